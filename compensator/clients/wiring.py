"""Rewriting a client's server list so that the client launches the proxy instead of the
servers the registry took over, and putting the file back.

Only the server object changes: the rest of the file (other keys, comments, formatting) is
kept byte for byte. Every write is atomic (a temporary file renamed over the old one), and
the first `wire` of a file keeps its original bytes beside it, which `unwire` restores.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import jsonc
from .jsonc import ConfigFileError
from .sources import Source

__all__ = [
    "BACKUP_SUFFIX",
    "PROXY_NAME",
    "backup_of",
    "diff",
    "replace_atomically",
    "still_wired",
    "unwired",
    "wired",
]

PROXY_NAME = "compensator"
"""The name the proxy's entry gets in a client's server list."""

BACKUP_SUFFIX = ".compensator-backup"


def backup_of(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def wired(text: str, source: Source, taken: Iterable[str], proxy: Mapping[str, Any]) -> str:
    """`text` (the file of `source`) with the servers named in `taken` removed from its list
    and the proxy's entry `proxy` added as `compensator`. Raises ConfigFileError."""
    where = jsonc.span(text, source.keys)
    if where is None:
        raise ConfigFileError(f"{source.where}: not found in the file any more")
    start, end = where
    servers = jsonc.loads(text[start:end])
    if PROXY_NAME in servers and PROXY_NAME not in taken:
        raise ConfigFileError(
            f"{source.where} already has a server named {PROXY_NAME!r}: run `compensator "
            "unwire` first, or rename that server"
        )
    taken = set(taken)
    kept = {name: entry for name, entry in servers.items() if name not in taken}
    entry = dict(proxy)
    if source.client in ("vscode", "claude-code"):
        entry = {"type": "stdio", **entry}
    kept[PROXY_NAME] = entry
    # A file with Windows line ends keeps them.
    newline = "\r\n" if "\r\n" in text else "\n"
    entries = _indented(kept, _column(text, start), len(source.keys)).replace("\n", newline)
    return text[:start] + entries + text[end:]


def _column(text: str, offset: int) -> str:
    """The indentation of the line `offset` stands on."""
    line_start = text.rfind("\n", 0, offset) + 1
    line = text[line_start:offset]
    return line[: len(line) - len(line.lstrip())]


def _indented(value: Any, indent: str, depth: int) -> str:
    """JSON in the file's own indentation (the key's, which stands `depth` levels deep, split
    into levels; two spaces when that does not work out), continuing lines under the key."""
    unit = indent[: len(indent) // depth] if depth else ""
    if not unit or unit * depth != indent:
        unit = "  "
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


def diff(path: Path, old: str, new: str) -> str:
    """A unified diff of a file's two versions."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"{path} (now)",
        tofile=f"{path} (after)",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def replace_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file renamed over it, keeping the file's
    permission bits: a crash leaves the old file or the new one, never half of one."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o600
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def unwired(current: str, backup: str, sources: Iterable[Source]) -> str:
    """`current` with each server list of `sources` put back as it stands in `backup`, and
    the rest of `current` (what the client changed since, in ~/.claude.json) kept."""
    for source in sources:
        now, before = jsonc.span(current, source.keys), jsonc.span(backup, source.keys)
        if now is None or before is None:
            continue
        if PROXY_NAME in jsonc.loads(current[now[0] : now[1]]):
            current = current[: now[0]] + backup[before[0] : before[1]] + current[now[1] :]
    return current


def still_wired(text: str) -> bool:
    """Whether any server list anywhere in a client file (every project's of ~/.claude.json
    too, not only the lists one project reads) still has the proxy's entry: while one does,
    the backup holds the only copy of the servers it replaced."""

    def walk(value: Any) -> bool:
        if isinstance(value, dict):
            for key, inner in value.items():
                listed = key in ("mcpServers", "servers") and isinstance(inner, dict)
                if (listed and PROXY_NAME in inner) or walk(inner):
                    return True
        elif isinstance(value, list):
            return any(walk(inner) for inner in value)
        return False

    return walk(jsonc.loads(text))
