"""The SQLite journal, the default: one file in WAL mode that the processes of one machine
share.

`store.py` is the store (its connection, sessions and writes), `transaction.py` a write
transaction and the hash chain's links it appends, `schema.py` the migrations from one schema
version to the next, `files.py` the file itself: created private, one lock file per live
session, and what SQLite's errors about it mean to a person.
"""

from __future__ import annotations

from .schema import MIGRATIONS, SCHEMA_VERSION
from .store import SQLiteJournal

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteJournal"]
