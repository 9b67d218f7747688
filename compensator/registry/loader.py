"""Loading a registry file: read it, check every section, and build the `Registry`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import RegistryError, did_you_mean
from . import keys
from .model import (
    AutoCheckpoints,
    Defaults,
    Registry,
    ResetCall,
    ServerSpec,
    StateProbe,
    ToolPolicy,
)
from .policies import check_verify_reads, read_tools
from .reader import Reader
from .servers import read_servers
from .yamlnodes import line_of, load_with_lines

__all__ = ["BUILTIN", "builtin_names", "load_registry", "parse_registry"]

BUILTIN = "builtin:"
"""`include: builtin:NAME` names the registry compensator/registries/NAME.yaml."""


def load_registry(
    path: str | os.PathLike[str],
    environ: Mapping[str, str] | None = None,
    *,
    _including: tuple[Path, ...] = (),
    _replaced: frozenset[str] = frozenset(),
) -> Registry:
    """Read and validate the registry at `path`; `${VAR}` come from `environ` (os.environ)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _unreadable(file, "file not found", "Check the path or create the file") from None
    except UnicodeDecodeError:
        raise _unreadable(file, "not UTF-8 text", "Save the file as UTF-8") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _unreadable(
            file, f"cannot read ({reason})", "Check the path and permissions"
        ) from None
    return parse_registry(text, file, environ, _including=_including, _replaced=_replaced)


def parse_registry(
    text: str,
    path: Path,
    environ: Mapping[str, str] | None = None,
    *,
    _including: tuple[Path, ...] = (),
    _replaced: frozenset[str] = frozenset(),
) -> Registry:
    """Validate registry YAML `text`; `path` names it in errors and anchors relative cwd.
    For an included file: `_including` is the chain of files that include it (to refuse a
    cycle), `_replaced` the servers an including file replaces (only their prefix is read)."""
    data, lines = load_with_lines(text, str(path))
    environ = os.environ if environ is None else environ
    reader = Reader(Path(path), lines, environ)
    top = reader.mapping({} if data is None else data, "", keys.TOP)
    chain = (*_including, Path(path).absolute())
    own = top.get("servers")
    replaced = _replaced | (frozenset(own) if isinstance(own, dict) else frozenset())
    base = _include(reader, top.get("include"), environ, chain, replaced)
    if base is None and "servers" not in top:
        fix = "Add 'servers:' naming the servers to start, or 'include: builtin:NAME'."
        raise reader.error("servers", "missing required key", fix)
    # first: tool names are checked against the servers
    servers = read_servers(reader, own, base.servers if base else {}, _replaced)
    defaults = _defaults(reader, top.get("defaults"))
    local = read_tools(reader, top.get("tools"), defaults)
    tools = {**(base.tools if base else {}), **local}
    check_verify_reads(reader, tools)
    mine = {f"tools.{name}" for name in local} | {f"servers.{name}" for name in own or {}}
    origins = {k: f for k, f in (base.origins if base else {}).items() if k not in mine}
    return Registry(
        path=reader.path,
        servers=MappingProxyType(servers),
        state=(*(base.state if base else ()), *_calls(reader, top.get("state"), "state", _probe)),
        tools=MappingProxyType(tools),
        defaults=defaults,
        reset=(*(base.reset if base else ()), *_calls(reader, top.get("reset"), "reset", _reset)),
        checkpoints=_checkpoints(reader, top.get("checkpoints")),
        origins=MappingProxyType(origins),
    )


@dataclass
class _Included:
    """What the `include:` files bring, merged in their order."""

    servers: dict[str, ServerSpec] = field(default_factory=dict)
    tools: dict[str, ToolPolicy] = field(default_factory=dict)
    origins: dict[str, Path] = field(default_factory=dict)
    """`tools.NAME` or `servers.NAME` -> the file that entry is written in."""
    state: list[StateProbe] = field(default_factory=list)
    reset: list[ResetCall] = field(default_factory=list)
    server_from: dict[str, str] = field(default_factory=dict)
    """Server name -> the `include:` item that brought it."""


def builtin_names() -> list[str]:
    """The registries shipped in the package, by the name `include: builtin:NAME` takes."""
    folder = resources.files("compensator").joinpath("registries")
    return sorted(e.name[: -len(".yaml")] for e in folder.iterdir() if e.name.endswith(".yaml"))


