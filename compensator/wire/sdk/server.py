"""The proxy as a server to its client: the low-level server whose tool handlers skip the
SDK's own validation, on both SDK lines (serving it over stdio is in `stdio`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server

from .base import MCP2, types_v1
from .catalog import CatalogHandlers, add_catalog
from .session import handling_call

__all__ = ["ToolCaller", "ToolLister", "build_server"]

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
