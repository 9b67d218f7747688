"""Loading a registry file: read it, check every section, and build the `Registry`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import RegistryError
from . import keys
from .model import AutoCheckpoints, Defaults, Registry, ResetCall, StateProbe
from .policies import read_tools
from .reader import Reader
from .servers import read_servers
from .yamlnodes import line_of, load_with_lines

__all__ = ["load_registry", "parse_registry"]


def load_registry(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
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
    return parse_registry(text, file, environ)


def parse_registry(text: str, path: Path, environ: Mapping[str, str] | None = None) -> Registry:
    """Validate registry YAML `text`; `path` names it in errors and anchors relative cwd."""
    data, lines = load_with_lines(text, str(path))
    reader = Reader(Path(path), lines, os.environ if environ is None else environ)
    top = reader.mapping({} if data is None else data, "", keys.TOP, ("servers",))
    servers = read_servers(reader, top["servers"])  # first: tool names are checked against it
    defaults = _defaults(reader, top.get("defaults"))
    return Registry(
        path=reader.path,
        servers=MappingProxyType(servers),
        state=tuple(_calls(reader, top.get("state"), "state", _probe)),
        tools=MappingProxyType(read_tools(reader, top.get("tools"), defaults)),
        defaults=defaults,
        reset=tuple(_calls(reader, top.get("reset"), "reset", _reset_call)),
        checkpoints=_checkpoints(reader, top.get("checkpoints")),
    )


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


def _reset_call(r: Reader, raw: Any, key: str) -> ResetCall:
    raw = r.mapping(raw, key, keys.RESET, ("tool",))
    return ResetCall(
        tool=r.target(raw["tool"], f"{key}.tool"),
        args=r.template(raw.get("args", {}), f"{key}.args"),
        line=line_of(r.lines, key),
    )
