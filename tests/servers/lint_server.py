"""A test downstream whose tool list trips `compensator check`'s live findings.

`wipe` is annotated destructive (readOnlyHint false, destructiveHint true); `plain` has no
annotations; `peek` is annotated read-only; `strict` forbids unknown arguments. With
`--long-name` it also offers a tool whose name is 60 characters, so `lint__` + that name is
longer than the 64 clients accept. With `--shadowed` it also offers `checkpoint`,
`tasks__add_task` and `tasks__zap`, names that the proxy routes elsewhere when this server
has `prefix: ""` (the tasks server has no `zap`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp.types as types

from compensator.wire import sdk as _sdk

LONG_NAME = "a_tool_name_that_is_sixty_characters_long_to_trip_the_linter"
assert len(LONG_NAME) == 60

_OBJECT = {"type": "object", "properties": {}}

LONG_TOOL = {"name": LONG_NAME, "description": "Does nothing.", "inputSchema": _OBJECT}

TOOLS = [
    {
        "name": "wipe",
        "description": "Pretends to wipe everything.",
        "inputSchema": _OBJECT,
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    {"name": "plain", "description": "Unannotated.", "inputSchema": _OBJECT},
    {
        "name": "peek",
        "description": "Annotated read-only.",
        "inputSchema": _OBJECT,
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "strict",
        "description": "Takes `id` (required) and nothing else.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
]


SHADOWED = [
    {"name": name, "description": "Named like something else.", "inputSchema": _OBJECT}
    for name in ("checkpoint", "tasks__add_task", "tasks__zap")
]


async def list_tools(cursor: str | None) -> types.ListToolsResult:
    tools = [*TOOLS, LONG_TOOL] if "--long-name" in sys.argv[1:] else TOOLS
    tools = [*tools, *SHADOWED] if "--shadowed" in sys.argv[1:] else tools
    return types.ListToolsResult.model_validate({"tools": tools})


async def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps({"tool": name, "args": args})
    return {"content": [{"type": "text", "text": text}]}


def main() -> None:
    server = _sdk.build_server("lint", "1.0", "", list_tools, call_tool)
    anyio.run(_sdk.serve_stdio, server)


if __name__ == "__main__":
    sys.exit(main())
