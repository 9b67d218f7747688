"""Every difference between the mcp 1.x and 2.x lines, kept in this one module."""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from . import _stdio

__all__ = [
    "SDK_MAJOR",
    "SDK_VERSION",
    "CatalogHandlers",
    "SDKError",
    "ToolCaller",
    "ToolLister",
    "build_server",
    "call_tool_raw",
    "connection_closed",
    "connection_failed",
    "list_tools_page",
    "next_cursor",
    "result_parts",
    "serve_stdio",
    "streamable_http",
    "tool_to_wire",
]

CANCEL_NOTICE_TIMEOUT = 1.0
"""Seconds to spend telling a server that a call was cancelled before giving up on it."""

SDK_VERSION = importlib.metadata.version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".", 1)[0])
MCP2 = SDK_MAJOR >= 2
"""True on the mcp 2.x line. Branch on this name, not on SDK_MAJOR: mypy's `always_true`
(pyproject.toml) then checks only the branch of the line it is run against."""

if MCP2:
    from mcp.shared.exceptions import MCPError as SDKError
else:  # pragma: no cover - exercised by the mcp 1.x tox env
    from mcp.shared.exceptions import McpError as SDKError

ToolLister = Callable[[str | None], Awaitable[types.ListToolsResult]]
ToolCaller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


class ProgressCallback(Protocol):
    """What gets the progress of a forwarded call: the SDKs' `ProgressFnT`, on both lines."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


_types_v1: Any = types
"""mcp.types for the 1.x-only code below: names such as `ServerResult` are classes there and
unions on 2.x, which mypy (checking against 2.x) would report as not callable."""


def _timeout(seconds: float | None) -> Any:
    """1.x takes a timedelta, 2.x float seconds."""
    if seconds is None or MCP2:
        return seconds
    return timedelta(seconds=seconds)  # pragma: no cover - 1.x only


def _request(request: Any) -> Any:
    """1.x wants requests wrapped in the ClientRequest root model."""
    if MCP2:
        return request
    return types.ClientRequest(request)  # pragma: no cover - 1.x only


async def call_tool_raw(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any] | None,
    timeout: float | None = None,
    progress_callback: ProgressCallback | None = None,
    meta: dict[str, Any] | None = None,
) -> types.CallToolResult:
    """Call a tool without the client's outputSchema re-validation, so any reply passes as-is.

    Cancelling the awaiting task sends `notifications/cancelled` for the request on both
    lines: 2.x does it itself, 1.x is told here. With `progress_callback` the request carries
    a progress token and each `notifications/progress` for it reaches the callback. `meta`
    is sent as the request's `_meta` (wire JSON, e.g. {"progressToken": "t"})."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
    if MCP2:
        result: types.CallToolResult = await session.send_request(
            request,
            types.CallToolResult,
            request_read_timeout_seconds=timeout,
            progress_callback=progress_callback,
        )
        return result
    return await _send_cancellable_v1(  # pragma: no cover
        session, request, timeout, progress_callback
    )


async def _send_cancellable_v1(  # pragma: no cover - 1.x only
    session: Any,
    request: types.CallToolRequest,
    timeout: float | None,
    progress_callback: ProgressCallback | None = None,
) -> types.CallToolResult:
    # 1.x numbers requests from `_request_id` and takes the number before its first await.
    request_id = session._request_id
    try:
        result: types.CallToolResult = await session.send_request(
            _request(request),
            _types_v1.CallToolResult,
            request_read_timeout_seconds=_timeout(timeout),
            progress_callback=progress_callback,
        )
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_TIMEOUT):
            await _notify_cancelled_v1(session, request_id)
        raise
    return result


async def _notify_cancelled_v1(session: Any, request_id: int) -> None:  # pragma: no cover
    params = _types_v1.CancelledNotificationParams(
        requestId=request_id, reason="cancelled by client"
    )
    notice = _types_v1.ClientNotification(_types_v1.CancelledNotification(params=params))
    # A closed stream means the server is gone, so it is not working on the request either.
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await session.send_notification(notice)


