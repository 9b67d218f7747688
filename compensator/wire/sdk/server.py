"""The proxy as a server to its client: the low-level server whose tool handlers skip the
SDK's own validation, on both SDK lines (serving it over stdio is in `stdio`).

A tool's result goes to the client as the JSON its server sent. The 2.x server re-validates
every result of a protocol method against the negotiated revision's models and writes what
they keep, which drops fields no revision defines (1.x models keep them). So the handler also
hands each result to `AsSent`, and the stdio wire (`stdio.py`) writes the answer with the
fields that were sent. Over HTTP the SDK writes the answer itself: there, on 2.x, such fields
are dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, cast

import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server

from .base import MCP2, types_v1
from .catalog import CatalogHandlers, add_catalog
from .client import ToolResult
from .session import handling_call

__all__ = ["AsSent", "ProxyServer", "ToolCaller", "ToolLister", "build_server"]

ToolLister = Callable[[str | None], Awaitable[types.ListToolsResult]]
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]
"""Answers a tools/call with its result as wire JSON, which 2.x sends as it is."""


class AsSent:
    """Tool results by request id, as the handler returned them, until the wire writes the
    answer to that request (`restore`). At most LIMIT are kept: an answer the SDK never writes
    (the client went away) does not pile up."""

    LIMIT = 1024

    def __init__(self) -> None:
        self._kept: OrderedDict[Any, ToolResult] = OrderedDict()

    def keep(self, request_id: Any, result: ToolResult) -> None:
        self._kept[request_id] = result
        if len(self._kept) > self.LIMIT:
            self._kept.popitem(last=False)

    def restore(self, message: Any) -> Any:
        """`message` (a JSON-RPC message being written), with a tool result's fields as sent
        when it answers a kept request. The SDK's own fields stay (on a 2026-era session it
        adds `resultType` and a `serverInfo` entry in `_meta`)."""
        if not self._kept or hasattr(message, "method"):
            return message  # a request or notification of ours: its id is in another space
        sent = self._kept.pop(getattr(message, "id", None), None)
        written = getattr(message, "result", None)
        if sent is None or not isinstance(written, dict) or "content" not in written:
            return message  # not a kept call, an error, or (a stale id) not a tool result
        result = {**written, **sent}
        if isinstance(written.get("_meta"), dict) and isinstance(sent.get("_meta"), dict):
            result["_meta"] = {**sent["_meta"], **written["_meta"]}
        return message.model_copy(update={"result": result})


class ProxyServer(Server[Any]):
    """The SDK's low-level server, with the capabilities the proxy advertises set here.

    `create_initialization_options` (what every transport asks at a session's start, with no
    arguments over HTTP) advertises `tools.listChanged`, the resources and prompts
    `listChanged` flags of `list_changed`, and `resources.subscribe` as `resources_subscribe`
    (2.x derives it from the subscribe handler being there; 1.x always says false)."""

    list_changed = NotificationOptions(tools_changed=True)
    resources_subscribe = False
    as_sent: AsSent | None = None
    """Where tool results wait for the wire that writes them as sent (2.x over stdio)."""

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

    async def on_call_tool(ctx: Any, params: Any) -> ToolResult:
        with handling_call(ctx.session, ctx.request_id, ctx.meta, params.name):
            result = await call_tool(params.name, dict(params.arguments or {}))
        if server.as_sent is not None:
            server.as_sent.keep(ctx.request_id, result)
        return result

    server = ProxyServer(
        name,
        version=version,
        instructions=instructions,
        on_list_tools=on_list_tools,
        # Its annotation wants a CallToolResult; its runner takes a dict too.
        on_call_tool=cast(Any, on_call_tool),
    )
    return server


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
            result = await call_tool(request.params.name, arguments)
        # 1.x sends only models; its models keep the fields they do not know.
        return types_v1.ServerResult(types_v1.CallToolResult.model_validate(result))

    server.request_handlers[types_v1.ListToolsRequest] = on_list_tools
    server.request_handlers[types_v1.CallToolRequest] = on_call_tool
    return server
