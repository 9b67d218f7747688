"""The proxy as a server to its client: the low-level server whose tool handlers skip the
SDK's own validation, on both SDK lines (serving it over stdio is in `stdio`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server

from .base import MCP2, types_v1
from .catalog import CatalogHandlers, add_catalog
from .session import handling_call

__all__ = ["ProxyServer", "ToolCaller", "ToolLister", "build_server"]

ToolLister = Callable[[str | None], Awaitable[types.ListToolsResult]]
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


class ProxyServer(Server[Any]):
    """The SDK's low-level server, with the capabilities the proxy advertises set here.

    `create_initialization_options` (what every transport asks at a session's start, with no
    arguments over HTTP) advertises `tools.listChanged`, the resources and prompts
    `listChanged` flags of `list_changed`, and `resources.subscribe` as `resources_subscribe`
    (2.x derives it from the subscribe handler being there; 1.x always says false)."""

    list_changed = NotificationOptions(tools_changed=True)
    resources_subscribe = False

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        chosen = notification_options or self.list_changed
        options = super().create_initialization_options(chosen, *args, **kwargs)
        resources = options.capabilities.resources
        if resources is not None:
            resources.subscribe = self.resources_subscribe
        return options


def build_server(
    name: str,
    version: str,
    instructions: str,
    list_tools: ToolLister,
    call_tool: ToolCaller,
    *,
    catalog: CatalogHandlers | None = None,
) -> ProxyServer:
    """A low-level server whose tool handlers skip the SDK's own validation and caching.

    `catalog` adds the resource, prompt and completion handlers that are not None (each
    capability is advertised only when its handler is given)."""
    if MCP2:
        server = _build_server_v2(name, version, instructions, list_tools, call_tool)
    else:  # pragma: no cover - 1.x only
        server = _build_server_v1(name, version, instructions, list_tools, call_tool)
    if catalog is not None:
        add_catalog(server, catalog)
        server.list_changed = NotificationOptions(
            tools_changed=True,
            resources_changed=catalog.resources_list_changed,
            prompts_changed=catalog.prompts_list_changed,
        )
        server.resources_subscribe = catalog.resources_subscribe
    return server


def _build_server_v2(
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> ProxyServer:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await list_tools(getattr(params, "cursor", None))

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        with handling_call(ctx.session, ctx.request_id, ctx.meta, params.name):
            return await call_tool(params.name, dict(params.arguments or {}))

    return ProxyServer(
        name,
        version=version,
        instructions=instructions,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _build_server_v1(  # pragma: no cover - 1.x only
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> ProxyServer:
    server: Any = ProxyServer(name, version=version, instructions=instructions)

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
