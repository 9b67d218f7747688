"""The journal's hash chain: every write to its records also appends a link that holds the
hash of the record as it stands after the write and the hash of the link before it, so that a
record changed, deleted or added afterwards by anything but a store is found by `verify`.

A link names the record (`table`, `row_id`) and holds `state`, the SHA-256 of the record's
chained columns after the write; its own `hash` covers its number, the link before it and
that. Holding the state's hash rather than the values keeps the chain small (about 90 bytes a
link, two links for most calls) and still catches any edit: the newest link of each record
must match the record as it is now. The hash is SHA-256, or HMAC-SHA256 when the journal key
(`$COMPENSATOR_JOURNAL_KEY`) is set, which someone who rewrites the whole chain cannot
recompute without the key. The stores append links inside the transaction of the write, in
commit order. Sessions (liveness bookkeeping) are not chained.

Pure: no I/O, no database; the stores read and write the links.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHAINED",
    "KEY_VARIABLE",
    "SUMMARY",
    "Link",
    "Verdict",
    "existing_links",
    "journal_key",
    "key_problem",
    "link_problem",
    "mixed_keys",
    "next_link",
    "stored_link",
    "summary_link",
    "verify",
]

KEY_VARIABLE = "COMPENSATOR_JOURNAL_KEY"
"""The environment variable whose value keys the chain's hashes (HMAC-SHA256) when set."""

GENESIS = bytes(32)
"""What the first link names as the hash before it."""

CHAINED: dict[str, tuple[str, ...]] = {
    "checkpoints": ("label", "created_at", "last_change_id", "session", "agent", "scope"),
    "changes": (
        "checkpoint_id",
        "tool",
        "classification",
        "status",
        "args",
        "snapshot",
        "snapshot_error",
        "result",
        "error",
        "pid",
        "created_at",
        "completed_at",
        "undone_at",
        "undo_note",
        "session",
        "agent",
        "scope",
        "post_state",
        "post_state_error",
        "redo_of",
        "undo_run",
    ),
    "compensations": (
        "change_id",
        "step",
        "tool",
        "args",
        "status",
        "result",
        "error",
        "created_at",
        "pid",
        "session",
    ),
    "decisions": (
        "tool",
        "classification",
        "args",
        "answer",
        "reason",
        "last_change_id",
        "last_checkpoint_id",
        "created_at",
        "session",
        "agent",
        "scope",
    ),
}
"""The tables whose records are chained, and their columns (besides `id`), in one order."""

_NOUNS = {
    "checkpoints": "checkpoint",
    "changes": "change",
    "compensations": "compensation",
    "decisions": "decision",
}

# Compact: a state's hash is over this text, so it must be the same on every machine.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


SUMMARY = "gc"
"""The `table` of a link that sums up the links `compensator gc` dropped before it: its
`note` (JSON) says what was dropped, and the number and hash of the last link dropped, from
which the links kept go on; its `state` is the note's SHA-256."""


@dataclass(frozen=True, kw_only=True)
class Link:
    """One link as stored: its number (from 1, in commit order), the record it wrote, the
    hash of that record's state after the write, whether its hash is keyed, its hash, and for
    a summary link its note."""

    seq: int
    table: str
    row_id: int
    state: bytes
    keyed: bool
    hash: bytes
    note: str | None = None

    def row(self) -> tuple[int, str, int, bytes, bool, bytes, str | None]:
        return (self.seq, self.table, self.row_id, self.state, self.keyed, self.hash, self.note)


