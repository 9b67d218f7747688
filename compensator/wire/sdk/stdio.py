"""Stdio wires on both SDK lines: serving the proxy to one client over this process's stdin
and stdout, and talking to a server process over its own (`process_stdio`).

`open_stdio` reads the client's first message before anything is served: it is `initialize`,
whose capabilities decide what the proxy advertises to its downstream servers (started after
it, compensator/cli/serve.py). `StdioWire.serve` then runs the server with that message
first. Over pipes the lines go through compensator/wire/stdio.py on the event loop; anything
else (a regular file on stdin) through the SDK's own `stdio_server`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from ...processes import Process, stop_process
from .. import stdio as pipes
from .base import MCP2, dump_message, error_response, parse_message
from .server import AsSent, ProxyServer

__all__ = ["StdioWire", "open_stdio", "process_stdio", "serve_stdio"]

log = logging.getLogger(__name__)


class StdioWire:
    """The client's stdio connection, its first message already read (see `open_stdio`)."""

    def __init__(
        self, read_stream: Any, write_stream: Any, first: Any, as_sent: AsSent | None = None
    ) -> None:
        self._read, self._write, self._first = read_stream, write_stream, first
        self._as_sent = as_sent

    @property
    def closed(self) -> bool:
        """Whether the client closed the connection without sending anything."""
        return self._first is None

    @property
    def initialize(self) -> dict[str, Any] | None:
        """The params of the client's `initialize` request (wire JSON), or None when its first
        message was something else or it closed the connection without one."""
        message = self._first.message if isinstance(self._first, SessionMessage) else None
        root = message if MCP2 else getattr(message, "root", None)
        if getattr(root, "method", None) != "initialize" or getattr(root, "id", None) is None:
            return None
        params = getattr(root, "params", None)
        return dict(params) if isinstance(params, dict) else {}

    async def serve(self, server: Server[Any]) -> None:
        """Run `server` on the connection, from its first message, until the client leaves."""
        if self._first is None:
            return  # the client closed stdin before sending anything
        if MCP2 and self._as_sent is not None and isinstance(server, ProxyServer):
            server.as_sent = self._as_sent  # tool results are written as they were sent
        options = server.create_initialization_options()
        read_stream = _Replayed(self._first, self._read)
        await server.run(read_stream, self._write, options)


@contextlib.asynccontextmanager
async def open_stdio() -> AsyncIterator[StdioWire]:
    """Take over stdin and stdout for the MCP wire and read the client's first message."""
    if pipes.usable():
        # Pipes on the loop instead of the SDK's worker threads: see compensator/wire/stdio.py.
        as_sent = AsSent()
        async with (
            pipes.pipe_stdio() as (reader, writer),
            _over_lines(reader, writer, as_sent) as (read_stream, write_stream),
        ):
            yield StdioWire(read_stream, write_stream, await _first(read_stream), as_sent)
        return
    async with stdio_server() as (read_stream, write_stream):
        yield StdioWire(read_stream, write_stream, await _first(read_stream))
        await write_stream.aclose()  # as in `_over_lines`: its writer ends only then


async def serve_stdio(server: Server[Any]) -> None:
    """Serve `server` to one client over stdin and stdout until it disconnects."""
    async with open_stdio() as wire:
        await wire.serve(server)


async def _first(read_stream: Any) -> Any:
    """The first message of the connection (an SDK SessionMessage, or the exception a line
    that was not one became), or None when the client closed it first."""
    try:
        return await read_stream.receive()
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        return None


class _Replayed(anyio.abc.ObjectReceiveStream[Any]):
    """A read stream that yields `first`, then what `rest` yields."""

    def __init__(self, first: Any, rest: Any) -> None:
        self._first, self._rest, self._replayed = first, rest, False

    async def receive(self) -> Any:
        if not self._replayed:
            self._replayed = True
            return self._first
        return await self._rest.receive()

    async def aclose(self) -> None:
        await self._rest.aclose()


