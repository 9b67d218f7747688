"""The journal on its own: durability rules, schema version, recovery of abandoned calls."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from compensator.errors import JournalError
from compensator.journal import (
    SCHEMA_VERSION,
    Answer,
    Intent,
    Status,
    StepOutcome,
    StepStatus,
    default_journal_path,
)
from compensator.journal import SQLiteJournal as Journal

from .faults import tally


@pytest.fixture
def open_journal():
    """Open journals and close them all afterwards (3.13 warns about unclosed connections)."""
    opened: list[Journal] = []

    def open_(path: Path) -> Journal:
        opened.append(Journal(path))
        return opened[-1]

    yield open_
    for journal in opened:
        journal.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_new_journal_is_private_versioned_and_in_wal_mode(tmp_path: Path):
    journal = Journal(tmp_path / "sub" / "j.db")
    journal.close()
    path = tmp_path / "sub" / "j.db"
    assert path.stat().st_mode & 0o777 == 0o600
    db = raw(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_newer_schema_is_refused_with_advice(tmp_path: Path, read_only: bool):
    path = tmp_path / "j.db"
    Journal(path).close()
    db = raw(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(JournalError, match="Upgrade mcp-compensator"):
        Journal(path, read_only=read_only)


def test_changes_after_a_checkpoint_newest_first(tmp_path: Path, open_journal):
    journal = open_journal(tmp_path / "j.db")
    early = journal.record_intent(Intent(tool="s__a", classification="reversible", args={"n": 1}))
    journal.record_outcome(early, status=Status.OK, result={"id": 1})
    cp = journal.create_checkpoint("cp")
    late = journal.record_intent(Intent(tool="s__b", classification="compensable", args={"n": 2}))
    assert [c.id for c in journal.open_changes()] == [late, early]
    assert [c.id for c in journal.open_changes(cp)] == [late]
    assert journal.change(late).checkpoint_id == cp.id
    assert journal.change(late).status == Status.PENDING
    assert journal.change(early).result == {"id": 1}


def test_undone_is_recorded_with_its_compensation(tmp_path: Path, open_journal):
    journal = open_journal(tmp_path / "j.db")
    change = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    step = journal.record_step_started(change, 0, "s__undo", {"id": 1})
    assert [c.status for c in journal.compensations(change)] == ["started"]
    assert journal.open_changes()[0].id == change  # started is not done
    journal.record_step_outcome(
        step, StepOutcome(status=StepStatus.OK, result={}), undone=(change, "compensated")
    )
    assert journal.open_changes() == []
    assert journal.change(change).undo_note == "compensated"
    assert [c.status for c in journal.compensations(change)] == ["ok"]


_DIES_WITH_A_PENDING_CALL = """
import os, sys
from compensator.journal import Intent, SQLiteJournal
journal = SQLiteJournal(sys.argv[1])
change = journal.record_intent(Intent(tool="s__b", classification="reversible", args={}))
journal.record_step_started(int(sys.argv[2]), 0, "s__undo", {})
print(change, journal.session, flush=True)
os._exit(0)  # no close(): as a killed proxy, it never says it ended
"""


def _die_with_a_pending_call(path: Path, change_to_claim: int) -> tuple[int, str]:
    """A session in another process that records a call and starts a compensating step, then
    dies; its change id and session."""
    done = subprocess.run(
        [sys.executable, "-c", _DIES_WITH_A_PENDING_CALL, str(path), str(change_to_claim)],
        capture_output=True,
        text=True,
        check=True,
    )
    change, session = done.stdout.split()
    return int(change), session


@pytest.mark.parametrize("pid", ["dead", "reused"])
def test_calls_pending_in_a_dead_process_become_unknown(tmp_path: Path, open_journal, pid: str):
    path = tmp_path / "j.db"
    journal = open_journal(path)
    mine = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    journal.record_outcome(mine, status=Status.OK)
    pending = journal.record_intent(Intent(tool="s__c", classification="reversible", args={}))
    orphan, session = _die_with_a_pending_call(path, mine)
    if pid == "reused":
        # The dead process's id now belongs to a live process (this one): pid 1 in one
        # container is pid 1 in the next, and a busy host hands ids out again.
        db = raw(path)
        db.execute("UPDATE changes SET pid = ? WHERE id = ?", (os.getpid(), orphan))
        db.execute("UPDATE compensations SET pid = ? WHERE change_id = ?", (os.getpid(), mine))
        db.execute("UPDATE sessions SET pid = ? WHERE id = ?", (os.getpid(), session))
        db.close()
    (step,) = journal.compensations(mine)
    assert step.status == StepStatus.STARTED and step.session == session
    assert not journal.started_elsewhere(step), "a dead session's step counts as running"
    assert journal.recover_abandoned() == 1
    assert journal.change(orphan).status == Status.UNKNOWN
    assert "stopped before the outcome" in journal.change(orphan).error
    assert journal.change(pending).status == Status.PENDING  # this process is alive
    reopened = open_journal(path)
    assert reopened.change(pending).status == Status.PENDING, "a live session's call was settled"
    if pid == "reused":
        tally("pid reuse", injected=1, survived=1)


def test_a_live_sessions_step_is_started_elsewhere_for_another_store(tmp_path, open_journal):
    path = tmp_path / "j.db"
    first, second = open_journal(path), open_journal(path)
    change = first.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    first.record_outcome(change, status=Status.OK)
    first.record_step_started(change, 0, "s__undo", {})
    (step,) = second.compensations(change)
    assert second.started_elsewhere(step)
    assert not first.started_elsewhere(step)
    first.close()
    assert not second.started_elsewhere(step), "a closed session still counts as running"


def test_a_restarted_session_continues_its_agent_and_concurrent_ones_do_not(tmp_path, open_journal):
    path = tmp_path / "j.db"
    first = Journal(path)
    agent = first.agent
    checkpoint = first.create_checkpoint("before")
    first.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    first.close()
    second = open_journal(path)  # started after the first ended: the same agent
    assert second.agent == agent and second.session != first.session
    later = second.record_intent(Intent(tool="s__b", classification="reversible", args={}))
    concurrent = open_journal(path)  # while the second runs: another agent
    assert concurrent.agent not in (None, agent)
    theirs = concurrent.record_intent(Intent(tool="s__c", classification="reversible", args={}))
    named = Journal(path, agent="team")
    assert named.agent == "team"
    named.close()
    again = Journal(path, agent="team")
    assert again.agent == "team"
    again.close()
    assert [c.tool for c in second.open_changes(checkpoint, agent=agent)] == ["s__b", "s__a"]
    assert [c.id for c in second.open_changes(checkpoint, agent=concurrent.agent)] == [theirs]
    assert len(second.open_changes(checkpoint)) == 3  # every agent's
    assert second.change(later).agent == agent
    assert [cp.id for cp in second.checkpoints(agent)] == [checkpoint.id]
    assert second.checkpoints(concurrent.agent) == []
    person = Journal(path, person=True)
    assert person.agent is None
    person.close()
    # A person's session is never continued: the next proxy is still the first agent's.
    second.close()
    assert open_journal(path).agent == agent


def test_a_journal_of_schema_2_migrates_with_each_old_session_an_agent(tmp_path: Path):
    path = tmp_path / "j.db"
    db = raw(path)
    from compensator.journal.sqlite import MIGRATIONS

    for number, script in enumerate(MIGRATIONS[:2], 1):
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version={number}")
    db.execute(
        "INSERT INTO checkpoints (label, created_at, last_change_id, session) "
        "VALUES ('old', '2026-01-01T00:00:00+00:00', 0, 'aaaa')"
    )
    db.execute(
        "INSERT INTO changes (checkpoint_id, tool, classification, status, args, pid, "
        "created_at, session) VALUES (1, 's__a', 'reversible', 'ok', '{}', 1, "
        "'2026-01-01T00:00:01+00:00', 'aaaa')"
    )
    db.close()
    journal = Journal(path)
    try:
        assert journal.agent == "aaaa", "the old session's agent is continued"
        checkpoint = journal.checkpoint(1)
        assert checkpoint is not None and checkpoint.agent == "aaaa"
        assert [c.tool for c in journal.open_changes(checkpoint, agent="aaaa")] == ["s__a"]
    finally:
        journal.close()


def test_a_write_the_journal_cannot_take_says_what_to_do(tmp_path: Path):
    path = tmp_path / "j.db"
    writer = Journal(path)
    writer.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    writer.close()
    # A read-only connection stands in for a read-only file, since root ignores file modes.
    reader = Journal(path, read_only=True)
    try:
        with pytest.raises(JournalError, match="the journal file is read-only"):
            reader.create_checkpoint("x")
        with pytest.raises(JournalError, match="the journal file is read-only"):
            reader.record_intent(Intent(tool="s__b", classification="reversible", args={}))
    finally:
        reader.close()
    again = Journal(path)
    try:
        assert [c.tool for c in again.open_changes()] == ["s__a"], "the refusal lost a change"
    finally:
        again.close()
    tally("journal read-only", injected=2, survived=2)
    full = Journal(path)
    try:
        # SQLite's own limit on the file's size: the writes fail as on a full disk.
        pages = full.pragma("page_count")
        full._db.execute(f"PRAGMA max_page_count={pages}")
        with pytest.raises(JournalError, match="the journal's disk is full"):
            for _ in range(1000):
                full.record_intent(
                    Intent(tool="s__a", classification="reversible", args={"n": "x" * 4000})
                )
        assert not full._db.in_transaction, "the failed write left its transaction open"
        full._db.execute(f"PRAGMA max_page_count={pages * 100}")
        assert full.create_checkpoint("after").id == 1, "the journal cannot write again"
    finally:
        full.close()


def test_default_path_is_per_registry_and_overridable(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("COMPENSATOR_DB", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    one = default_journal_path(tmp_path / "a" / "reg.yaml")
    two = default_journal_path(tmp_path / "b" / "reg.yaml")
    assert one.parent == tmp_path / "state" / "mcp-compensator"
    assert one.name.startswith("reg-") and one != two
    monkeypatch.setenv("COMPENSATOR_DB", str(tmp_path / "explicit.db"))
    assert default_journal_path(tmp_path / "a" / "reg.yaml") == tmp_path / "explicit.db"


def test_a_file_that_is_not_a_journal_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(JournalError, match=r"cannot use journal .*notes\.txt"):
        Journal(path)
    assert path.read_text().startswith("these are my notes")


def test_read_only_never_creates_a_journal(tmp_path: Path):
    missing = tmp_path / "sub" / "j.db"
    with pytest.raises(JournalError, match=r"no journal at .*j\.db"):
        Journal(missing, read_only=True)
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    raw(empty).close()
    with pytest.raises(JournalError, match="not a journal written by compensator"):
        Journal(empty, read_only=True)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    with pytest.raises(JournalError, match=r"cannot read journal .*notes\.txt"):
        Journal(notes, read_only=True)


def test_read_only_sees_a_live_writer_and_changes_nothing(tmp_path: Path, open_journal):
    path = tmp_path / "j.db"
    writer = open_journal(path)
    orphan = writer.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    db = raw(path)
    db.execute("UPDATE changes SET pid = ? WHERE id = ?", (2**22 + 12345, orphan))
    db.close()
    reader = Journal(path, read_only=True)
    try:
        # No recovery on a read-only open: the abandoned call is left for the proxy to settle.
        assert reader.change(orphan).status == Status.PENDING
        later = writer.record_intent(Intent(tool="s__b", classification="reversible", args={}))
        assert [c.id for c in reader.open_changes()] == [later, orphan]
        with pytest.raises(JournalError, match="readonly"):
            reader.create_checkpoint("nope")
    finally:
        reader.close()
    assert writer.checkpoints() == []


def test_fsync_chooses_full_synchronous_and_the_default_is_normal(tmp_path, open_journal):
    # 1 = NORMAL, 2 = FULL (https://sqlite.org/pragma.html#pragma_synchronous)
    assert open_journal(tmp_path / "a.db").pragma("synchronous") == 1
    full = Journal(tmp_path / "b.db", fsync=True)
    try:
        assert full.pragma("synchronous") == 2
    finally:
        full.close()


KILL_AFTER_INTENT = """
import os, signal, sys
from compensator.journal import Intent, open_journal
journal = open_journal(sys.argv[1])
for n in range(int(sys.argv[2])):
    journal.record_intent(Intent(tool="t__x", classification="reversible", args={"n": n}))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_intents_committed_before_a_sigkill_survive_it(tmp_path, open_journal):
    # The default synchronous=NORMAL: a commit is with the OS before record_intent returns.
    path = tmp_path / "j.db"
    done = subprocess.run([sys.executable, "-c", KILL_AFTER_INTENT, str(path), "25"], check=False)
    assert done.returncode == -9
    changes = open_journal(path).all_changes()  # opening marks the dead process's rows
    assert [c.args["n"] for c in changes] == list(range(24, -1, -1))
    assert {c.status for c in changes} == {Status.UNKNOWN}


