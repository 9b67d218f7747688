"""`undo_change`: one change undone alone through the real proxy and the real tasks server,
refused (with the later changes named) when a later change could depend on it, and forced."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import by_id
from .test_drift import verified_registry
from .test_unprefixed import _unprefixed_tasks

pytestmark = pytest.mark.anyio


async def titles(client) -> dict[int, str]:
    tasks = by_id((await client.call_ok("tasks__list_tasks"))["tasks"])
    return {task_id: task["title"] for task_id, task in tasks.items()}


async def change_ids(client) -> list[int]:
    return [change["id"] for change in await client.list_changes()]


async def add_as(agent: str, proxy, config: Path, db: Path, env: dict[str, str]) -> int:
    """One task added by `agent` through its own proxy on journal `db`; its change id."""
    async with proxy(config, db=db, env={**env, "COMPENSATOR_AGENT": agent}) as client:
        await client.call_ok("tasks__add_task", {"title": f"{agent}'s"})
        [change_id] = await change_ids(client)
    return change_id


async def test_the_newest_change_of_its_server_is_undone_alone(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        a = await client.call_ok("tasks__add_task", {"title": "a"})
        b = await client.call_ok("tasks__add_task", {"title": "b"})
        first, second = sorted(await change_ids(client))

        plan = await client.call_ok("undo_change", {"change_id": second, "dry_run": True})
        assert plan["undone"][0]["calls"] == [
            {"tool": "tasks__delete_task", "args": {"id": b["id"]}}
        ]
        assert await titles(client) == {a["id"]: "a", b["id"]: "b"}

        report = await client.call_ok("undo_change", {"change_id": second})
        assert report["change_id"] == second and report["skipped"] == []
        assert [c["id"] for c in report["undone"]] == [second]
        assert await titles(client) == {a["id"]: "a"}
        assert await change_ids(client) == [first]
        # Now the first is the newest open change of its server.
        report = await client.call_ok("undo_change", {"change_id": first})
        assert [c["id"] for c in report["undone"]] == [first]
        assert await titles(client) == {}


async def test_an_older_change_is_refused_with_the_later_ones_named_and_force_undoes_it(
    proxy, tasks_config, tasks_env
):
    async with proxy(tasks_config, env=tasks_env) as client:
        a = await client.call_ok("tasks__add_task", {"title": "a"})
        await client.call("tasks__set_status", {"id": a["id"], "status": "bogus"})  # fails
        b = await client.call_ok("tasks__add_task", {"title": "b", "parent_id": a["id"]})
        first, failed, second = sorted(await change_ids(client))

        report = await client.call_ok("undo_change", {"change_id": first})
        assert report["undone"] == []
        [skipped] = report["skipped"]
        assert skipped["id"] == first
        reason = skipped["reason"]
        assert reason.startswith("not undone alone: later open changes")
        assert f"{second} (tasks__add_task)" in reason
        assert f"{failed} (" not in reason  # a failed call changed nothing
        assert "force=true" in reason
        assert await titles(client) == {a["id"]: "a", b["id"]: "b"}
        assert await change_ids(client) == [second, failed, first]

        forced = await client.call_ok("undo_change", {"change_id": first, "force": True})
        assert [c["id"] for c in forced["undone"]] == [first]
        assert forced["undone"][0]["calls"] == [
            {"tool": "tasks__delete_task", "args": {"id": a["id"]}}
        ]
        assert await titles(client) == {}  # deleting a cascades over its subtask b
        assert await change_ids(client) == [second, failed]


async def test_a_verified_change_is_undone_alone_when_its_state_is_untouched(
    proxy, tmp_path: Path, tasks_env
):
    async with proxy(verified_registry(tmp_path), env=tasks_env) as client:
        one = await client.call_ok("tasks__add_task", {"title": "one"})
        two = await client.call_ok("tasks__add_task", {"title": "two"})
        await client.call_ok("tasks__rename_task", {"id": one["id"], "title": "ONE"})
        await client.call_ok("tasks__rename_task", {"id": two["id"], "title": "TWO"})
        await client.call_ok("tasks__rename_task", {"id": two["id"], "title": "TWO!"})
        changes = await client.list_changes()
        rename_two_first = changes[1]["id"]
        rename_one = changes[2]["id"]

        # Later changes touched task two only: the read of task one shows nothing moved.
        report = await client.call_ok("undo_change", {"change_id": rename_one})
        assert [c["id"] for c in report["undone"]] == [rename_one], report
        assert (await titles(client))[one["id"]] == "one"

        # The later rename of task two changed the state this one left: refused, as drift.
        report = await client.call_ok("undo_change", {"change_id": rename_two_first})
        [skipped] = report["skipped"]
        assert skipped["reason"].startswith("not undone alone: later open changes")
        assert f"{changes[0]['id']} (tasks__rename_task)" in skipped["reason"]
        assert "drift:" in skipped["reason"]
        assert skipped["drift"]["now"] != skipped["drift"]["after_call"]
        assert (await titles(client))[two["id"]] == "TWO!"


async def test_bad_undo_change_arguments_are_error_results(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    alices = await add_as("alice", proxy, tasks_config, db, tasks_env)
    async with proxy(tasks_config, db=db, env={**tasks_env, "COMPENSATOR_AGENT": "bob"}) as c:
        await c.call_ok("tasks__add_task", {"title": "bob's"})
        [bobs] = await change_ids(c)
        await c.call_ok("undo_change", {"change_id": bobs})
        for args, expected in (
            ({}, "change_id is required"),
            ({"change_id": "1"}, "change_id must be a positive integer"),
            ({"change_id": True}, "change_id must be a positive integer"),
            # As the client sent it, and what null from a client usually means.
            ({"change_id": "abc"}, 'got "abc"'),
            ({"change_id": None}, "got null (a client that could not read what you typed"),
            ({"change_id": 1, "dry_run": "yes"}, "dry_run must be true or false"),
            ({"change_id": 1, "checkpoint_id": 1}, "unknown argument(s) checkpoint_id"),
            ({"change_id": 999}, "no change 999 to undo"),
            ({"change_id": alices}, f"no change {alices} to undo"),  # another agent's
            ({"change_id": bobs}, f"change {bobs} was undone already"),
        ):
            reply = await c.call("undo_change", args)
            assert reply.is_error, (args, reply.text)
            assert expected in reply.text, (args, reply.text)
        assert await titles(c) == {1: "alice's"}  # alice's change was left alone
        assert (await c.call_ok("tasks__add_task", {"title": "still answering"}))["id"]


async def test_an_unprefixed_servers_tools_count_as_one_server(proxy, tmp_path: Path, tasks_env):
    # Without prefixes, only the registry's routing tells that add_task and complete_task
    # went to one server: a later complete_task must hold back undoing the add alone.
    async with proxy(_unprefixed_tasks(tmp_path), env=tasks_env) as client:
        added = await client.call_ok("add_task", {"title": "a"})
        await client.call_ok("complete_task", {"id": added["id"]})
        first, second = sorted(await change_ids(client))
        report = await client.call_ok("undo_change", {"change_id": first})
        assert report["undone"] == []
        [skipped] = report["skipped"]
        assert f"{second} (complete_task)" in skipped["reason"]
        assert await change_ids(client) == [second, first]


async def test_another_agents_later_change_holds_it_back_without_being_shown(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    alices = await add_as("alice", proxy, tasks_config, db, tasks_env)
    bobs = await add_as("bob", proxy, tasks_config, db, tasks_env)
    async with proxy(tasks_config, db=db, env={**tasks_env, "COMPENSATOR_AGENT": "alice"}) as c:
        report = await c.call_ok("undo_change", {"change_id": alices})
        [skipped] = report["skipped"]
        reason = skipped["reason"]
        assert "may depend on it: 1 by another agent;" in reason, reason
        assert f"{bobs} (" not in reason and "undo those first" not in reason, reason
        assert "force=true" in reason
