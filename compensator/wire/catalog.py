"""Resources, resource templates, prompts and completion of the downstream servers, merged.

The proxy offers the client one catalog made of every downstream server's lists, and routes
each request about an entry to the server that listed it. Nothing here is journaled: reading a
resource, getting a prompt or asking for completions changes nothing, so none of them passes
through the proxy's mutating-call path.

How entries are named and routed is in compensator/wire/routing.py.

Lists are served to the client whole, in one page, without `nextCursor`; the proxy follows
each downstream server's pagination itself when it lists (at start-up, after a restart, and on
`refresh`, which the relay calls on a server's `resources/list_changed` or
`prompts/list_changed`). A server that lists none of a kind (or does not advertise it, or fails
to list it: logged) adds nothing. The proxy advertises `resources`, `prompts` and `completions`
only when at least one downstream server that started advertises them, with
`resources.subscribe` and the `listChanged` flags set when at least one of those servers sets
them; this is decided once, at start-up.

Subscriptions are forwarded to the owning server and remembered by URI, with the client
sessions that asked (several with `compensator serve --http`): an update goes to the sessions
subscribed to its URI, or, for a URI nobody subscribed to as such (a server may report a
part of a subscribed resource), to every session subscribed to something at that server. The
server is asked to unsubscribe when the last of them unsubscribes. When a server is restarted
(or an HTTP server reconnected), its subscriptions are sent to it again before the call that
restarted it goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio
import mcp.types as types

from . import sdk
from .downstream import CATALOG
from .pool import DownstreamPool
from .routing import PREFIX, Entry, Tables

__all__ = ["Catalog"]

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001


class Catalog:
    """The merged resources, templates and prompts of a `DownstreamPool`, and the handlers
    that serve and route them (see the module docstring for the naming scheme).

    The tables follow the downstream lists: they are rebuilt whenever a server's lists have
    been replaced (after a restart or `refresh`)."""

    def __init__(self, pool: DownstreamPool) -> None:
        self.pool = pool
        self._key: tuple[Any, ...] = ()
        self._tables = Tables([])
        self._warned: set[tuple[str, str, str]] = set()
        self.subscriptions: dict[str, tuple[str, str]] = {}
        """Client-side URI -> (server, the server's own URI) of each live subscription."""
        self._subscribers: dict[str, dict[Any, Any]] = {}
        """Client-side URI -> the client sessions subscribed to it, by `sdk.client_key`."""
        self.tables()

    # -- state -------------------------------------------------------------------------

    def tables(self) -> Tables:
        servers = list(self.pool.servers.values())
        key = tuple(
            list_ for s in servers for list_ in (s.resources, s.resource_templates, s.prompts)
        )
        same = len(key) == len(self._key) and all(
            a is b for a, b in zip(key, self._key, strict=True)
        )
        if not same:
            self._key, self._tables = key, Tables(servers)
            self._warn_collisions(self._tables.collisions)
            self._warn_hidden(self._tables.hidden_prompts)
        return self._tables

    def _warn_hidden(self, hidden: dict[str, str]) -> None:
        for name, why in hidden.items():
            if ("prompt", name, why) not in self._warned:
                self._warned.add(("prompt", name, why))
                log.warning(
                    "the unprefixed server's prompt %r is left out: %s takes that name; give "
                    "the server a prefix: to offer it",
                    name,
                    why,
                )

    def _warn_collisions(self, collisions: Iterable[tuple[str, str, str]]) -> None:
        """One warning per pair of servers, for the collisions not reported before."""
        pairs: dict[tuple[str, str], list[str]] = {}
        for collision in collisions:
            if collision not in self._warned:
                self._warned.add(collision)
                uri, owner, other = collision
                pairs.setdefault((owner, other), []).append(uri)
        for (owner, other), uris in pairs.items():
            shown = ", ".join(uris[:5]) + (f" and {len(uris) - 5} more" if len(uris) > 5 else "")
            log.warning(
                "servers %r and %r both list %d resource URI(s) or template(s): %s. %r comes "
                "first in the registry and keeps them; %r's are offered as %s%s/<uri>",
                owner,
                other,
                len(uris),
                shown,
                owner,
                other,
                PREFIX,
                other,
            )

    def _advertised(self, capability: str) -> list[dict[str, Any]]:
        found = (s.capabilities.get(capability) for s in self.pool.servers.values())
        return [c if isinstance(c, dict) else {} for c in found if c is not None]

    def handlers(self) -> sdk.CatalogHandlers:
        """The handlers for `sdk.build_server`: only those of capabilities that at least one
        downstream server advertises."""
        self.tables()  # reports collisions at start-up
        resources, prompts = self._advertised("resources"), self._advertised("prompts")
        any_resources, any_prompts = bool(resources), bool(prompts)
        subscribe = any(c.get("subscribe") for c in resources)
        return sdk.CatalogHandlers(
            list_resources=self.list_resources if any_resources else None,
            list_resource_templates=self.list_resource_templates if any_resources else None,
            read_resource=self.read_resource if any_resources else None,
            subscribe_resource=self.subscribe if subscribe else None,
            unsubscribe_resource=self.unsubscribe if subscribe else None,
            list_prompts=self.list_prompts if any_prompts else None,
            get_prompt=self.get_prompt if any_prompts else None,
            complete=self.complete if self._advertised("completions") else None,
            resources_subscribe=subscribe,
            resources_list_changed=any(c.get("listChanged") for c in resources),
            prompts_list_changed=any(c.get("listChanged") for c in prompts),
        )

    async def refresh(self, server: str, kinds: Iterable[str] = CATALOG) -> None:
        """List `server`'s resources, templates and prompts again (`kinds`: any of
        "resources", "resource_templates", "prompts"), e.g. after its `list_changed`
        notification. Do not await this inside the downstream session's message handler on
        mcp 1.x (it deadlocks there): start a task."""
        downstream = self.pool.servers.get(server)
        if downstream is None or downstream.session is None:
            return
        await downstream.list_catalog(downstream.session, kinds)
        self.tables()

    async def refresh_resources(self, server: str) -> None:
        """`refresh` of `server`'s resources and resource templates."""
        await self.refresh(server, ("resources", "resource_templates"))

    async def refresh_prompts(self, server: str) -> None:
        """`refresh` of `server`'s prompts."""
        await self.refresh(server, ("prompts",))

    # -- lists -------------------------------------------------------------------------

    async def list_resources(self, cursor: str | None) -> types.ListResourcesResult:
        wire = [entry.wire for entry in self.tables().resources]
        return types.ListResourcesResult.model_validate({"resources": wire})

    async def list_resource_templates(
        self, cursor: str | None
    ) -> types.ListResourceTemplatesResult:
        wire = [entry.wire for entry in self.tables().templates]
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": wire})

    async def list_prompts(self, cursor: str | None) -> types.ListPromptsResult:
        wire = [entry.wire for entry in self.tables().prompts.values()]
        return types.ListPromptsResult.model_validate({"prompts": wire})

    # -- routed requests ---------------------------------------------------------------

    def route_uri(self, uri: str) -> tuple[str, str]:
        """(server, the server's own URI) for a URI the client sent."""
        return self.tables().route_uri(uri, self.pool.servers)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        server, original = self.route_uri(uri)
        result = await self._request(
            server,
            "resources/read",
            {"uri": original},
            types.ReadResourceRequest,
            types.ReadResourceResult,
        )
        if original == uri:
            return result  # type: ignore[no-any-return]
        wire = sdk.to_wire(result)
        for content in wire.get("contents", []):
            if content.get("uri") == original:
                content["uri"] = uri
        return types.ReadResourceResult.model_validate(wire)

    async def subscribe(self, uri: str, client: Any) -> None:
        """Subscribe at the owning server; its updates go to `client` (the client's session)."""
        server, original = self.route_uri(uri)
        await self._subscribe_at(server, original)
        self.subscriptions[uri] = (server, original)
        self._subscribers.setdefault(uri, {})[sdk.client_key(client)] = client

    async def unsubscribe(self, uri: str, client: Any) -> None:
        """`client` no longer wants updates of `uri`; the server is told when nobody does."""
        subscribers = self._subscribers.get(uri, {})
        subscribers.pop(sdk.client_key(client), None)
        if subscribers:
            return  # another client still wants its updates
        server, original = self.subscriptions.get(uri) or self.route_uri(uri)
        await self._request(
            server,
            "resources/unsubscribe",
            {"uri": original},
            types.UnsubscribeRequest,
            types.EmptyResult,
        )
        self.subscriptions.pop(uri, None)
        self._subscribers.pop(uri, None)

    async def _subscribe_at(self, server: str, original: str) -> None:
        await self._request(
            server,
            "resources/subscribe",
            {"uri": original},
            types.SubscribeRequest,
            types.EmptyResult,
        )

    async def renew(self, server: str) -> None:
        """Send `server` the subscriptions it had before it was restarted; one that fails is
        logged and dropped."""
        for uri, (owner, original) in list(self.subscriptions.items()):
            if owner != server:
                continue
            try:
                await self._subscribe_at(server, original)
            except sdk.SDKError as exc:
                why = sdk.error_data(exc)[1]
                log.warning(
                    "server %r: renewing the subscription to %s failed: %s", server, uri, why
                )
                self.subscriptions.pop(uri, None)
                self._subscribers.pop(uri, None)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        entry = self._prompt(name)
        params: dict[str, Any] = {"name": entry.original}
        if arguments is not None:
            params["arguments"] = arguments
        result = await self._request(
            entry.server, "prompts/get", params, types.GetPromptRequest, types.GetPromptResult
        )
        return result  # type: ignore[no-any-return]

    def _prompt(self, name: str) -> Entry:
        prompts = self.tables().prompts
        entry = prompts.get(name)
        if entry is None:
            known = ", ".join(list(prompts)[:20]) or "none"
            raise sdk.sdk_error(
                INVALID_PARAMS,
                f"no prompt named {name!r} behind the proxy; prompts are named server__prompt, "
                f"known prompts: {known}",
            )
        return entry

    async def complete(self, params: dict[str, Any]) -> types.CompleteResult:
        ref = dict(params.get("ref") or {})
        if ref.get("type") == "ref/prompt":
            entry = self._prompt(str(ref.get("name")))
            server, ref["name"] = entry.server, entry.original
        else:
            uri = str(ref.get("uri"))
            template = self.tables().by_template.get(uri)
            if template is not None:
                server, ref["uri"] = template.server, template.original
            else:
                server, ref["uri"] = self.route_uri(uri)
        if "completions" not in self.pool.servers[server].capabilities:
            return types.CompleteResult.model_validate({"completion": {"values": []}})
        result = await self._request(
            server,
            "completion/complete",
            {**params, "ref": ref},
            types.CompleteRequest,
            types.CompleteResult,
        )
        return result  # type: ignore[no-any-return]

    # -- notifications -----------------------------------------------------------------

    def watch(self) -> None:
        """Forward each downstream's `notifications/resources/updated` to the client (through
        `forward_resource_updated`), chained before any `message_handler` already in the
        server's session options, and renew subscriptions when a server restarts. Call before
        the pool starts its servers."""
        self.pool.restart_hooks.append(self.renew)
        for downstream in self.pool.servers.values():
            options = downstream.session_options
            options["message_handler"] = self._watcher(
                downstream.name, options.get("message_handler")
            )

    def _watcher(self, server: str, then: Any) -> Any:
        async def message_handler(message: Any) -> None:
            notification = sdk.notification_of(message)
            if getattr(notification, "method", None) == "notifications/resources/updated":
                uri = str(notification.params.uri)  # type: ignore[union-attr]
                try:
                    await self.forward_resource_updated(server, uri)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    log.debug("resources/updated for %s dropped: the client is gone", uri)
            if then is not None:
                await then(message)

        return message_handler

    async def forward_resource_updated(self, server: str, uri: str) -> bool:
        """Send `notifications/resources/updated` from `server` about its own `uri` to the
        sessions subscribed to it, under the URI the client knows; False when none is."""
        exposed = self.tables().exposed_uri(server, uri)
        targets = dict(self._subscribers.get(exposed, {}))
        if not targets:  # a part of a subscribed resource: whoever subscribed at this server
            for subscribed, (owner, _) in self.subscriptions.items():
                if owner == server:
                    targets.update(self._subscribers.get(subscribed, {}))
        for key, client in targets.items():
            try:
                await client.send_resource_updated(exposed)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                log.debug("resources/updated for %s dropped: a client is gone", exposed)
                for subscribers in self._subscribers.values():
                    subscribers.pop(key, None)
        return bool(targets)

    # -- the downstream side -----------------------------------------------------------

    async def _request(
        self, server: str, method: str, params: dict[str, Any], request_type: Any, result: Any
    ) -> Any:
        problem = await self.pool.ensure_running(server)
        downstream = self.pool.servers[server]
        session = downstream.session
        if problem is not None or session is None:
            raise sdk.sdk_error(INTERNAL_ERROR, problem or f"server {server!r} is not running")
        limit = downstream.spec.call_timeout
        try:
            with anyio.fail_after(limit):
                return await sdk.send_wire_request(session, method, params, request_type, result)
        except TimeoutError:
            message = f"server {server!r} did not answer {method} within {limit:.3g} s"
            raise sdk.sdk_error(REQUEST_TIMEOUT, message) from None
        except sdk.SDKError as exc:
            code, text, data = sdk.error_data(exc)
            raise sdk.sdk_error(code, f"server {server!r}: {text}", data) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            message = f"server {server!r} is gone ({type(exc).__name__}) during {method}"
            raise sdk.sdk_error(INTERNAL_ERROR, message) from None
