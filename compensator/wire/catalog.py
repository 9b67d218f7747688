"""Resources, resource templates, prompts and completion of the downstream servers, merged.

The proxy offers the client one catalog made of every downstream server's lists, and routes
each request about an entry to the server that listed it. Nothing here is journaled: reading a
resource, getting a prompt or asking for completions changes nothing, so none of them passes
through the proxy's mutating-call path.

Naming and routing, as the client sees it:

- Prompts are exposed as `server__prompt`, like tools (with the server's `prefix:` when it has
  one); `prompts/get` and a completion request whose `ref` is `ref/prompt` go to that server
  with the original name.
- Resource URIs are kept unchanged, so a resource link inside a tool result stays readable
  through the proxy. `resources/read`, `resources/subscribe` and `resources/unsubscribe` for a
  URI go to, in this order:
  1. `compensator://<server>/<original uri>`: to <server>, with the original URI;
  2. the server that listed exactly that URI;
  3. the first server (in registry order) with a resource template that matches the URI;
  4. the only server whose listed URIs or templates use the URI's scheme.
  Anything else is answered with JSON-RPC error -32002 (resource not found), naming what was
  tried.
- When two servers list the same URI (or the same URI template), the first server in registry
  order owns it and each later one exposes its entry as `compensator://<server>/<original>`;
  a warning is logged when this happens. Contents read through such a URI carry it back in
  `contents[].uri`, and `notifications/resources/updated` about the original URI from a later
  server is forwarded with that URI too.
- Resource and template `name`s, and everything else in the entries, are passed on unchanged.
- Completion requests whose `ref` is `ref/resource` are routed by the template string the
  proxy listed (either form), else like a read of that URI. A server that does not advertise
  the `completions` capability gets no request; the client gets an empty completion.

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
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types

from ..names import exposed_name
from . import sdk
from .downstream import CATALOG, Downstream
from .pool import DownstreamPool

__all__ = [
    "PREFIX",
    "RESOURCE_NOT_FOUND",
    "Catalog",
    "template_pattern",
]

log = logging.getLogger(__name__)

PREFIX = "compensator://"
"""How a resource whose URI another server already lists is exposed: PREFIX<server>/<uri>."""

RESOURCE_NOT_FOUND = -32002
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001

_EXPRESSION = re.compile(r"\{([^}]*)\}")


def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the URIs an RFC 6570 template expands to (loosely: a
    `{var}` is one path segment, `{+var}` anything, `{?a,b}` an optional query)."""
    parts: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        operator = match.group(1)[:1]
        parts.append(
            {
                "+": ".*",
                "#": "(?:#.*)?",
                "?": r"(?:\?[^#]*)?",
                "&": r"(?:&[^#]*)?",
                "/": r"(?:/[^/?#]*)*",
                ".": r"(?:\.[^/?#.]*)*",
                ";": r"(?:;[^/?#]*)*",
            }.get(operator, r"[^/?#]*")
        )
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


def _scheme(uri: str) -> str | None:
    scheme, sep, _ = uri.partition(":")
    return scheme.lower() if sep and scheme else None


@dataclass(frozen=True)
class _Entry:
    """One downstream entry as the client sees it."""

    server: str
    original: str
    """The server's own URI, URI template or prompt name."""
    exposed: str
    wire: dict[str, Any]
    pattern: re.Pattern[str] | None = None


