"""The journal on its own: durability rules, schema version, recovery of abandoned calls."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from compensator.errors import JournalError
from compensator.journal import (
    SCHEMA_VERSION,
    Intent,
    Status,
    StepOutcome,
    StepStatus,
    default_journal_path,
)
from compensator.journal import SQLiteJournal as Journal


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


def test_calls_pending_in_a_dead_process_become_unknown(tmp_path: Path, open_journal):
    path = tmp_path / "j.db"
    journal = open_journal(path)
    mine = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = journal.record_intent(Intent(tool="s__b", classification="reversible", args={}))
    db = raw(path)
    db.execute("UPDATE changes SET pid = ? WHERE id = ?", (int(dead.stdout), orphan))
    db.close()
    reopened = open_journal(path)
    assert reopened.change(orphan).status == Status.UNKNOWN
    assert "stopped before the outcome" in reopened.change(orphan).error
    assert reopened.change(mine).status == Status.PENDING  # this process is alive


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
