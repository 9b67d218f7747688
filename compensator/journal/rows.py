"""What both backends write the same way: timestamps, JSON columns, the host a session runs
on, and a change read back from its row."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from .records import (
    Answer,
    Change,
    Checkpoint,
    Compensation,
    Decision,
    Intent,
    Status,
    StepStatus,
)

__all__ = [
    "CHANGE_COLUMNS",
    "CHECKPOINT_COLUMNS",
    "DECISION_COLUMNS",
    "Reads",
    "change_from_row",
    "decision_values",
    "dump",
    "host_identity",
    "intent_values",
    "load",
    "now",
    "step_values",
]

CHANGE_COLUMNS = (
    "id, checkpoint_id, tool, classification, status, args, snapshot, snapshot_error, "
    "result, error, created_at, completed_at, undone_at, undo_note, session, agent, scope, "
    "post_state, post_state_error, redo_of, undo_run"
)
CHECKPOINT_COLUMNS = "id, label, created_at, last_change_id, session, agent, scope"
DECISION_COLUMNS = (
    "id, tool, classification, args, answer, reason, created_at, last_change_id, "
    "last_checkpoint_id, session, agent, scope"
)
_COMPENSATION_COLUMNS = "id, change_id, step, tool, args, status, error, created_at, pid, session"
_JSON_COLUMNS = ("args", "snapshot", "result", "post_state")


def now() -> str:
    """This moment, as the journal writes it: ISO 8601 in UTC, to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def intent_values(
    intent: Intent, *, session: str, agent: str | None, scope: str | None
) -> dict[str, Any]:
    """A new change's columns as both stores write them, `checkpoint_id` aside (each store
    looks it up in its own transaction); in the PostgreSQL store's INSERT order."""
    return {
        "tool": intent.tool,
        "classification": intent.classification,
        "status": Status.PENDING,
        "args": dump(dict(intent.args)),
        "snapshot": dump(intent.snapshot),
        "snapshot_error": intent.snapshot_error,
        "pid": os.getpid(),
        "created_at": now(),
        "session": session,
        "agent": agent,
        "scope": scope,
        "redo_of": intent.redo_of,
    }


def decision_values(
    *,
    tool: str,
    classification: str,
    args: Any,
    answer: str,
    reason: str | None,
    session: str,
    agent: str | None,
    scope: str | None,
) -> dict[str, Any]:
    """A new decision's columns, the newest change and checkpoint ids aside."""
    return {
        "tool": tool,
        "classification": classification,
        "args": dump(args),
        "answer": answer,
        "reason": reason,
        "created_at": now(),
        "session": session,
        "agent": agent,
        "scope": scope,
    }


def step_values(change_id: int, step: int, tool: str, args: Any, *, session: str) -> dict[str, Any]:
    """A compensating step's columns as it is claimed (`started`)."""
    return {
        "change_id": change_id,
        "step": step,
        "tool": tool,
        "args": dump(args),
        "status": StepStatus.STARTED,
        "created_at": now(),
        "pid": os.getpid(),
        "session": session,
    }


def load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def host_identity() -> str:
    """The machine a session runs on, as `log` shows it: $COMPENSATOR_HOST when set (a
    container's host name is often a random id), else the host name."""
    return os.environ.get("COMPENSATOR_HOST") or socket.gethostname()


def change_from_row(row: Mapping[str, Any]) -> Change:
    fields = dict(row)
    recorded = fields["post_state"] is not None or fields["post_state_error"] is not None
    for name in _JSON_COLUMNS:
        fields[name] = load(fields[name])
    return Change(**fields, post_state_recorded=recorded)


def _whose(agent: str | None, scope: str | None) -> tuple[str, list[Any]]:
    """The rows of an agent, and of its shared scope when it has one; every row for None."""
    if agent is None:
        return "1 = 1", []  # not TRUE: SQLite before 3.23 does not know it
    if scope is None:
        return "agent = ?", [agent]
    return "(agent = ? OR scope = ?)", [agent, scope]


class Reads:
    """The reads of a `JournalStore`, the same SQL on both backends: a store supplies
    `_select`, which runs a query written with `?` placeholders and returns its rows as dicts."""

    def _select(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def checkpoint(self, checkpoint_id: int) -> Checkpoint | None:
        rows = self._select(
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE id = ?", (checkpoint_id,)
        )
        return Checkpoint(**rows[0]) if rows else None

    def checkpoints(
        self, agent: str | None = None, *, scope: str | None = None
    ) -> list[Checkpoint]:
        where, params = _whose(agent, scope)
        rows = self._select(
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE {where} ORDER BY id DESC", params
        )
        return [Checkpoint(**row) for row in rows]

    def change(self, change_id: int) -> Change | None:
        changes = self._changes("id = ?", (change_id,))
        return changes[0] if changes else None

    def open_changes(
        self,
        after_checkpoint: Checkpoint | None = None,
        *,
        agent: str | None = None,
        scope: str | None = None,
    ) -> list[Change]:
        where, params = _whose(agent, scope)
        where += " AND undone_at IS NULL"
        if after_checkpoint is not None:
            where += " AND id > ?"
            params.append(after_checkpoint.last_change_id)
        return self._changes(f"{where} ORDER BY id DESC", params)

    def unknown_changes(self) -> list[Change]:
        return self._changes("undone_at IS NULL AND status = ? ORDER BY id", (Status.UNKNOWN,))

    def all_changes(self) -> list[Change]:
        return self._changes("1 = 1 ORDER BY id DESC", ())

    def _changes(self, where: str, params: Sequence[Any]) -> list[Change]:
        rows = self._select(f"SELECT {CHANGE_COLUMNS} FROM changes WHERE {where}", params)
        return [change_from_row(row) for row in rows]

    def decisions(
        self,
        after_checkpoint: Checkpoint | None = None,
        *,
        agent: str | None = None,
        scope: str | None = None,
        refused: bool = False,
    ) -> list[Decision]:
        where, params = _whose(agent, scope)
        if after_checkpoint is not None:
            where += " AND last_checkpoint_id >= ?"
            params.append(after_checkpoint.id)
        if refused:
            where += f" AND answer IN ({', '.join('?' for _ in Answer.REFUSED)})"
            params.extend(Answer.REFUSED)
        rows = self._select(
            f"SELECT {DECISION_COLUMNS} FROM decisions WHERE {where} ORDER BY id DESC", params
        )
        return [Decision(**{**row, "args": load(row["args"])}) for row in rows]

    def compensations(self, change_id: int) -> list[Compensation]:
        rows = self._select(
            f"SELECT {_COMPENSATION_COLUMNS} FROM compensations WHERE change_id = ? ORDER BY id",
            (change_id,),
        )
        return [Compensation(**{**row, "args": load(row["args"])}) for row in rows]
