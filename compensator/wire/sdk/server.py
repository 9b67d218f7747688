"""The proxy as a server to its client: the low-level server whose tool handlers skip the
SDK's own validation, and serving it over stdio, on both SDK lines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .. import stdio
from .base import MCP2, dump_message, error_response, parse_message, types_v1
from .catalog import CatalogHandlers, add_catalog
from .session import handling_call

__all__ = ["ToolCaller", "ToolLister", "build_server", "serve_stdio"]

log = logging.getLogger(__name__)

ToolLister = Callable[[str | None], Awaitable[types.ListToolsResult]]
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


def build_server(
    name: str,
    version: str,
    instructions: str,
    list_tools: ToolLister,
    call_tool: ToolCaller,
    *,
    catalog: CatalogHandlers | None = None,
) -> Server[Any]:
    """A low-level server whose tool handlers skip the SDK's own validation and caching.

    `catalog` adds the resource, prompt and completion handlers that are not None (each
    capability is advertised only when its handler is given)."""
    if MCP2:
        server = _build_server_v2(name, version, instructions, list_tools, call_tool)
    else:  # pragma: no cover - 1.x only
        server = _build_server_v1(name, version, instructions, list_tools, call_tool)
    if catalog is not None:
        add_catalog(server, catalog)
    return server


def _build_server_v2(
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> Server[Any]:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await list_tools(getattr(params, "cursor", None))

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        with handling_call(ctx.session, ctx.request_id, ctx.meta, params.name):
            return await call_tool(params.name, dict(params.arguments or {}))

    return Server(
        name,
        version=version,
        instructions=instructions,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _build_server_v1(  # pragma: no cover - 1.x only
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> Server[Any]:
    server: Any = Server(name, version=version, instructions=instructions)

    async def on_list_tools(request: Any) -> Any:
        cursor = request.params.cursor if request.params is not None else None
        return types_v1.ServerResult(await list_tools(cursor))

    async def on_call_tool(request: Any) -> Any:
        arguments = dict(request.params.arguments or {})
        ctx = server.request_context
        with handling_call(ctx.session, ctx.request_id, ctx.meta, request.params.name):
            return types_v1.ServerResult(await call_tool(request.params.name, arguments))

    server.request_handlers[types_v1.ListToolsRequest] = on_list_tools
    server.request_handlers[types_v1.CallToolRequest] = on_call_tool
    return server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects."""
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    if stdio.usable():
        # Pipes on the loop instead of the SDK's worker threads: see compensator/wire/stdio.py.
        async with stdio.pipe_stdio() as (reader, writer), _over_lines(reader, writer) as streams:
            await server.run(streams[0], streams[1], options)
        return
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


@contextlib.asynccontextmanager
async def _over_lines(
    reader: stdio.LineReader, writer: stdio.LineWriter
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
                    if isinstance(line, stdio.TooLong):
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
                    await writer.write(dump_message(session_message.message) + "\n")
                    await writer.flush()

    async with anyio.create_task_group() as group:
        group.start_soon(read_lines)
        group.start_soon(write_lines)
        yield read_out, write_in


async def _refuse(line: stdio.TooLong, read_in: Any, writer: stdio.LineWriter) -> None:
    """A request over the limit gets a JSON-RPC error; a response over it (the client's answer
    to a request of ours) fails that request with the same words; anything else is logged."""
    log.warning("%s", line.describe())
    refusal = line.refusal()
    if refusal is not None:
        await writer.write_bytes(refusal)
        await writer.flush()
    elif line.is_response and line.request_id is not None:
        error = error_response(line.request_id, stdio.INVALID_REQUEST, line.describe())
        await read_in.send(SessionMessage(error))
