"""The journal's hash chain on both backends: every write is a link, `compensator log --verify`
holds on an untouched journal and names the first record or link changed, deleted or added
behind the store's back, with and without an HMAC key; a journal from before the chain gets
its records linked when it is migrated."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from compensator.journal import Intent, Status, StepOutcome, StepStatus

from .journals import sql


def _verify(address: str, key: str | None = None) -> tuple[int, str]:
    """`compensator log --db ADDRESS --verify` as a person runs it: exit status and output."""
    env = {k: v for k, v in os.environ.items() if k != "COMPENSATOR_JOURNAL_KEY"}
    if key is not None:
        env["COMPENSATOR_JOURNAL_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "compensator", "log", "--db", address, "--verify"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def _history(journal: Any) -> int:
    """One of each kind of write a proxy makes; how many links they are."""
    journal.create_checkpoint("before")
    first = journal.record_intent(
        Intent(
            tool="fs__write",
            classification="compensable",
            args={"path": "a" * 200},
            snapshot={"content": "old"},
        )
    )
    journal.record_outcome(first, status=Status.OK, result={"content": [{"type": "text"}]})
    journal.record_post_state(first, {"content": "new"})
    second = journal.record_intent(Intent(tool="fs__mkdir", classification="reversible", args={}))
    journal.record_outcome(second, status=Status.OK)
    journal.record_decision(tool="fs__rm", classification="irreversible", args={}, answer="denied")
    step = journal.record_step_started(first, 0, "fs__write", {"path": "a"})
    journal.record_step_outcome(
        step, StepOutcome(status=StepStatus.OK, result={}), undone=(first, "undone")
    )
    journal.mark_undone(second, "nothing to undo")
    journal.mark_undone(second, "settled twice")  # changes nothing: no link
    return 11


def test_every_write_is_a_link_and_an_untouched_journal_holds(address: str, open_journal):
    journal = open_journal(address)
    links = _history(journal)
    verdict = journal.verify_chain(None)
    assert (verdict.holds, verdict.links, verdict.keyed) == (True, links, False), verdict
    status, said = _verify(address)
    assert status == 0, said
    assert f"the journal's chain holds: {links} links (SHA-256, not keyed)" in said
    assert verdict.head is not None and verdict.head[1] in said


TAMPERING = {
    # what is done behind the store's back -> what `log --verify` must name
    "a change edited": (
        "UPDATE changes SET status = 'failed' WHERE id = 2",
        "change 2 was changed after link 11 wrote it",
    ),
    "a long argument edited": (
        "UPDATE changes SET args = replace(args, 'aaa', 'bbb') WHERE id = 1",
        "change 1 was changed after link 10 wrote it",
    ),
    "a decision deleted": (
        "DELETE FROM decisions WHERE id = 1",
        "decision 1 is missing: link 7 wrote it, and it was deleted",
    ),
    "a change inserted": (
        "INSERT INTO changes (tool, classification, status, args, pid, created_at) "
        "VALUES ('fs__write', 'compensable', 'ok', '{}', 1, '2026-01-01T00:00:00+00:00')",
        "change 3 is in no link: something other than compensator added it",
    ),
    "a link edited": (
        "UPDATE chain SET row_id = 2 WHERE seq = 3",
        "link 3 does not match its hash: it, or the link before it, was changed",
    ),
    "a link deleted": ("DELETE FROM chain WHERE seq = 4", "link 5 comes where link 4 should be"),
    "the first links deleted": (
        "DELETE FROM chain WHERE seq < 3",
        "link 3 comes where the first should be: links were removed",
    ),
}


@pytest.mark.parametrize("tampering", list(TAMPERING))
def test_log_verify_names_the_first_record_or_link_changed_deleted_or_added(
    address: str, open_journal, tampering: str
):
    journal = open_journal(address)
    _history(journal)
    journal.close()
    assert _verify(address)[0] == 0
    statement, named = TAMPERING[tampering]
    sql(address, statement)
    status, said = _verify(address)
    assert status == 1, said
    assert f"the journal's chain is broken: {named}" in said


def test_a_keyed_chain_needs_its_key_and_a_rewritten_one_is_caught(
    address: str, open_journal, monkeypatch
):
    monkeypatch.setenv("COMPENSATOR_JOURNAL_KEY", "the key")
    journal = open_journal(address)
    links = _history(journal)
    journal.close()
    status, said = _verify(address, key="the key")
    assert status == 0 and f"{links} links (HMAC-SHA256, keyed)" in said, said
    status, said = _verify(address)
    assert status == 1 and "link 1 is keyed: set COMPENSATOR_JOURNAL_KEY" in said, said
    status, said = _verify(address, key="another key")
    assert status == 1, said
    assert "link 1 does not match its hash: it, or the link before it, was changed, or the" in said
    # Someone without the key rewrites the journal and every link after it, unkeyed: a journal
    # that would hold without a key, and does not with one.
    _rewrite_chain_without_key(address)
    assert _verify(address)[0] == 0
    status, said = _verify(address, key="the key")
    assert status == 1 and "link 1 is not keyed, but COMPENSATOR_JOURNAL_KEY is set" in said


def _rewrite_chain_without_key(address: str) -> None:
    from compensator.journal.chain import GENESIS, _seal

    rows = sql(address, "SELECT seq, tbl, row_id, state FROM chain ORDER BY seq")
    sql(address, "DELETE FROM chain")
    prev = GENESIS
    for seq, table, row_id, state in rows:
        prev = _seal(seq, prev, table, row_id, bytes(state), None)
        sql(
            address,
            "INSERT INTO chain (seq, tbl, row_id, state, keyed, hash) VALUES (?, ?, ?, ?, ?, ?)",
            (seq, table, row_id, bytes(state), False, prev),
        )


def test_a_journal_from_before_the_chain_gets_its_records_linked(address: str, open_journal):
    journal = open_journal(address)
    _history(journal)
    journal.close()
    # Back to the schema before the chain, as a journal written by the last release is.
    sql(address, "DROP TABLE chain")
    sql(address, "ALTER TABLE changes DROP COLUMN redo_of")
    sql(address, "ALTER TABLE changes DROP COLUMN undo_run")
    if address.startswith("postgresql"):
        sql(address, "UPDATE schema_version SET version = 5")
    else:
        sql(address, "PRAGMA user_version = 5")
    journal = open_journal(address)
    records = 1 + 2 + 1 + 1  # checkpoint, changes, decision, step
    verdict = journal.verify_chain(None)
    assert (verdict.holds, verdict.links) == (True, records), verdict
    change = journal.record_intent(Intent(tool="fs__mkdir", classification="reversible", args={}))
    journal.record_outcome(change, status=Status.OK)
    assert journal.verify_chain(None).links == records + 2
    assert _verify(address)[0] == 0


def test_writers_at_once_make_one_chain_in_commit_order(address: str, open_journal):
    """Stores on their own connections write together; the links never fork or interleave
    wrongly (on PostgreSQL they are appended under the journal's order lock)."""
    stores = [open_journal(address) for _ in range(4)]
    ready = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def write(store: Any) -> None:
        try:
            ready.wait()
            for _ in range(15):
                change = store.record_intent(
                    Intent(tool="s__a", classification="reversible", args={})
                )
                store.record_outcome(change, status=Status.OK)
        except BaseException as exc:  # reported below, with the thread's failure
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    verdict = stores[0].verify_chain(None)
    assert (verdict.holds, verdict.links) == (True, 4 * 15 * 2), verdict


def test_a_journal_path_that_is_not_a_journal_is_not_verified(tmp_path: Path):
    status, said = _verify(str(tmp_path / "none.db"))
    assert status == 1 and "no journal at" in said, said


@pytest.mark.anyio
async def test_a_proxy_keys_its_chain_and_undo_keeps_it_whole(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    """Through the real proxy: calls and an undo are links keyed with the proxy's key; the
    journal holds while the proxy runs, and an edited argument is named afterwards."""
    db = tmp_path / "journal.db"
    async with proxy(
        tasks_config, db=db, env={**tasks_env, "COMPENSATOR_JOURNAL_KEY": "k"}
    ) as client:
        cp = await client.checkpoint("before")
        task = await client.call_ok("tasks__add_task", {"title": "write report"})
        await client.call_ok("tasks__complete_task", {"id": task["id"]})
        report = await client.undo_to(cp)
        assert len(report["undone"]) == 2
        status, said = _verify(str(db), key="k")
        assert status == 0 and "(HMAC-SHA256, keyed)" in said, said
    sql(str(db), 'UPDATE changes SET args = \'{"title": "something else"}\' WHERE id = 1')
    status, said = _verify(str(db), key="k")
    assert status == 1, said
    assert "change 1 was changed after link" in said
