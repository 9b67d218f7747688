"""Redo through the real proxy: undo then redo gives the state after the original calls, for
reversible and compensable changes, on the example task server and on server-memory with its
shipped registry; the redo is journaled and undone again like any call; and the cases redo
refuses say why."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import by_id
from .test_registry_memory import REGISTRY as MEMORY_REGISTRY
from .test_registry_memory import (
    graph,
    memory_env,  # noqa: F401 - the fixture the last test asks for
)

pytestmark = pytest.mark.anyio


async def state(client: Any) -> dict[str, Any]:
    tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
    labels = (await client.call_ok("tasks__list_labels"))["labels"]
    return {"tasks": by_id(tasks), "labels": sorted(labels, key=json.dumps)}


async def redo(client: Any, **arguments: Any) -> dict[str, Any]:
    result: dict[str, Any] = await client.call_ok("redo", arguments)
    return result


CALLS = {
    # per classification: calls after the checkpoint ("keep" and "other" are tasks made
    # before it); an add_task is left out: its replay gets a new id (see the next test)
    "reversible": [
        ("tasks__add_label", {"name": "urgent"}),
        ("tasks__toggle_task", {"id": "keep"}),
        ("tasks__remove_label", {"name": "old"}),
    ],
    "compensable": [
        ("tasks__rename_task", {"id": "keep", "title": "renamed"}),
        ("tasks__complete_task", {"id": "keep"}),
        ("tasks__delete_task", {"id": "other"}),
    ],
    "both": [
        ("tasks__rename_task", {"id": "keep", "title": "renamed"}),
        ("tasks__add_label", {"name": "urgent"}),
        ("tasks__toggle_task", {"id": "keep"}),
        ("tasks__complete_task", {"id": "keep"}),
        ("tasks__delete_task", {"id": "other"}),
    ],
}


@pytest.mark.parametrize("kind", list(CALLS))
async def test_undo_then_redo_gives_the_state_after_the_calls_and_can_be_undone(
    proxy, tasks_config, tasks_env, kind: str
):
    async with proxy(tasks_config, env=tasks_env) as client:
        made = {
            name: (await client.call_ok("tasks__add_task", {"title": name, "parent_id": None}))[
                "id"
            ]
            for name in ("keep", "other")
        }
        await client.call_ok("tasks__add_label", {"name": "old"})
        before = await state(client)
        cp = await client.checkpoint()
        calls = CALLS[kind]
        for tool, args in calls:
            await client.call_ok(tool, {k: made.get(v, v) for k, v in args.items()})
        after = await state(client)
        assert (await client.undo_to(cp))["skipped"] == []
        assert await state(client) == before

        plan = await redo(client, checkpoint_id=cp, dry_run=True)
        assert len(plan["redone"]) == len(calls) and plan["skipped"] == []
        assert await state(client) == before, "a dry run changed something"
        report = await redo(client, checkpoint_id=cp)

        assert report["skipped"] == [], report
        assert [r["tool"] for r in report["redone"]] == [tool for tool, _ in calls]
        assert await state(client) == after
        replays = await client.list_changes(cp)
        assert sorted(c["redo_of"] for c in replays) == [r["change_id"] for r in report["redone"]]
        # A redo is a set of new changes: undo takes them back as any other.
        assert len((await client.undo_to(cp))["undone"]) == len(calls)
        assert await state(client) == before
        # What was redone once is not redone again from the original; the replays are.
        again = await redo(client, checkpoint_id=cp)
        assert sorted(r["change_id"] for r in again["redone"]) == sorted(c["id"] for c in replays)
        assert await state(client) == after


async def test_an_id_the_server_handed_out_stops_the_redo_with_why(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        cp = await client.checkpoint()
        task = await client.call_ok("tasks__add_task", {"title": "a", "parent_id": None})
        await client.call_ok("tasks__complete_task", {"id": task["id"]})
        await client.undo_to(cp)
        # The plan cannot know the replay's id: it says the second depends on it.
        plan = await redo(client, checkpoint_id=cp, dry_run=True)
        assert [r["tool"] for r in plan["redone"]] == ["tasks__add_task", "tasks__complete_task"]
        assert "replayed only if that replay is handed it again" in plan["redone"][1]["note"]
        # Redoing the second alone is refused while the first is undone.
        alone = await redo(client, change_id=plan["redone"][1]["change_id"])
        assert alone["redone"] == []
        assert alone["skipped"][0]["reason"] == (
            f"its arguments hold {task['id']}, which change {plan['redone'][0]['change_id']}'s "
            "first run was handed, and change "
            f"{plan['redone'][0]['change_id']} is undone: redo it first"
        )
        report = await redo(client, checkpoint_id=cp)
        [added] = report["redone"]
        [completed] = report["skipped"]
        assert added["tool"] == "tasks__add_task"
        assert completed["tool"] == "tasks__complete_task"
        assert completed["reason"] == (
            f"its arguments hold {task['id']}, which change {added['change_id']}'s first run "
            "was handed and its replay was not"
        )
        tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
        assert [(t["title"], t["status"]) for t in tasks] == [("a", "open")]


async def test_drift_since_the_undo_and_a_later_change_in_effect_refuse_the_redo(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    async with proxy(tasks_config, env=tasks_env) as client:
        keep = await client.call_ok("tasks__add_task", {"title": "a", "parent_id": None})
        cp = await client.checkpoint()
        await client.call_ok("tasks__rename_task", {"id": keep["id"], "title": "b"})
        await client.call_ok("tasks__add_label", {"name": "x"})
        await client.undo_to(cp)
        # Someone else renames the task behind the proxy's back.
        with sqlite3.connect(tmp_path / "tasks.db") as db:
            db.execute("UPDATE tasks SET title = 'z' WHERE id = ?", (keep["id"],))
        report = await redo(client, checkpoint_id=cp)
        assert report["redone"] == []
        renamed, labelled = report["skipped"]
        assert "its snapshot read (tasks__get_task) no longer sees what it saw" in renamed["reason"]
        assert labelled["reason"].startswith("not replayed, because change")
        # Put back, then make a new change to the same server: redo would replay over it.
        with sqlite3.connect(tmp_path / "tasks.db") as db:
            db.execute("UPDATE tasks SET title = 'a' WHERE id = ?", (keep["id"],))
        later = await client.call_ok("tasks__add_label", {"name": "y"})
        assert later["created"]
        report = await redo(client, change_id=renamed["change_id"])
        [refused] = report["skipped"]
        assert "came after it and is still in effect" in refused["reason"]
        assert "tasks__add_label" in refused["reason"]


async def test_arguments_journaled_redacted_are_not_sent_again(proxy, write_registry):
    config = write_registry(
        """
        servers:
          tasks:
            command: "@PYTHON@"
            args: ["@TASKS_SERVER@", "--db", "@TMP@/t.db"]
        tools:
          tasks__list_tasks: {classification: read}
          tasks__add_task:
            classification: reversible
            redact: [args.title]
            inverse_tool: tasks__delete_task
            inverse_args: {id: "{result.id}"}
        """
    )
    async with proxy(config) as client:
        cp = await client.checkpoint()
        await client.call_ok("tasks__add_task", {"title": "secret", "parent_id": None})
        assert (await client.undo_to(cp))["skipped"] == []
        report = await redo(client, checkpoint_id=cp)
        [refused] = report["skipped"]
        assert refused["reason"] == (
            "its arguments were journaled redacted, so they cannot be sent again"
        )


async def test_bad_redo_arguments_are_error_results(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        cp = await client.checkpoint()
        both = await client.call("redo", {"checkpoint_id": cp, "change_id": 1})
        assert both.is_error and "not both or neither" in both.text
        neither = await client.call("redo", {})
        assert neither.is_error and "not both or neither" in neither.text
        nothing = await client.call("redo", {"change_id": 99})
        assert nothing.is_error and "is not one an undo took back" in nothing.text
        unknown = await client.call("redo", {"checkpoint_id": 99})
        assert unknown.is_error and "no checkpoint 99" in unknown.text


async def test_redo_on_server_memory_with_its_shipped_registry(proxy, request):
    memory = request.getfixturevalue("memory_env")
    folder = Path(memory["COMPENSATOR_WORKDIR"])

    def current() -> list[str]:
        return sorted(json.dumps(line, sort_keys=True) for line in graph(folder))

    async with proxy(MEMORY_REGISTRY, env=memory) as client:
        people = [
            {"name": "ada", "entityType": "person", "observations": ["math"]},
            {"name": "bob", "entityType": "person", "observations": []},
        ]
        await client.call_ok("memory__create_entities", {"entities": people})
        before = current()
        cp = await client.checkpoint()
        await client.call_ok(
            "memory__create_entities",
            {"entities": [{"name": "cy", "entityType": "person", "observations": []}]},
        )
        knows = {"from": "ada", "to": "cy", "relationType": "knows"}
        await client.call_ok("memory__create_relations", {"relations": [knows]})
        await client.call_ok(
            "memory__add_observations", {"observations": [{"entityName": "bob", "contents": ["x"]}]}
        )
        await client.call_ok("memory__delete_entities", {"entityNames": ["bob"]})
        after = current()
        assert (await client.undo_to(cp))["skipped"] == []
        assert current() == before
        report = await redo(client, checkpoint_id=cp)
        assert report["skipped"] == [] and len(report["redone"]) == 4, report
        assert current() == after
        assert len((await client.undo_to(cp))["undone"]) == 4
        assert current() == before


def _redo_cli(config: Path, db: Path, env: dict[str, str], *options: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "compensator", "redo", "--config", str(config), "--db", str(db),
         *options],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


async def test_compensator_redo_from_a_terminal(proxy, tasks_config, tasks_env, tmp_path: Path):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        keep = await client.call_ok("tasks__add_task", {"title": "a", "parent_id": None})
        cp = await client.checkpoint()
        await client.call_ok("tasks__rename_task", {"id": keep["id"], "title": "b"})
        await client.call_ok("tasks__complete_task", {"id": keep["id"]})
        after = await state(client)
        await client.undo_to(cp)
    status, said = _redo_cli(tasks_config, db, tasks_env, "--to", str(cp), "--dry-run")
    assert status == 0, said
    assert "replay change 2 tasks__rename_task" in said and "replay change 3" in said
    status, said = _redo_cli(tasks_config, db, tasks_env, "--to", str(cp))
    assert status == 2 and "stdin is not a terminal" in said, said
    status, said = _redo_cli(tasks_config, db, tasks_env, "--to", str(cp), "--yes")
    assert status == 0, said
    assert "replayed change 2 tasks__rename_task as change 4" in said
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        assert await state(client) == after
        # The replays are the agent's own changes: its undo_to takes them back.
        assert len((await client.undo_to(cp))["undone"]) == 2
    status, said = _redo_cli(tasks_config, db, tasks_env, "--change", "99", "--yes")
    assert status == 1 and "change 99 is not one an undo took back" in said, said


async def test_redo_to_replays_the_latest_undo_only_and_a_failed_replay_can_be_retried(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    async with proxy(tasks_config, env=tasks_env) as client:
        keep = await client.call_ok("tasks__add_task", {"title": "a", "parent_id": None})
        cp = await client.checkpoint()
        mistake = await client.call_ok("tasks__add_label", {"name": "mistake"})
        assert mistake["created"]
        [undone] = (await client.call_ok("undo_change", {"change_id": 2}))["undone"]
        assert undone["tool"] == "tasks__add_label"
        await client.call_ok("tasks__toggle_task", {"id": keep["id"]})
        await client.undo_to(cp)
        # The task goes behind the proxy's back: the toggle's replay fails.
        with sqlite3.connect(tmp_path / "tasks.db") as db:
            db.execute("DELETE FROM tasks WHERE id = ?", (keep["id"],))
        report = await redo(client, checkpoint_id=cp)
        assert report["redone"] == []
        [left] = report["left_undone"]
        assert (left["change_id"], left["tool"]) == (2, "tasks__add_label")
        [failed] = report["skipped"]
        assert failed["tool"] == "tasks__toggle_task"
        assert re.fullmatch(r"its replay \(change \d+\) ended error: .+", failed["reason"])
        labels = (await client.call_ok("tasks__list_labels"))["labels"]
        assert "mistake" not in json.dumps(labels), "an earlier undo's change was replayed"
        # Nothing happened, so it may be tried again once the task is back.
        with sqlite3.connect(tmp_path / "tasks.db") as db:
            db.execute(
                "INSERT INTO tasks (id, title, status) VALUES (?, 'a', 'open')", (keep["id"],)
            )
        again = await redo(client, checkpoint_id=cp)
        assert [r["tool"] for r in again["redone"]] == ["tasks__toggle_task"], again


async def test_compensator_redo_covers_every_agents_changes_as_undo_does(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as first:
        cp = await first.checkpoint()
        async with proxy(tasks_config, db=db, env=tasks_env) as second:
            await first.call_ok("tasks__add_label", {"name": "x"})
            await second.call_ok("tasks__add_label", {"name": "y"})
    agents = dict(sql_rows(db, "SELECT id, agent FROM changes"))
    assert len(set(agents.values())) == 2, "the two proxies were one agent"
    done = subprocess.run(
        [sys.executable, "-m", "compensator", "undo", "--config", str(tasks_config),
         "--db", str(db), "--to", str(cp), "--yes"],
        capture_output=True, text=True, env={**os.environ, **tasks_env}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    status, said = _redo_cli(tasks_config, db, tasks_env, "--to", str(cp), "--yes")
    assert status == 0, said
    replays = sql_rows(db, "SELECT redo_of, agent FROM changes WHERE redo_of IS NOT NULL")
    assert sorted(replays) == sorted(agents.items()), "a replay is not its first run's agent's"
    status, said = _redo_cli(
        tasks_config, db, tasks_env, "--to", str(cp), "--agent", agents[1], "--dry-run"
    )
    assert status == 0 and "Nothing to redo" in said, said


def sql_rows(db: Path, statement: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(statement).fetchall()


async def test_an_earlier_undone_change_that_only_echoed_its_arguments_blocks_nothing(
    proxy, tasks_config, tasks_env
):
    async with proxy(tasks_config, env=tasks_env) as client:
        task = await client.call_ok("tasks__add_task", {"title": "a", "parent_id": None})
        cp = await client.checkpoint()
        await client.call_ok("tasks__rename_task", {"id": task["id"], "title": "b"})
        await client.call_ok("undo_change", {"change_id": 2})  # its result names the task
        await client.call_ok("tasks__complete_task", {"id": task["id"]})
        await client.undo_to(cp)
        report = await redo(client, checkpoint_id=cp)
        assert [r["tool"] for r in report["redone"]] == ["tasks__complete_task"], report
        assert [c["change_id"] for c in report["left_undone"]] == [2]
