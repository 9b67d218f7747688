"""Everything between the proxy's server and its clients that is not a tool list or a tool
result: which client call is being handled, the relay's handlers, notifications and requests
to a client, and what a client supports, on both SDK lines."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server

from . import _private
from ._private import wrap_handle_message_v1
from .base import MCP2, types_v1

__all__ = [
    "CURRENT_CALL",
    "ClientCall",
    "RelayHandlers",
    "ask_client",
    "client_key",
    "client_supports",
    "elicit",
    "handling_call",
    "install_relay",
    "notify_client",
    "on_client_closed",
]


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
def handling_call(session: Any, request_id: Any, meta: Any, tool: str) -> Iterator[None]:
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
    def wrap(handle_message: Any) -> Any:
        async def on_message(message: Any, session: Any, *args: Any, **kwargs: Any) -> Any:
            root = getattr(message, "root", None)
            if isinstance(root, types_v1.InitializedNotification):
                handlers.on_client(session)
            return await handle_message(message, session, *args, **kwargs)

        return on_message

    async def on_set_level(request: Any) -> Any:
        await handlers.set_level(request.params.level)
        return types_v1.ServerResult(types_v1.EmptyResult())

    async def on_roots_changed(notification: Any) -> None:
        await handlers.roots_changed()

    wrap_handle_message_v1(server, wrap)
    server.request_handlers[types_v1.SetLevelRequest] = on_set_level
    server.notification_handlers[types_v1.RootsListChangedNotification] = on_roots_changed


def client_supports(session: Any, capability: str) -> bool:
    """Whether the client of `session` advertised `capability` (sampling, elicitation, roots)."""
    if MCP2:
        capabilities = session.client_capabilities
    else:  # pragma: no cover - 1.x only
        params = session.client_params
        capabilities = params.capabilities if params is not None else None
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


async def elicit(session: Any, message: str, related_request_id: Any = None) -> str:
    """Ask the person at the client of `session` an `elicitation/create` with `message` and
    nothing to fill in (the answer is the action alone): "accept", "decline" or "cancel".
    Raises SDKError with the client's own error, or when the connection is gone."""
    # Both lines validate the same wire shape (2.x picks the form variant of its params union).
    request = types.ElicitRequest.model_validate(
        {
            "method": "elicitation/create",
            "params": {"message": message, "requestedSchema": {"type": "object", "properties": {}}},
        }
    )
    result = await ask_client(session, request, types.ElicitResult, related_request_id)
    return str(result.action)


def on_client_closed(session: Any, callback: Callable[[], None]) -> None:
    """Run `callback` when the client connection of `session` closes, where the SDK says so
    (2.x: the connection's exit stack). On 1.x sending to a closed session raises
    ClosedResourceError, which is how the relay finds out there."""
    connection = _private.connection(session) if MCP2 else None
    if connection is not None:
        connection.exit_stack.callback(callback)


def client_key(session: Any) -> Any:
    """What stays the same for every message of one client connection: 1.x has one
    ServerSession per connection, 2.x builds one per message around the connection."""
    if MCP2:
        return _private.connection(session) or session
    return session  # pragma: no cover - 1.x only
