"""This process's stdin and stdout as event-loop pipes, read and written line by line (and
`LineReader`/`LineWriter` over a server process's pipes too: compensator/wire/sdk/stdio.py).

The SDK reads and writes stdio through worker threads: a thread hop for every line read,
written and flushed, which is most of the proxy's per-call overhead. When both ends are pipes
(as an MCP client starts us) and the loop is asyncio, the same line protocol runs on the loop
itself (the JSON-RPC side is in compensator/wire/sdk/server.py). Like the SDK, we keep the
wire private: fds 0 and 1 are pointed at the null device and at stderr while serving, so a
stray print (ours or a library's) cannot corrupt the protocol.

A line longer than LINE_LIMIT is not kept: it is read to its end and dropped, and the reader
yields a `TooLong` in its place, with what the line's first bytes say about it (its id and
method), so that a request can be answered with an error and the next line is read as usual.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from ..limits import LINE_LIMIT

__all__ = ["LINE_LIMIT", "LineReader", "LineWriter", "TooLong", "pipe_stdio", "usable"]


HEAD = 64 * 1024
"""Bytes kept of a refused line, to find its id and method in."""

INVALID_REQUEST = -32600
"""The JSON-RPC error code a refused request is answered with."""


@dataclass(frozen=True, kw_only=True)
class TooLong:
    """A line over LINE_LIMIT, read to its end and dropped.

    `members` holds the top-level members of the message that are whole within its first
    HEAD bytes (typically `jsonrpc`, `id` and `method`, which clients write first); `keys`
    names those and the member cut off there (often `params` or `result`)."""

    size: int
    members: dict[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()

    @property
    def request_id(self) -> str | int | None:
        """The message's id when it was found and is one JSON-RPC allows, else None."""
        found = self.members.get("id")
        valid = isinstance(found, (str, int)) and not isinstance(found, bool)
        return found if valid else None

    @property
    def method(self) -> str | None:
        found = self.members.get("method")
        return found if isinstance(found, str) else None

    @property
    def is_request(self) -> bool:
        return self.request_id is not None and self.method is not None

    @property
    def is_response(self) -> bool:
        """An answer to a request of ours (it has an id, and a result or error, no method)."""
        answer = "result" in self.keys or "error" in self.keys
        return self.request_id is not None and self.method is None and answer

    def describe(self) -> str:
        what = self.method or ("a response" if self.is_response else "a message")
        about = f"{what} (id {self.request_id!r})" if self.request_id is not None else what
        return (
            f"{about} of {self.size} bytes is over the limit of {LINE_LIMIT // 2**20} MiB per "
            "line, so the compensator dropped it unread"
        )

    def refusal(self) -> bytes | None:
        """The JSON-RPC error line that answers the refused request; None unless it is one."""
        if not self.is_request:
            return None
        error = {"code": INVALID_REQUEST, "message": self.describe()}
        answer = {"jsonrpc": "2.0", "id": self.request_id, "error": error}
        return json.dumps(answer).encode() + b"\n"


def top_level_members(head: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The top-level members of a JSON object that are complete in `head`, its first part, in
    order until the first one that is cut off (or is not JSON); and the keys of those and of
    the one cut off."""
    decoder = json.JSONDecoder()
    members: dict[str, Any] = {}
    keys: list[str] = []
    at = _skip_space(head, 0)
    if not head.startswith("{", at):
        return members, ()
    at += 1
    while True:
        at = _skip_space(head, at)
        if not head.startswith('"', at):
            break
        try:
            key, at = decoder.raw_decode(head, at)  # a string: the opening quote is there
        except ValueError:
            break
        at = _skip_space(head, at)
        if not head.startswith(":", at):
            break
        keys.append(key)
        try:
            value, at = decoder.raw_decode(head, _skip_space(head, at + 1))
        except ValueError:
            break
        members[key] = value
        at = _skip_space(head, at)
        if not head.startswith(",", at):
            break
        at += 1
    return members, tuple(keys)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


class LineReader:
    """`async for line in reader` over a pipe: text lines, or a `TooLong` for a line over
    LINE_LIMIT."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str | TooLong:
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the last line, with no newline
            if not exc.partial:
                raise StopAsyncIteration from None
            line = exc.partial
        except asyncio.LimitOverrunError as exc:
            return await self._drop_long_line(exc.consumed)
        return line.decode("utf-8", errors="replace")

    async def _drop_long_line(self, buffered: int) -> TooLong:
        """Read the rest of a line over the limit, keeping only its first HEAD bytes."""
        head = (await self._reader.readexactly(buffered))[:HEAD]
        size = buffered
        while True:
            try:
                size += len(await self._reader.readuntil(b"\n"))
                break
            except asyncio.LimitOverrunError as exc:
                size += len(await self._reader.readexactly(exc.consumed))
            except asyncio.IncompleteReadError as exc:
                size += len(exc.partial)
                break
        members, keys = top_level_members(head.decode("utf-8", errors="replace"))
        return TooLong(size=size, members=members, keys=keys)


class LineWriter:
    """`await write(text)` and `await flush()` over a pipe."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def write_bytes(self, data: bytes) -> None:
        self._writer.write(data)

    async def flush(self) -> None:
        await self._writer.drain()


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def usable() -> bool:
    """Whether stdin and stdout are both pipes and the running loop is asyncio's."""
    try:
        asyncio.get_running_loop()
        return _is_pipe(0) and _is_pipe(1)
    except (RuntimeError, OSError):
        return False


def _claim(fd: int, replacement: int) -> tuple[int, int]:
    """Two duplicates of `fd`: one for the transport (which closes it at EOF) and one to
    restore `fd` from on exit; `fd` itself now points at `replacement`."""
    wire, saved = os.dup(fd), os.dup(fd)
    os.dup2(replacement, fd)
    return wire, saved


@asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[LineReader, LineWriter]]:
    """The stdio wire as a line reader and writer on the loop; fds restored on exit."""
    loop = asyncio.get_running_loop()
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    wire_in, saved_in = _claim(0, devnull)
    wire_out, saved_out = _claim(1, 2)
    os.close(devnull)
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        read_file = os.fdopen(wire_in, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), read_file
        )
        transports.append(transport)
        write_file = os.fdopen(wire_out, "wb", buffering=0)
        write_transport, protocol = await loop.connect_write_pipe(_FlowControl, write_file)
        transports.append(write_transport)
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        yield LineReader(reader), LineWriter(writer)
    finally:
        for opened in transports:
            opened.close()
        for fd, saved in ((0, saved_in), (1, saved_out)):
            os.dup2(saved, fd)
            os.close(saved)


class _FlowControl(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """What asyncio.StreamWriter needs from a write-only protocol: `drain()` support."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._closed = asyncio.get_running_loop().create_future()

    def _get_close_waiter(self, stream: Any) -> asyncio.Future[None]:
        return self._closed

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)
