"""Candidates for servers that can make things but not delete them (a filesystem server
with write, mkdir and move, and no delete): what a call created is moved into a `.trash/`
folder; what existed before it gets its snapshot written back (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .candidates import Candidate, Samples, compensable_entry, restores, snapshot_tools, writers
from .filling import ToolInfo, expression, fill, normal, sources, template, words

__all__ = ["TRASH", "quarantine_candidates"]

TRASH = ".trash"
"""Where undo moves what a call created. The registry's state probes must leave it out."""

_PATHS = ("path", "file", "filepath", "filename", "dir", "directory")
_FOLDERS = ("directory", "dir", "folder")


def quarantine_candidates(
    tool: ToolInfo, offered: Mapping[str, ToolInfo], reads: Iterable[ToolInfo], samples: Samples
) -> list[Candidate]:
    """When the snapshot failed (nothing was at the path before the call), make the trash
    folder and move the path into it under the change's id; when it worked, write the
    snapshot back (unless the tool only makes folders: an existing one was left alone)."""
    mover, maker, path = _mover(tool, offered), _maker(tool, offered), _path_argument(tool)
    if mover is None or maker is None or path is None or _deleter(tool, offered):
        return []
    source, destination, move = mover
    away = [
        {"tool": maker.name, "args": {_path_argument(maker): TRASH}, "when": "snapshot_error"},
        {
            "tool": move.name,
            "args": {source: template("args", path), destination: _trash_path(path)},
            "when": "snapshot_error",
        },
    ]
    arg_sources = sources("args", samples.args)
    out: list[Candidate] = []
    for read, filling in snapshot_tools(tool, reads):
        if not samples.after.get(read.name):
            # A read that fails even on what the call made (a file reader on a folder) would
            # fail on what existed before it too, and undo would move that away.
            continue
        snapshot_args = {r: template("args", own) for r, own in filling.items()}
        if tool.name == maker.name:
            out.append(compensable_entry(read, snapshot_args, away, "quarantine"))
            continue
        shapes = sources("snapshot", samples.shapes(read.name))
        for writer in writers(tool, offered):
            args = fill(writer, [*shapes, *arg_sources])
            if args is not None and restores(args):
                back = {"tool": writer.name, "args": args, "when": "!snapshot_error"}
                out.append(compensable_entry(read, snapshot_args, [back, *away], "quarantine"))
    return out


def _trash_path(path: str) -> str:
    """`.trash/<change id>-<the last part of the path>`: unique per change, so a second undo
    never meets the first one's leftovers."""
    name = f"regex({expression('args', path)}, '[^/]+$')"
    return "{join('', ['" + TRASH + "/', to_string(change.id), '-', " + name + "])}"


def _path_argument(tool: ToolInfo) -> Any:
    for name in tool.required:
        schema = tool.properties.get(name) or {}
        if normal(name) in _PATHS and schema.get("type") == "string":
            return name
    return None


def _mover(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> tuple[str, str, ToolInfo] | None:
    """The server's move tool, with its source and destination arguments."""
    for other in offered.values():
        if other.prefix != tool.prefix or words(other.short)[:1] not in (["move"], ["rename"]):
            continue
        names = {normal(n): n for n in other.required}
        for one, two in (("source", "destination"), ("from", "to"), ("src", "dst")):
            if one in names and two in names:
                return names[one], names[two], other
    return None


def _deleter(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> bool:
    """Whether the server has a tool that deletes by path: then opposites do the job."""
    return any(
        other.prefix == tool.prefix
        and words(other.short)[:1] in (["delete"], ["remove"])
        and _path_argument(other) is not None
        for other in offered.values()
    )


def _maker(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> ToolInfo | None:
    """The server's tool that makes a folder from one path argument."""
    for other in offered.values():
        found = words(other.short)
        if (
            other.prefix == tool.prefix
            and found[:1] in (["create"], ["make"], ["mkdir"])
            and any(w in found for w in _FOLDERS)
            and len(other.required) == 1
            and _path_argument(other) is not None
        ):
            return other
    return None
