"""Retention: `compensator gc` drops what is older than a moment, never a change that is not
settled nor what a kept checkpoint's undo needs, and keeps the hash chain verifiable.

Settled: undone, or its outcome recorded (`ok` or `error`) with no compensating step in doubt
(`started` or `unknown`). A change that is not settled (pending, `unknown`, a step in doubt)
is for a person, and stays whatever its age. A checkpoint named in `keep` stays, and so does
every change after it (what undoing to it would take back); so does a checkpoint a kept change
belongs to.

The chain: links up to the newest one that wrote a dropped record are dropped; a summary link
(chain.SUMMARY) says what was dropped and names the last dropped link's number and hash, from
which the kept links go on; and a kept record whose newest link was among the dropped ones
gets a new link for its state. `log --verify` then holds as before. gc refuses a journal whose
chain does not hold: dropping records would hide what changed them.

Both stores run `collect` inside one write transaction of their own (`Tx`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import JournalError
from .chain import CHAINED, SUMMARY, Link, next_link, stored_link, summary_link, verify
from .records import Status, StepStatus

__all__ = ["Collected", "Tx", "collect"]

_CHUNK = 500
"""Ids per DELETE statement (SQLite allows 32,766 parameters; smaller keeps statements short)."""

_IN_DOUBT = (StepStatus.STARTED, StepStatus.UNKNOWN)


class Tx(Protocol):
    """One write transaction of a store, with `?` placeholders; under the journal's write or
    order lock, so no other write interleaves."""

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> object: ...


@dataclass(frozen=True, kw_only=True)
class Collected:
    """What `collect` dropped (or, with `dry_run`, would drop), and what it kept though older."""

    before: str
    dry_run: bool
    changes: int = 0
    never_undone: int = 0
    """Of the changes dropped, those never undone: beyond undo now."""
    compensations: int = 0
    checkpoints: int = 0
    decisions: int = 0
    links: int = 0
    carried: int = 0
    """Kept records that got a new link, their newest one being dropped."""
    unsettled: int = 0
    """Changes older than `before` kept because they are not settled."""
    pinned: int = 0
    """Changes older than `before` kept because a checkpoint in `keep` comes before them."""

    @property
    def records(self) -> int:
        return self.changes + self.compensations + self.checkpoints + self.decisions


def collect(
    tx: Tx, *, before: str, keep: Collection[int], key: bytes | None, dry_run: bool
) -> Collected:
    """Drop the records made before `before` (ISO 8601 in UTC, as the journal writes times)
    that may go, unless `dry_run`; what was (or would be) dropped."""
    links = tx.select("SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq")
    rows = {
        table: tx.select(f"SELECT id, {', '.join(columns)} FROM {table} ORDER BY id")
        for table, columns in CHAINED.items()
    }
    verdict = verify(links, rows, key)
    if not verdict.holds:
        raise JournalError(
            f"the journal's chain is broken ({verdict.problem}): gc would hide what changed "
            "it, so nothing was dropped. `compensator log --verify` shows it."
        )
    plan = _Plan(rows, before=before, keep=keep)
    dropped = plan.dropped()
    if not dropped:
        return Collected(before=before, dry_run=dry_run, **plan.kept_counts())
    stored = [stored_link(row) for row in links]
    cut = max(link.seq for link in stored if (link.table, link.row_id) in dropped)
    newest = {(link.table, link.row_id): link for link in stored if link.table != SUMMARY}
    carried = [
        (key_, plan.index[key_])
        for key_, link in sorted(newest.items(), key=lambda item: item[1].seq)
        if link.seq <= cut and key_ not in dropped
    ]
    found = Collected(
        before=before,
        dry_run=dry_run,
        changes=len(plan.changes),
        never_undone=sum(1 for row in plan.changes.values() if row["undone_at"] is None),
        compensations=len(plan.compensations),
        checkpoints=len(plan.checkpoints),
        decisions=len(plan.decisions),
        links=sum(1 for link in stored if link.seq <= cut),
        carried=len(carried),
        **plan.kept_counts(),
    )
    if dry_run:
        return found
    for table, ids in plan.by_table():
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            tx.execute(f"DELETE FROM {table} WHERE id IN ({marks})", chunk)
    tx.execute("DELETE FROM chain WHERE seq <= ?", (cut,))
    head = stored[-1]
    last_dropped = next(link for link in reversed(stored) if link.seq == cut)
    summary = summary_link(
        (head.seq, head.hash),
        (last_dropped.seq, last_dropped.hash),
        {
            "dropped": "records made before " + before,
            "changes": found.changes,
            "compensations": found.compensations,
            "checkpoints": found.checkpoints,
            "decisions": found.decisions,
            "links": found.links,
        },
        key,
    )
    _insert(tx, summary)
    last = (summary.seq, summary.hash)
    for (table, _), record in carried:
        link = next_link(last, table, record, key)
        _insert(tx, link)
        last = (link.seq, link.hash)
    return found


class _Plan:
    """Which records go, from every chained record of the journal."""

    def __init__(
        self, rows: dict[str, list[dict[str, Any]]], *, before: str, keep: Collection[int]
    ) -> None:
        self.index = {(table, row["id"]): row for table in rows for row in rows[table]}
        checkpoints = {row["id"]: row for row in rows["checkpoints"]}
        missing = sorted(set(keep) - set(checkpoints))
        if missing:
            raise JournalError(
                f"no checkpoint {', '.join(map(str, missing))} in the journal to keep; "
                "`compensator log` lists them"
            )
        limit = min((checkpoints[n]["last_change_id"] for n in keep), default=None)
        in_doubt = {row["change_id"] for row in rows["compensations"] if row["status"] in _IN_DOUBT}
        old = [row for row in rows["changes"] if row["created_at"] < before]
        settled = [row for row in old if _settled(row, in_doubt)]
        self.unsettled = len(old) - len(settled)
        self.changes = {row["id"]: row for row in settled if limit is None or row["id"] <= limit}
        self.pinned = len(settled) - len(self.changes)
        self.compensations = {
            row["id"]: row for row in rows["compensations"] if row["change_id"] in self.changes
        }
        needed = {row["checkpoint_id"] for row in rows["changes"] if row["id"] not in self.changes}
        self.checkpoints = {
            n: row
            for n, row in checkpoints.items()
            if row["created_at"] < before and n not in keep and n not in needed
        }
        self.decisions = {row["id"]: row for row in rows["decisions"] if row["created_at"] < before}

    def by_table(self) -> list[tuple[str, list[int]]]:
        """The ids to delete, table by table in an order the foreign keys allow."""
        return [
            ("compensations", sorted(self.compensations)),
            ("changes", sorted(self.changes)),
            ("checkpoints", sorted(self.checkpoints)),
            ("decisions", sorted(self.decisions)),
        ]

    def dropped(self) -> set[tuple[str, int]]:
        return {(table, n) for table, ids in self.by_table() for n in ids}

    def kept_counts(self) -> dict[str, int]:
        return {"unsettled": self.unsettled, "pinned": self.pinned}


def _settled(change: dict[str, Any], in_doubt: set[int]) -> bool:
    if change["undone_at"] is not None:
        return True
    return change["status"] in (Status.OK, Status.ERROR) and change["id"] not in in_doubt


def _insert(tx: Tx, link: Link) -> None:
    tx.execute(
        "INSERT INTO chain (seq, tbl, row_id, state, keyed, hash, note) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        link.row(),
    )
