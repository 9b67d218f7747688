"""Tool names as clients see them: `server__tool`, the meta tools' names, and how long a name
may get.

Every downstream tool is exposed as `<prefix>__<tool>`, the prefix being the server's `prefix:`
or else its name. Claude Code calls a tool of an MCP server it knows as CLIENT
`mcp__CLIENT__TOOL` and rejects names over 64 characters: `compensator serve` warns about such
names at start-up and `compensator check` reports them as errors, both counting the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "CLIENT_NAME",
    "MAX_NAME_LENGTH",
    "META_TOOLS",
    "SEPARATOR",
    "client_tool_name",
    "exposed_name",
    "split_name",
    "too_long",
]

SEPARATOR = "__"
"""Between the server's prefix and the tool's own name."""

META_TOOLS = frozenset(
    {
        "checkpoint",
        "list_checkpoints",
        "list_changes",
        "undo_to",
        "undo_change",
        "explain_blast_radius",
    }
)
"""The tools the proxy answers itself (defined in compensator/proxy/meta.py)."""

CLIENT_NAME = "compensator"
"""The name a client is assumed to know the proxy by (`claude mcp add compensator ...`)."""

MAX_NAME_LENGTH = 64
"""The longest tool name MCP clients accept (Claude, OpenAI and others enforce 64)."""


def exposed_name(prefix: str, tool: str) -> str:
    """("tasks", "add_task") -> `tasks__add_task`."""
    return f"{prefix}{SEPARATOR}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """`tasks__add_task` -> ("tasks", "add_task"); None when the name has no prefix."""
    prefix, sep, tool = name.partition(SEPARATOR)
    return (prefix, tool) if sep and prefix and tool else None


def client_tool_name(exposed: str, client: str = CLIENT_NAME) -> str:
    """`tasks__add` -> `mcp__compensator__tasks__add`: the name Claude Code shows and checks."""
    return f"mcp__{client}__{exposed}"


def too_long(exposed: Iterable[str], client: str = CLIENT_NAME) -> dict[str, int]:
    """The exposed names whose client name is over MAX_NAME_LENGTH, with that length."""
    lengths = {name: len(client_tool_name(name, client)) for name in exposed}
    return {name: length for name, length in lengths.items() if length > MAX_NAME_LENGTH}