def _include(
    r: Reader,
    raw: Any,
    environ: Mapping[str, str],
    chain: tuple[Path, ...],
    replaced: frozenset[str],
) -> _Included | None:
    """Load every registry `include:` names (each checked on its own, so its mistakes name
    its own file and line) and merge them: a server or tool may come from one of them only."""
    if raw is None:
        return None
    single = isinstance(raw, str)
    items = [raw] if single else r.expect(raw, list, "include")
    merged = _Included()
    for index, item in enumerate(items):
        key = "include" if single else f"include[{index}]"
        file = _included_file(r, item, key)
        if file.absolute() in chain:
            cycle = " -> ".join(p.name for p in (*chain, file))
            problem = f"the include makes a cycle ({cycle})"
            raise r.error(key, problem, "Remove the include that leads back.")
        registry = load_registry(file, environ, _including=chain, _replaced=replaced)
        for name, spec in registry.servers.items():
            if name in merged.servers:
                first = merged.server_from[name]
                if first == item:
                    raise r.error(key, f"{item} is included twice", "Remove one of them.")
                problem = f"server '{name}' comes from both {first} and {item}"
                fix = "Include only one of them, or rename the server in a copy of one."
                raise r.error(key, problem, fix)
            merged.servers[name] = spec
            merged.server_from[name] = item
            merged.origins[f"servers.{name}"] = registry.origins.get(
                f"servers.{name}", registry.path
            )
        for name, policy in registry.tools.items():
            merged.tools[name] = policy
            key = f"tools.{name}"
            merged.origins[key] = registry.origins.get(key, registry.path)
        merged.state.extend(registry.state)
        merged.reset.extend(registry.reset)
    return merged


def _included_file(r: Reader, item: Any, key: str) -> Path:
    """The file an `include:` item names: `builtin:NAME` or a path (relative to this file)."""
    text = r.expand(item, key).strip()
    if not text.startswith(BUILTIN):
        path = Path(text).expanduser()
        return path if path.is_absolute() else r.base / path
    name = text[len(BUILTIN) :]
    known = builtin_names()
    if name not in known:
        fallback = f"Shipped registries: {', '.join(BUILTIN + n for n in known)}."
        fix = did_you_mean(name, known, fallback, prefix=BUILTIN)
        raise r.error(key, f"there is no shipped registry '{name}'", fix)
    shipped = resources.files("compensator").joinpath("registries").joinpath(f"{name}.yaml")
    with resources.as_file(shipped) as file:  # the file itself, for an installed package
        return Path(file)


def _unreadable(file: Path, problem: str, fix: str) -> RegistryError:
    return RegistryError(f"{file}: registry {problem}. {fix}.", path=str(file), fix=f"{fix}.")


def _defaults(r: Reader, raw: Any) -> Defaults:
    raw = r.mapping({} if raw is None else raw, "defaults", keys.DEFAULTS)
    return Defaults(
        trust_read_only_hint=r.flag(raw, "trust_read_only_hint", "defaults"),
        verify=r.flag(raw, "verify", "defaults"),
    )


def _checkpoints(r: Reader, raw: Any) -> AutoCheckpoints:
    raw = r.mapping({} if raw is None else raw, "checkpoints", keys.CHECKPOINTS)
    return AutoCheckpoints(
        on_session_start=r.flag(raw, "on_session_start", "checkpoints"),
        after_idle=r.optional(raw, "after_idle", "checkpoints", r.seconds),
    )


def _calls(r: Reader, raw: Any, section: str, read: Any) -> list[Any]:
    items = r.expect([] if raw is None else raw, list, section)
    return [read(r, item, f"{section}[{i}]") for i, item in enumerate(items)]


def _probe(r: Reader, raw: Any, key: str) -> StateProbe:
    raw = r.mapping(raw, key, keys.STATE, ("tool",))
    select = r.optional(raw, "select", key, r.select)
    return StateProbe(
        tool=r.target(raw["tool"], f"{key}.tool"),
        args=r.template(raw.get("args", {}), f"{key}.args"),
        select=select,
        unordered=r.flag(raw, "unordered", key),
        line=line_of(r.lines, key),
    )


def _reset(r: Reader, raw: Any, key: str) -> ResetCall:
    raw = r.mapping(raw, key, keys.RESET, ("tool",))
    return ResetCall(
        tool=r.target(raw["tool"], f"{key}.tool"),
        args=r.template(raw.get("args", {}), f"{key}.args"),
        line=line_of(r.lines, key),
    )
