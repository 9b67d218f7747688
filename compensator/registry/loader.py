"""Loading a registry file: read it, check every section, and build the `Registry`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..classification import Classification
from ..durations import DURATION_EXAMPLES, LONGEST, parse_duration
from ..errors import RegistryError, did_you_mean
from . import keys
from .model import (
    AutoCheckpoints,
    Defaults,
    Registry,
    ResetCall,
    Retention,
    ServerSpec,
    StateProbe,
    ToolPolicy,
)
from .policies import check_verify_reads, read_tools
from .reader import Reader, describe
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
    chain = (*_including, Path(path).resolve())
    own = top.get("servers")
    replaced = _replaced | (frozenset(own) if isinstance(own, dict) else frozenset())
    base = _include(reader, top.get("include"), environ, chain, replaced) or _Included()
    if not base.servers and "servers" not in top:
        fix = "Add 'servers:' naming the servers to start, or 'include: builtin:NAME'."
        raise reader.error("servers", "missing required key", fix)
    # first: tool names are checked against the servers
    servers = read_servers(reader, own, base.servers, _replaced)
    defaults = _defaults(reader, top.get("defaults"))
    local = read_tools(reader, top.get("tools"), defaults)
    tools = {**base.tools, **local}
    check_verify_reads(reader, tools)
    state = _calls(reader, top.get("state"), "state", _probe)
    reset = _calls(reader, top.get("reset"), "reset", _reset)
    mine = {f"tools.{name}" for name in local} | {f"servers.{name}" for name in own or {}}
    origins = {k: where for k, where in base.origins.items() if k not in mine}
    for section, calls, before in (("state", state, base.state), ("reset", reset, base.reset)):
        for index in range(len(calls) if before else 0):  # this file's, after the included
            origins[f"{section}[{len(before) + index}]"] = (reader.path, f"{section}[{index}]")
    return Registry(
        path=reader.path,
        servers=MappingProxyType(servers),
        state=(*base.state, *state),
        tools=MappingProxyType(tools),
        defaults=defaults,
        reset=(*base.reset, *reset),
        checkpoints=_checkpoints(reader, top.get("checkpoints")),
        retention=_retention(reader, top.get("retention")),
        origins=MappingProxyType(origins),
    )


@dataclass
class _Included:
    """What the `include:` files bring, merged in their order."""

    servers: dict[str, ServerSpec] = field(default_factory=dict)
    tools: dict[str, ToolPolicy] = field(default_factory=dict)
    origins: dict[str, tuple[Path, str]] = field(default_factory=dict)
    """As Registry.origins."""
    state: list[StateProbe] = field(default_factory=list)
    reset: list[ResetCall] = field(default_factory=list)
    server_from: dict[str, str] = field(default_factory=dict)
    """Server name -> the `include:` item that brought it."""
    files: dict[Path, str] = field(default_factory=dict)
    """Each included file (resolved) -> the `include:` item that named it."""

    def add(self, registry: Registry) -> None:
        for key in [f"servers.{name}" for name in registry.servers] + [
            f"tools.{name}" for name in registry.tools
        ]:
            self.origins[key] = registry.origins.get(key, (registry.path, key))
        self.servers.update(registry.servers)
        self.tools.update(registry.tools)
        self._renumber(registry, "state", len(self.state), len(registry.state))
        self._renumber(registry, "reset", len(self.reset), len(registry.reset))
        self.state.extend(registry.state)
        self.reset.extend(registry.reset)

    def _renumber(self, registry: Registry, section: str, before: int, count: int) -> None:
        """The included file's `section[i]` become `section[before + i]` here."""
        for index in range(count):
            own = f"{section}[{index}]"
            where = registry.origins.get(own, (registry.path, own))
            self.origins[f"{section}[{before + index}]"] = where


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
    if not single and not isinstance(raw, list):
        fix = "Write include: builtin:NAME, a path, or a list of them."
        raise r.error("include", f"expected a string or a list, got {describe(raw)}", fix)
    merged = _Included()
    for index, item in enumerate([raw] if single else raw):
        key = "include" if single else f"include[{index}]"
        file = _included_file(r, item, key)
        if file in chain:
            cycle = " -> ".join(p.name for p in (*chain, file))
            problem = f"the include makes a cycle ({cycle})"
            raise r.error(key, problem, "Remove the include that leads back.")
        if file in merged.files:
            first = merged.files[file]
            problem = f"{item} is included twice" + ("" if first == item else f" (as {first})")
            raise r.error(key, problem, "Remove one of them.")
        merged.files[file] = item
        registry = load_registry(file, environ, _including=chain, _replaced=replaced)
        prefixes = {spec.exposed_prefix: spec.name for spec in merged.servers.values()}
        for name, spec in registry.servers.items():
            if name in merged.servers:
                problem = f"server '{name}' comes from both {merged.server_from[name]} and {item}"
                fix = "Include only one of them, or rename the server in a copy of one."
                raise r.error(key, problem, fix)
            other = prefixes.get(spec.exposed_prefix)
            if other is not None:
                shown = f"'{spec.exposed_prefix}__...'" if spec.exposed_prefix else "unprefixed"
                problem = (
                    f"server '{name}' of {item} and server '{other}' of "
                    f"{merged.server_from[other]} would both expose their tools {shown}"
                )
                fix = "Include only one of them, or change a prefix: in a copy of one."
                raise r.error(key, problem, fix)
            merged.server_from[name] = item
        merged.add(registry)
    return merged


