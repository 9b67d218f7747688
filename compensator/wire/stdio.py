"""This process's stdin and stdout as event-loop pipes, for the SDK's stdio server.

The SDK reads and writes stdio through worker threads: a thread hop for every line read,
written and flushed, which is most of the proxy's per-call overhead. When both ends are pipes
(as an MCP client starts us) and the loop is asyncio, the same line protocol runs on the loop
itself. Like the SDK, we keep the wire private: fds 0 and 1 are pointed at the null device and
at stderr while serving, so a stray print (ours or a library's) cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["pipe_stdio"]

# A request or result line may be large (a file's content); past this, the line is refused.
LINE_LIMIT = 64 * 1024 * 1024


class LineReader:
    """`async for line in reader` over a pipe, as text lines (what the SDK iterates)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class LineWriter:
    """`await write(text)` and `await flush()` over a pipe (what the SDK calls)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

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