def test_decisions_are_kept_apart_from_changes_and_filtered(tmp_path: Path, open_journal):
    journal = open_journal(tmp_path / "j.db")
    before = journal.create_checkpoint("before")
    approved = journal.record_decision(
        tool="s__drop", classification="irreversible", args={"t": 1}, answer=Answer.APPROVED
    )
    change = journal.record_intent(Intent(tool="s__drop", classification="irreversible", args={}))
    checkpoint = journal.create_checkpoint("after")
    declined = journal.record_decision(
        tool="s__drop",
        classification="irreversible",
        args={"t": 2},
        answer=Answer.DECLINED,
        reason="declined by the person",
    )
    assert declined > approved
    newest, oldest = journal.decisions()
    assert (newest.id, newest.answer, newest.args, newest.reason) == (
        declined,
        "declined",
        {"t": 2},
        "declined by the person",
    )
    assert (newest.last_change_id, newest.last_checkpoint_id) == (change, checkpoint.id)
    assert (oldest.last_change_id, oldest.last_checkpoint_id) == (0, before.id)
    assert newest.refused and not oldest.refused
    assert newest.agent == journal.agent and newest.session == journal.session
    assert [d.id for d in journal.decisions(refused=True)] == [declined]
    assert [d.id for d in journal.decisions(checkpoint)] == [declined]
    assert [d.id for d in journal.decisions(before)] == [declined, approved]
    assert journal.decisions(agent="someone else") == []
    # Undo sees changes only: a decision is never one.
    assert [c.id for c in journal.open_changes()] == [change]


def test_a_journal_of_schema_3_migrates_and_keeps_its_changes(tmp_path: Path):
    path = tmp_path / "j.db"
    db = raw(path)
    from compensator.journal.sqlite import MIGRATIONS

    for number, script in enumerate(MIGRATIONS[:3], 1):
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version={number}")
    db.execute(
        "INSERT INTO changes (tool, classification, status, args, pid, created_at, session, "
        "agent) VALUES ('s__a', 'reversible', 'ok', '{}', 1, '2026-01-01T00:00:01+00:00', "
        "'aaaa', 'aaaa')"
    )
    db.close()
    journal = Journal(path)
    try:
        assert journal.pragma("user_version") == SCHEMA_VERSION == 5
        assert journal.decisions() == []
        journal.record_decision(
            tool="s__a", classification="reversible", args={}, answer=Answer.DENIED
        )
        (decision,) = journal.decisions(refused=True)
        assert (decision.tool, decision.last_change_id) == ("s__a", 1)
        assert [c.tool for c in journal.open_changes()] == ["s__a"]
    finally:
        journal.close()
