"""The Claude Code hook that makes each prompt a turn to undo: a `UserPromptSubmit` hook in a
project's `.claude/settings.json` that calls the proxy's `checkpoint` with the prompt.

Claude Code (2.1.118 and later) runs an `mcp_tool` hook handler on the MCP connection it
already has: `server` is the name in the client's server list, `tool` the tool's own name,
and `${prompt}` in a string of `input` is filled from the hook's input, whose `prompt` field
is the prompt as submitted. The checkpoint's label becomes `turn: ` and the prompt's first
line (compensator/proxy/turns.py), which `compensator undo --turns N` counts back through.

`wire --hooks` adds the hook (the file's old bytes kept beside it, as for server lists);
`unwire` takes it out, and writes the old bytes back when nothing else in the file changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import jsonc
from .jsonc import ConfigFileError
from .wiring import PROXY_NAME

__all__ = ["EVENT", "SETTINGS", "turn_hook", "with_turn_hook", "without_turn_hook"]

SETTINGS = Path(".claude") / "settings.json"
"""A project's Claude Code settings, shared with its team (settings.local.json is not)."""

EVENT = "UserPromptSubmit"


def turn_hook(server: str = PROXY_NAME) -> dict[str, Any]:
    """The hook handler: a checkpoint on the proxy named `server`, with the prompt."""
    return {
        "type": "mcp_tool",
        "server": server,
        "tool": "checkpoint",
        "input": {"prompt": "${prompt}"},
        "timeout": 30,
        "statusMessage": "compensator: checkpoint for this turn",
    }


def _is_turn_hook(handler: Any) -> bool:
    return (
        isinstance(handler, dict)
        and handler.get("type") == "mcp_tool"
        and handler.get("server") == PROXY_NAME
        and handler.get("tool") == "checkpoint"
    )


def _settings(text: str, path: Path) -> dict[str, Any]:
    try:
        settings = jsonc.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ConfigFileError(f"{path}: not JSON ({exc}); fix it or move it away") from exc
    if not isinstance(settings, dict):
        raise ConfigFileError(f"{path}: not a JSON object; is it Claude Code's settings?")
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigFileError(f"{path}: hooks is not an object of events")
    if not isinstance(hooks.get(EVENT, []), list):
        raise ConfigFileError(f"{path}: hooks.{EVENT} is not a list of matcher groups")
    return settings


def with_turn_hook(text: str, path: Path) -> str:
    """`text` (the settings file; "" when there is none) with the turn hook added, or as it
    is when it has it already. Raises ConfigFileError for a file that is not settings."""
    settings = _settings(text, path)
    groups = settings.setdefault("hooks", {}).setdefault(EVENT, [])
    if any(_is_turn_hook(h) for group in groups for h in _handlers(group)):
        return text
    groups.append({"hooks": [turn_hook()]})
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def without_turn_hook(text: str, backup: bytes, path: Path) -> bytes | None:
    """The file's bytes with the turn hook taken out: the backup's bytes when that leaves
    what the backup holds (None when the backup is empty: there was no file, so none is
    left), else the rest of the file with what changed since kept. A file without the hook
    (taken out by hand) is left as it is, byte for byte."""
    settings = _settings(text, path)
    hooks = settings.get("hooks", {})
    if not any(_is_turn_hook(h) for g in hooks.get(EVENT, []) for h in _handlers(g)):
        return text.encode("utf-8")
    kept = []
    for group in hooks.get(EVENT, []):
        handlers = _handlers(group)
        if any(_is_turn_hook(h) for h in handlers):
            group = {**group, "hooks": [h for h in handlers if not _is_turn_hook(h)]}
            if not group["hooks"]:
                continue  # the group wire added, or one left with nothing else
        kept.append(group)
    if kept:
        hooks[EVENT] = kept
    else:
        hooks.pop(EVENT, None)
    if not hooks:
        settings.pop("hooks", None)
    before = _settings(backup.decode("utf-8"), path)
    if settings == before:
        return backup if backup else None
    return (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _handlers(group: Any) -> list[Any]:
    handlers = group.get("hooks") if isinstance(group, dict) else None
    return handlers if isinstance(handlers, list) else []
