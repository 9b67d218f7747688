"""Where MCP clients keep their server lists, and the servers read from them.

Each place is a `Source`: a file, the keys that lead to its server object inside it, and
the client it belongs to (which decides the shape of a server entry the proxy writes there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import jsonc
from .jsonc import ConfigFileError

__all__ = [
    "CLIENTS",
    "ClientServer",
    "Collected",
    "Source",
    "collect",
    "discover",
    "read_file",
    "read_servers",
    "registry_name",
    "sources_of",
]

CLIENTS = ("claude-code", "claude-desktop", "vscode", "cursor")


@dataclass(frozen=True, kw_only=True)
class Source:
    """One server list: `keys` lead from the top of `path` to the object of servers."""

    path: Path
    keys: tuple[str, ...]
    client: str

    @property
    def where(self) -> str:
        """`~/.claude.json projects["/p"].mcpServers`, for messages."""
        inner = ".".join(k if re.fullmatch(r"\w+", k) else f'["{k}"]' for k in self.keys)
        return f"{self.path} {inner.replace('.[', '[')}"


@dataclass(frozen=True, kw_only=True)
class ClientServer:
    """One server as a client configured it: a command to start, or a URL to reach."""

    name: str
    source: Source
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


def discover(project: Path, home: Path) -> list[Source]:
    """Every known server list that exists for `project` and `home`, the project's own first
    (a server named in two places is taken from the first)."""
    project = project.resolve()
    desktop = "claude_desktop_config.json"
    candidates = [
        Source(path=project / ".mcp.json", keys=("mcpServers",), client="claude-code"),
        Source(
            path=home / ".claude.json",
            keys=("projects", str(project), "mcpServers"),
            client="claude-code",
        ),
        Source(path=home / ".claude.json", keys=("mcpServers",), client="claude-code"),
        Source(path=project / ".vscode" / "mcp.json", keys=("servers",), client="vscode"),
        Source(path=project / ".cursor" / "mcp.json", keys=("mcpServers",), client="cursor"),
        Source(path=home / ".cursor" / "mcp.json", keys=("mcpServers",), client="cursor"),
        Source(
            path=home / ".config" / "Claude" / desktop,
            keys=("mcpServers",),
            client="claude-desktop",
        ),
        Source(
            path=home / "Library" / "Application Support" / "Claude" / desktop,
            keys=("mcpServers",),
            client="claude-desktop",
        ),
    ]
    found = []
    for source in candidates:
        if source.path.is_file() and _lookup(read_file(source.path), source.keys) is not None:
            found.append(source)
    return found


def sources_of(path: Path) -> list[Source]:
    """The server lists in a file given with --from: whichever of `mcpServers` (Claude Code,
    Claude Desktop, Cursor) and `servers` (VS Code) it has; a `.vscode` folder means VS Code."""
    data = read_file(path)
    client = "vscode" if path.parent.name == ".vscode" else "claude-code"
    if path.name == "claude_desktop_config.json":
        client = "claude-desktop"
    elif path.parent.name == ".cursor":
        client = "cursor"
    found = [
        Source(path=path, keys=(key,), client="vscode" if key == "servers" else client)
        for key in ("mcpServers", "servers")
        if isinstance(data.get(key), dict)
    ]
    if not found:
        raise ConfigFileError(
            f'{path}: no server list in it: expected an object under "mcpServers" (Claude '
            'Code, Claude Desktop, Cursor) or "servers" (VS Code)'
        )
    return found


def read_file(path: Path) -> dict[str, Any]:
    """A client configuration file as data. Raises ConfigFileError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot read it: {exc}") from exc
    try:
        data = jsonc.loads(text)
    except ValueError as exc:
        raise ConfigFileError(f"{path}: not valid JSON (comments allowed): {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: expected a JSON object at the top, found {_kind(data)}")
    return data


def read_servers(source: Source) -> list[ClientServer]:
    """The servers of one list. Raises ConfigFileError for an entry that is not a server."""
    raw = _lookup(read_file(source.path), source.keys)
    if not isinstance(raw, dict):
        raise ConfigFileError(f"{source.where}: expected an object of servers, found {_kind(raw)}")
    return [_server(source, name, entry) for name, entry in raw.items()]


def _server(source: Source, name: str, entry: Any) -> ClientServer:
    where = f"{source.where}.{name}"
    if not isinstance(entry, dict):
        raise ConfigFileError(f"{where}: expected an object, found {_kind(entry)}")
    strings = _strings(where)
    if isinstance(entry.get("url"), str):
        return ClientServer(
            name=name, source=source, url=entry["url"], headers=strings(entry, "headers")
        )
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigFileError(f'{where}: has neither "command" nor "url"')
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigFileError(f"{where}.args: expected a list of strings")
    cwd = entry.get("cwd")
    return ClientServer(
        name=name,
        source=source,
        command=command,
        args=tuple(args),
        env=strings(entry, "env"),
        cwd=cwd if isinstance(cwd, str) else None,
    )


def _strings(where: str) -> Any:
    def read(entry: Mapping[str, Any], key: str) -> dict[str, str]:
        value = entry.get(key, {})
        if not isinstance(value, dict):
            raise ConfigFileError(f"{where}.{key}: expected an object, found {_kind(value)}")
        # Numbers and booleans are common in env (PORT: 8080); a client passes them as text.
        return {k: _text(v) for k, v in value.items()}

    return read


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True, kw_only=True)
class Collected:
    """The servers of several lists under registry names, and which entry became which."""

    servers: dict[str, ClientServer]
    names: dict[tuple[Source, str], str]
    """(list, the client's server name) -> registry server name."""


def collect(sources: Iterable[Source]) -> Collected:
    """Every server of `sources` under a registry name. The same server configured the same
    way in two lists is one registry server; a different one under a taken name gets `-2`."""
    servers: dict[str, ClientServer] = {}
    names: dict[tuple[Source, str], str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for source in sources:
        for server in read_servers(source):
            key = _definition(server)
            name = seen.get(key) or registry_name(server.name, servers)
            if name not in servers:
                servers[name], seen[key] = server, name
            names[(source, server.name)] = name
    return Collected(servers=servers, names=names)


def _definition(server: ClientServer) -> tuple[Any, ...]:
    return (
        server.name,
        server.command,
        server.args,
        tuple(sorted(server.env.items())),
        server.url,
        tuple(sorted(server.headers.items())),
        server.cwd,
    )


def _lookup(data: Any, keys: Iterable[str]) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), repr(value))


_INVALID = re.compile(r"[^A-Za-z0-9_-]+")


def registry_name(name: str, taken: Iterable[str] = ()) -> str:
    """A client's server name as a registry server name: only letters, digits, `_` and `-`,
    no `__`, and not one of `taken` (then `-2`, `-3`, ...)."""
    base = re.sub("_{2,}", "_", _INVALID.sub("-", name)).strip("-") or "server"
    taken = set(taken)
    candidate, number = base, 2
    while candidate in taken:
        candidate, number = f"{base}-{number}", number + 1
    return candidate