async def list_tools_page(session: ClientSession, cursor: str | None) -> types.ListToolsResult:
    params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
    return await session.list_tools(params=params)


def next_cursor(page: types.ListToolsResult) -> str | None:
    if MCP2:
        return page.next_cursor
    return page.nextCursor  # pragma: no cover - 1.x only


def result_parts(result: types.CallToolResult) -> tuple[Any, list[dict[str, Any]], bool]:
    """(structuredContent, content blocks as wire dicts, isError) of a tool result."""
    if MCP2:
        structured, is_error = result.structured_content, result.is_error
    else:  # pragma: no cover - 1.x only
        structured, is_error = result.structuredContent, result.isError
    content = [block.model_dump(by_alias=True, mode="json") for block in result.content]
    return structured, content, bool(is_error)


def tool_to_wire(tool: types.Tool) -> dict[str, Any]:
    """A tool definition as plain JSON with the protocol's camelCase keys."""
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


# -- streamable HTTP downstreams ----------------------------------------------------------


@contextlib.asynccontextmanager
async def streamable_http(
    url: str,
    headers: Mapping[str, str] | None = None,
    on_session_lost: Callable[[], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) streams to the MCP server at `url`, every request carrying `headers`.

    Both lines have `streamable_http_client(url, http_client=...)`, with headers set on the
    client (1.x httpx, 2.x httpx2; `create_mcp_http_client` makes either, with the SDK's
    timeouts); 1.x yields a third item (a session-id getter), 2.x only the two streams.
    `on_session_lost` runs when the server answers 404 to a request that names a session: it
    no longer knows the session (it restarted), so it did not handle the request. The SDK then
    fails the request with an error whose text differs by line and server."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers=dict(headers) if headers else None)
    if on_session_lost is not None:
        callback = on_session_lost

        async def watch(response: Any) -> None:
            if response.status_code == 404 and "mcp-session-id" in response.request.headers:
                callback()

        client.event_hooks["response"].append(watch)
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams[0], streams[1]


def connection_failed(message: Any) -> bool:
    """Whether a message from an HTTP transport's read stream is an HTTP client's transport
    error (httpx or httpx2 `TransportError`: refused, reset, timed out): the server is gone.
    1.x puts such errors in the stream and leaves the request waiting; 2.x fails the
    transport instead."""
    if not isinstance(message, Exception):
        return False
    return any(
        cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
        for cls in type(message).__mro__
    )


def connection_closed(exc: BaseException) -> bool:
    """Whether `exc` is the SDK's own error for a request whose session closed before the
    answer came (both lines: code -32000, "Connection closed"): it may have been handled."""
    error = getattr(exc, "error", None)
    return (
        isinstance(exc, SDKError)
        and getattr(error, "code", None) == -32000
        and getattr(error, "message", None) == "Connection closed"
    )


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
        _add_catalog(server, catalog)
    return server


def _build_server_v2(
    name: str, version: str, instructions: str, list_tools: ToolLister, call_tool: ToolCaller
) -> Server[Any]:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await list_tools(getattr(params, "cursor", None))

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        with _handling_call(ctx.session, ctx.request_id, ctx.meta, params.name):
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
        return _types_v1.ServerResult(await list_tools(cursor))

    async def on_call_tool(request: Any) -> Any:
        arguments = dict(request.params.arguments or {})
        ctx = server.request_context
        with _handling_call(ctx.session, ctx.request_id, ctx.meta, request.params.name):
            return _types_v1.ServerResult(await call_tool(request.params.name, arguments))

    server.request_handlers[_types_v1.ListToolsRequest] = on_list_tools
    server.request_handlers[_types_v1.CallToolRequest] = on_call_tool
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


# -- resources, prompts and completion (compensator/catalog.py) -------------------------

PageLister = Callable[[str | None], Awaitable[Any]]
PromptGetter = Callable[[str, dict[str, str] | None], Awaitable[types.GetPromptResult]]


@dataclass(frozen=True, kw_only=True)
class CatalogHandlers:
    """The proxy's resource, prompt and completion handlers, in SDK-neutral signatures.

    Listers take the client's cursor; `read_resource` the URI; `subscribe_resource` and
    `unsubscribe_resource` the URI and the client's session (to send
    `notifications/resources/updated` on later); `get_prompt` the name and arguments;
    `complete` the request's params as a wire dict (`ref`, `argument`, `context`). Results are
    the SDK's result models. The flags set the advertised `resources.subscribe`,
    `resources.listChanged` and `prompts.listChanged`."""

    list_resources: PageLister | None = None
    list_resource_templates: PageLister | None = None
    read_resource: Callable[[str], Awaitable[types.ReadResourceResult]] | None = None
    subscribe_resource: Callable[[str, Any], Awaitable[None]] | None = None
    unsubscribe_resource: Callable[[str, Any], Awaitable[None]] | None = None
    list_prompts: PageLister | None = None
    get_prompt: PromptGetter | None = None
    complete: Callable[[dict[str, Any]], Awaitable[types.CompleteResult]] | None = None
    resources_subscribe: bool = False
    resources_list_changed: bool = False
    prompts_list_changed: bool = False


def _add_catalog(server: Server[Any], handlers: CatalogHandlers) -> None:
    if MCP2:
        _add_catalog_v2(server, handlers)
    else:  # pragma: no cover - 1.x only
        _add_catalog_v1(server, handlers)
    _adjust_capabilities(server, handlers)


def _cursor(params: Any) -> str | None:
    cursor: str | None = getattr(params, "cursor", None) if params is not None else None
    return cursor


def _add_catalog_v2(server: Server[Any], h: CatalogHandlers) -> None:
    add = server.add_request_handler

    def lister(method: str, handler: PageLister | None) -> None:
        if handler is None:
            return

        async def on_list(ctx: Any, params: Any) -> Any:
            return await handler(_cursor(params))

        add(method, types.PaginatedRequestParams, on_list)

    lister("resources/list", h.list_resources)
    lister("resources/templates/list", h.list_resource_templates)
    lister("prompts/list", h.list_prompts)
    read, get, complete = h.read_resource, h.get_prompt, h.complete
    if read is not None:

        async def on_read(ctx: Any, params: Any) -> Any:
            return await read(str(params.uri))

        add("resources/read", types.ReadResourceRequestParams, on_read)
    for method, params_type, handler in (
        ("resources/subscribe", types.SubscribeRequestParams, h.subscribe_resource),
        ("resources/unsubscribe", types.UnsubscribeRequestParams, h.unsubscribe_resource),
    ):
        if handler is not None:
            add(method, params_type, _v2_subscriber(handler))
    if get is not None:

        async def on_get(ctx: Any, params: Any) -> Any:
            return await get(params.name, params.arguments)

        add("prompts/get", types.GetPromptRequestParams, on_get)
    if complete is not None:

        async def on_complete(ctx: Any, params: Any) -> Any:
            return await complete(params.model_dump(by_alias=True, mode="json", exclude_none=True))

        add("completion/complete", types.CompleteRequestParams, on_complete)


def _v2_subscriber(handler: Callable[[str, Any], Awaitable[None]]) -> Any:
    async def on_subscription(ctx: Any, params: Any) -> Any:
        await handler(str(params.uri), ctx.session)
        return types.EmptyResult()

    return on_subscription


def _add_catalog_v1(server: Any, h: CatalogHandlers) -> None:  # pragma: no cover
    handlers = server.request_handlers

    def lister(request_type: Any, handler: PageLister | None) -> None:
        if handler is None:
            return

        async def on_list(request: Any) -> Any:
            return _types_v1.ServerResult(await handler(_cursor(request.params)))

        handlers[request_type] = on_list

    lister(_types_v1.ListResourcesRequest, h.list_resources)
    lister(_types_v1.ListResourceTemplatesRequest, h.list_resource_templates)
    lister(_types_v1.ListPromptsRequest, h.list_prompts)
    read, get, complete = h.read_resource, h.get_prompt, h.complete
    if read is not None:

        async def on_read(request: Any) -> Any:
            return _types_v1.ServerResult(await read(str(request.params.uri)))

        handlers[_types_v1.ReadResourceRequest] = on_read
    for request_type, handler in (
        (_types_v1.SubscribeRequest, h.subscribe_resource),
        (_types_v1.UnsubscribeRequest, h.unsubscribe_resource),
    ):
        if handler is not None:
            handlers[request_type] = _v1_subscriber(server, handler)
    if get is not None:

        async def on_get(request: Any) -> Any:
            return _types_v1.ServerResult(await get(request.params.name, request.params.arguments))

        handlers[_types_v1.GetPromptRequest] = on_get
    if complete is not None:

        async def on_complete(request: Any) -> Any:
            params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
            return _types_v1.ServerResult(await complete(params))

        handlers[_types_v1.CompleteRequest] = on_complete


def _v1_subscriber(  # pragma: no cover - 1.x only
    server: Any, handler: Callable[[str, Any], Awaitable[None]]
) -> Any:
    async def on_subscription(request: Any) -> Any:
        await handler(str(request.params.uri), server.request_context.session)
        return _types_v1.ServerResult(_types_v1.EmptyResult())

    return on_subscription


def _adjust_capabilities(server: Server[Any], h: CatalogHandlers) -> None:
    """Advertise `resources.subscribe` and the resources/prompts `listChanged` flags as given:
    1.x always says subscribe=false, and both lines take listChanged from one
    NotificationOptions shared with tools."""
    derive = server.get_capabilities
    changed = "list_changed" if MCP2 else "listChanged"
    modern: Any = ()
    if MCP2:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS as modern

    def get_capabilities(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = derive(*args, **kwargs)
        if kwargs.get("protocol_version") in modern:
            return capabilities  # 2026-07-28+: the SDK derives them from subscriptions/listen
        if capabilities.resources is not None:
            capabilities.resources.subscribe = h.resources_subscribe
            setattr(capabilities.resources, changed, h.resources_list_changed)
        if capabilities.prompts is not None:
            setattr(capabilities.prompts, changed, h.prompts_list_changed)
        return capabilities

    server.get_capabilities = get_capabilities  # type: ignore[method-assign]


def to_wire(model: Any) -> dict[str, Any]:
    """Any protocol model as plain JSON with the protocol's camelCase keys."""
    wire: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return wire


def sdk_error(code: int, message: str, data: Any = None) -> Exception:
    """The SDK's error that a request handler raises to answer with a JSON-RPC error."""
    if MCP2:
        return SDKError(code, message, data)
    return SDKError(types.ErrorData(code=code, message=message, data=data))  # pragma: no cover


def error_data(exc: Exception) -> tuple[int, str, Any]:
    """(code, message, data) of an SDKError."""
    error = exc.error  # type: ignore[attr-defined]
    return int(error.code), str(error.message), error.data


_LIST_FIELDS = {
    "resources": "resources",
    "resource_templates": "resource_templates" if MCP2 else "resourceTemplates",
    "prompts": "prompts",
}


async def list_page(
    session: ClientSession, kind: str, cursor: str | None
) -> tuple[list[Any], str | None]:
    """One page of `resources`, `resource_templates` or `prompts`: (items, next cursor)."""
    params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
    page = await getattr(session, f"list_{kind}")(params=params)
    after: str | None = page.next_cursor if MCP2 else page.nextCursor
    return list(getattr(page, _LIST_FIELDS[kind])), after


async def send_wire_request(
    session: ClientSession,
    method: str,
    params: dict[str, Any],
    request_type: Any,
    result_type: Any,
    timeout: float | None = None,
) -> Any:
    """Send a request given as wire JSON (`method`, camelCase `params`) and parse its result."""
    request = request_type.model_validate({"method": method, "params": params})
    return await session.send_request(
        _request(request), result_type, request_read_timeout_seconds=_timeout(timeout)
    )


def initialize_capabilities(result: Any) -> dict[str, Any]:
    """A server's capabilities from its initialize result, as wire JSON."""
    return to_wire(result.capabilities)


# -- notifications, progress, logging, server-initiated requests (compensator/relay.py) ---


@dataclass(kw_only=True)
class ClientCall:
    """The client's `tools/call` that the current task is handling: where its progress goes."""

    session: Any
    request_id: Any
    progress_token: str | int | None
    tool: str
    progress_taken: bool = False


CURRENT_CALL: contextvars.ContextVar[ClientCall | None] = contextvars.ContextVar(
    "compensator_client_call", default=None
)
"""Set while a `tools/call` handler runs; calls it makes downstream inherit it."""


@contextlib.contextmanager
def _handling_call(session: Any, request_id: Any, meta: Any, tool: str) -> Iterator[None]:
    call = ClientCall(
        session=session, request_id=request_id, progress_token=_progress_token(meta), tool=tool
    )
    token = CURRENT_CALL.set(call)
    try:
        yield
    finally:
        CURRENT_CALL.reset(token)


def _progress_token(meta: Any) -> str | int | None:
    if meta is None:
        return None
    if MCP2:  # a TypedDict keyed by the field name
        token: str | int | None = meta.get("progress_token")
        return token
    return getattr(meta, "progressToken", None)  # pragma: no cover - 1.x only


@dataclass(frozen=True, kw_only=True)
class RelayHandlers:
    """What the proxy's server does with the client messages that are not tool calls.

    `on_client` gets the client's session once it has initialized; `set_level` a
    `logging/setLevel` level; `roots_changed` is called on `notifications/roots/list_changed`."""

    on_client: Callable[[Any], None]
    set_level: Callable[[str], Awaitable[None]]
    roots_changed: Callable[[], Awaitable[None]]


def install_relay(server: Server[Any], handlers: RelayHandlers) -> None:
    """Register the relay's handlers; registering `logging/setLevel` advertises `logging`."""
    if MCP2:
        _install_relay_v2(server, handlers)
    else:  # pragma: no cover - 1.x only
        _install_relay_v1(server, handlers)


def _install_relay_v2(server: Server[Any], handlers: RelayHandlers) -> None:
    async def on_initialized(ctx: Any, params: Any) -> None:
        # The session is built per message, but what it sends without a related request id
        # goes on the connection's own channel, so it stays usable after this notification.
        handlers.on_client(ctx.session)

    async def on_set_level(ctx: Any, params: Any) -> types.EmptyResult:
        await handlers.set_level(params.level)
        return types.EmptyResult()

    async def on_roots_changed(ctx: Any, params: Any) -> None:
        await handlers.roots_changed()

    server.add_notification_handler(
        "notifications/initialized", types.NotificationParams, on_initialized
    )
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)
    server.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, on_roots_changed
    )


