"""Retention on both backends: `compensator gc` drops what is older and settled, keeps what is
not settled and what a kept checkpoint's undo needs, refuses a broken chain, and leaves a
chain that `log --verify` holds, including after a second gc; `serve` does it at start-up
from the registry's `retention:`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compensator.errors import JournalError
from compensator.journal import Intent, Status, StepOutcome, StepStatus

from .journals import sql

LATER = "9999-01-01T00:00:00.000+00:00"
"""A moment after every record a test makes (now() may fall in the millisecond of the last)."""


def _gc(address: str, *options: str) -> tuple[int, str]:
    """`compensator gc --db ADDRESS ...` as a person runs it: exit status and output."""
    env = {k: v for k, v in os.environ.items() if k != "COMPENSATOR_JOURNAL_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "compensator", "gc", "--db", address, *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def _counts(address: str) -> dict[str, int]:
    tables = ("checkpoints", "changes", "compensations", "decisions", "chain")
    return {table: sql(address, f"SELECT COUNT(*) FROM {table}")[0][0] for table in tables}


def _history(journal: Any) -> dict[str, int]:
    """Checkpoints 1-3 with two changes each; change 2 was undone; change 3 is in doubt (its
    undo step never finished); change 5 never got its outcome (pending, its session alive)."""
    ids: dict[str, int] = {}
    for n in range(1, 4):
        journal.create_checkpoint(f"cp{n}")
        for m in range(2):
            change = journal.record_intent(
                Intent(tool="t__a", classification="reversible", args={"n": n, "m": m})
            )
            ids[f"c{n}{m}"] = change
            if change != 5:
                journal.record_outcome(change, status=Status.OK)
    step = journal.record_step_started(2, 0, "t__b", {})
    journal.record_step_outcome(step, StepOutcome(status=StepStatus.OK), undone=(2, "undone"))
    journal.record_step_started(3, 0, "t__b", {})  # in doubt: never finished
    journal.record_decision(tool="t__c", classification="irreversible", args={}, answer="denied")
    return ids


def test_gc_drops_what_is_settled_and_keeps_what_undo_still_needs(address: str, open_journal):
    journal = open_journal(address)
    _history(journal)
    before = _counts(address)
    moment = LATER
    planned = journal.collect(moment, keep=[3], dry_run=True)
    assert _counts(address) == before, "a dry run dropped something"
    found = journal.collect(moment, keep=[3])
    assert replace(planned, dry_run=False) == found, "the dry run said something else"
    # Changes 1, 2 (undone), 4 go; 3 (its undo begun, not finished) and 5 (pending) are not
    # settled; 6 comes after checkpoint 3, which is kept, and so does the decision. Checkpoint
    # 2 stays: change 3 belongs to it.
    assert (found.changes, found.never_undone, found.compensations) == (3, 2, 1)
    assert (found.checkpoints, found.decisions, found.unsettled, found.pinned) == (1, 0, 2, 1)
    assert sorted(row[0] for row in sql(address, "SELECT id FROM changes")) == [3, 5, 6]
    assert sorted(row[0] for row in sql(address, "SELECT id FROM checkpoints")) == [2, 3]
    assert [c.id for c in journal.open_changes(journal.checkpoint(3))] == [6, 5]
    verdict = journal.verify_chain(None)
    assert verdict.holds, verdict
    # The chain goes on from its summary: a later write, and a second gc, keep it whole.
    change = journal.record_intent(Intent(tool="t__a", classification="reversible", args={}))
    journal.record_outcome(change, status=Status.OK)
    second = journal.collect(LATER)  # 6 and the new one, and the decision; 3 and 5 stay
    assert (second.changes, second.decisions) == (2, 1)
    assert journal.verify_chain(None).holds


def test_gc_from_the_command_line_and_the_chain_after_it(address: str, open_journal):
    journal = open_journal(address)
    _history(journal)
    journal.close()
    status, said = _gc(address, "--older-than", "0s", "--dry-run")
    assert status == 0, said
    assert "Would drop what was made before" in said
    assert "4 changes (3 never undone: beyond undo now), 1 compensating step" in said
    assert "Kept though older: 2 changes not settled" in said
    dropped = _counts(address)
    status, said = _gc(address, "--older-than", "0s")
    assert status == 0 and "Dropped what was made before" in said, said
    assert "the journal's chain holds" in said
    assert _counts(address)["changes"] == dropped["changes"] - 4
    # Tampering after gc is still found; so is the summary link's removal. (Change 5 became
    # `unknown` when gc opened the journal: the session that made it had ended.)
    sql(address, "UPDATE changes SET status = 'ok' WHERE id = 5")
    status, said = _verify(address)
    assert status == 1 and "change 5 was changed after link" in said, said
    sql(address, "UPDATE changes SET status = 'unknown' WHERE id = 5")
    assert _verify(address)[0] == 0
    sql(address, "DELETE FROM chain WHERE tbl = 'gc'")
    status, said = _verify(address)
    assert status == 1 and "should be: links were removed" in said, said


def test_gc_refuses_a_broken_chain_and_drops_nothing(address: str, open_journal):
    journal = open_journal(address)
    _history(journal)
    journal.close()
    sql(address, "UPDATE changes SET tool = 't__z' WHERE id = 1")
    before = _counts(address)
    status, said = _gc(address, "--older-than", "0s")
    assert status == 1, said
    assert "the journal's chain is broken (change 1 was changed after link" in said
    assert "nothing was dropped" in said
    after = _counts(address)  # gc's own session found change 5 abandoned: one link more
    assert {**after, "chain": 0} == {**before, "chain": 0} and after["chain"] == before["chain"] + 1


def test_gc_names_a_checkpoint_to_keep_that_does_not_exist(address: str, open_journal):
    open_journal(address).create_checkpoint(None)
    status, said = _gc(address, "--older-than", "0s", "--keep-checkpoints", "1,9")
    assert status == 1 and "no checkpoint 9 in the journal to keep" in said, said


def test_gc_never_makes_a_journal(tmp_path: Path):
    status, said = _gc(str(tmp_path / "none.db"), "--older-than", "30d")
    assert status == 1 and "no journal at" in said, said
    assert not (tmp_path / "none.db").exists()


def _verify(address: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "compensator", "log", "--db", address, "--verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.anyio
async def test_serve_applies_the_registrys_retention_at_start_up(
    proxy, write_registry, tmp_path: Path
):
    config = write_registry(
        """
        servers:
          tasks:
            command: "@PYTHON@"
            args: ["@TASKS_SERVER@", "--db", "@TMP@/t.db"]
        tools:
          tasks__add_task:
            classification: reversible
            inverse_tool: tasks__delete_task
            inverse_args: {id: "{result.id}"}
        """
    )
    db = tmp_path / "journal.db"
    async with proxy(config, db=db) as client:
        await client.checkpoint()
        await client.call_ok("tasks__add_task", {"title": "a"})
    kept = write_registry(config.read_text() + "retention: {older_than: 0s}\n")
    async with proxy(kept, db=db) as client:
        assert await client.list_changes() == []
        await client.call_ok("tasks__add_task", {"title": "b"})
        assert [c["tool"] for c in await client.list_changes()] == ["tasks__add_task"]
    assert sql(str(db), "SELECT COUNT(*) FROM changes")[0][0] == 1
    assert _verify(str(db))[0] == 0


def test_writers_of_every_kind_and_gc_at_once_neither_deadlock_nor_break_the_chain(
    address: str, open_journal
):
    """A proxy settles old failed calls (the rows gc deletes) and makes new changes of every
    kind while gc runs again and again on the same journal: on PostgreSQL both take the
    order lock first, so neither waits for the other's rows the other way round."""
    writer, collector = open_journal(address), open_journal(address)
    old = []
    for _ in range(30):
        change = writer.record_intent(Intent(tool="t__a", classification="reversible", args={}))
        writer.record_outcome(change, status=Status.ERROR)
        old.append(change)
    moment = sql(address, "SELECT MAX(created_at) FROM changes")[0][0]
    failures: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for n, stale in enumerate(old):
                writer.mark_undone(stale, "nothing to undo: the call failed")
                change = writer.record_intent(
                    Intent(tool="t__a", classification="reversible", args={"n": n})
                )
                writer.record_outcome(change, status=Status.OK)
                step = writer.record_step_started(change, 0, "t__b", {})
                writer.record_step_outcome(
                    step, StepOutcome(status=StepStatus.OK), undone=(change, "undone")
                )
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    def collect() -> None:
        try:
            while not done.is_set():
                collector.collect(moment + "~")  # after the old ones, before the new ones
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write), threading.Thread(target=collect)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    collector.collect(LATER)
    assert sql(address, "SELECT COUNT(*) FROM changes")[0][0] == 0
    verdict = collector.verify_chain(None)
    assert verdict.holds, verdict


