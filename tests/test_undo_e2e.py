"""Undo through the real proxy and the real example server, as an agent would drive it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import by_id

pytestmark = pytest.mark.anyio


async def state(client):
    tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
    labels = (await client.call_ok("tasks__list_labels"))["labels"]
    return {"tasks": by_id(tasks), "labels": labels}


async def test_demo_story_restores_the_checkpoint_state(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        keep = await client.call_ok("tasks__add_task", {"title": "existing"})
        before = await state(client)
        cp = await client.checkpoint("before the agent")
        a = await client.call_ok("tasks__add_task", {"title": "write report"})
        b = await client.call_ok("tasks__add_task", {"title": "sub", "parent_id": keep["id"]})
        await client.call_ok("tasks__complete_task", {"id": a["id"]})
        deleted = await client.call_ok("tasks__delete_task", {"id": keep["id"]})
        assert sorted(deleted["deleted"]) == sorted([keep["id"], b["id"]])

        report = await client.undo_to(cp)

        assert report["skipped"] == []
        assert [c["tool"] for c in report["undone"]] == [
            "tasks__delete_task",
            "tasks__complete_task",
            "tasks__add_task",
            "tasks__add_task",
        ]
        assert await state(client) == before
        assert await client.list_changes(cp) == []


async def test_every_meta_tool_answers(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"checkpoint", "list_checkpoints", "list_changes", "undo_to"} <= names
        assert "explain_blast_radius" in names
        assert "tasks__add_task" in names

        first = await client.checkpoint("one")
        second = await client.checkpoint()
        listed = await client.list_checkpoints()
        assert [c["id"] for c in listed] == [second, first]
        assert listed[1]["label"] == "one" and listed[0]["label"] is None

        await client.call_ok("tasks__add_task", {"title": "x"})
        await client.call_ok("tasks__list_tasks")  # a read: not journaled
        changes = await client.list_changes()
        assert [c["tool"] for c in changes] == ["tasks__add_task"]
        assert changes[0]["classification"] == "reversible"
        assert changes[0]["status"] == "ok"
        assert changes[0]["args"] == {"title": "x"}
        assert changes[0]["checkpoint"] == second
        assert await client.list_changes(second) == changes

        explained = await client.call_ok("explain_blast_radius", {"tool": "tasks__delete_task"})
        assert explained["classification"] == "compensable"
        assert explained["snapshot"]["tool"] == "tasks__get_task_tree"
        assert "snapshot" in explained["explanation"]


async def test_dry_run_plans_and_changes_nothing(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        cp = await client.checkpoint()
        task = await client.call_ok("tasks__add_task", {"title": "x"})
        plan = await client.undo_to(cp, dry_run=True)
        assert plan["dry_run"] is True
        assert plan["undone"][0]["calls"] == [
            {"tool": "tasks__delete_task", "args": {"id": task["id"]}}
        ]
        assert (await client.call_ok("tasks__get_task", {"id": task["id"]}))["title"] == "x"
        assert len(await client.list_changes(cp)) == 1
        # The real undo still has everything to do.
        assert len((await client.undo_to(cp))["undone"]) == 1
        assert (await client.call("tasks__get_task", {"id": task["id"]})).is_error


async def test_irreversible_and_unknown_are_reported_not_undone(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        done = await client.call_ok("tasks__add_task", {"title": "old"})
        await client.call_ok("tasks__complete_task", {"id": done["id"]})
        cp = await client.checkpoint()
        await client.call_ok("tasks__purge_completed")
        await client.call_ok(
            "tasks__restore_tasks",
            {"tasks": [{"id": 99, "title": "r", "status": "open", "parent_id": None}]},
        )
        report = await client.undo_to(cp)
        reasons = {s["tool"]: s["reason"] for s in report["skipped"]}
        assert set(reasons) == {"tasks__purge_completed", "tasks__restore_tasks"}
        assert reasons["tasks__purge_completed"].startswith("irreversible")
        assert reasons["tasks__restore_tasks"].startswith("unknown")
        assert "add one under `tools:`" in reasons["tasks__restore_tasks"]
        assert report["undone"] == []
        # Skipped changes stay listed, so a person can see what is left.
        assert {c["tool"] for c in await client.list_changes(cp)} == set(reasons)


async def test_failed_call_is_journaled_and_never_compensated(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        cp = await client.checkpoint()
        reply = await client.call("tasks__delete_task", {"id": 404})
        assert reply.is_error and "not found" in reply.text
        changes = await client.list_changes(cp)
        assert [(c["tool"], c["status"]) for c in changes] == [("tasks__delete_task", "error")]
        report = await client.undo_to(cp)
        assert report["undone"] == [] and report["skipped"] == []
        assert [c["id"] for c in report["nothing_to_undo"]] == [changes[0]["id"]]
        assert await client.list_changes(cp) == []


async def test_error_when_marks_in_band_failures(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        task = await client.call_ok("tasks__add_task", {"title": "t"})
        cp = await client.checkpoint()
        bad = await client.call("tasks__set_status", {"id": task["id"], "status": "bogus"})
        assert not bad.is_error and bad.value["ok"] is False  # passed through unchanged
        good = await client.call_ok("tasks__set_status", {"id": task["id"], "status": "done"})
        assert good["ok"] is True
        statuses = [c["status"] for c in await client.list_changes(cp)]
        assert statuses == ["ok", "error"]
        report = await client.undo_to(cp)
        assert len(report["undone"]) == 1 and len(report["nothing_to_undo"]) == 1
        assert (await client.call_ok("tasks__get_task", {"id": task["id"]}))["status"] == "open"


async def test_mutating_when_false_is_a_read(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        task = await client.call_ok("tasks__add_task", {"title": "t"})
        cp = await client.checkpoint()
        preview = {"id": task["id"], "title": "new", "dry_run": True}
        assert (await client.call_ok("tasks__rename_task", preview))["title"] == "new"
        assert await client.list_changes(cp) == []
        await client.call_ok("tasks__rename_task", {"id": task["id"], "title": "new"})
        assert [c["tool"] for c in await client.list_changes(cp)] == ["tasks__rename_task"]
        await client.undo_to(cp)
        assert (await client.call_ok("tasks__get_task", {"id": task["id"]}))["title"] == "t"


async def test_multi_step_inverse_honours_when(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        lone = await client.call_ok("tasks__add_task", {"title": "lone"})
        parent = await client.call_ok("tasks__add_task", {"title": "parent"})
        child = await client.call_ok("tasks__add_task", {"title": "c", "parent_id": parent["id"]})
        await client.call_ok("tasks__add_task", {"title": "gc", "parent_id": child["id"]})
        before = await state(client)
        cp = await client.checkpoint()
        await client.call_ok("tasks__delete_task", {"id": lone["id"]})
        await client.call_ok("tasks__delete_task", {"id": parent["id"]})
        report = await client.undo_to(cp)
        calls = {c["args"]: c["calls"] for c in _keyed(report["undone"])}
        assert [step["tool"] for step in calls[parent["id"]]] == [
            "tasks__restore_task",
            "tasks__restore_tasks",
        ]
        # No children: the `when` on the second step is false, so it is skipped, not failed.
        assert [step["tool"] for step in calls[lone["id"]]] == ["tasks__restore_task"]
        assert await state(client) == before


def _keyed(undone):
    return [{"args": c["args"]["id"], "calls": c["calls"]} for c in undone]


async def test_label_no_op_is_not_undone(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        await client.call_ok("tasks__add_label", {"name": "urgent"})
        cp = await client.checkpoint()
        again = await client.call_ok("tasks__add_label", {"name": "urgent"})
        assert again["created"] is False
        report = await client.undo_to(cp)
        assert report["undone"][0]["calls"] == []  # settled with every step skipped by `when`
        assert (await client.call_ok("tasks__list_labels"))["labels"] == ["urgent"]


async def test_one_failing_compensation_does_not_stop_the_rest(
    proxy, write_registry, tmp_path: Path
):
    config = write_registry(
        """
        servers:
          tasks:
            command: "@PYTHON@"
            args: ["@TASKS_SERVER@", "--db", "@TMP@/t.db"]
        tools:
          tasks__get_task: {classification: read}
          tasks__add_task:
            classification: reversible
            inverse_tool: tasks__delete_task
            inverse_args: {id: "{result.id}"}
          tasks__add_label:
            classification: reversible
            inverse_tool: tasks__get_task      # wrong on purpose: this id never exists
            inverse_args: {id: 424242}
        """
    )
    async with proxy(config) as client:
        cp = await client.checkpoint()
        task = await client.call_ok("tasks__add_task", {"title": "a"})
        await client.call_ok("tasks__add_label", {"name": "l"})
        await client.call_ok("tasks__add_task", {"title": "b"})
        report = await client.undo_to(cp)
        assert [c["tool"] for c in report["undone"]] == ["tasks__add_task", "tasks__add_task"]
        [skipped] = report["skipped"]
        assert skipped["tool"] == "tasks__add_label"
        assert "tasks__get_task" in skipped["reason"] and "not found" in skipped["reason"]
        assert (await client.call("tasks__get_task", {"id": task["id"]})).is_error
        assert [c["tool"] for c in await client.list_changes(cp)] == ["tasks__add_label"]
        # Undo is idempotent: a second run redoes nothing that already worked.
        again = await client.undo_to(cp)
        assert again["undone"] == [] and len(again["skipped"]) == 1


async def test_bad_meta_arguments_are_error_results(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        cp = await client.checkpoint()
        cases = [
            ("undo_to", {"checkpoint_id": 999}, f"valid checkpoint ids: {cp}"),
            ("undo_to", {"checkpoint_id": "1"}, "positive integer"),
            ("undo_to", {"checkpoint_id": True}, "positive integer"),
            ("undo_to", {}, "checkpoint_id is required"),
            ("undo_to", {"checkpoint_id": cp, "dry_run": "yes"}, "dry_run must be"),
            ("undo_to", {"checkpoint_id": cp, "purge": 1}, "unknown argument(s) purge"),
            ("undo_to", {"checkpoint_id": cp, "force": 1}, "force must be true or false"),
            ("list_changes", {"checkpoint_id": 77}, "no checkpoint 77"),
            ("checkpoint", {"label": 5}, "label must be a string"),
            ("explain_blast_radius", {"tool": "nope__x"}, "no tool named 'nope__x'"),
            ("explain_blast_radius", {}, "tool must be"),
            ("tasks__nonexistent", {}, "does not offer tool 'nonexistent'"),
        ]
        for name, args, expected in cases:
            reply = await client.call(name, args)
            assert reply.is_error, (name, args)
            assert expected in reply.text, (name, args, reply.text)
        # The proxy is still up and working.
        assert await client.checkpoint() == cp + 1


async def test_journal_survives_a_new_proxy_process(proxy, tasks_config, tasks_env, tmp_path):
    db = tmp_path / "shared.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        cp = await client.checkpoint()
        task = await client.call_ok("tasks__add_task", {"title": "persist"})
        await client.call_ok("tasks__complete_task", {"id": task["id"]})
        before = await client.list_changes(cp)
    assert oct(db.stat().st_mode & 0o777) == "0o600"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        assert await client.list_changes(cp) == before
        report = await client.undo_to(cp)
        assert len(report["undone"]) == 2
        assert (await client.call_ok("tasks__list_tasks"))["tasks"] == []
