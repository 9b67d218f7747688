"""The journal on its own: durability rules, schema version, recovery of abandoned calls."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from compensator.errors import JournalError
from compensator.journal import (
    SCHEMA_VERSION,
    Answer,
    Intent,
    JournalStore,
    Status,
    StepOutcome,
    StepStatus,
    default_journal_path,
)
from compensator.journal import SQLiteJournal as Journal
from compensator.journal import open_journal as open_store

from .faults import tally
from .journals import raw, sql, target


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


def test_changes_after_a_checkpoint_newest_first(address: str, open_journal):
    journal = open_journal(address)
    early = journal.record_intent(Intent(tool="s__a", classification="reversible", args={"n": 1}))
    journal.record_outcome(early, status=Status.OK, result={"id": 1})
    cp = journal.create_checkpoint("cp")
    late = journal.record_intent(Intent(tool="s__b", classification="compensable", args={"n": 2}))
    assert [c.id for c in journal.open_changes()] == [late, early]
    assert [c.id for c in journal.open_changes(cp)] == [late]
    assert journal.change(late).checkpoint_id == cp.id
    assert journal.change(late).status == Status.PENDING
    assert journal.change(early).result == {"id": 1}


def test_undone_is_recorded_with_its_compensation(address: str, open_journal):
    journal = open_journal(address)
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
from compensator.journal import Intent, open_journal
journal = open_journal(sys.argv[1])
change = journal.record_intent(Intent(tool="s__b", classification="reversible", args={}))
journal.record_step_started(int(sys.argv[2]), 0, "s__undo", {})
print(change, journal.session, flush=True)
os._exit(0)  # no close(): as a killed proxy, it never says it ended
"""


def _die_with_a_pending_call(path: str, change_to_claim: int) -> tuple[int, str]:
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
def test_calls_pending_in_a_dead_process_become_unknown(address: str, open_journal, pid: str):
    path = address
    journal = open_journal(path)
    mine = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    journal.record_outcome(mine, status=Status.OK)
    pending = journal.record_intent(Intent(tool="s__c", classification="reversible", args={}))
    orphan, session = _die_with_a_pending_call(path, mine)
    if pid == "reused":
        # The dead process's id now belongs to a live process (this one): pid 1 in one
        # container is pid 1 in the next, and a busy host hands ids out again.
        sql(path, "UPDATE changes SET pid = ? WHERE id = ?", (os.getpid(), orphan))
        sql(path, "UPDATE compensations SET pid = ? WHERE change_id = ?", (os.getpid(), mine))
        sql(path, "UPDATE sessions SET pid = ? WHERE id = ?", (os.getpid(), session))
    (step,) = journal.compensations(mine)
    assert step.status == StepStatus.STARTED and step.session == session
    # On PostgreSQL the session is dead once its server backend has seen the connection end
    # and let go of the session's lock, a moment after the process exited.
    deadline = time.monotonic() + 30
    while journal.started_elsewhere(step):
        assert time.monotonic() < deadline, "a dead session's step counts as running"
        time.sleep(0.05)
    assert journal.recover_abandoned() == 1
    assert journal.change(orphan).status == Status.UNKNOWN
    assert "stopped before the outcome" in journal.change(orphan).error
    assert journal.change(pending).status == Status.PENDING  # this process is alive
    reopened = open_journal(path)
    assert reopened.change(pending).status == Status.PENDING, "a live session's call was settled"
    if pid == "reused":
        tally("pid reuse", injected=1, survived=1)


def test_a_live_sessions_step_is_started_elsewhere_for_another_store(address, open_journal):
    path = address
    first, second = open_journal(path), open_journal(path)
    change = first.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    first.record_outcome(change, status=Status.OK)
    first.record_step_started(change, 0, "s__undo", {})
    (step,) = second.compensations(change)
    assert second.started_elsewhere(step)
    assert not first.started_elsewhere(step)
    first.close()
    assert not second.started_elsewhere(step), "a closed session still counts as running"


def test_a_restarted_session_continues_its_agent_and_concurrent_ones_do_not(address, open_journal):
    path = address
    first = open_store(target(path))
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
    named = open_store(target(path), agent="team")
    assert named.agent == "team"
    named.close()
    again = open_store(target(path), agent="team")
    assert again.agent == "team"
    again.close()
    assert [c.tool for c in second.open_changes(checkpoint, agent=agent)] == ["s__b", "s__a"]
    assert [c.id for c in second.open_changes(checkpoint, agent=concurrent.agent)] == [theirs]
    assert len(second.open_changes(checkpoint)) == 3  # every agent's
    assert second.change(later).agent == agent
    assert [cp.id for cp in second.checkpoints(agent)] == [checkpoint.id]
    assert second.checkpoints(concurrent.agent) == []
    person = open_store(target(path), person=True)
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


