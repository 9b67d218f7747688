"""The catalog's names and routes: one state of the downstream servers' resources, templates
and prompts as lookup tables.

Naming and routing, as the client sees it:

- Prompts are exposed as `server__prompt`, like tools (with the server's `prefix:` when it has
  one; under their own names for the server with `prefix: ""`, leaving out, with a warning,
  a prompt whose name starts with another server's `prefix__`); `prompts/get` and a
  completion request whose `ref` is `ref/prompt` go to that server with the original name.
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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..names import exposed_name, hidden_by
from . import sdk
from .downstream import Downstream

__all__ = ["PREFIX", "RESOURCE_NOT_FOUND", "Entry", "Tables", "template_pattern"]

PREFIX = "compensator://"
"""How a resource whose URI another server already lists is exposed: PREFIX<server>/<uri>."""

RESOURCE_NOT_FOUND = -32002

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
class Entry:
    """One downstream entry as the client sees it."""

    server: str
    original: str
    """The server's own URI, URI template or prompt name."""
    exposed: str
    wire: dict[str, Any]
    pattern: re.Pattern[str] | None = None


class Tables:
    """The routing tables of one state of the downstream lists."""

    def __init__(self, servers: Sequence[Downstream]) -> None:
        self.resources: list[Entry] = []
        self.templates: list[Entry] = []
        self.prompts: dict[str, Entry] = {}
        self.by_uri: dict[str, Entry] = {}
        self.by_template: dict[str, Entry] = {}
        self.schemes: dict[str, list[str]] = {}
        self.collisions: list[tuple[str, str, str]] = []
        self.hidden_prompts: dict[str, str] = {}
        """The unprefixed server's prompts left out, with what takes their name."""
        self._prefixes = {server.prefix: server.name for server in servers}
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
            why = None if server.prefix else hidden_by(exposed, self._prefixes, meta=False)
            if why is not None:
                self.hidden_prompts[exposed] = why
                continue
            entry = Entry(server.name, str(wire["name"]), exposed, {**wire, "name": exposed})
            self.prompts.setdefault(exposed, entry)

    def _entry(
        self, server: str, original: str, taken: dict[str, Entry], key: str, wire: dict[str, Any]
    ) -> Entry:
        exposed = original
        owner = taken.get(original)
        if owner is not None and owner.server != server:
            exposed = f"{PREFIX}{server}/{original}"
            self.collisions.append((original, owner.server, server))
        scheme = _scheme(original)
        if scheme is not None and server not in self.schemes.setdefault(scheme, []):
            self.schemes[scheme].append(server)
        pattern = template_pattern(original) if key == "uriTemplate" else None
        return Entry(server, original, exposed, {**wire, key: exposed}, pattern)

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