def journal_key(environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The key from `$COMPENSATOR_JOURNAL_KEY`, or None when it is unset or empty."""
    value = environ.get(KEY_VARIABLE)
    return value.encode() if value else None


def state_hash(table: str, record: Mapping[str, Any]) -> bytes:
    """The SHA-256 of a record's chained columns (a column it lacks counts as NULL)."""
    values = [record.get(column) for column in CHAINED[table]]
    return hashlib.sha256(_ENCODER.encode(values).encode()).digest()


def _seal(seq: int, prev: bytes, table: str, row_id: int, state: bytes, key: bytes | None) -> bytes:
    message = b"%d\n%s\n%s\n%d\n%s" % (seq, prev, table.encode(), row_id, state)
    if key is None:
        return hashlib.sha256(message).digest()
    return hmac.new(key, message, hashlib.sha256).digest()


def next_link(
    last: tuple[int, bytes] | None,
    table: str,
    record: Mapping[str, Any],
    key: bytes | None,
) -> Link:
    """The link after `last` (its number and hash; None for the first link) for a write that
    left `record` (its `id` and chained columns) in `table`."""
    seq, prev = (1, GENESIS) if last is None else (last[0] + 1, bytes(last[1]))
    row_id, state = int(record["id"]), state_hash(table, record)
    return Link(
        seq=seq,
        table=table,
        row_id=row_id,
        state=state,
        keyed=key is not None,
        hash=_seal(seq, prev, table, row_id, state, key),
    )


def summary_link(
    last: tuple[int, bytes], dropped: tuple[int, bytes], what: Mapping[str, Any], key: bytes | None
) -> Link:
    """The link after `last` that says links up to `dropped` (its number and hash) were
    dropped, with `what` (counts, the cutoff) for a person."""
    note = _ENCODER.encode({**what, "last_link": dropped[0], "last_hash": dropped[1].hex()})
    seq, prev = last[0] + 1, bytes(last[1])
    state = hashlib.sha256(note.encode()).digest()
    return Link(
        seq=seq,
        table=SUMMARY,
        row_id=dropped[0],
        state=state,
        keyed=key is not None,
        hash=_seal(seq, prev, SUMMARY, dropped[0], state, key),
        note=note,
    )


def existing_links(
    rows: Mapping[str, Iterable[Mapping[str, Any]]], key: bytes | None
) -> list[Link]:
    """Links for the records already in a journal that had no chain yet (a journal migrated
    to the version that brought it): table by table in `CHAINED`'s order, by id."""
    links: list[Link] = []
    last: tuple[int, bytes] | None = None
    for table in CHAINED:
        for row in rows.get(table, ()):
            link = next_link(last, table, row, key)
            links.append(link)
            last = (link.seq, link.hash)
    return links


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What `verify` found: how many links, the last one's number and hash (hex), whether
    they are keyed, and the first problem in words with how many there are (none: the chain
    holds)."""

    links: int
    head: tuple[int, str] | None
    keyed: bool
    problem: str | None = None
    problems: int = 0

    @property
    def holds(self) -> bool:
        return self.problem is None


def verify(
    links: Iterable[Mapping[str, Any]],
    rows: Mapping[str, Iterable[Mapping[str, Any]]],
    key: bytes | None,
) -> Verdict:
    """Check the links (in `seq` order) against each other, then the records in `rows` (per
    table, each with `id` and `CHAINED`'s columns) against the newest link of each."""
    stored = [stored_link(row) for row in links]
    newest: dict[tuple[str, int], Link] = {}
    count, keyed = 0, False
    head = _start(stored)
    for link in stored:
        problem = link_problem(link, head, key)
        if problem is not None:
            shown = None if count == 0 or head is None else (head[0], head[1].hex())
            return Verdict(links=count, head=shown, keyed=keyed, problem=problem, problems=1)
        if link.table != SUMMARY:
            newest[(link.table, link.row_id)] = link
        count, head, keyed = count + 1, (link.seq, link.hash), keyed or link.keyed
    found = _record_problems(newest, rows)
    return Verdict(
        links=count,
        head=None if head is None or count == 0 else (head[0], head[1].hex()),
        keyed=keyed,
        problem=found[0] if found else None,
        problems=len(found),
    )


def stored_link(row: Mapping[str, Any]) -> Link:
    """A link as the `chain` table holds it (its columns by name)."""
    return Link(
        seq=int(row["seq"]),
        table=row["tbl"],
        row_id=int(row["row_id"]),
        state=bytes(row["state"]),
        keyed=bool(row["keyed"]),
        hash=bytes(row["hash"]),
        note=row["note"],
    )


def key_problem(newest: list[Mapping[str, Any]], key: bytes | None) -> str | None:
    """Whether a store may write links with `key` after `newest` (the last two stored links,
    newest first): a keyed chain needs its key, an unkeyed one no key. In words; None: yes.
    Every process that writes a journal must agree, or its chain breaks for good."""
    if not newest:
        return None
    head = stored_link(newest[0])
    mixed = mixed_keys(head.keyed, key)
    if mixed is not None:
        return mixed
    if key is None:
        return None
    before = [stored_link(row) for row in newest[1:]]
    if head.seq == 1:
        prev = GENESIS
    elif before and before[0].seq == head.seq - 1:
        prev = before[0].hash
    else:  # the first link left after a gc: its summary names the one before it
        start = _start([head])
        if start is None:
            return None
        prev = start[1]
    if _seal(head.seq, prev, head.table, head.row_id, head.state, key) != head.hash:
        return f"{KEY_VARIABLE} is not the key the journal's hash chain was written with"
    return None


def mixed_keys(last_keyed: bool, key: bytes | None) -> str | None:
    """Why a link with `key` may not follow one whose `keyed` is `last_keyed`; None: it may.
    Checked at every write too: two processes that opened an empty journal with different
    keys would otherwise break its chain for good with their first writes."""
    if last_keyed and key is None:
        return (
            f"the journal's hash chain is keyed: set {KEY_VARIABLE} to the key it was written "
            "with (every process that writes the journal needs it: serve, undo, redo, gc)"
        )
    if not last_keyed and key is not None:
        return (
            f"{KEY_VARIABLE} is set, but the journal's hash chain is not keyed: unset it for "
            "this journal, or start a new journal with it set"
        )
    return None


def _start(links: list[Link]) -> tuple[int, bytes] | None:
    """The number and hash the first stored link follows: none (it is link 1), or the last
    link a summary after it says was dropped (a journal `gc` went over)."""
    if not links or links[0].seq == 1:
        return None
    for link in links:
        if link.table == SUMMARY and link.note is not None:
            try:
                note = json.loads(link.note)
                dropped = (int(note["last_link"]), bytes.fromhex(note["last_hash"]))
            except (ValueError, KeyError, TypeError):
                continue
            if dropped[0] == links[0].seq - 1:
                return dropped
    return None


def link_problem(link: Link, head: tuple[int, bytes] | None, key: bytes | None) -> str | None:
    """What is wrong with `link` coming after `head` (the number and hash of the link before
    it; None: it should be the first), in words; None when nothing is."""
    expected = 1 if head is None else head[0] + 1
    if link.seq != expected:
        missing = "the first" if head is None else f"link {expected}"
        return f"link {link.seq} comes where {missing} should be: links were removed"
    if link.table not in CHAINED and link.table != SUMMARY:
        return f"link {link.seq} names {link.table!r}, which is not a table the journal chains"
    if link.table == SUMMARY and (
        link.note is None or hashlib.sha256(link.note.encode()).digest() != link.state
    ):
        return f"link {link.seq} sums up links gc dropped, and its note was changed"
    if link.keyed and key is None:
        return (
            f"link {link.seq} is keyed: set {KEY_VARIABLE} to the key the journal was "
            "written with to check it"
        )
    if not link.keyed and key is not None:
        return (
            f"link {link.seq} is not keyed, but {KEY_VARIABLE} is set: it was written "
            "without the key, or rewritten by someone who lacked it"
        )
    prev = GENESIS if head is None else head[1]
    sealed = _seal(link.seq, prev, link.table, link.row_id, link.state, key)
    if not hmac.compare_digest(sealed, link.hash):
        why = "changed, or the key is not the one it was written with" if key else "changed"
        return f"link {link.seq} does not match its hash: it, or the link before it, was {why}"
    return None


def _record_problems(
    newest: Mapping[tuple[str, int], Link], rows: Mapping[str, Iterable[Mapping[str, Any]]]
) -> list[str]:
    """Every record that differs from its newest link, is missing, or has none; the first by
    the number of the link concerned (records no link wrote come last)."""
    found: list[tuple[float, str]] = []
    seen: set[tuple[str, int]] = set()
    for table in CHAINED:
        for row in rows.get(table, ()):
            key = (table, int(row["id"]))
            seen.add(key)
            name = f"{_NOUNS[table]} {key[1]}"
            link = newest.get(key)
            if link is None:
                added = f"{name} is in no link: something other than compensator added it"
                found.append((float("inf"), added))
            elif state_hash(table, row) != link.state:
                found.append((link.seq, f"{name} was changed after link {link.seq} wrote it"))
    for key, link in newest.items():
        if key not in seen:
            name = f"{_NOUNS[key[0]]} {key[1]}"
            deleted = f"{name} is missing: link {link.seq} wrote it, and it was deleted"
            found.append((link.seq, deleted))
    return [text for _, text in sorted(found, key=lambda item: item[0])]
