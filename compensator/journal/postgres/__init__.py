"""The PostgreSQL journal: one database that proxies on many machines share.

`store.py` is the store (sessions and writes), `connection.py` its connection and the lease
that keeps its session alive, `schema.py` the tables, migrations and advisory locks.
psycopg is an optional dependency (`mcp-compensator[postgres]`), imported when a store is
opened, so the SQLite journal and the CLI never load it.
"""

from __future__ import annotations

from .connection import DEFAULT_LEASE
from .schema import FIRST_VERSION, MIGRATIONS
from .store import PostgresJournal

__all__ = ["DEFAULT_LEASE", "FIRST_VERSION", "MIGRATIONS", "PostgresJournal"]
