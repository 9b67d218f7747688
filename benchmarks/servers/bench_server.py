"""The downstream for the benchmarks: a trivial read tool and a mutating pair, in memory."""

from __future__ import annotations

try:  # mcp 2.x renamed FastMCP to MCPServer
    from mcp.server.mcpserver import MCPServer
except ModuleNotFoundError:  # pragma: no cover - mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]

server = MCPServer("bench")
counter = {"value": 0}


@server.tool()
def ping() -> str:
    """Answer at once: the cost of a call is all protocol."""
    return "pong"


@server.tool()
def bump(by: int = 1) -> dict[str, int]:
    """Add to the counter (mutating; undone by unbump)."""
    counter["value"] += by
    return {"value": counter["value"]}


@server.tool()
def unbump(by: int = 1) -> dict[str, int]:
    """Subtract from the counter: bump's inverse."""
    counter["value"] -= by
    return {"value": counter["value"]}


if __name__ == "__main__":
    server.run()
