"""Everything between the client and the downstream servers that is not a tool call.

Forwarded: a downstream's `tools/list_changed` (the proxy lists that server's tools again,
re-routes them, then tells the client), `resources/list_changed` and `prompts/list_changed`
(refreshed through `on_list_changed` hooks, then told); progress of a forwarded call, under
the client's own token; log messages (`notifications/message`, the logger prefixed with the
server name); the client's `logging/setLevel` to every server that offers logging; the
client's `notifications/roots/list_changed` to every server; and the server-initiated
requests `sampling/createMessage`, `elicitation/create` and `roots/list` to the client and
its answer back. A server that starts late (it failed its first start and a background retry
brought it up) is announced as if it had sent list_changed. A request the client cannot
answer (it did not advertise the capability, or no client is connected yet) gets a JSON-RPC
error that says so.

What the downstream servers are told the proxy, as their client, supports: over stdio, what
the one client's `initialize` advertised of sampling, elicitation and roots (`Relay(client=
capabilities)`; the servers start after it), so that a server offering some tools only to
capable clients does not offer them to a client that would see them fail; over HTTP, where
clients come and go on shared servers, all three.

The downstream servers start before the client has finished initializing (over HTTP, before
any client connects). Until then, notifications are dropped (logged at debug level): the
client's first `tools/list` sees the refreshed tools anyway. A server that asked for roots
before then is sent `notifications/roots/list_changed` once a client with roots support is
connected.

Several clients (sessions) at once, as `compensator serve --http` allows: a list_changed goes
to every session. Progress of a call goes to the session that made it (progress is tied to
the downstream request); log messages that arrive while a session's `tools/call` to that
server is in flight go to that session, on that call's own stream; a log message no call
explains goes to every session. A sampling, elicitation or roots request goes to the session
whose call to that server is in flight (the latest such call), else to the most recently
active session (the last to initialize or call a tool) that advertised the capability, else
it gets the error above. "Caused by" is inferred from timing: the SDKs carry no link from a
downstream's message to the call it belongs to, so whatever a server sends while a call to it
is in flight is taken to belong to that call. A session that has ended, or cannot be written
to any more, is forgotten. The last `logging/setLevel` of any session is the level every
server gets.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp.types as types

from . import sdk
from .pool import DownstreamPool

__all__ = ["Relay"]

log = logging.getLogger(__name__)

# mcp 2.x warns on every use of logging and roots: protocol 2026-07-28 deprecates them, but
# stdio sessions negotiate 2025-11-25, where they are current.
warnings.filterwarnings("ignore", "The (logging|roots) capability is deprecated")

Refresher = Callable[[str], Awaitable[None]]
"""Called with a server name when that server announced a changed resource or prompt list."""

SET_LEVEL_TIMEOUT = 10.0
"""Seconds a server gets to answer a forwarded `logging/setLevel`."""

_CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/resources/list_changed": "resources",
    "notifications/prompts/list_changed": "prompts",
}

_TELL_CLIENT = {
    "tools": types.ToolListChangedNotification,
    "resources": types.ResourceListChangedNotification,
    "prompts": types.PromptListChangedNotification,
}

_CATALOG_KINDS = {"resources": ("resources", "resource_templates"), "prompts": ("prompts",)}


class Relay:
    """Carries notifications and server-initiated requests across the proxy.

    Use as an async context manager around the pool (its task group runs the refreshes), pass
    it to `DownstreamPool(relay=...)`, and install `handlers()` on the proxy's server."""

    def __init__(self, client: Mapping[str, Any] | None = None) -> None:
        self.pool: DownstreamPool | None = None
        self.offered = _offered(client)
        """What the downstream sessions advertise: the client's capabilities (wire JSON) that
        the proxy relays, by name; all of them when `client` is None."""
        self._clients: dict[Any, Any] = {}
        """Initialized sessions by `sdk.client_key`, least recently active first."""
        self._calls: list[tuple[str | None, sdk.ClientCall]] = []
        """Client `tools/call`s in flight: (the server they go to, or None for a meta tool)."""
        self.level: str | None = None
        """The last level the client set with `logging/setLevel`."""
        self._refreshers: dict[str, Refresher] = {}
        self._group: Any = None
        self._refreshing: set[tuple[str, str]] = set()
        self._again: set[tuple[str, str]] = set()
        self._roots_asked_early: set[str] = set()
        self._client_hooks: list[Callable[[Any], None]] = []

    async def __aenter__(self) -> Relay:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        group, self._group = self._group, None
        group.cancel_scope.cancel()
        result: bool | None = await group.__aexit__(*exc_info)
        return result

    # -- wiring --------------------------------------------------------------------------

    def bind(self, pool: DownstreamPool) -> None:
        self.pool = pool

    def on_list_changed(self, kind: str, refresh: Refresher) -> None:
        """Call `refresh(server)` when a server says its `resources` or `prompts` changed,
        before the client is told. Without a hook the server's own lists are listed again
        (`Downstream.list_catalog`) when it has that method."""
        if kind not in _CATALOG_KINDS:
            raise ValueError(f"on_list_changed: kind must be one of {sorted(_CATALOG_KINDS)}")
        self._refreshers[kind] = refresh

    def on_client_attached(self, hook: Callable[[Any], None]) -> None:
        """Call `hook(session)` each time a client session has finished initializing."""
        self._client_hooks.append(hook)

    def handlers(self) -> sdk.RelayHandlers:
        """What the proxy's server calls for the client's non-tool messages."""
        return sdk.RelayHandlers(
            on_client=self.attach_client,
            set_level=self.set_level,
            roots_changed=self.roots_changed,
        )

    def session_options(self, server: str) -> dict[str, Any]:
        """The ClientSession callbacks for the downstream `server`."""

        async def sampling(context: Any, params: Any) -> Any:
            with_tools = getattr(params, "tools", None) is not None
            result = types.CreateMessageResultWithTools if with_tools else types.CreateMessageResult
            request = types.CreateMessageRequest(params=params)
            return await self._ask(server, "sampling", request, result)

        async def elicitation(context: Any, params: Any) -> Any:
            request = types.ElicitRequest(params=params)
            return await self._ask(server, "elicitation", request, types.ElicitResult)

        async def list_roots(context: Any) -> Any:
            request = types.ListRootsRequest()
            return await self._ask(server, "roots", request, types.ListRootsResult)

        async def logging_callback(params: Any) -> None:
            await self._forward_log(server, params)

        async def message_handler(message: Any) -> None:
            self._on_message(server, message)

        options: dict[str, Any] = {
            "logging_callback": logging_callback,
            "message_handler": message_handler,
        }
        # The SDK advertises each of these capabilities when its callback is given.
        if "sampling" in self.offered:
            options["sampling_callback"] = sampling
            options["sampling_capabilities"] = _sampling_capability(self.offered["sampling"])
        if "elicitation" in self.offered:
            options["elicitation_callback"] = elicitation
        if "roots" in self.offered:
            options["list_roots_callback"] = list_roots
        return options

    # -- the client ----------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The most recently active client session, else None (no client has initialized)."""
        return next(reversed(self._clients.values()), None)

    @property
    def clients(self) -> list[Any]:
        """Every initialized client session, least recently active first."""
        return list(self._clients.values())

    def attach_client(self, session: Any) -> None:
        """A client finished initializing: from now on notifications reach it."""
        self._touch(session)
        key = sdk.client_key(session)
        sdk.on_client_closed(session, lambda: self._forget(key))
        log.debug("client connected (%d now); relaying notifications to it", len(self._clients))
        for hook in self._client_hooks:
            try:
                hook(session)
            except Exception:
                log.exception("a hook on the client's start failed")
        if self._roots_asked_early and sdk.client_supports(session, "roots"):
            asked, self._roots_asked_early = self._roots_asked_early, set()
            log.info(
                "server(s) %s asked for roots before the client connected; telling them the "
                "roots changed so that they ask again",
                ", ".join(map(repr, sorted(asked))),
            )
            self._start(self._tell_roots_changed, sorted(asked))

    async def set_level(self, level: str) -> None:
        """Forward the client's `logging/setLevel` to every running server offering logging."""
        self.level = level
        for server in self._running():
            session = server.session
            if session is None or not sdk.server_supports(session, "logging"):
                continue
            try:
                with anyio.fail_after(SET_LEVEL_TIMEOUT):
                    await session.set_logging_level(level)  # type: ignore[arg-type]
            except Exception as exc:
                log.warning("server %r: forwarding logging/setLevel failed: %s", server.name, exc)

    def track_calls(self, call_tool: sdk.ToolCaller) -> sdk.ToolCaller:
        """`call_tool` that remembers which session's call is in flight to which server, so
        that what a server sends meanwhile reaches that session."""

        async def tracked(name: str, arguments: dict[str, Any]) -> Any:
            call = sdk.CURRENT_CALL.get()
            if call is None:
                return await call_tool(name, arguments)
            routed = self.pool.route(name) if self.pool is not None else None
            entry = (routed.server if routed is not None else None, call)
            self._touch(call.session)
            self._calls.append(entry)
            try:
                return await call_tool(name, arguments)
            finally:
                self._calls = [each for each in self._calls if each is not entry]

        return tracked

    async def roots_changed(self) -> None:
        """Forward the client's `notifications/roots/list_changed` to every running server."""
        await self._tell_roots_changed([server.name for server in self._running()])

    def server_started(self, server: str) -> None:
        """`server` started after failing its first start: list what it offers, as if it had
        announced list_changed for its tools and for the resources and prompts it has, and
        tell the client."""
        self._changed(server, "tools")
        assert self.pool is not None
        capabilities = self.pool.servers[server].capabilities
        for kind in _CATALOG_KINDS:
            if kind in capabilities:
                self._changed(server, kind)

    # -- progress --------------------------------------------------------------------------

    def progress_for(self, name: str) -> sdk.ProgressCallback | None:
        """A progress callback for the downstream call of tool `name`, when it is the client's
        call being handled and the client asked for progress. Only the first downstream call
        of that tool gets it: a verification read afterwards must not report progress."""
        call = sdk.CURRENT_CALL.get()
        if call is None or call.progress_token is None or call.tool != name:
            return None
        if call.progress_taken:
            return None
        call.progress_taken = True
        session, token, request_id = call.session, call.progress_token, call.request_id

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            try:
                await session.send_progress_notification(
                    token, progress, total, message, related_request_id=request_id
                )
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("progress for %s dropped: the client is gone", name)

        return forward

    # -- downstream messages ---------------------------------------------------------------

    def _on_message(self, server: str, message: Any) -> None:
        # Never await a request on the downstream session here: 1.29 handles messages inline
        # in the session's receive loop, so it would wait for itself. Start a task instead.
        notification = sdk.notification_of(message)
        kind = _CHANGED.get(getattr(notification, "method", ""))
        if kind is not None:
            self._changed(server, kind)

    def _changed(self, server: str, kind: str) -> None:
        key = (server, kind)
        if key in self._refreshing:
            self._again.add(key)  # one more round once the running one ends
            return
        self._refreshing.add(key)
        self._start(self._refresh_rounds, server, kind)

    async def _refresh_rounds(self, server: str, kind: str) -> None:
        key = (server, kind)
        try:
            while True:
                self._again.discard(key)
                await self._refresh(server, kind)
                if key not in self._again:
                    return
        finally:
            self._refreshing.discard(key)

    async def _refresh(self, server: str, kind: str) -> None:
        pool = self.pool
        if pool is None or server not in pool.servers:
            return
        try:
            if kind == "tools":
                if not await pool.relist(server):
                    return
                log.info(
                    "server %r changed its tools; now %d", server, len(pool.servers[server].tools)
                )
            else:
                await self._refresh_catalog(server, kind)
        except Exception as exc:
            log.warning("server %r announced new %s, listing them failed: %s", server, kind, exc)
            return
        await self._tell_client(_TELL_CLIENT[kind](), f"{kind}/list_changed from {server!r}")

    async def _refresh_catalog(self, server: str, kind: str) -> None:
        refresh = self._refreshers.get(kind)
        if refresh is not None:
            await refresh(server)
            return
        assert self.pool is not None
        downstream = self.pool.servers[server]
        list_catalog = getattr(downstream, "list_catalog", None)
        session = downstream.session
        if list_catalog is not None and session is not None:
            await list_catalog(session, _CATALOG_KINDS[kind])

    async def _forward_log(self, server: str, params: Any) -> None:
        logger = f"{server}/{params.logger}" if params.logger else server
        forwarded = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level=params.level, logger=logger, data=params.data
            )
        )
        what = f"a {params.level} log message from {server!r}"
        call = self._caller(server)
        if call is not None:
            try:
                await sdk.notify_client(call.session, forwarded, call.request_id)
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("the call's stream is closed; sending %s to every client", what)
        await self._tell_client(forwarded, what)

    async def _tell_client(self, notification: Any, what: str) -> None:
        """Send `notification` to every connected client."""
        if not self._clients:
            log.debug("no client connected yet; dropped %s", what)
            return
        for key, client in list(self._clients.items()):
            try:
                await sdk.notify_client(client, notification)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("a client is gone; dropped %s for it", what)
                self._forget(key)

    async def _tell_roots_changed(self, servers: list[str]) -> None:
        if self.pool is None:
            return
        for name in servers:
            session = self.pool.servers[name].session
            if session is None:
                continue
            try:
                await session.send_roots_list_changed()
            except Exception as exc:
                log.warning("server %r: forwarding roots/list_changed failed: %s", name, exc)

    # -- server-initiated requests -----------------------------------------------------------

    async def _ask(self, server: str, capability: str, request: Any, result_type: Any) -> Any:
        """Put a downstream's request to the client; its answer, or an ErrorData saying why
        there is none. The client is the session whose call caused it when one is in flight,
        else the most recently active session with the capability."""
        call = self._caller(server)
        method = request.method
        if call is not None:
            candidates, related = [call.session], call.request_id
        else:
            newest = list(reversed(self.clients))
            able = [each for each in newest if sdk.client_supports(each, capability)]
            candidates, related = able or newest[:1], None
        if not candidates:
            if capability == "roots":
                self._roots_asked_early.add(server)
            return _error(
                f"server {server!r} sent {method} before a client connected to the compensator; "
                "nobody can answer it yet. Send it again once a client is connected"
            )
        if not sdk.client_supports(candidates[0], capability):
            return _error(
                f"the client connected to the compensator does not support {capability} (it "
                f"did not advertise the {capability!r} capability), so {method} from server "
                f"{server!r} cannot be answered"
            )
        for client in candidates:  # the next one when a session turns out to be gone
            try:
                return await sdk.ask_client(client, request, result_type, related)
            except sdk.SDKError as exc:
                if not sdk.connection_closed(exc):
                    return exc.error  # the client's own error, passed on as it is
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            self._forget(sdk.client_key(client))
        return _error(f"the client disconnected before answering {method} from {server!r}")

    # -- helpers -----------------------------------------------------------------------------

    def _touch(self, session: Any) -> None:
        """`session` is the most recently active client from now on."""
        key = sdk.client_key(session)
        self._clients.pop(key, None)
        self._clients[key] = session

    def _forget(self, key: Any) -> None:
        self._clients.pop(key, None)

    def _caller(self, server: str) -> sdk.ClientCall | None:
        """The latest client call in flight to `server` (or a meta tool's, e.g. undo_to)."""
        for target, call in reversed(self._calls):
            if target in (server, None):
                return call
        return None

    def _running(self) -> list[Any]:
        if self.pool is None:
            return []
        return [server for server in self.pool.servers.values() if server.session is not None]

    def _start(self, function: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._group is None:
            log.debug("relay is closed; not starting %s", getattr(function, "__name__", function))
            return
        self._group.start_soon(_logged, function, *args)


async def _logged(function: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run a background step; a failure is logged, never fatal to the proxy."""
    try:
        await function(*args)
    except Exception:
        log.exception("relaying failed in %s", getattr(function, "__name__", function))


RELAYED = ("sampling", "elicitation", "roots")
"""The client capabilities a downstream server may use through the proxy."""


def _offered(client: Mapping[str, Any] | None) -> dict[str, Any]:
    if client is None:
        return {name: {} for name in RELAYED}
    return {name: client[name] for name in RELAYED if client.get(name) is not None}


def _sampling_capability(wire: Any) -> types.SamplingCapability | None:
    """The client's own sampling capability (e.g. with `tools`), else the SDK's default."""
    try:
        return types.SamplingCapability.model_validate(wire or {})
    except ValueError:
        return None


def _error(message: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=message)
