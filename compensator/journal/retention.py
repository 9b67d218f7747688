"""Retention: `compensator gc` drops what is older than a moment, never a change that is not
settled nor what a kept checkpoint's undo needs, and keeps the hash chain verifiable.

Settled: undone, or its outcome recorded (`ok` or `error`) and no undo of it begun (no
compensating step recorded). A change that is not settled (pending, `unknown`, an undo that
stopped midway or is running) is for a person, and stays whatever its age. A checkpoint named
in `keep` stays, and so does every change and decision after it (what undoing to it would take
back, and what `list_changes` lists as refused since); so does a checkpoint a kept change
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
from .chain import (
    CHAINED,
    SUMMARY,
    Link,
    Verdict,
    link_problem,
    next_link,
    stored_link,
    summary_link,
)
from .records import Status

__all__ = ["Collected", "Tx", "checked", "collect"]

_CHUNK = 500
"""Ids per DELETE statement (SQLite allows 32,766 parameters; smaller keeps statements short)."""


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
    not_compacted: str | None = None
    """Why the file was not shrunk when that was asked for, after what was dropped went."""

    @property
    def records(self) -> int:
        return self.changes + self.compensations + self.checkpoints + self.decisions


def checked(verdict: Verdict) -> tuple[int, str] | None:
    """The last link a verdict on the whole journal vouches for (None: there was none);
    JournalError when the chain does not hold."""
    if not verdict.holds:
        raise JournalError(
            f"the journal's chain is broken ({verdict.problem}): gc would hide what changed "
            "it, so nothing was dropped. `compensator log --verify` shows it."
        )
    return verdict.head


def collect(
    tx: Tx,
    *,
    before: str,
    keep: Collection[int],
    key: bytes | None,
    dry_run: bool,
    verified: tuple[int, str] | None,
) -> Collected:
    """Drop the records made before `before` (ISO 8601 in UTC, as the journal writes times)
    that may go, unless `dry_run`; what was (or would be) dropped. `verified` is the last
    link of the chain as a check of the whole journal found it holding, just before: only the
    links after it are checked here."""
    links = tx.select("SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq")
    stored = [stored_link(row) for row in links]
    _recheck(stored, verified, key)
    # Only what the plan reads, not arguments, snapshots and results: proxies wait meanwhile.
    rows = {
        table: tx.select(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")
        for table, columns in _PLANNED.items()
    }
    plan = _Plan(rows, before=before, keep=keep)
    dropped = plan.dropped()
    if not dropped:
        return Collected(
            before=before, dry_run=dry_run, unsettled=plan.unsettled, pinned=plan.pinned
        )
    cut = max(link.seq for link in stored if (link.table, link.row_id) in dropped)
    newest = {(link.table, link.row_id): link for link in stored if link.table != SUMMARY}
    carried = [
        key_
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
        unsettled=plan.unsettled,
        pinned=plan.pinned,
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
    for (table, _), record in zip(carried, _records(tx, carried), strict=True):
        link = next_link(last, table, record, key)
        _insert(tx, link)
        last = (link.seq, link.hash)
    return found


class _Plan:
    """Which records go, from every chained record of the journal."""

    def __init__(
        self, rows: dict[str, list[dict[str, Any]]], *, before: str, keep: Collection[int]
    ) -> None:
        checkpoints = {row["id"]: row for row in rows["checkpoints"]}
        missing = sorted(set(keep) - set(checkpoints))
        if missing:
            raise JournalError(
                f"no checkpoint {', '.join(map(str, missing))} in the journal to keep; "
                "`compensator log` lists them"
            )
        limit = min((checkpoints[n]["last_change_id"] for n in keep), default=None)
        first_kept = min(keep, default=None)
        undoing = {row["change_id"] for row in rows["compensations"]}
        old = [row for row in rows["changes"] if row["created_at"] < before]
        settled = [row for row in old if _settled(row, undoing)]
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
        self.decisions = {
            row["id"]: row
            for row in rows["decisions"]
            if row["created_at"] < before
            and (first_kept is None or row["last_checkpoint_id"] < first_kept)
        }

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


def _settled(change: dict[str, Any], undoing: set[int]) -> bool:
    """Undone, or its outcome recorded and no undo of it begun (a compensating step recorded
    for a change not undone is an undo that stopped midway, or is running)."""
    if change["undone_at"] is not None:
        return True
    return change["status"] in (Status.OK, Status.ERROR) and change["id"] not in undoing


def _recheck(stored: list[Link], verified: tuple[int, str] | None, key: bytes | None) -> None:
    """JournalError unless the chain still ends in `verified` or goes on from it soundly."""
    head: tuple[int, bytes] | None = None
    rest = stored
    if verified is not None:
        index = next((i for i, link in enumerate(stored) if link.seq == verified[0]), None)
        if index is None or stored[index].hash.hex() != verified[1]:
            raise JournalError(
                "the journal's chain changed while gc checked it (another gc?); nothing was "
                "dropped: run gc again"
            )
        head, rest = (stored[index].seq, stored[index].hash), stored[index + 1 :]
    for link in rest:
        problem = link_problem(link, head, key)
        if problem is not None:
            checked(Verdict(links=0, head=None, keyed=False, problem=problem, problems=1))
        head = (link.seq, link.hash)


_PLANNED = {
    "checkpoints": ("id", "created_at", "last_change_id"),
    "changes": ("id", "created_at", "status", "undone_at", "checkpoint_id"),
    "compensations": ("id", "change_id"),
    "decisions": ("id", "created_at", "last_checkpoint_id"),
}
"""The columns the plan reads of each chained table."""


def _records(tx: Tx, keys: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The chained columns of the records `keys` names, in that order."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for table, columns in CHAINED.items():
        ids = [row_id for name, row_id in keys if name == table]
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for row in tx.select(
                f"SELECT id, {', '.join(columns)} FROM {table} WHERE id IN ({marks})", chunk
            ):
                found[(table, row["id"])] = row
    return [found[key] for key in keys]


def _insert(tx: Tx, link: Link) -> None:
    tx.execute(
        "INSERT INTO chain (seq, tbl, row_id, state, keyed, hash, note) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        link.row(),
    )
