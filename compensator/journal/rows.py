"""What both backends write the same way: timestamps, JSON columns, the host a session runs
on, and a change read back from its row."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .records import Change

__all__ = ["CHANGE_COLUMNS", "change_from_row", "dump", "host_identity", "load", "now"]

CHANGE_COLUMNS = (
    "id, checkpoint_id, tool, classification, status, args, snapshot, snapshot_error, "
    "result, error, created_at, completed_at, undone_at, undo_note, session, agent, scope, "
    "post_state, post_state_error"
)
_JSON_COLUMNS = ("args", "snapshot", "result", "post_state")


def now() -> str:
    """This moment, as the journal writes it: ISO 8601 in UTC, to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


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