def test_read_only_sees_a_live_writer_and_changes_nothing(address: str, open_journal):
    path = address
    writer = open_journal(path)
    orphan = writer.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    sql(path, "UPDATE changes SET pid = ? WHERE id = ?", (2**22 + 12345, orphan))
    reader = open_store(target(path), read_only=True)
    try:
        # No recovery on a read-only open: the abandoned call is left for the proxy to settle.
        assert reader.change(orphan).status == Status.PENDING
        later = writer.record_intent(Intent(tool="s__b", classification="reversible", args={}))
        assert [c.id for c in reader.open_changes()] == [later, orphan]
        with pytest.raises(JournalError, match=r"read-?only"):
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


def test_intents_committed_before_a_sigkill_survive_it(address: str, open_journal):
    # SQLite's default synchronous=NORMAL: a commit is with the OS before record_intent
    # returns; PostgreSQL has it before it answers.
    path = address
    done = subprocess.run([sys.executable, "-c", KILL_AFTER_INTENT, str(path), "25"], check=False)
    assert done.returncode == -9
    changes = open_journal(path).all_changes()  # opening marks the dead process's rows
    assert [c.args["n"] for c in changes] == list(range(24, -1, -1))
    assert {c.status for c in changes} == {Status.UNKNOWN}


def test_decisions_are_kept_apart_from_changes_and_filtered(address: str, open_journal):
    journal = open_journal(address)
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
        assert journal.pragma("user_version") == SCHEMA_VERSION == 6
        assert journal.decisions() == []
        journal.record_decision(
            tool="s__a", classification="reversible", args={}, answer=Answer.DENIED
        )
        (decision,) = journal.decisions(refused=True)
        assert (decision.tool, decision.last_change_id) == ("s__a", 1)
        assert [c.tool for c in journal.open_changes()] == ["s__a"]
    finally:
        journal.close()


def test_a_shared_scope_sees_every_members_changes_and_no_one_elses(address, open_journal):
    ann = open_journal(address, scope="team")
    bob = open_journal(address, scope="team")
    eve = open_journal(address)  # not in the scope
    assert len({ann.agent, bob.agent, eve.agent}) == 3
    before = ann.create_checkpoint("team start")
    ids = {
        who: store.record_intent(Intent(tool=f"s__{who}", classification="reversible", args={}))
        for who, store in (("ann", ann), ("bob", bob), ("eve", eve))
    }
    assert ann.change(ids["ann"]).scope == "team" and eve.change(ids["eve"]).scope is None
    team = {"agent": ann.agent, "scope": "team"}
    assert [c.id for c in ann.open_changes(before, **team)] == [ids["bob"], ids["ann"]]
    assert [c.id for c in bob.open_changes(before, agent=bob.agent, scope="team")] == [
        ids["bob"],
        ids["ann"],
    ]
    assert [c.id for c in eve.open_changes(before, agent=eve.agent)] == [ids["eve"]]
    assert [c.id for c in ann.open_changes(before, agent=ann.agent)] == [ids["ann"]]
    # bob sees the checkpoint ann took; eve does not.
    assert [cp.id for cp in bob.checkpoints(bob.agent, scope="team")] == [before.id]
    assert eve.checkpoints(eve.agent) == []
    eve.record_decision(tool="s__x", classification="irreversible", args={}, answer="denied")
    bob.record_decision(tool="s__y", classification="irreversible", args={}, answer="denied")
    assert [d.tool for d in ann.decisions(before, **team)] == ["s__y"]
    # A person is in no scope, whatever is asked for.
    assert open_journal(address, person=True, scope="team").scope is None


