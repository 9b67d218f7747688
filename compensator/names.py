"""Tool names as clients see them: `server__tool`, the meta tools' names, and how long a name
may get.

Every downstream tool is exposed as `<prefix>__<tool>`, the prefix being the server's `prefix:`
or else its name. One server per registry may have `prefix: ""`: its tools keep their own
names, and a name is routed by `resolve`: `prefix__tool` to the server with that prefix, a
meta tool's name to the proxy, anything else to the unprefixed server.

Claude Code calls a tool of an MCP server it knows as CLIENT `mcp__CLIENT__TOOL` and rejects
names over 64 characters: `compensator serve` warns about such names at start-up and
`compensator check` reports them as errors, both counting the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

__all__ = [
    "CLIENT_NAME",
    "MAX_NAME_LENGTH",
    "META_TOOLS",
    "SEPARATOR",
    "client_tool_name",
    "exposed_name",
    "hidden_by",
    "resolve",
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
        "redo",
        "explain_blast_radius",
    }
)
"""The tools the proxy answers itself (defined in compensator/proxy/meta.py)."""

CLIENT_NAME = "compensator"
"""The name a client is assumed to know the proxy by (`claude mcp add compensator ...`)."""

MAX_NAME_LENGTH = 64
"""The longest tool name MCP clients accept (Claude, OpenAI and others enforce 64)."""


def exposed_name(prefix: str, tool: str) -> str:
    """("tasks", "add_task") -> `tasks__add_task`; ("", "add_task") -> `add_task`."""
    return f"{prefix}{SEPARATOR}{tool}" if prefix else tool


def split_name(name: str) -> tuple[str, str] | None:
    """`tasks__add_task` -> ("tasks", "add_task"); None when the name has no prefix."""
    prefix, sep, tool = name.partition(SEPARATOR)
    return (prefix, tool) if sep and prefix and tool else None


def resolve(name: str, prefixes: Collection[str]) -> tuple[str, str] | None:
    """(prefix, the server's own tool name) for the exposed `name`, given the exposed prefixes
    in use ("" for the unprefixed server): `fs__write` -> ("fs", "write") when "fs" is one of
    them, else ("", `fs__write`) when "" is; None for a meta tool's name and for a name no
    prefix claims."""
    split = split_name(name)
    if split is not None and split[0] and split[0] in prefixes:
        return split
    if "" in prefixes and name not in META_TOOLS:
        return "", name
    return None


def hidden_by(tool: str, prefixes: Mapping[str, str], *, meta: bool = True) -> str | None:
    """What hides the unprefixed server's own tool (or, with `meta=False`, prompt) `tool` from
    clients, described, or None: the meta tool of that name, or the server whose prefix the
    name starts with (`prefixes`: exposed prefix -> server name)."""
    if meta and tool in META_TOOLS:
        return f"the meta tool {tool}"
    split = split_name(tool)
    if split is not None and split[0] and split[0] in prefixes:
        return f"server '{prefixes[split[0]]}', whose prefix is {split[0]}"
    return None


def client_tool_name(exposed: str, client: str = CLIENT_NAME) -> str:
    """`tasks__add` -> `mcp__compensator__tasks__add`: the name Claude Code shows and checks."""
    return f"mcp__{client}__{exposed}"


def too_long(exposed: Iterable[str], client: str = CLIENT_NAME) -> dict[str, int]:
    """The exposed names whose client name is over MAX_NAME_LENGTH, with that length."""
    lengths = {name: len(client_tool_name(name, client)) for name in exposed}
    return {name: length for name, length in lengths.items() if length > MAX_NAME_LENGTH}