class _Tables:
    """The routing tables of one state of the downstream lists."""

    def __init__(self, servers: Sequence[Downstream]) -> None:
        self.resources: list[_Entry] = []
        self.templates: list[_Entry] = []
        self.prompts: dict[str, _Entry] = {}
        self.by_uri: dict[str, _Entry] = {}
        self.by_template: dict[str, _Entry] = {}
        self.schemes: dict[str, list[str]] = {}
        self.collisions: list[tuple[str, str, str]] = []
        for server in servers:
            self._add_server(server)

    def _add_server(self, server: Downstream) -> None:
        for resource in server.resources:
            wire = sdk.to_wire(resource)
            entry = self._entry(server.name, str(wire["uri"]), self.by_uri, "uri", wire)
            self.resources.append(entry)
            self.by_uri.setdefault(entry.exposed, entry)
        for template in server.resource_templates:
            wire = sdk.to_wire(template)
            entry = self._entry(
                server.name, str(wire["uriTemplate"]), self.by_template, "uriTemplate", wire
            )
            self.templates.append(entry)
            self.by_template.setdefault(entry.exposed, entry)
        for prompt in server.prompts:
            wire = sdk.to_wire(prompt)
            exposed = exposed_name(server.prefix, str(wire["name"]))
            entry = _Entry(server.name, str(wire["name"]), exposed, {**wire, "name": exposed})
            self.prompts.setdefault(exposed, entry)

    def _entry(
        self, server: str, original: str, taken: dict[str, _Entry], key: str, wire: dict[str, Any]
    ) -> _Entry:
        exposed = original
        owner = taken.get(original)
        if owner is not None and owner.server != server:
            exposed = f"{PREFIX}{server}/{original}"
            self.collisions.append((original, owner.server, server))
        scheme = _scheme(original)
        if scheme is not None and server not in self.schemes.setdefault(scheme, []):
            self.schemes[scheme].append(server)
        pattern = template_pattern(original) if key == "uriTemplate" else None
        return _Entry(server, original, exposed, {**wire, key: exposed}, pattern)

    def route_uri(self, uri: str, servers: Iterable[str]) -> tuple[str, str]:
        """(server, the server's own URI) for a URI the client sent; raises the SDK's error
        (resource not found) when nothing claims it."""
        if uri.startswith(PREFIX):
            server, _, original = uri[len(PREFIX) :].partition("/")
            if server in servers and original:
                return server, original
        entry = self.by_uri.get(uri)
        if entry is not None:
            return entry.server, entry.original
        for template in self.templates:
            owned = template.exposed == template.original and template.pattern is not None
            if owned and template.pattern.fullmatch(uri):  # type: ignore[union-attr]
                return template.server, uri
        scheme = _scheme(uri)
        owners = self.schemes.get(scheme, []) if scheme is not None else []
        if len(owners) == 1:
            return owners[0], uri
        if uri.startswith(PREFIX):
            why = f"{PREFIX}<server>/<uri> needs one of the servers {', '.join(servers)}"
        elif owners:
            why = f"its scheme {scheme!r} is used by several servers ({', '.join(owners)})"
        else:
            why = f"no server lists a URI or template with the scheme {scheme!r}"
        raise sdk.sdk_error(
            RESOURCE_NOT_FOUND,
            f"no server behind the proxy offers resource {uri!r}: no server listed it or a "
            f"template matching it, and {why}. List resources/list and "
            "resources/templates/list for the URIs that can be read",
            {"uri": uri},
        )

    def exposed_uri(self, server: str, uri: str) -> str:
        """The URI the client knows for `server`'s own `uri`."""
        owner = self.by_uri.get(uri)
        if owner is not None and owner.server != server:
            return f"{PREFIX}{server}/{uri}"
        return uri


class Catalog:
    """The merged resources, templates and prompts of a `DownstreamPool`, and the handlers
    that serve and route them (see the module docstring for the naming scheme).

    The tables follow the downstream lists: they are rebuilt whenever a server's lists have
    been replaced (after a restart or `refresh`)."""

    def __init__(self, pool: DownstreamPool) -> None:
        self.pool = pool
        self._key: tuple[Any, ...] = ()
        self._tables = _Tables([])
        self._warned: set[tuple[str, str, str]] = set()
        self.subscriptions: dict[str, tuple[str, str]] = {}
        """Client-side URI -> (server, the server's own URI) of each live subscription."""
        self._subscribers: dict[str, dict[Any, Any]] = {}
        """Client-side URI -> the client sessions subscribed to it, by `sdk.client_key`."""
        self.tables()

    # -- state -------------------------------------------------------------------------

    def tables(self) -> _Tables:
        servers = list(self.pool.servers.values())
        key = tuple(
            list_ for s in servers for list_ in (s.resources, s.resource_templates, s.prompts)
        )
        same = len(key) == len(self._key) and all(
            a is b for a, b in zip(key, self._key, strict=True)
        )
        if not same:
            self._key, self._tables = key, _Tables(servers)
            self._warn_collisions(self._tables.collisions)
        return self._tables

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

    def _prompt(self, name: str) -> _Entry:
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