def test_a_writer_with_another_key_than_the_chains_is_refused(
    address: str, open_journal, monkeypatch
):
    monkeypatch.setenv("COMPENSATOR_JOURNAL_KEY", "the key")
    journal = open_journal(address)
    journal.create_checkpoint(None)
    journal.close()
    status, said = _gc(address, "--older-than", "0s")  # _gc runs without the key
    assert status == 1, said
    assert "the journal's hash chain is keyed: set COMPENSATOR_JOURNAL_KEY" in said
    monkeypatch.setenv("COMPENSATOR_JOURNAL_KEY", "another key")
    with pytest.raises(JournalError, match="is not the key the journal's hash chain was written"):
        open_journal(address)
    monkeypatch.setenv("COMPENSATOR_JOURNAL_KEY", "the key")
    assert open_journal(address).verify_chain(b"the key").holds


def test_writers_that_opened_an_empty_journal_with_different_keys_do_not_mix_them(
    address: str, open_journal, monkeypatch
):
    unkeyed = open_journal(address)
    monkeypatch.setenv("COMPENSATOR_JOURNAL_KEY", "the key")
    keyed = open_journal(address)  # nothing to compare with yet: the chain is empty
    unkeyed.create_checkpoint(None)
    with pytest.raises(JournalError, match="COMPENSATOR_JOURNAL_KEY is set, but the journal's"):
        keyed.create_checkpoint(None)
    assert unkeyed.verify_chain(None).holds
