"""The SQLite journal's write transaction: the few helpers its writes share, and the links
they append to the hash chain (chain.py) as they write."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ...errors import JournalError
from ..chain import CHAINED, existing_links, mixed_keys, next_link
from ..rows import now

__all__ = ["Tx", "chained_rows"]


def chained_rows(db: sqlite3.Connection) -> dict[str, list[dict[str, Any]]]:
    """Every chained record, per table, by id: what the chain is checked against."""
    return {
        table: [
            dict(row)
            for row in db.execute(f"SELECT id, {', '.join(columns)} FROM {table} ORDER BY id")
        ]
        for table, columns in CHAINED.items()
    }


_INSERT_LINK = (
    "INSERT INTO chain (seq, tbl, row_id, state, keyed, hash, note) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class Tx:
    """The connection inside one transaction, with the few helpers the writes share: `add`
    and `update` also append the write's link to the hash chain (chain.py)."""

    def __init__(self, db: sqlite3.Connection, key: bytes | Literal[False] | None) -> None:
        self._db = db
        self._key = key  # False: not chained (benchmarks only)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self._db.execute(sql, params)]

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._db.execute(sql, params).fetchone()[0]

    def add(self, table: str, values: dict[str, Any]) -> int:
        """Insert a record (the columns are the store's own names); the id SQLite gave it."""
        marks = ", ".join("?" * len(values))
        row_id = self._db.execute(
            f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", tuple(values.values())
        ).lastrowid
        assert row_id is not None
        self._link(table, {"id": row_id, **values})
        return row_id

    def update(self, table: str, row_id: int, values: dict[str, Any], *, where: str = "") -> None:
        """Set `values` on a record (when `where`, an extra condition, holds for it)."""
        assignments = ", ".join(f"{column} = ?" for column in values)
        cursor = self._db.execute(
            f"UPDATE {table} SET {assignments} WHERE id = ?{where}", (*values.values(), row_id)
        )
        if cursor.rowcount:
            self._link(table, self._chained_row(table, row_id))

    def _chained_row(self, table: str, row_id: int) -> dict[str, Any]:
        columns = ", ".join(CHAINED[table])
        row = self._db.execute(f"SELECT id, {columns} FROM {table} WHERE id = ?", (row_id,))
        return dict(row.fetchone())

    def _link(self, table: str, record: Mapping[str, Any]) -> None:
        """Append the link of a write that left `record` (id and chained columns) in `table`;
        the transaction's write lock keeps links in commit order."""
        if self._key is False:
            return
        last = self._db.execute(
            "SELECT seq, hash, keyed FROM chain ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if last is not None and (mixed := mixed_keys(bool(last[2]), self._key)) is not None:
            raise JournalError(f"cannot write the journal: {mixed}")
        link = next_link(None if last is None else (last[0], last[1]), table, record, self._key)
        self._db.execute(_INSERT_LINK, link.row())

    def link_existing(self) -> None:
        """Link the records a journal held before it had a chain."""
        rows = chained_rows(self._db)
        for link in existing_links(rows, self._key or None):
            self._db.execute(_INSERT_LINK, link.row())

    def run_script(self, script: str) -> None:
        # executescript() would COMMIT the open transaction; run statements one by one.
        for statement in script.split(";"):
            if statement.strip():
                self._db.execute(statement)

    def mark_undone(self, change_id: int, note: str, *, run: str | None) -> None:
        self.update(
            "changes",
            change_id,
            {"undone_at": now(), "undo_note": note, "undo_run": run},
            where=" AND undone_at IS NULL",
        )