def _install_relay_v1(server: Any, handlers: RelayHandlers) -> None:  # pragma: no cover
    # 1.x hands notification handlers no session; `run` passes it to `_handle_message`, which
    # is looked up on the instance, so wrapping it there sees the session of every message.
    handle_message = server._handle_message

    async def on_message(message: Any, session: Any, *args: Any, **kwargs: Any) -> Any:
        root = getattr(message, "root", None)
        if isinstance(root, _types_v1.InitializedNotification):
            handlers.on_client(session)
        return await handle_message(message, session, *args, **kwargs)

    async def on_set_level(request: Any) -> Any:
        await handlers.set_level(request.params.level)
        return _types_v1.ServerResult(_types_v1.EmptyResult())

    async def on_roots_changed(notification: Any) -> None:
        await handlers.roots_changed()

    server._handle_message = on_message
    server.request_handlers[_types_v1.SetLevelRequest] = on_set_level
    server.notification_handlers[_types_v1.RootsListChangedNotification] = on_roots_changed


def client_supports(session: Any, capability: str) -> bool:
    """Whether the client of `session` advertised `capability` (sampling, elicitation, roots)."""
    if MCP2:
        capabilities = session.client_capabilities
    else:  # pragma: no cover - 1.x only
        params = session.client_params
        capabilities = params.capabilities if params is not None else None
    return capabilities is not None and getattr(capabilities, capability, None) is not None


