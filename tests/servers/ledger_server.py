"""A key-value MCP server that keeps an append-only ledger of every mutation it applied.

The crash tests kill the proxy in front of it and then need the truth about what this server
received and applied, in order. Everything lives in the folder named by $LEDGER_DIR:

  store.json     the key-value store, rewritten atomically (temporary file, fsync, rename)
  ledger.jsonl   one line per applied mutation: {"seq", "tool", "args", "previous", "pid"},
                 flushed and fsynced before the call is answered
  received.jsonl one line per mutating call as it arrives, before any delay
  pids           one line per server process started, with its pid
  delay          optional, "BEFORE [AFTER]" in seconds: how long every mutating call waits
                 before it applies, and after it applied before it answers. Re-read every
                 10 ms while waiting, so rewriting it shortens or stretches a wait in progress.
                 Without the file, $LEDGER_DELAY (same format) applies; default no delay.

Tools: put(key, value) -> {"previous": old or null}; delete(key) -> {"deleted", "previous"};
get(key) -> {"value"}; dump() -> {"store"}. Applying a mutation runs with no await in between
(store, then ledger), so concurrent calls never interleave inside one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import FastMCP as MCPServer
except ModuleNotFoundError:
    from mcp.server.mcpserver import MCPServer

DIR = Path(os.environ.get("LEDGER_DIR", "."))
STORE = DIR / "store.json"
LEDGER = DIR / "ledger.jsonl"
RECEIVED = DIR / "received.jsonl"
DELAY = DIR / "delay"
PIDS = DIR / "pids"

# Tools are async so they run on the event loop thread: one mutation at a time.
mcp = MCPServer("ledger", log_level="WARNING")


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_store() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(STORE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data


def _write_store(store: dict[str, Any]) -> None:
    tmp = STORE.with_name(f"store.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(store, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, STORE)


def _delays() -> tuple[float, float]:
    try:
        text = DELAY.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = os.environ.get("LEDGER_DELAY", "")
    parts = [float(p) for p in text.split()] or [0.0]
    return parts[0], parts[1] if len(parts) > 1 else 0.0


async def _wait(which: int) -> None:
    """Wait until the delay in the `delay` file (part `which`) has passed since we started."""
    start = time.monotonic()
    while time.monotonic() - start < _delays()[which]:
        await anyio.sleep(0.01)


def _seq() -> int:
    try:
        with LEDGER.open(encoding="utf-8") as f:
            return sum(1 for _ in f) + 1
    except FileNotFoundError:
        return 1


async def _mutate(tool: str, args: dict[str, Any]) -> Any:
    _append(RECEIVED, {"tool": tool, "args": args, "pid": os.getpid()})
    await _wait(0)
    # From here to the ledger line: no await, so nothing interleaves and nothing cancels.
    store = _read_store()
    previous = store.get(args["key"])
    if tool == "put":
        store[args["key"]] = args["value"]
    else:
        store.pop(args["key"], None)
    _write_store(store)
    record = {"seq": _seq(), "tool": tool, "args": args, "previous": previous}
    _append(LEDGER, {**record, "pid": os.getpid()})
    await _wait(1)
    return previous


@mcp.tool()
async def put(key: str, value: str) -> dict[str, Any]:
    """Set key to value; returns the value it replaced (null when the key was new)."""
    return {"previous": await _mutate("put", {"key": key, "value": value})}


@mcp.tool()
async def delete(key: str) -> dict[str, Any]:
    """Remove key; returns whether it existed and its old value."""
    previous = await _mutate("delete", {"key": key})
    return {"deleted": previous is not None, "previous": previous}


@mcp.tool()
async def get(key: str) -> dict[str, Any]:
    """The value of key, or null."""
    return {"value": _read_store().get(key)}


@mcp.tool()
async def dump() -> dict[str, Any]:
    """The whole store."""
    return {"store": _read_store()}


if __name__ == "__main__":
    DIR.mkdir(parents=True, exist_ok=True)
    _append(PIDS, {"pid": os.getpid()})
    mcp.run()
