"""The proxy as a client of its downstream servers: calls, lists, requests, and what their
answers hold, on both SDK lines."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol, cast

import anyio
import mcp.types as types
from mcp import ClientSession
from pydantic import TypeAdapter

from ...errors import DownstreamError
from ._private import next_request_id_v1
from .base import MCP2, SDKError, as_timeout, to_wire, types_v1, wrap_request

__all__ = [
    "MAX_PAGES",
    "ProgressCallback",
    "ToolResult",
    "call_tool_raw",
    "connection_closed",
    "initialize_capabilities",
    "list_all",
    "list_page",
    "next_cursor",
    "notification_of",
    "result_parts",
    "send_wire_request",
    "server_supports",
    "tool_to_wire",
]

CANCEL_NOTICE_TIMEOUT = 1.0
"""Seconds to spend telling a server that a call was cancelled before giving up on it."""

MAX_PAGES = 1000
"""A bound on following a list's pagination, against a server whose cursor never ends."""


ToolResult = dict[str, Any]
"""A `tools/call` result as the wire JSON a server sent (a CallToolResult's fields, camelCase,
and any others). The proxy passes it on as it is, parsing only what journaling needs."""

_AS_SENT: TypeAdapter[ToolResult] = TypeAdapter(ToolResult)


class ProgressCallback(Protocol):
    """What gets the progress of a forwarded call: the SDKs' `ProgressFnT`, on both lines."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


async def call_tool_raw(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any] | None,
    timeout: float | None = None,
    progress_callback: ProgressCallback | None = None,
    meta: dict[str, Any] | None = None,
) -> ToolResult:
    """Call a tool and return its result as the server sent it: no outputSchema re-validation,
    no round trip through the SDK's models (on 2.x those drop fields they do not know).

    Cancelling the awaiting task sends `notifications/cancelled` for the request on both
    lines: 2.x does it itself, 1.x is told here. With `progress_callback` the request carries
    a progress token and each `notifications/progress` for it reaches the callback. `meta`
    is sent as the request's `_meta` (wire JSON, e.g. {"progressToken": "t"})."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
    if MCP2:
        # 2.x checks the result against the protocol's schema, then validates it with this
        # adapter: a plain dict (its annotation wants a model; its code takes any adapter).
        result: ToolResult = await session.send_request(
            request,
            cast(Any, _AS_SENT),
            request_read_timeout_seconds=timeout,
            progress_callback=progress_callback,
        )
        return result
    # 1.x always builds its model, which keeps the fields it does not know.
    return to_wire(  # pragma: no cover
        await _send_cancellable_v1(session, request, timeout, progress_callback)
    )


async def _send_cancellable_v1(  # pragma: no cover - 1.x only
    session: Any,
    request: types.CallToolRequest,
    seconds: float | None,
    progress_callback: ProgressCallback | None = None,
) -> types.CallToolResult:
    # 1.x takes the request's number before its first await.
    request_id = next_request_id_v1(session)
    try:
        result: types.CallToolResult = await session.send_request(
            wrap_request(request),
            types_v1.CallToolResult,
            request_read_timeout_seconds=as_timeout(seconds),
            progress_callback=progress_callback,
        )
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_TIMEOUT):
            await _notify_cancelled_v1(session, request_id)
        raise
    return result


async def _notify_cancelled_v1(session: Any, request_id: int) -> None:  # pragma: no cover
    params = types_v1.CancelledNotificationParams(
        requestId=request_id, reason="cancelled by client"
    )
    notice = types_v1.ClientNotification(types_v1.CancelledNotification(params=params))
    # A closed stream means the server is gone, so it is not working on the request either.
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await session.send_notification(notice)


_LISTS = {
    "tools": ("tools", "tools/list"),
    "resources": ("resources", "resources listing"),
    "resource_templates": (
        "resource_templates" if MCP2 else "resourceTemplates",
        "resource templates listing",
    ),
    "prompts": ("prompts", "prompts listing"),
}
"""What `list_all` reads from a page of each kind, and what its error calls the listing."""


async def list_page(
    session: ClientSession, kind: str, cursor: str | None
) -> tuple[list[Any], str | None]:
    """One page of `tools`, `resources`, `resource_templates` or `prompts`: (items, the next
    cursor, None after the last page)."""
    params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
    page = await getattr(session, f"list_{kind}")(params=params)
    return list(getattr(page, _LISTS[kind][0])), next_cursor(page)


def next_cursor(page: Any) -> str | None:
    """The cursor of the page after a list result; None when it is the last."""
    cursor: str | None = page.next_cursor if MCP2 else page.nextCursor
    return cursor


async def list_all(session: ClientSession, kind: str) -> list[Any]:
    """Every item of a kind `list_page` lists, following the server's pagination for at most
    MAX_PAGES pages (then DownstreamError: a cursor that never ends)."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page, cursor = await list_page(session, kind, cursor)
        items.extend(page)
        if not cursor:
            return items
    raise DownstreamError(f"{_LISTS[kind][1]} did not end after {MAX_PAGES} pages")


def result_parts(result: Mapping[str, Any]) -> tuple[Any, list[dict[str, Any]], bool]:
    """(structuredContent, content blocks, isError) of a tool result (`ToolResult`)."""
    content = result.get("content")
    blocks = [block for block in content if isinstance(block, dict)] if content else []
    return result.get("structuredContent"), blocks, result.get("isError") is True


def tool_to_wire(tool: types.Tool) -> dict[str, Any]:
    """A tool definition as plain JSON with the protocol's camelCase keys."""
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


async def send_wire_request(
    session: ClientSession,
    method: str,
    params: dict[str, Any],
    request_type: Any,
    result_type: Any,
    seconds: float | None = None,
) -> Any:
    """Send a request given as wire JSON (`method`, camelCase `params`) and parse its result."""
    request = request_type.model_validate({"method": method, "params": params})
    return await session.send_request(
        wrap_request(request), result_type, request_read_timeout_seconds=as_timeout(seconds)
    )


def initialize_capabilities(result: Any) -> dict[str, Any]:
    """A server's capabilities from its initialize result, as wire JSON."""
    return to_wire(result.capabilities)


def server_supports(session: ClientSession, capability: str) -> bool:
    """Whether the downstream server of `session` advertised `capability` (e.g. logging)."""
    if MCP2:  # noqa: SIM108 - in a ternary mypy would check the 1.x side against 2.x
        capabilities = session.server_capabilities
    else:  # pragma: no cover - 1.x only
        capabilities = session.get_server_capabilities()
    return capabilities is not None and getattr(capabilities, capability, None) is not None


def notification_of(message: Any) -> Any:
    """The notification model a downstream `message_handler` got, or None for anything else
    (a transport exception; on 1.x also a request the session did not answer itself)."""
    if isinstance(message, Exception):
        return None
    if MCP2:
        return message
    root = getattr(message, "root", None)  # pragma: no cover - 1.x only
    return root if isinstance(message, types.ServerNotification) else None  # pragma: no cover


def connection_closed(exc: BaseException) -> bool:
    """Whether `exc` is the SDK's own error for a request whose session closed before the
    answer came (both lines: code -32000, "Connection closed"): it may have been handled."""
    error = getattr(exc, "error", None)
    return (
        isinstance(exc, SDKError)
        and getattr(error, "code", None) == -32000
        and getattr(error, "message", None) == "Connection closed"
    )