@contextlib.asynccontextmanager
async def _over_lines(
    reader: pipes.LineReader, writer: pipes.LineWriter, as_sent: AsSent
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams a server runs on, over a line reader and writer: the
    SDK's `stdio_server` does the same over its own file objects only. A line over the limit
    is answered here (see `_refuse`)."""
    read_in, read_out = anyio.create_memory_object_stream[Any](0)
    write_in, write_out = anyio.create_memory_object_stream[Any](0)

    async def read_lines() -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with read_in:
                async for line in reader:
                    if isinstance(line, pipes.TooLong):
                        await _refuse(line, read_in, writer)
                        continue
                    try:
                        message = parse_message(line)
                    except Exception as exc:  # the SDK's own transport passes it on likewise
                        await read_in.send(exc)
                        continue
                    await read_in.send(SessionMessage(message))

    async def write_lines() -> None:
        with contextlib.suppress(anyio.ClosedResourceError):
            async with write_out:
                async for session_message in write_out:
                    message = as_sent.restore(session_message.message)
                    await writer.write(dump_message(message) + "\n")
                    await writer.flush()

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        yield read_out, write_in
        # The writer ends once its stream is closed: a server that ran has closed it; one that
        # never ran (the client left before its first message) has not.
        await write_in.aclose()


async def _refuse(line: pipes.TooLong, read_in: Any, writer: pipes.LineWriter) -> None:
    """A request over the limit gets a JSON-RPC error; a response over it (the client's answer
    to a request of ours) fails that request with the same words; anything else is logged."""
    log.warning("%s", line.describe())
    refusal = line.refusal()
    if refusal is not None:
        await writer.write_bytes(refusal)
        await writer.flush()
    elif line.is_response and line.request_id is not None:
        error = error_response(line.request_id, pipes.INVALID_REQUEST, line.describe())
        await read_in.send(SessionMessage(error))


@contextlib.asynccontextmanager
async def process_stdio(process: Process, name: str) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams a ClientSession runs on, over the stdout and stdin of
    server `name`'s process (compensator/processes.py started it); the process is stopped on
    exit. The read stream ends when the server's stdout does (it exited), or when a write to
    its stdin fails (it stopped reading): either way the session sees the server gone.

    What the SDK's `stdio_client` does, but over lines on the loop (compensator/wire/stdio.py)
    and for a process started before the SDK was imported. Lines have no length limit (see
    `start_process`); bytes that are not UTF-8 are replaced; a line that is not JSON-RPC is
    logged in one line and dropped."""
    assert process.stdout is not None and process.stdin is not None
    reader, writer = pipes.LineReader(process.stdout), pipes.LineWriter(process.stdin)
    read_in, read_out = anyio.create_memory_object_stream[Any](0)
    write_in, write_out = anyio.create_memory_object_stream[Any](0)

    async def read_lines() -> None:
        listened = True  # until the session's stream is closed; then lines are only drained
        async with read_in:
            async for line in reader:
                if isinstance(line, pipes.TooLong):  # not with start_process's limit
                    log.error("server %r: %s; its session ends", name, line.describe())
                    return
                try:
                    message = parse_message(line)
                except Exception as exc:
                    first = (str(exc) or type(exc).__name__).splitlines()[0]
                    log.warning(
                        "server %r wrote a line that is not JSON-RPC; dropped it (%s)",
                        name,
                        first,
                    )
                    continue
                if listened:
                    try:
                        await read_in.send(SessionMessage(message))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        listened = False  # a server that writes as it stops is not blocked

    async def write_lines() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with write_out:
                try:
                    async for session_message in write_out:
                        await writer.write(dump_message(session_message.message) + "\n")
                        await writer.flush()
                except OSError as exc:
                    log.debug("server %r: writing to its stdin failed: %s", name, exc)
                    read_in.close()  # the session sees the server gone

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        try:
            yield read_out, write_in
        finally:
            with anyio.CancelScope(shield=True):
                await read_out.aclose()  # the reader goes on draining stdout (see above)
                await stop_process(process, name)
            group.cancel_scope.cancel()
