"""The `servers:` section: how to start each downstream server, or where to reach it."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import RegistryError
from ..names import exposed_name
from . import keys
from .model import ServerSpec
from .reader import Reader
from .variables import StartsNoServer
from .yamlnodes import join_key, line_of

__all__ = ["read_servers"]

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def read_servers(
    r: Reader,
    raw: Any,
    inherited: Mapping[str, ServerSpec],
    replaced: frozenset[str] = frozenset(),
) -> dict[str, ServerSpec]:
    """Every server entry, after the `inherited` ones from included files (an entry of the
    same name replaces one whole); also tells `r` the server names and prefixes, which tool
    names elsewhere in the file are checked against. Of a server in `replaced` (a file that
    includes this one has its own entry for it) only the prefix is read."""
    if raw is None and inherited:
        raw = {}
    r.expect(raw, dict, "servers")
    if not raw and not inherited:
        raise r.error("servers", "no servers are defined", "Add at least one server.")
    r.server_names = tuple({**inherited, **raw})
    own = {
        name: _replaced_server(r, name, spec) if name in replaced else _server(r, name, spec)
        for name, spec in raw.items()
    }
    for name, spec in own.items():
        if name in inherited and spec.exposed_prefix != inherited[name].exposed_prefix:
            raise _reprefixed(r, inherited[name], spec)
    specs = {**inherited, **own}
    r.prefixes = {}
    for spec in specs.values():
        other = r.prefixes.setdefault(spec.exposed_prefix, spec.name)
        if other != spec.name:
            raise _clash(r, specs[other], spec)
    return specs


def _reprefixed(r: Reader, included: ServerSpec, spec: ServerSpec) -> RegistryError:
    """A local entry that would rename the tools an included file's entries are written for."""
    where = f"servers.{spec.name}" + (".prefix" if spec.prefix is not None else "")
    problem = (
        f"this entry replaces server '{spec.name}' of an included registry, whose tool "
        f"entries name its tools {exposed_name(included.exposed_prefix, '<tool>')}, and it "
        f"would expose them as {exposed_name(spec.exposed_prefix, '<tool>')}"
    )
    if included.prefix is None:
        fix = "Remove prefix: here (an included server keeps its prefix)."
    else:
        fix = f'Write prefix: "{included.prefix}" here (an included server keeps its prefix).'
    return r.error(where, problem, fix)


def _clash(r: Reader, first: ServerSpec, second: ServerSpec) -> RegistryError:
    """Two servers whose tools would be exposed under the same names."""
    where = f"servers.{second.name}" + (".prefix" if second.prefix is not None else "")
    if not second.exposed_prefix:
        problem = (
            f"servers '{first.name}' and '{second.name}' both have prefix: \"\", and at most one "
            "server may expose its tools under their own names (two could offer the same name)"
        )
        return r.error(where, problem, "Give one of them a prefix: (its name, say).")
    problem = (
        f"servers '{first.name}' and '{second.name}' would both expose their tools as "
        f"'{second.exposed_prefix}__...'"
    )
    return r.error(where, problem, "Give one of them a different prefix:.")


def _replaced_server(r: Reader, name: str, raw: Any) -> ServerSpec:
    """A stand-in for an entry the including file replaces: its name and prefix only."""
    key = f"servers.{name}"
    prefix = r.optional(r.expect(raw, dict, key), "prefix", key, lambda v, k: _prefix(r, v, k))
    return ServerSpec(
        name=name,
        command="",
        args=(),
        env={},
        cwd=r.base,
        line=line_of(r.lines, key),
        prefix=prefix,
    )


def _server(r: Reader, name: str, raw: Any) -> ServerSpec:
    key = f"servers.{name}"
    r.expanded = {}
    _check_name(r, name, key, "server name", "Rename the server.", "Rename the server")
    raw = r.mapping(raw, key, keys.SERVER)
    if "url" in raw:
        return _http_server(r, name, raw, key)
    if "command" not in raw:
        fix = (
            "Add 'command:' with the executable that starts the server, or 'url:' with "
            "the address of a running streamable HTTP server."
        )
        raise r.error(f"{key}.command", "missing required key", fix)
    if "headers" in raw:
        problem = "headers are sent to a url: server, and this server has command:"
        fix = "Remove headers (pass settings in env:), or give url: instead of command:."
        raise r.error(f"{key}.headers", problem, fix)
    command = r.expand(raw["command"], f"{key}.command")
    if not command.strip():
        raise r.error(f"{key}.command", "the command is empty", "Name the executable.")
    args = r.expect(raw.get("args", []), list, f"{key}.args")
    env = r.expect(raw.get("env", {}), dict, f"{key}.env")
    return ServerSpec(
        name=name,
        command=command,
        args=tuple(r.expand(a, f"{key}.args[{i}]") for i, a in enumerate(args)),
        env=MappingProxyType({k: r.expand(v, f"{key}.env.{k}") for k, v in env.items()}),
        cwd=_cwd(r, raw.get("cwd"), f"{key}.cwd"),
        line=line_of(r.lines, key),
        call_timeout=r.optional(raw, "call_timeout", key, r.seconds),
        startup_timeout=r.optional(raw, "startup_timeout", key, r.seconds),
        expanded=MappingProxyType(dict(r.expanded)),
        prefix=r.optional(raw, "prefix", key, lambda v, k: _prefix(r, v, k)),
    )