def server_supports(session: ClientSession, capability: str) -> bool:
    """Whether the downstream server of `session` advertised `capability` (e.g. logging)."""
    if MCP2:  # noqa: SIM108 - in a ternary mypy would check the 1.x side against 2.x
        capabilities = session.server_capabilities
    else:  # pragma: no cover - 1.x only
        capabilities = session.get_server_capabilities()
    return capabilities is not None and getattr(capabilities, capability, None) is not None


async def notify_client(session: Any, notification: Any, related_request_id: Any = None) -> None:
    """Send a server notification (an unwrapped model such as ToolListChangedNotification)."""
    if not MCP2:  # pragma: no cover - 1.x only
        notification = types.ServerNotification(notification)
    await session.send_notification(notification, related_request_id=related_request_id)


async def ask_client(
    session: Any, request: Any, result_type: Any, related_request_id: Any = None
) -> Any:
    """Send a server-to-client request (an unwrapped model such as CreateMessageRequest).

    With `related_request_id` (the client's request being handled) it travels with that
    request: over streamable HTTP on the POST's response stream, not the session's GET stream."""
    if not MCP2:  # pragma: no cover - 1.x only
        request = types.ServerRequest(request)
    if related_request_id is None:
        return await session.send_request(request, result_type)
    from mcp.shared.message import ServerMessageMetadata

    metadata = ServerMessageMetadata(related_request_id=related_request_id)
    return await session.send_request(request, result_type, metadata=metadata)


