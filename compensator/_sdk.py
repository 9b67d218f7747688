"""Every difference between the mcp 1.x and 2.x lines, kept in this one module."""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from . import _stdio

__all__ = [
    "SDK_MAJOR",
    "SDK_VERSION",
    "SDKError",
    "ToolCaller",
    "ToolLister",
    "build_server",
    "call_tool_raw",
    "list_tools_page",
    "next_cursor",
    "result_parts",
    "serve_stdio",
    "tool_to_wire",
]

CANCEL_NOTICE_TIMEOUT = 1.0
"""Seconds to spend telling a server that a call was cancelled before giving up on it."""

SDK_VERSION = importlib.metadata.version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".", 1)[0])

if SDK_MAJOR >= 2:
    from mcp.shared.exceptions import MCPError as SDKError
else:  # pragma: no cover - exercised by the mcp 1.x tox env
    from mcp.shared.exceptions import McpError as SDKError

ToolLister = Callable[[str | None], Awaitable[types.ListToolsResult]]
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


def _timeout(seconds: float | None) -> Any:
    """1.x takes a timedelta, 2.x float seconds."""
    if seconds is None or SDK_MAJOR >= 2:
        return seconds
    return timedelta(seconds=seconds)  # pragma: no cover - 1.x only


def _request(request: Any) -> Any:
    """1.x wants requests wrapped in the ClientRequest root model."""
    if SDK_MAJOR >= 2:
        return request
    return types.ClientRequest(request)  # pragma: no cover - 1.x only


async def call_tool_raw(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any] | None,
    timeout: float | None = None,
) -> types.CallToolResult:
    """Call a tool without the client's outputSchema re-validation, so any reply passes as-is.

    Cancelling the awaiting task sends `notifications/cancelled` for the request on both
    lines: 2.x does it itself, 1.x is told here."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=arguments),
    )
    if SDK_MAJOR >= 2:
        result: types.CallToolResult = await session.send_request(
            request, types.CallToolResult, request_read_timeout_seconds=timeout
        )
        return result
    return await _send_cancellable_v1(session, request, timeout)  # pragma: no cover


async def _send_cancellable_v1(  # pragma: no cover - 1.x only
    session: ClientSession, request: types.CallToolRequest, timeout: float | None
) -> types.CallToolResult:
    # 1.x numbers requests from `_request_id` and takes the number before its first await.
    request_id = session._request_id
    try:
        result: types.CallToolResult = await session.send_request(
            _request(request), types.CallToolResult, request_read_timeout_seconds=_timeout(timeout)
        )
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_TIMEOUT):
            await _notify_cancelled_v1(session, request_id)
        raise
    return result


async def _notify_cancelled_v1(session: ClientSession, request_id: int) -> None:  # pragma: no cover
    params = types.CancelledNotificationParams(requestId=request_id, reason="cancelled by client")
    notice = types.ClientNotification(types.CancelledNotification(params=params))
    # A closed stream means the server is gone, so it is not working on the request either.
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await session.send_notification(notice)


async def list_tools_page(session: ClientSession, cursor: str | None) -> types.ListToolsResult:
    params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
    return await session.list_tools(params=params)


def next_cursor(page: types.ListToolsResult) -> str | None:
    cursor: str | None = page.next_cursor if SDK_MAJOR >= 2 else page.nextCursor
    return cursor


def result_parts(result: types.CallToolResult) -> tuple[Any, list[dict[str, Any]], bool]:
    """(structuredContent, content blocks as wire dicts, isError) of a tool result."""
    if SDK_MAJOR >= 2:
        structured, is_error = result.structured_content, result.is_error
    else:  # pragma: no cover - 1.x only
        structured, is_error = result.structuredContent, result.isError
    content = [block.model_dump(by_alias=True, mode="json") for block in result.content]
    return structured, content, bool(is_error)


def tool_to_wire(tool: types.Tool) -> dict[str, Any]:
    """A tool definition as plain JSON with the protocol's camelCase keys."""
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


def build_server(
    name: str,
    version: str,
    instructions: str,
    list_tools: ToolLister,
    call_tool: ToolCaller,
) -> Server[Any]:
    """A low-level server whose tool handlers skip the SDK's own validation and caching."""
    if SDK_MAJOR >= 2:
        return _build_server_v2(name, version, instructions, list_tools, call_tool)
    return _build_server_v1(name, version, instructions, list_tools, call_tool)  # pragma: no cover


def _build_server_v2(
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> Server[Any]:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await list_tools(getattr(params, "cursor", None))

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
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
    server: Server[Any] = Server(name, version=version, instructions=instructions)

    async def on_list_tools(request: Any) -> Any:
        cursor = request.params.cursor if request.params is not None else None
        return types.ServerResult(await list_tools(cursor))

    async def on_call_tool(request: Any) -> Any:
        arguments = dict(request.params.arguments or {})
        return types.ServerResult(await call_tool(request.params.name, arguments))

    server.request_handlers[types.ListToolsRequest] = on_list_tools
    server.request_handlers[types.CallToolRequest] = on_call_tool
    return server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects."""
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    if _stdio.usable():
        # Pipes on the loop instead of the SDK's worker threads: see compensator/_stdio.py.
        async with _stdio.pipe_stdio() as (stdin, stdout):
            transport = stdio_server(stdin, stdout)  # type: ignore[arg-type]
            async with transport as (read_stream, write_stream):
                await server.run(read_stream, write_stream, options)
        return
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)