def _included_file(r: Reader, item: Any, key: str) -> Path:
    """The file an `include:` item names, resolved: `builtin:NAME` or a path (relative to
    this file's folder)."""
    text = r.expand(item, key).strip()
    if not text.startswith(BUILTIN):
        path = Path(text).expanduser()
        path = (path if path.is_absolute() else r.base / path).resolve()
        if not path.is_file():
            problem = f"{text or 'the empty path'} is not a file ({path})"
            fix = "Check the path: a relative one is taken from the folder of this file."
            raise r.error(key, problem, fix)
        return path
    name = text[len(BUILTIN) :]
    known = builtin_names()
    if name not in known:
        fallback = f"Shipped registries: {', '.join(BUILTIN + n for n in known)}."
        fix = did_you_mean(name, known, fallback, prefix=BUILTIN)
        raise r.error(key, f"there is no shipped registry '{name}'", fix)
    shipped = resources.files("compensator").joinpath("registries").joinpath(f"{name}.yaml")
    # The package is installed as files (setuptools, not a zip), so this path stays valid.
    with resources.as_file(shipped) as file:
        return Path(file).resolve()


def _unreadable(file: Path, problem: str, fix: str) -> RegistryError:
    return RegistryError(f"{file}: registry {problem}. {fix}.", path=str(file), fix=f"{fix}.")


def _defaults(r: Reader, raw: Any) -> Defaults:
    raw = r.mapping({} if raw is None else raw, "defaults", keys.DEFAULTS)
    return Defaults(
        trust_read_only_hint=r.flag(raw, "trust_read_only_hint", "defaults"),
        verify=r.flag(raw, "verify", "defaults"),
        approve=_approve_classes(r, raw.get("approve", []), "defaults.approve"),
        on_no_approval=_on_no_approval(r, raw.get("on_no_approval", "deny")),
        approval_timeout=r.optional(raw, "approval_timeout", "defaults", r.seconds) or 300.0,
    )


def _approve_classes(r: Reader, raw: Any, key: str) -> frozenset[Classification]:
    """`defaults.approve`: the classifications whose calls need the person's approval."""
    names = [kind.value for kind in Classification]
    if not isinstance(raw, list):
        problem = f"expected a list of classifications, got {describe(raw)}"
        fix = f"Write e.g. approve: [irreversible, unknown]; allowed: {', '.join(names)}."
        raise r.error(key, problem, fix)
    chosen = set()
    for index, item in enumerate(raw):
        where = f"{key}[{index}]"
        text = r.expect(item, str, where)
        if text not in names:
            fallback = f"Use one of {', '.join(names)}."
            raise r.error(
                where, f"'{text}' is not a classification", did_you_mean(text, names, fallback)
            )
        chosen.add(Classification(text))
    return frozenset(chosen)


def _on_no_approval(r: Reader, raw: Any) -> str:
    key = "defaults.on_no_approval"
    text = r.expect(raw, str, key)
    if text not in keys.ON_NO_APPROVAL:
        fallback = (
            "Write deny (refuse such a call, the default) or allow (forward it without asking)."
        )
        problem = f"'{text}' is not deny or allow"
        raise r.error(key, problem, did_you_mean(text, keys.ON_NO_APPROVAL, fallback))
    return text


def _checkpoints(r: Reader, raw: Any) -> AutoCheckpoints:
    raw = r.mapping({} if raw is None else raw, "checkpoints", keys.CHECKPOINTS)
    return AutoCheckpoints(
        on_session_start=r.flag(raw, "on_session_start", "checkpoints"),
        after_idle=r.optional(raw, "after_idle", "checkpoints", r.seconds),
    )


def _retention(r: Reader, raw: Any) -> Retention | None:
    if raw is None:
        return None
    raw = r.mapping(raw, "retention", keys.RETENTION, ("older_than",))
    text = raw["older_than"]
    seconds = parse_duration(text) if isinstance(text, str) else None
    if seconds is None or seconds > LONGEST:
        raise r.error(
            "retention.older_than",
            f"expected a duration of at most 100 years, got {text!r}",
            f"Write how long the journal keeps what was done, e.g. 30d ({DURATION_EXAMPLES}).",
        )
    pins = r.expect(raw.get("keep_checkpoints", []), list, "retention.keep_checkpoints")
    for index, pin in enumerate(pins):
        if isinstance(pin, bool) or not isinstance(pin, int) or pin < 1:
            raise r.error(
                f"retention.keep_checkpoints[{index}]",
                f"expected a checkpoint id, got {pin!r}",
                "Write the ids `compensator log` shows, e.g. [3, 7].",
            )
    return Retention(older_than=seconds, keep_checkpoints=tuple(pins))


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
