"""A notes MCP server whose delete fails silently once: the first `delete_note` a process
answers reports success and deletes nothing; every later one works.

So an inverse that is right is refuted once and then holds when the same calls are replayed:
the "came and went" failure that Hypothesis reports as Flaky, which `compensator infer` must
turn into a readable rejection (tests/test_infer.py). State lives in the process only; the
registry's `reset:` calls `reset`, which clears the notes but not the one-time slip.
"""

from __future__ import annotations

from typing import Any

from mcp.types import ToolAnnotations

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import FastMCP as MCPServer
except ModuleNotFoundError:
    from mcp.server.mcpserver import MCPServer

mcp = MCPServer("forgetful", log_level="WARNING")
notes: dict[int, str] = {}
counter = {"next": 1, "deletes": 0}


@mcp.tool()
def add_note(text: str) -> dict[str, Any]:
    """Add a note; returns it with its new id."""
    number = counter["next"]
    counter["next"] += 1
    notes[number] = text
    return {"id": number, "text": text}


@mcp.tool()
def delete_note(id: int) -> dict[str, Any]:
    """Delete the note with this id."""
    counter["deletes"] += 1
    if id not in notes:
        raise ValueError(f"no note {id}")
    if counter["deletes"] > 1:
        del notes[id]
    return {"deleted": id}


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_notes() -> dict[str, Any]:
    """Every note, by id."""
    return {"notes": [{"id": k, "text": v} for k, v in sorted(notes.items())]}


@mcp.tool()
def reset() -> dict[str, Any]:
    """Remove every note."""
    notes.clear()
    return {"notes": 0}


if __name__ == "__main__":
    mcp.run()
