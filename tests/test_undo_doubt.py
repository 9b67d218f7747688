"""The in-doubt rule and the cross-process claim, on a real journal file with a scripted caller
standing in for the servers (the end-to-end versions with SIGKILL are in test_crash.py)."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compensator.journal import SCHEMA_VERSION, Intent, Status
from compensator.journal import SQLiteJournal as Journal
from compensator.proxy import CallOutcome, Undoer
from compensator.registry import parse_registry

REGISTRY = """\
servers:
  s: {command: x}
tools:
  s__put:
    classification: compensable
    snapshot_tool: s__get
    snapshot_args: {key: "{args.key}"}
    inverse_tool: s__set
    inverse_args: {key: "{args.key}", value: "{snapshot}"}
    verify: VERIFY
  s__set: {classification: irreversible, idempotent: IDEMPOTENT}
  s__get: {classification: read}
"""

pytestmark = pytest.mark.anyio


class Servers:
    """Answers s__set and s__get from a dict, and counts every compensating call."""

    def __init__(self) -> None:
        self.store: dict[str, Any] = {"k": "after"}
        self.sets: list[dict[str, Any]] = []

    async def __call__(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        if name == "s__get":
            return CallOutcome(ok=True, value=self.store.get(arguments["key"]))
        self.sets.append(arguments)
        self.store[arguments["key"]] = arguments["value"]
        return CallOutcome(ok=True, value={})


_OPENED: list[Journal] = []
"""Journals a test opened, closed after it (Python 3.13 warns about an unclosed database)."""


def opened(journal: Journal) -> Journal:
    _OPENED.append(journal)
    return journal


@pytest.fixture(autouse=True)
def close_journals() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


def setup(tmp_path: Path, *, verify: bool = False, idempotent: bool = False):
    text = REGISTRY.replace("VERIFY", str(verify).lower())
    text = text.replace("IDEMPOTENT", str(idempotent).lower())
    registry = parse_registry(text, tmp_path / "r.yaml")
    journal = opened(Journal(tmp_path / "j.db"))
    cp = journal.create_checkpoint(None)
    change = journal.record_intent(
        Intent(tool="s__put", classification="compensable", args={"key": "k"}, snapshot="before")
    )
    journal.record_outcome(change, status=Status.OK, result={})
    if verify:
        journal.record_post_state(change, {"content": "after"})
    return registry, journal, cp, change


def gone_session() -> str:
    """A session that has ended: no process holds its lock (it never had one)."""
    return uuid.uuid4().hex


def leave_in_flight(journal: Journal, change: int, session: str) -> None:
    """What a process killed mid-compensation leaves: a step `started`, never finished.
    Its pid is this live process's: a pid that was handed out again must not matter."""
    journal.record_step_started(change, 0, "s__set", {"key": "k", "value": "before"})
    with sqlite3.connect(journal.path) as conn:
        conn.execute("UPDATE compensations SET session = ?, pid = ?", (session, os.getpid()))
    conn.close()


async def test_an_in_doubt_step_is_reported_not_rerun(tmp_path):
    registry, journal, cp, change = setup(tmp_path)
    leave_in_flight(journal, change, gone_session())
    servers = Servers()
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id)
    [skipped] = report.skipped
    assert skipped["reason"].startswith("in doubt: compensating call s__set (step 1)")
    assert "force=true" in skipped["reason"]
    assert servers.sets == []
    assert [c.id for c in journal.open_changes(cp)] == [change]


async def test_force_reruns_an_in_doubt_step_once(tmp_path):
    registry, journal, cp, change = setup(tmp_path)
    leave_in_flight(journal, change, gone_session())
    servers = Servers()
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id, force=True)
    assert [e["id"] for e in report.undone] == [change]
    again = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id, force=True)
    assert again.undone == again.skipped == []
    assert servers.sets == [{"key": "k", "value": "before"}]


