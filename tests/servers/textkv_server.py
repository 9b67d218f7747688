"""A key-value MCP server that answers in plain text, as many real servers do: `get` returns
the stored value as it is ("1.50", "true", "[1,  2]"), which a reader that takes text for JSON
would turn into 1.5, true and [1, 2]. The store is the JSON file $TEXTKV_FILE.

Tools: put(key, value) -> "OK"; get(key) -> the value (an error when the key is not set, or
with $TEXTKV_MISSING set, that text with {key} replaced, as server-redis answers "Key not
found: <key>"); delete(key) -> "OK"; dump() -> the whole store as JSON; keys() -> "Keys:" and
a key a line, values not shown (the two read-only).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.types import ToolAnnotations

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import FastMCP as MCPServer
except ModuleNotFoundError:
    from mcp.server.mcpserver import MCPServer

STORE = Path(os.environ.get("TEXTKV_FILE", "textkv.json"))
mcp = MCPServer("textkv", log_level="WARNING")


def _load() -> dict[str, str]:
    data: dict[str, str] = json.loads(STORE.read_text()) if STORE.exists() else {}
    return data


def _save(store: dict[str, Any]) -> None:
    STORE.write_text(json.dumps(store, sort_keys=True))


@mcp.tool(structured_output=False)
def put(key: str, value: str) -> str:
    """Set key to value."""
    store = _load()
    store[key] = value
    _save(store)
    return "OK"


@mcp.tool(structured_output=False, annotations=ToolAnnotations(readOnlyHint=True))
def get(key: str) -> str:
    """The value of key, as stored."""
    store = _load()
    if key not in store:
        missing = os.environ.get("TEXTKV_MISSING")
        if missing:
            return missing.replace("{key}", key)
        raise ValueError(f"no such key: {key}")
    return store[key]


@mcp.tool(structured_output=False)
def delete(key: str) -> str:
    """Remove key."""
    store = _load()
    store.pop(key, None)
    _save(store)
    return "OK"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def dump() -> dict[str, Any]:
    """The whole store."""
    return {"store": _load()}


@mcp.tool(structured_output=False, annotations=ToolAnnotations(readOnlyHint=True))
def keys() -> str:
    """The keys, one a line."""
    return "\n".join(["Keys:", *sorted(_load())])


if __name__ == "__main__":
    mcp.run()
