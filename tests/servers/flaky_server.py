"""A test downstream that misbehaves on request: it crashes, hangs, and fails to start.

Everything it keeps lives in the folder named by $FLAKY_DIR, so a restarted process sees
what the previous one wrote and tests can watch from outside:

- `state.json`: the key-value store of `put` / `put_after_change` / `get` / `restore`;
- `starts.log`: one line per process start (written before anything can fail);
- `events.log`: `started <tag>`, then `finished <tag>` or `cancelled <tag>`, from `sleep`;
  `hanging` once `hang` has the call;
- marker files read at start: `fail-start` (exit 4 before serving), `hang-start` (sleep
  before serving, never answering `initialize`), `drop-get` (do not offer `get`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(os.environ.get("FLAKY_DIR", "."))


def _load() -> dict[str, Any]:
    path = HERE / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save(state: dict[str, Any]) -> None:
    (HERE / "state.json").write_text(json.dumps(state))


def _event(line: str) -> None:
    with (HERE / "events.log").open("a") as log:
        log.write(line + "\n")


async def put(key: str, value: str) -> dict[str, Any]:
    """Set `key` to `value`; returns the previous value (null when there was none)."""
    state = _load()
    previous = state.get(key)
    state[key] = value
    _save(state)
    return {"key": key, "value": value, "previous": previous}


async def restore(key: str, value: str | None = None) -> dict[str, Any]:
    """Set `key` back to `value`, or remove it when `value` is null."""
    state = _load()
    if value is None:
        state.pop(key, None)
    else:
        state[key] = value
    _save(state)
    return {"key": key, "value": value}


async def get(key: str) -> dict[str, Any]:
    """The value of `key` (null when unset)."""
    return {"key": key, "value": _load().get(key)}


async def put_after_change(key: str, value: str, wait: float = 5.0) -> dict[str, Any]:
    """Wait until `key` changes (or `wait` seconds pass), then put: a call the server applies
    after a later one. Records `waiting <key>` in events.log on arrival."""
    before = _load().get(key)
    _event(f"waiting {key}")
    with anyio.move_on_after(wait):
        while _load().get(key) == before:
            await anyio.sleep(0.01)
    return await put(key, value)


async def put_then_crash(key: str, value: str, code: int = 3) -> dict[str, Any]:
    """Set `key` to `value`, then exit with `code` before answering."""
    await put(key, value)
    os._exit(code)


async def crash(code: int = 3, delay: float = 0.0) -> dict[str, Any]:
    """Exit the process with `code` after `delay` seconds, without answering."""
    await anyio.sleep(delay)
    os._exit(code)


async def sleep(seconds: float, tag: str = "") -> dict[str, Any]:
    """Sleep, then answer; records `started`, then `finished` or `cancelled` in events.log."""
    _event(f"started {tag}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _event(f"cancelled {tag}")
        raise
    _event(f"finished {tag}")
    return {"slept": seconds}


async def hang() -> dict[str, Any]:
    """Never answer (records `hanging` in events.log first)."""
    _event("hanging")
    await anyio.sleep_forever()
    return {}


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    with (HERE / "starts.log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    if (HERE / "fail-start").exists():
        print("flaky: fail-start marker present, exiting", file=sys.stderr)
        sys.exit(4)
    if (HERE / "hang-start").exists():
        time.sleep(3600)
    # Imported only now, so that a failing start fails fast. mcp 2.x renamed FastMCP.
    try:
        from mcp.server.fastmcp import FastMCP as MCPServer
    except ModuleNotFoundError:
        from mcp.server.mcpserver import MCPServer  # type: ignore[no-redef]
    mcp = MCPServer("flaky", log_level="WARNING")
    for tool in (put, put_after_change, restore, put_then_crash, crash, sleep, hang):
        mcp.tool()(tool)
    if not (HERE / "drop-get").exists():
        mcp.tool()(get)
    mcp.run()


if __name__ == "__main__":
    main()
