"""A test downstream with the awkward edges a faithful proxy must pass through untouched.

Tools come in pages of two; `shaped` carries a title, annotations, `_meta` and an outputSchema
that its own result violates; `fail` returns isError; `peek` is annotated read-only without a
registry entry; `bump` / `count` keep a counter in memory so tests can see what ran; `vendor`
answers with fields no MCP revision defines (VENDOR_RESULT), in the result and in a block.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp.types as types

from compensator.wire import sdk as _sdk

PAGE_SIZE = 2

TOOLS = [
    {
        "name": "shaped",
        "title": "A Shaped Tool",
        "description": "Returns structured content that does not match its own outputSchema.",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "outputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
        "annotations": {
            "title": "Shaped",
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": True,
            "openWorldHint": False,
        },
        "_meta": {"example.com/owner": "tests", "nested": {"k": [1, 2]}},
    },
    {
        "name": "echo",
        "description": "Returns its arguments as JSON text.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "fail",
        "description": "Always returns isError.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "peek",
        "description": "Reads the counter; annotated read-only.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "vendor",
        "description": "Answers with fields no MCP revision defines.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "bump",
        "description": "Adds `by` (default 1) to the counter and returns the new value.",
        "inputSchema": {"type": "object", "properties": {"by": {"type": "integer"}}},
    },
    {
        "name": "set_count",
        "description": "Sets the counter.",
        "inputSchema": {
            "type": "object",
            "properties": {"value": {"type": "integer"}},
            "required": ["value"],
        },
    },
]

state = {"count": 0}

VENDOR_RESULT = {
    "content": [
        {"type": "text", "text": '{"n": 1}', "x-vendor-block": {"keep": [1, "two"]}},
        {"type": "text", "text": "second", "annotations": {"priority": 0.5, "x-rank": 7}},
    ],
    "structuredContent": {"n": 1},
    "x-vendor-result": {"trace": "abc", "spans": [1, 2, 3]},
    "_meta": {"example.com/cost": 3},
}


def _text(value: Any, *, error: bool = False, structured: Any = None) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(value)
    payload: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": error}
    if structured is not None:
        payload["structuredContent"] = structured
    return payload


async def list_tools(cursor: str | None) -> types.ListToolsResult:
    start = int(cursor or 0)
    page = TOOLS[start : start + PAGE_SIZE]
    following = start + PAGE_SIZE
    payload: dict[str, Any] = {"tools": page}
    if following < len(TOOLS):
        payload["nextCursor"] = str(following)
    return types.ListToolsResult.model_validate(payload)


async def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "vendor":
        return VENDOR_RESULT
    if name == "shaped":
        bad = {"count": "not a number", "extra": True}
        return _text(bad, structured=bad)
    if name == "echo":
        return _text(args)
    if name == "fail":
        return _text("this tool always fails", error=True)
    if name == "peek":
        return _text({"count": state["count"]})
    if name == "bump":
        state["count"] += int(args.get("by", 1))
        return _text({"count": state["count"]})
    if name == "set_count":
        state["count"] = int(args["value"])
        return _text({"count": state["count"]})
    return _text(f"no tool {name}", error=True)


def main() -> None:
    server = _sdk.build_server("fidelity", "1.0", "", list_tools, call_tool)
    anyio.run(_sdk.serve_stdio, server)


if __name__ == "__main__":
    sys.exit(main())
