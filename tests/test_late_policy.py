"""A policy added after a call was journaled as `unknown`: undo uses a reversible one, and
says for a compensable one that no snapshot was taken; list_changes, explain_blast_radius,
`log` and `undo` all say which. Real proxy, real example server, real journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .broken import cut, write_example
from .test_cli_human import WIDE, cli

pytestmark = pytest.mark.anyio

NO_SNAPSHOT = "journaled before this tool had a policy; no snapshot was taken"
LATE_REVERSIBLE = "journaled before this tool had a policy; undo uses its reversible policy"


def without_policies(text: str) -> str:
    """The example registry as it was before add_task and rename_task had entries."""
    text = cut(text, "  tasks__add_task:", "  tasks__restore_task:")
    text = cut(text, "  tasks__set_status:", "  tasks__rename_task:")
    return cut(text, "  tasks__rename_task:", "  tasks__delete_task:")


async def test_undo_uses_a_reversible_policy_added_later_and_says_why_not_a_compensable_one(
    proxy, tasks_env, tmp_path: Path
):
    before = write_example(tmp_path, "before", without_policies)
    after = write_example(tmp_path, "after")
    db = tmp_path / "journal.db"
    async with proxy(before, db=db, env=tasks_env) as client:
        checkpoint = await client.checkpoint("before the policies")
        task = await client.call_ok("tasks__add_task", {"title": "x"})
        await client.call_ok("tasks__rename_task", {"id": task["id"], "title": "y"})
        # An answer that says it failed, without isError: journaled as done, for now.
        await client.call_ok("tasks__set_status", {"id": 99, "status": "done"})
        journaled = await client.list_changes(checkpoint)
        assert [c["classification"] for c in journaled] == ["unknown"] * 3
        assert not any("policy_added_later" in c for c in journaled)

    # The person adds the two policies, and the client restarts the proxy.
    async with proxy(after, db=db, env=tasks_env) as client:
        listed = {c["tool"]: c for c in await client.list_changes(checkpoint)}
        assert LATE_REVERSIBLE in listed["tasks__add_task"]["policy_added_later"]
        assert NO_SNAPSHOT in listed["tasks__rename_task"]["policy_added_later"]
        explained = await client.call_ok("explain_blast_radius", {"tool": "tasks__rename_task"})
        assert f"1 open change of tasks__rename_task {NO_SNAPSHOT}" in explained["explanation"]

        shown = cli("log", "--config", str(after), "--db", str(db), env={**tasks_env, **WIDE})
        assert shown.returncode == 0, shown.stderr
        assert "unknown→reversible" in shown.stdout and "unknown→compensable" in shown.stdout

        report = await client.undo_to(checkpoint)
        (undone,) = report["undone"]
        assert undone["tool"] == "tasks__add_task" and LATE_REVERSIBLE in undone["policy"]
        (skipped,) = report["skipped"]
        assert skipped["tool"] == "tasks__rename_task" and NO_SNAPSHOT in skipped["reason"]
        # The error_when added since says that call failed: nothing to undo, and settled.
        (failed,) = report["nothing_to_undo"]
        assert failed["tool"] == "tasks__set_status" and "says the call failed" in failed["reason"]
        assert "add one under `tools:`" not in skipped["reason"]
        assert await client.call_ok("tasks__list_tasks") in ([], {"tasks": []})

    # The journal records which policy undid the change; the skipped one is still open.
    listed = cli("log", "--config", str(after), "--db", str(db), "--all", "--json", env=tasks_env)
    assert listed.returncode == 0, listed.stderr
    changes = {c["tool"]: c for c in json.loads(listed.stdout)["changes"]}
    added = changes["tasks__add_task"]
    assert added["undo_note"] == "compensated with the reversible policy added after it"
    assert "policy_added_later" not in added  # settled: nothing left for a policy to do
    assert NO_SNAPSHOT in changes["tasks__rename_task"]["policy_added_later"]
    table = cli("log", "--config", str(after), "--db", str(db), "--all", env=WIDE)
    assert "compensated (policy added later)" in table.stdout


async def test_without_a_policy_the_reason_still_says_to_add_one(proxy, tasks_env, tmp_path):
    before = write_example(tmp_path, "before", without_policies)
    async with proxy(before, db=tmp_path / "journal.db", env=tasks_env) as client:
        checkpoint = await client.checkpoint()
        await client.call_ok("tasks__add_task", {"title": "x"})
        (skipped,) = (await client.undo_to(checkpoint))["skipped"]
        assert "add one under `tools:`" in skipped["reason"]
        assert "policy_added_later" not in (await client.list_changes(checkpoint))[0]
