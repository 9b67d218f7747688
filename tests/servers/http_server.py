"""A key-value MCP server over streamable HTTP, for the tests of `url:` downstreams.

    python http_server.py PORT STORE_FILE

Serves MCP at http://127.0.0.1:PORT/mcp. The store lives in STORE_FILE (JSON, rewritten on each
change), so a server killed and started again on the same port keeps its data, like a real
service with a database. Tools: put(key, value) -> {"previous": old or null};
delete(key) -> {"previous"}; get(key) -> {"value"}; dump() -> {"store"};
header(name) -> {"value"}: the value of request header `name` as this server received it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as MCPServer

    V1 = True
except ModuleNotFoundError:
    from mcp.server.mcpserver import Context, MCPServer

    V1 = False

PORT = int(sys.argv[1])
STORE = Path(sys.argv[2])

mcp = MCPServer("http-kv")


def _load() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(STORE.read_text())
    except FileNotFoundError:
        return {}
    return data


def _save(store: dict[str, Any]) -> None:
    partial = STORE.with_suffix(".partial")
    partial.write_text(json.dumps(store))
    partial.replace(STORE)


@mcp.tool()
def put(key: str, value: str) -> dict[str, Any]:
    """Set `key` to `value`; returns the previous value (null when the key was new)."""
    store = _load()
    previous = store.get(key)
    store[key] = value
    _save(store)
    return {"previous": previous}


@mcp.tool()
def delete(key: str) -> dict[str, Any]:
    """Remove `key`; returns the value it had (null when absent)."""
    store = _load()
    previous = store.pop(key, None)
    _save(store)
    return {"previous": previous}


@mcp.tool()
def get(key: str) -> dict[str, Any]:
    """The value of `key`, or null."""
    return {"value": _load().get(key)}


@mcp.tool()
def dump() -> dict[str, Any]:
    """The whole store."""
    return {"store": _load()}


@mcp.tool()
def header(name: str, ctx: Context) -> dict[str, Any]:  # type: ignore[type-arg]
    """The value of request header `name` (null when absent), as this server received it."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return {"value": None if headers is None else headers.get(name)}


if __name__ == "__main__":
    if V1:  # 1.x: host and port are settings
        mcp.settings.host, mcp.settings.port = "127.0.0.1", PORT
        mcp.run(transport="streamable-http")
    else:
        mcp.run(transport="streamable-http", host="127.0.0.1", port=PORT)
