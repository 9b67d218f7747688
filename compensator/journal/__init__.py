"""The journal: what every mutating call was, what undo did about it, and the checkpoints
between them.

It owns the records (`records.py`), the `JournalStore` protocol that everything above the
journal uses and `open_journal`, which picks a backend (`store.py`), and the backends: SQLite
(`sqlite/`, the default) and PostgreSQL (`postgres/`, for a journal that many machines
share). A new backend is one module implementing `JournalStore`, chosen in
`open_journal`. It imports only compensator.errors: it knows nothing of MCP, YAML or the proxy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .records import (
    TURN,
    Answer,
    Change,
    Checkpoint,
    Compensation,
    Decision,
    Intent,
    Session,
    Status,
    StepOutcome,
    StepStatus,
    latest_steps,
    turn_label,
)

if TYPE_CHECKING:
    from .postgres import PostgresJournal
    from .sqlite import SCHEMA_VERSION, SQLiteJournal
    from .store import (
        JournalStore,
        default_journal_path,
        is_postgres_url,
        journal_address,
        open_journal,
    )

# The records are imported with the package; the stores when first asked for, so that
# `compensator log --help` starts without sqlite3, and the SQLite journal without psycopg.
_HOMES = {
    "SCHEMA_VERSION": "sqlite",
    "SQLiteJournal": "sqlite",
    "PostgresJournal": "postgres",
    "JournalStore": "store",
    "default_journal_path": "store",
    "is_postgres_url": "store",
    "journal_address": "store",
    "open_journal": "store",
}

__all__ = [
    "SCHEMA_VERSION",
    "TURN",
    "Answer",
    "Change",
    "Checkpoint",
    "Compensation",
    "Decision",
    "Intent",
    "JournalStore",
    "PostgresJournal",
    "SQLiteJournal",
    "Session",
    "Status",
    "StepOutcome",
    "StepStatus",
    "default_journal_path",
    "is_postgres_url",
    "journal_address",
    "latest_steps",
    "open_journal",
    "turn_label",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