def on_client_closed(session: Any, callback: Callable[[], None]) -> None:
    """Run `callback` when the client connection of `session` closes, where the SDK says so
    (2.x: the connection's exit stack). On 1.x sending to a closed session raises
    ClosedResourceError, which is how the relay finds out there."""
    connection = getattr(session, "_connection", None) if MCP2 else None
    if connection is not None:
        connection.exit_stack.callback(callback)


def client_key(session: Any) -> Any:
    """What stays the same for every message of one client connection: 1.x has one
    ServerSession per connection, 2.x builds one per message around the connection."""
    if MCP2:
        return getattr(session, "_connection", session)
    return session  # pragma: no cover - 1.x only


def notification_of(message: Any) -> Any:
    """The notification model a downstream `message_handler` got, or None for anything else
    (a transport exception; on 1.x also a request the session did not answer itself)."""
    if isinstance(message, Exception):
        return None
    if MCP2:
        return message
    root = getattr(message, "root", None)  # pragma: no cover - 1.x only
    return root if isinstance(message, types.ServerNotification) else None  # pragma: no cover


# -- serving over streamable HTTP (compensator/http_serve.py) ------------------------------


def http_session_manager(server: Server[Any], allowed_hosts: list[str] | None) -> Any:
    """The SDK's StreamableHTTPSessionManager for `server`, with stateful sessions.

    Same module, class and arguments on both lines. `allowed_hosts` (Host header patterns such
    as "127.0.0.1:*") turns on the SDK's DNS-rebinding protection, Origin limited to the same
    hosts over http; None leaves it off. Both lines start each session with
    `server.create_initialization_options()` and no arguments: the default is made to
    advertise `tools.listChanged`, as `serve_stdio` does."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    if allowed_hosts is None:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    else:
        origins = [f"http://{host}" for host in allowed_hosts]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=origins,
        )
    create = server.create_initialization_options

    def create_initialization_options(
        notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        options = notification_options or NotificationOptions(tools_changed=True)
        return create(options, *args, **kwargs)

    server.create_initialization_options = create_initialization_options  # type: ignore[method-assign]
    return StreamableHTTPSessionManager(app=server, security_settings=security)
