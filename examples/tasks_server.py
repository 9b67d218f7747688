"""A small SQLite-backed task-list MCP server (stdio).

It is the demo and test downstream for the compensator undo proxy: its tools
cover the interesting cases (additive, idempotent, cascading deletes, dry runs,
in-band errors, an irreversible purge) and return plain JSON objects.

Run:  python examples/tasks_server.py --db /tmp/tasks.db
The database path comes from --db, else $TASKS_DB, else ./tasks.db.
"""

import argparse
import os
import sqlite3
from typing import Any

from mcp.types import ToolAnnotations

# The one difference between SDK lines: mcp 2.x renamed FastMCP to MCPServer.
try:
    from mcp.server.fastmcp import FastMCP as MCPServer
    from mcp.server.fastmcp.exceptions import ToolError
except ModuleNotFoundError:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'done')),
    parent_id INTEGER NULL REFERENCES tasks(id)
);
CREATE TABLE IF NOT EXISTS labels (name TEXT PRIMARY KEY);
"""

# Parents before children, then by id: the order restore_tasks needs to re-insert a subtree.
SUBTREE = """
WITH RECURSIVE sub(id, depth) AS (
    SELECT id, 0 FROM tasks WHERE id = ?
    UNION ALL
    SELECT t.id, sub.depth + 1 FROM tasks t JOIN sub ON t.parent_id = sub.id
)
SELECT t.* FROM tasks t JOIN sub USING (id) ORDER BY sub.depth, t.id
"""

STATUSES = ("open", "done")
Task = dict[str, Any]

# Tools return dict[str, Any], which both SDK lines publish as structuredContent
# unwrapped (no {"result": ...}) plus the same value as JSON text.
# Tools are async on purpose: mcp 2.x runs sync tools on worker threads, while
# async ones run on the event loop thread, so one connection is never shared across threads.
mcp = MCPServer("tasks", log_level="WARNING")
db: sqlite3.Connection  # opened in main()

READ_ONLY = ToolAnnotations(readOnlyHint=True)
DESTRUCTIVE = ToolAnnotations(destructiveHint=True)
IDEMPOTENT = ToolAnnotations(idempotentHint=True)


def open_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")  # a restore must not create orphans
    conn.executescript(SCHEMA)
    return conn


def as_task(row: sqlite3.Row) -> Task:
    return {key: row[key] for key in ("id", "title", "status", "parent_id")}


def find(task_id: int) -> Task | None:
    row = db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return as_task(row) if row else None


def require(task_id: int) -> Task:
    task = find(task_id)
    if task is None:
        raise ToolError(f"task {task_id} not found")
    return task


def subtree(task_id: int) -> list[Task]:
    return [as_task(row) for row in db.execute(SUBTREE, (task_id,))]


def check_parent(parent_id: int | None) -> None:
    if parent_id is not None and find(parent_id) is None:
        raise ToolError(f"parent task {parent_id} not found")


def insert(task_id: int, title: str, status: str, parent_id: int | None) -> Task:
    """Insert a task with an explicit id; the caller owns the transaction."""
    if status not in STATUSES:
        raise ToolError(f"status must be 'open' or 'done', not {status!r}")
    if find(task_id) is not None:
        raise ToolError(f"task {task_id} already exists")
    check_parent(parent_id)
    # AUTOINCREMENT bumps its counter past explicit ids, so add_task never reuses one.
    db.execute(
        "INSERT INTO tasks (id, title, status, parent_id) VALUES (?, ?, ?, ?)",
        (task_id, title, status, parent_id),
    )
    return {"id": task_id, "title": title, "status": status, "parent_id": parent_id}


def delete_subtrees(roots: list[int]) -> list[int]:
    ids = [task["id"] for root in roots for task in subtree(root)]
    ids = list(dict.fromkeys(ids))  # a done task may sit under another done task
    if not ids:
        return []
    # One statement, so the foreign key check only sees the final state.
    db.execute(f"DELETE FROM tasks WHERE id IN ({','.join('?' * len(ids))})", ids)
    return ids


def write_status(task_id: int, status: str) -> Task:
    with db:
        require(task_id)
        db.execute("UPDATE tasks SET status = ? WHERE id = ?", (status, task_id))
    return require(task_id)


@mcp.tool(description="Add an open task, optionally under a parent task.")
async def add_task(title: str, parent_id: int | None = None) -> dict[str, Any]:
    with db:
        check_parent(parent_id)
        cur = db.execute(
            "INSERT INTO tasks (title, status, parent_id) VALUES (?, 'open', ?)", (title, parent_id)
        )
    return require(cur.lastrowid)


@mcp.tool(description="Get one task by id.", annotations=READ_ONLY)
async def get_task(id: int) -> dict[str, Any]:
    return require(id)


@mcp.tool(description="Get a task and all its descendants, parents first.", annotations=READ_ONLY)
async def get_task_tree(id: int) -> dict[str, Any]:
    task = require(id)
    return {"task": task, "children": subtree(id)[1:]}


@mcp.tool(description="List all tasks ordered by id.", annotations=READ_ONLY)
async def list_tasks() -> dict[str, Any]:
    rows = db.execute("SELECT * FROM tasks ORDER BY id")
    return {"tasks": [as_task(row) for row in rows]}


@mcp.tool(description="Mark a task done.", annotations=IDEMPOTENT)
async def complete_task(id: int) -> dict[str, Any]:
    return write_status(id, "done")


@mcp.tool(description="Mark a task open again.", annotations=IDEMPOTENT)
async def uncomplete_task(id: int) -> dict[str, Any]:
    return write_status(id, "open")


@mcp.tool(description="Flip a task between open and done.")
async def toggle_task(id: int) -> dict[str, Any]:
    # Its own inverse, and the example of a compensation that must never run twice.
    return write_status(id, "open" if require(id)["status"] == "done" else "done")


@mcp.tool(description="Rename a task; with dry_run, only show the result.")
async def rename_task(id: int, title: str, dry_run: bool = False) -> dict[str, Any]:
    task = require(id)
    if not dry_run:
        with db:
            db.execute("UPDATE tasks SET title = ? WHERE id = ?", (title, id))
    return {**task, "title": title}


@mcp.tool(description="Set a task's status to 'open' or 'done'; reports failures in-band.")
async def set_status(id: int, status: str) -> dict[str, Any]:
    # Deliberately not isError: some real servers report failures inside a normal result.
    if status not in STATUSES:
        return {"ok": False, "error": f"status must be 'open' or 'done', not {status!r}"}
    if find(id) is None:
        return {"ok": False, "error": f"task {id} not found"}
    return {"ok": True, "task": write_status(id, status)}


@mcp.tool(description="Delete a task and all its descendants.", annotations=DESTRUCTIVE)
async def delete_task(id: int) -> dict[str, Any]:
    with db:
        require(id)
        return {"deleted": delete_subtrees([id])}


@mcp.tool(description="Re-insert a deleted task with its original id.")
async def restore_task(
    id: int, title: str, status: str, parent_id: int | None = None
) -> dict[str, Any]:
    with db:
        return insert(id, title, status, parent_id)


@mcp.tool(description="Re-insert task dicts in order, all or nothing.")
async def restore_tasks(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    with db:  # rolls back every insert if any one fails
        for task in tasks:
            try:
                insert(task["id"], task["title"], task["status"], task.get("parent_id"))
            except KeyError as exc:
                raise ToolError(f"task dict is missing {exc}") from None
    return {"restored": len(tasks)}


@mcp.tool(description="Create a label; a no-op if it already exists.", annotations=IDEMPOTENT)
async def add_label(name: str) -> dict[str, Any]:
    with db:
        cur = db.execute("INSERT OR IGNORE INTO labels (name) VALUES (?)", (name,))
    return {"name": name, "created": cur.rowcount == 1}


@mcp.tool(description="Remove a label if it exists.", annotations=IDEMPOTENT)
async def remove_label(name: str) -> dict[str, Any]:
    with db:
        cur = db.execute("DELETE FROM labels WHERE name = ?", (name,))
    return {"name": name, "removed": cur.rowcount == 1}


@mcp.tool(description="List all label names, sorted.", annotations=READ_ONLY)
async def list_labels() -> dict[str, Any]:
    rows = db.execute("SELECT name FROM labels ORDER BY name")
    return {"labels": [row["name"] for row in rows]}


@mcp.tool(description="Permanently delete done tasks and their subtasks.", annotations=DESTRUCTIVE)
async def purge_completed() -> dict[str, Any]:
    with db:
        done = [row["id"] for row in db.execute("SELECT id FROM tasks WHERE status = 'done'")]
        return {"purged": len(delete_subtrees(done))}


@mcp.tool(
    description="Delete every task and label and restart ids at 1 (a test hook).",
    annotations=DESTRUCTIVE,
)
async def reset() -> dict[str, Any]:
    with db:
        db.execute("DELETE FROM tasks")
        db.execute("DELETE FROM labels")
        db.execute("DELETE FROM sqlite_sequence")
    return {"reset": True}


def main() -> None:
    global db
    parser = argparse.ArgumentParser(description="Task-list MCP server (stdio).")
    parser.add_argument("--db", default=os.environ.get("TASKS_DB", "tasks.db"), help="SQLite file")
    db = open_db(parser.parse_args().db)
    mcp.run()  # stdio; the SDK keeps stdout for protocol messages and logs to stderr


if __name__ == "__main__":
    main()