async def test_an_idempotent_compensating_tool_is_rerun(tmp_path):
    registry, journal, cp, change = setup(tmp_path, idempotent=True)
    leave_in_flight(journal, change, gone_session())
    servers = Servers()
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id)
    assert [e["id"] for e in report.undone] == [change]
    assert servers.sets == [{"key": "k", "value": "before"}]


async def test_verify_reruns_when_the_state_shows_it_did_not_apply(tmp_path):
    registry, journal, cp, change = setup(tmp_path, verify=True)
    leave_in_flight(journal, change, gone_session())
    servers = Servers()  # still "after": the interrupted call never reached the store
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id)
    assert [e["id"] for e in report.undone] == [change]
    assert servers.store == {"k": "before"}


async def test_verify_does_not_rerun_when_the_state_moved(tmp_path):
    registry, journal, cp, change = setup(tmp_path, verify=True)
    leave_in_flight(journal, change, gone_session())
    servers = Servers()
    servers.store["k"] = "before"  # the interrupted call did apply
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id)
    assert report.skipped[0]["reason"].startswith("in doubt:")
    assert servers.sets == []


async def test_a_step_a_live_process_is_running_is_left_to_it(tmp_path):
    registry, journal, cp, change = setup(tmp_path, idempotent=True)
    other = opened(Journal(journal.path))  # another live session on the same file
    leave_in_flight(journal, change, other.session)
    servers = Servers()
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id, force=True)
    assert report.skipped[0]["reason"] == (
        f"being compensated by another live process (session {other.session[:8]}, pid "
        f"{os.getpid()}; `compensator log --sessions` says on which host); undo again once it "
        "has finished"
    )
    assert servers.sets == []
    other.close()  # it ends without finishing: the step is in doubt, and force re-runs it
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id, force=True)
    assert [e["id"] for e in report.undone] == [change]
    assert servers.sets == [{"key": "k", "value": "before"}]


def test_a_step_claim_fails_when_another_process_recorded_it_first(tmp_path):
    _, journal, _, change = setup(tmp_path)
    other = opened(Journal(journal.path))  # a second process on the same file
    first = other.record_step_started(change, 0, "s__set", {}, after=None)
    assert first is not None
    assert journal.record_step_started(change, 0, "s__set", {}, after=None) is None
    assert journal.record_step_started(change, 0, "s__set", {}, after=first) is not None


def test_a_version_1_journal_is_migrated_and_its_checkpoints_still_undo(tmp_path):
    from compensator.journal.sqlite import MIGRATIONS

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        for statement in MIGRATIONS[0].split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("PRAGMA user_version=1")
        conn.execute("INSERT INTO checkpoints VALUES (1, 'old', '2026-01-01', 0)")
        conn.execute(
            "INSERT INTO changes (checkpoint_id, tool, classification, status, args, pid, "
            "created_at) VALUES (1, 's__put', 'compensable', 'ok', '{}', ?, '2026-01-01')",
            (os.getpid(),),
        )
    conn.close()
    journal = opened(Journal(path))
    assert journal.pragma("user_version") == SCHEMA_VERSION
    old = journal.checkpoint(1)
    assert old is not None and old.session is None
    assert [c.tool for c in journal.open_changes(old)] == ["s__put"]
    journal.create_checkpoint("new")
    assert [c.tool for c in journal.open_changes(old)] == ["s__put"]


async def test_a_classification_this_version_does_not_know_is_refused_by_name(tmp_path):
    registry, journal, cp, _ = setup(tmp_path)
    newer = journal.record_intent(Intent(tool="s__put", classification="quarantined", args={}))
    journal.record_outcome(newer, status=Status.OK, result={})
    servers = Servers()
    report = await Undoer(journal, registry, servers, agent=None).undo_to(cp.id, dry_run=True)
    [skipped] = report.skipped
    assert skipped["id"] == newer
    assert "records classification 'quarantined'" in skipped["reason"]
    assert servers.sets == []