def test_sessions_say_where_they_ran_and_whether_they_still_run(
    address, open_journal, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("COMPENSATOR_HOST", "machine-a")
    first = open_store(target(address), scope="team")
    monkeypatch.setenv("COMPENSATOR_HOST", "machine-b")
    second = open_journal(address)
    rows = {s.id: s for s in second.sessions()}
    assert rows[first.session].host == "machine-a" and rows[first.session].scope == "team"
    assert rows[second.session].host == "machine-b" and rows[second.session].pid == os.getpid()
    assert rows[first.session].alive and rows[second.session].alive
    first.close()
    rows = {s.id: s for s in second.sessions()}
    assert not rows[first.session].alive and rows[first.session].ended_at is not None
    assert rows[second.session].alive


def test_only_one_of_many_stores_claims_a_step(address, open_journal):
    """Several stores (threads, each with its own connection) race to claim one step."""
    stores = [open_journal(address) for _ in range(6)]
    change = stores[0].record_intent(Intent(tool="s__a", classification="reversible", args={}))
    stores[0].record_outcome(change, status=Status.OK)
    claims: list[int | None] = []
    ready = threading.Barrier(len(stores))

    def claim(store: JournalStore) -> None:
        ready.wait()
        claims.append(store.record_step_started(change, 0, "s__undo", {}, after=None))

    threads = [threading.Thread(target=claim, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [claim for claim in claims if claim is not None]
    assert len(claims) == 6 and len(won) == 1, claims
    assert [c.id for c in stores[0].compensations(change)] == won


@pytest.mark.postgres_journal
def test_a_postgres_journal_keeps_to_its_own_schema(postgres_url: str, open_journal):
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE public.changes (app_data text)")
        db.execute("INSERT INTO public.changes VALUES ('mine')")
    journal = open_journal(postgres_url)
    journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    with psycopg.connect(postgres_url, autocommit=True) as db:
        assert db.execute("SELECT app_data FROM public.changes").fetchall() == [("mine",)]
        tables = db.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'compensator' ORDER BY 1"
        ).fetchall()
    assert [t for (t,) in tables] == [
        "chain",
        "changes",
        "checkpoints",
        "compensations",
        "decisions",
        "schema_version",
        "sessions",
    ]


@pytest.mark.postgres_journal
def test_postgres_problems_say_what_to_do_without_the_password(postgres_url: str):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://me:s3cret@127.0.0.1:{port}/journal"
    with pytest.raises(JournalError) as caught:
        open_store(url)
    message = str(caught.value)
    assert f"cannot reach the journal database postgresql://me@127.0.0.1:{port}/journal" in message
    assert "the proxy needs its journal to start" in message and "s3cret" not in message
    with pytest.raises(JournalError, match=r"no journal in postgresql://.*no compensator schema"):
        open_store(postgres_url, read_only=True)
    for bad in ("postgresql://me@host/x?no_such_option=1", "postgresql://me:s3cr%zzet@host/db"):
        with pytest.raises(
            JournalError, match="not a valid PostgreSQL connection string"
        ) as bad_url:
            open_store(bad)
        assert "s3cr" not in str(bad_url.value)
    open_store(postgres_url).close()
    sql(postgres_url, "UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    for read_only in (False, True):
        with pytest.raises(JournalError, match="Upgrade mcp-compensator"):
            open_store(postgres_url, read_only=read_only)


@pytest.mark.postgres_journal
def test_a_lost_postgres_connection_is_opened_again_and_nothing_doubles(
    postgres_url: str, open_journal
):
    journal = open_journal(postgres_url)
    other = open_journal(postgres_url)
    first = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    ((backend,),) = sql(
        postgres_url,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
        "AND ((classid::bigint << 32) | objid::bigint) = "
        "(SELECT lock_key FROM sessions WHERE id = ?)",
        (journal.session,),
    )
    assert sql(postgres_url, "SELECT pg_terminate_backend(?)", (backend,)) == [(True,)]
    # pg_terminate_backend only signals: wait until the backend, and so its lock, is gone.
    deadline = time.monotonic() + 30
    while sql(postgres_url, "SELECT 1 FROM pg_stat_activity WHERE pid = ?", (backend,)):
        assert time.monotonic() < deadline, f"backend {backend} still runs 30 s after its end"
        time.sleep(0.01)
    # The session's lock went with its connection: for the others it is dead until it is back.
    assert other.recover_abandoned() == 1
    assert other.change(first).status == Status.UNKNOWN
    second = journal.record_intent(Intent(tool="s__b", classification="reversible", args={}))
    journal.record_outcome(first, status=Status.OK, result={"late": True})
    assert [c.id for c in other.all_changes()] == [second, first], "a retried write doubled"
    assert other.change(first).status == Status.OK  # the outcome arrived after all
    live = {s.id: s.alive for s in other.sessions()}
    assert live[journal.session], "the session did not take its lock back"
    assert other.recover_abandoned() == 0
    assert other.change(second).status == Status.PENDING
    tally("journal connection killed", injected=1, survived=1)


_OPENS_AT_ONCE = """
import sys, time
from compensator.journal import open_journal
start = float(sys.argv[2])
while time.time() < start:  # every process opens the new journal at the same moment
    pass
open_journal(sys.argv[1]).close()
"""


def test_processes_opening_a_new_journal_at_once_all_start(address: str):
    start = time.time() + 1.5  # after every interpreter has started, even on a busy machine
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENS_AT_ONCE, address, str(start)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [(p.communicate(timeout=60)[1], p.returncode) for p in procs]
    assert [text for text, code in errors if code != 0] == []


def test_a_proxy_carries_on_only_an_agent_of_its_own_host(
    address: str, open_journal, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("COMPENSATOR_HOST", "alice-laptop")
    alice = open_store(target(address))
    alice.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    alice.close()
    monkeypatch.setenv("COMPENSATOR_HOST", "bob-desktop")
    bob = open_journal(address)
    assert bob.agent != alice.agent, "a proxy on another machine carried on alice's agent"
    assert bob.open_changes(agent=bob.agent) == []
    monkeypatch.setenv("COMPENSATOR_HOST", "alice-laptop")
    assert open_journal(address).agent == alice.agent


@pytest.mark.postgres_journal
def test_a_retried_intent_or_checkpoint_is_written_once(postgres_url: str, open_journal):
    """A write whose commit may have been kept is sent again with the same request number
    (after a lost connection); the database keeps one row and the store the same id."""
    journal = open_journal(postgres_url)
    journal._request = lambda: 7  # the retry of request 7, as `_run` sends it
    first = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    again = journal.record_intent(Intent(tool="s__a", classification="reversible", args={}))
    assert again == first and len(journal.all_changes()) == 1
    checkpoint = journal.create_checkpoint("once")
    assert journal.create_checkpoint("once") == checkpoint
    assert len(journal.checkpoints()) == 1


@pytest.mark.postgres_journal
def test_a_checkpoint_sees_the_change_committed_while_it_waited(postgres_url: str, open_journal):
    """Ids follow commit order: a checkpoint that waits for an intent's order lock counts that
    intent's change as before it, once the intent commits."""
    from compensator.journal.postgres.schema import LOCK_CLASS, ORDER_LOCK

    journal = open_journal(postgres_url)
    with psycopg.connect(postgres_url, options="-c search_path=compensator") as side:
        side.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, ORDER_LOCK))
        (change,) = side.execute(
            "INSERT INTO changes (tool, classification, status, args, pid, created_at) "
            "VALUES ('s__a', 'reversible', 'ok', '{}', 1, '2026-12-04T00:00:00+00:00') "
            "RETURNING id"
        ).fetchone()
        taken: list[Any] = []
        waiter = threading.Thread(target=lambda: taken.append(journal.create_checkpoint("cp")))
        waiter.start()
        deadline = time.monotonic() + 30
        while not sql(
            postgres_url,
            "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'advisory' "
            "AND application_name = 'mcp-compensator'",
        ):
            assert time.monotonic() < deadline, "the checkpoint never waited for the order lock"
            time.sleep(0.01)
        side.commit()  # the intent commits while the checkpoint waits
    waiter.join(timeout=30)
    (checkpoint,) = taken
    assert checkpoint.last_change_id == change
    assert journal.open_changes(checkpoint) == []


@pytest.mark.postgres_journal
def test_a_session_whose_lease_lapsed_carries_on_when_it_renews(postgres_url: str, open_journal):
    """A paused proxy (a laptop asleep) is taken for dead once its lease lapses; when it runs
    again, its next renewal brings the session back instead of leaving it ended."""
    from compensator.journal.postgres import PostgresJournal

    paused = PostgresJournal(postgres_url, lease=0.6)
    try:
        other = open_journal(postgres_url)
        change = paused.record_intent(Intent(tool="s__a", classification="reversible", args={}))
        sql(postgres_url, "UPDATE sessions SET lease_until = now() - interval '1 second'")
        assert other.recover_abandoned() == 1  # taken for dead: its call is unknown
        deadline = time.monotonic() + 30
        while not {s.id: s.alive for s in other.sessions()}[paused.session]:
            assert time.monotonic() < deadline, "the session never came back"
            time.sleep(0.02)
        assert other.recover_abandoned() == 0
        paused.record_outcome(change, status=Status.OK)
        assert other.change(change).status == Status.OK
    finally:
        paused.close()


def test_the_journal_schema_has_a_postgresql_twin_of_every_migration():
    from compensator.journal import postgres

    assert set(postgres.MIGRATIONS) == set(range(postgres.FIRST_VERSION, SCHEMA_VERSION))


def test_a_url_that_is_not_postgresql_is_refused_not_made_a_file(tmp_path: Path):
    from compensator.journal import journal_address

    assert journal_address("PostgreSQL://me@db/j") == "PostgreSQL://me@db/j"
    assert journal_address(str(tmp_path / "j.db")) == tmp_path / "j.db"
    for url in ("mysql://me@db/j", "postgresql+psycopg://me@db/j"):
        with pytest.raises(JournalError, match="neither a file nor a postgresql:// URL"):
            journal_address(url)
