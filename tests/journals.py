"""What the journal's tests share: the `address` fixture (a SQLite file, or a fresh PostgreSQL
database), `open_journal` (stores closed after the test), and `sql` (a statement run behind the
store's back). conftest imports the fixtures."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from compensator.journal import JournalStore, is_postgres_url
from compensator.journal import open_journal as open_store

__all__ = ["address", "open_journal", "raw", "sql", "target"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres_journal)])
def address(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's journal is: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "j.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def open_journal():
    """Open journals (a path or URL, as --db takes it) and close them all afterwards (3.13
    warns about unclosed connections)."""
    opened: list[JournalStore] = []

    def open_(where: str | Path, **options: Any) -> Any:
        opened.append(open_store(target(str(where)), **options))
        return opened[-1]

    yield open_
    for journal in opened:
        journal.close()


def target(address: str) -> str | Path:
    """An address as `open_journal` takes it: a URL as it is, a path as a Path."""
    return address if is_postgres_url(address) else Path(address)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def sql(address: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the journal's database behind the store's back (`?` placeholders,
    table names unqualified) and return its rows."""
    if not is_postgres_url(address):
        db = raw(Path(address))
        try:
            return db.execute(statement, params).fetchall()
        finally:
            db.close()
    with psycopg.connect(address, autocommit=True, options="-c search_path=compensator") as db:
        cursor = db.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []
