"""The journal: what every mutating call was, what undo did about it, and the checkpoints
between them.

It owns the records (`records.py`), the `JournalStore` protocol that everything above the
journal uses and `open_journal`, which picks a backend (`store.py`), and the backends: SQLite
(`sqlite.py`, the default) and PostgreSQL (`postgres.py`, for a journal that many machines
share). A new backend is one module implementing `JournalStore`, chosen in
`open_journal`. It imports only compensator.errors: it knows nothing of MCP, YAML or the proxy.
"""

from __future__ import annotations

from .postgres import PostgresJournal, is_postgres_url
from .records import (
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
)
from .sqlite import SCHEMA_VERSION, SQLiteJournal
from .store import JournalStore, default_journal_path, journal_address, open_journal

__all__ = [
    "SCHEMA_VERSION",
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
]