def _http_server(r: Reader, name: str, raw: dict[str, Any], key: str) -> ServerSpec:
    """A server entry with `url:`: connect over streamable HTTP instead of starting it."""
    if "command" in raw:
        fix = (
            "Keep command: to start a local server over stdio, or url: to connect to a "
            "running streamable HTTP server, not both."
        )
        raise r.error(f"{key}.url", "command and url are both given", fix)
    for unused in keys.COMMAND_ONLY:
        if unused in raw:
            problem = f"{unused} applies to a server started with command:, and this has url:"
            fix = f"Remove {unused}: a url: server is already running on its own."
            raise r.error(f"{key}.{unused}", problem, fix)
    url = r.expand(raw["url"], f"{key}.url").strip()
    parts = urllib.parse.urlsplit(url)
    # A command that starts no server leaves an unset ${NAME} as it stands: no address yet.
    unresolved = isinstance(r.environ, StartsNoServer) and "${" in url
    bad = parts.scheme.lower() not in ("http", "https") or not parts.hostname
    if bad and not unresolved:
        # The value is not quoted: it may hold an expanded token.
        problem = "the url is not an http:// or https:// address with a host"
        fix = "Write the server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp."
        raise r.error(f"{key}.url", problem, fix)
    return ServerSpec(
        name=name,
        command="",
        args=(),
        env=MappingProxyType({}),
        cwd=r.base,
        line=line_of(r.lines, key),
        call_timeout=r.optional(raw, "call_timeout", key, r.seconds),
        startup_timeout=r.optional(raw, "startup_timeout", key, r.seconds),
        url=url,
        headers=MappingProxyType(_headers(r, raw.get("headers", {}), f"{key}.headers")),
        prefix=r.optional(raw, "prefix", key, lambda v, k: _prefix(r, v, k)),
        expanded=MappingProxyType(dict(r.expanded)),
    )


def _headers(r: Reader, raw: Any, key: str) -> dict[str, str]:
    r.expect(raw, dict, key)
    headers: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            problem = "a header name may only contain letters, digits and !#$%&'*+-.^_`|~"
            raise r.error(join_key(key, str(name)), problem, "Fix the header name.")
        where = join_key(key, name)
        text = r.expand(value, where)
        if "\r" in text or "\n" in text:
            problem = "the header value holds a line break"
            raise r.error(where, problem, "Write the value on one line.")
        headers[name] = text
    return headers


def _prefix(r: Reader, raw: Any, key: str) -> str:
    text: str = r.expect(raw, str, key)
    if text:  # "" exposes the server's tools under their own names
        fix = "Write a short name such as fs."
        _check_name(r, text, key, "prefix", fix, "Change the prefix")
    return text


def _check_name(r: Reader, name: str, key: str, what: str, fix: str, then: str) -> None:
    """A server name or prefix: what stands before `__` in the server's tool names."""
    if not _NAME.fullmatch(name):
        problem = f"a {what} may only contain letters, digits, '_' and '-'"
        raise r.error(key, problem, fix)
    if "__" in name or name.endswith("_"):
        problem = f"a {what} must not contain '__' or end with '_'"
        part = what.split()[0]  # "server" or "prefix"
        raise r.error(key, problem, f"{then}: '__' separates {part} and tool in tool names.")


def _cwd(r: Reader, raw: Any, key: str) -> Path:
    if raw is None:
        return r.base
    try:
        folder = Path(r.expand(raw, key)).expanduser()
    except RuntimeError:  # `~name` of no known user, or `~` without a home folder
        problem = "a leading ~ names a user (or home folder) that is not known here"
        raise r.error(key, problem, "Write the folder as an absolute path.") from None
    return folder if folder.is_absolute() else r.base / folder
