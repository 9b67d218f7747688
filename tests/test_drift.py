"""Drift check: a change whose state moved out of band after the call is reported, never
overwritten; `force` overrides. Real proxy, real tasks server, out-of-band writes straight
into the server's SQLite file."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compensator.errors import RegistryError
from compensator.registry import load_registry
from pytest_compensator.client import launch_proxy
from tests.conftest import EXAMPLES
from tests.faults import tally

TASK_IDS = (1, 2, 3)


def example_with(path: Path, section: str) -> Path:
    """The example registry at `path`, with `section` before its `state:` and its server path
    made absolute."""
    text = (EXAMPLES / "compensators.yaml").read_text()
    text = text.replace('"tasks_server.py"', f'"{EXAMPLES / "tasks_server.py"}"')
    path.write_text(text.replace("\nstate:\n", f"\n{section}\nstate:\n", 1))
    return path


def verified_registry(tmp_path: Path, extra: str = "") -> Path:
    """The example registry with `defaults: {verify: true}`."""
    return example_with(tmp_path / "verified.yaml", f"defaults:\n  verify: true\n{extra}")


def out_of_band(db: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(db, timeout=10) as conn:
        conn.execute(sql, params)
    conn.close()


def seed(db: Path) -> None:
    """Three open tasks, no labels, written behind the proxy's back."""
    with sqlite3.connect(db, timeout=10) as conn:
        conn.execute("DELETE FROM tasks")
        conn.execute("DELETE FROM labels")
        conn.executemany(
            "INSERT INTO tasks (id, title, status, parent_id) VALUES (?, ?, 'open', NULL)",
            [(i, f"t{i}") for i in TASK_IDS],
        )
    conn.close()


def titles(db: Path) -> dict[int, tuple[str, str]]:
    with sqlite3.connect(db, timeout=10) as conn:
        rows = conn.execute("SELECT id, title, status FROM tasks").fetchall()
    conn.close()
    return {row[0]: (row[1], row[2]) for row in rows}


@pytest.mark.anyio
async def test_drift_is_reported_and_nothing_is_overwritten(proxy, tmp_path, tasks_env):
    db = tmp_path / "tasks.db"
    async with proxy(verified_registry(tmp_path), env=tasks_env) as client:
        explained = await client.call_ok("explain_blast_radius", {"tool": "tasks__rename_task"})
        assert "reads tasks__get_task again after the call" in explained["explanation"]
        task = await client.call_ok("tasks__add_task", {"title": "draft"})
        cp = await client.checkpoint()
        await client.call_ok("tasks__rename_task", {"id": task["id"], "title": "final"})
        out_of_band(db, "UPDATE tasks SET title = 'edited by a person' WHERE id = ?", task["id"])

        plan = await client.undo_to(cp, dry_run=True)
        report = await client.undo_to(cp)

        for answer in (plan, report):
            assert answer["undone"] == []
            [skipped] = answer["skipped"]
            assert skipped["reason"].startswith("drift:")
            assert skipped["drift"]["after_call"]["content"]["title"] == "final"
            assert skipped["drift"]["now"]["content"]["title"] == "edited by a person"
        assert titles(db)[task["id"]][0] == "edited by a person"
        assert [c["id"] for c in await client.list_changes(cp)] == [skipped["id"]]

        forced = await client.call_ok("undo_to", {"checkpoint_id": cp, "force": True})
        assert [c["id"] for c in forced["undone"]] == [skipped["id"]]
        assert titles(db)[task["id"]][0] == "draft"
        assert await client.list_changes(cp) == []


@pytest.mark.anyio
async def test_no_drift_undoes_and_a_delete_is_verified_too(proxy, tmp_path, tasks_env):
    db = tmp_path / "tasks.db"
    async with proxy(verified_registry(tmp_path), env=tasks_env) as client:
        parent = await client.call_ok("tasks__add_task", {"title": "p"})
        await client.call_ok("tasks__add_task", {"title": "c", "parent_id": parent["id"]})
        before = titles(db)
        cp = await client.checkpoint()
        await client.call_ok("tasks__complete_task", {"id": parent["id"]})
        await client.call_ok("tasks__delete_task", {"id": parent["id"]})

        report = await client.undo_to(cp)

        assert report["skipped"] == []
        assert len(report["undone"]) == 2
        assert titles(db) == before


CALLS = st.one_of(
    st.tuples(st.just("tasks__rename_task"), st.sampled_from(TASK_IDS), st.sampled_from("ab")),
    st.tuples(st.just("tasks__complete_task"), st.sampled_from(TASK_IDS), st.none()),
    st.tuples(st.just("tasks__uncomplete_task"), st.sampled_from(TASK_IDS), st.none()),
)
STEPS = st.lists(
    st.tuples(CALLS, st.one_of(st.none(), st.sampled_from(TASK_IDS))), min_size=1, max_size=6
)


def test_out_of_band_changes_are_reported_never_overwritten(tmp_path):
    """Random proxy calls, each maybe followed by an out-of-band rename of some task; then undo.
    Every out-of-band title survives the undo, every change on a task nobody touched out of
    band is undone, and each skipped change says `drift`."""
    db = tmp_path / "tasks.db"
    registry = verified_registry(tmp_path)
    env = {"COMPENSATOR_WORKDIR": str(tmp_path)}
    with (
        (tmp_path / "proxy.log").open("w") as log,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(
            launch_proxy(registry, tmp_path / "journal.db", env=env, stderr=log)
        ) as client,
    ):
        portal.call(client.call_ok, "tasks__list_tasks", {})  # the server made its tables
        counter = iter(range(10**6))
        writes = [0]

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        @given(steps=STEPS)
        def run(steps):
            seed(db)
            before = titles(db)
            cp = portal.call(client.checkpoint)
            oob: dict[int, str] = {}
            touched_after_oob: set[int] = set()
            for (tool, task_id, title), oob_task in steps:
                args = {"id": task_id} if title is None else {"id": task_id, "title": title}
                portal.call(client.call_ok, tool, args)
                if task_id in oob:
                    touched_after_oob.add(task_id)
                if oob_task is not None:
                    value = f"oob-{next(counter)}"
                    out_of_band(db, "UPDATE tasks SET title = ? WHERE id = ?", value, oob_task)
                    oob[oob_task] = value
                    writes[0] += 1
                    touched_after_oob.discard(oob_task)

            report = portal.call(client.undo_to, cp)

            after = titles(db)
            for task_id, value in oob.items():
                assert after[task_id][0] == value, (steps, report)
            for task_id in TASK_IDS:
                if task_id not in oob:
                    assert after[task_id] == before[task_id], (steps, report)
            for skipped in report["skipped"]:
                assert skipped["reason"].startswith("drift:"), skipped
                assert skipped["args"]["id"] in oob
            undone_ids = {c["args"]["id"] for c in report["undone"]}
            assert not undone_ids - set(TASK_IDS)

        run()
        # Each out-of-band write that reached the undo survived it (else an assert above failed).
        tally("out-of-band write, then undo (verify)", injected=writes[0], survived=writes[0])


# -- verify with a read of its own: reversible tools ------------------------------------------

ADD_TASK_READ = '    verify: {tool: tasks__get_task, args: {id: "{result.id}"}}\n'


def with_lines(tmp_path: Path, tool: str, lines: str, name: str = "verify-read.yaml") -> Path:
    """The example registry with `lines` added to `tool`'s entry, its server path absolute."""
    text = (EXAMPLES / "compensators.yaml").read_text()
    text = text.replace('"tasks_server.py"', f'"{EXAMPLES / "tasks_server.py"}"')
    head = f"  {tool}:\n    classification: "
    assert head in text
    path = tmp_path / name
    path.write_text(text.replace(head, f"  {tool}:\n{lines}    classification: ", 1))
    return path


@pytest.mark.anyio
async def test_a_reversible_tool_is_verified_with_a_read_of_its_own(proxy, tmp_path, tasks_env):
    """add_task is undone by deleting the task; a task a person edited since is not deleted."""
    db = tmp_path / "tasks.db"
    config = with_lines(tmp_path, "tasks__add_task", ADD_TASK_READ)
    async with proxy(config, env=tasks_env) as client:
        explained = await client.call_ok("explain_blast_radius", {"tool": "tasks__add_task"})
        assert "reads tasks__get_task again after the call" in explained["explanation"]
        cp = await client.checkpoint()
        edited = await client.call_ok("tasks__add_task", {"title": "draft"})
        untouched = await client.call_ok("tasks__add_task", {"title": "scratch"})
        out_of_band(db, "UPDATE tasks SET title = 'kept by a person' WHERE id = ?", edited["id"])

        report = await client.undo_to(cp)

        assert [c["args"]["title"] for c in report["undone"]] == ["scratch"]
        [skipped] = report["skipped"]
        assert skipped["reason"].startswith("drift: the state read with tasks__get_task")
        assert skipped["drift"]["after_call"]["content"]["title"] == "draft"
        assert skipped["drift"]["now"]["content"]["title"] == "kept by a person"
        assert titles(db) == {edited["id"]: ("kept by a person", "open")}
        assert untouched["id"] not in titles(db)

        forced = await client.call_ok("undo_to", {"checkpoint_id": cp, "force": True})
        assert [c["id"] for c in forced["undone"]] == [skipped["id"]]
        assert titles(db) == {}


def load_error(path: Path) -> str:
    with pytest.raises(RegistryError) as caught:
        load_registry(path, environ={"COMPENSATOR_PYTHON": sys.executable})
    message = str(caught.value)
    assert f"{path}:" in message  # file and line
    return message


@pytest.mark.parametrize(
    ("tool", "lines", "key", "expected"),
    [
        (
            "tasks__add_task",
            "    verify: true\n",
            "tools.tasks__add_task.verify",
            "Name the read: verify: {tool: server__read_tool",
        ),
        (
            "tasks__add_task",
            "    verify: {tol: tasks__get_task}\n",
            "tools.tasks__add_task.verify.tol",
            "Did you mean 'tool'?",
        ),
        (
            "tasks__add_task",
            "    verify: yes please\n",
            "tools.tasks__add_task.verify",
            "expected true, false or a {tool, args} read",
        ),
        (
            "tasks__add_task",
            '    verify: {tool: tasks__get_task, args: {id: "{snapshot.id}"}}\n',
            "tools.tasks__add_task.verify.args",
            "built from the call's args and result",
        ),
        (
            "tasks__add_task",
            '    verify: {tool: tasks__delete_task, args: {id: "{result.id}"}}\n',
            "tools.tasks__add_task.verify.tool",
            "classifies it compensable: it must only read",
        ),
        (
            "tasks__add_task",
            f"    redact: [result.id]\n{ADD_TASK_READ}",
            "tools.tasks__add_task.redact",
            "reads `result.id`, which redact keeps out",
        ),
        (
            "tasks__purge_completed",
            "    verify: {tool: tasks__list_tasks}\n",
            "tools.tasks__purge_completed.verify",
            "an irreversible tool is never undone",
        ),
    ],
)
def test_verify_mistakes_are_located_load_errors(tmp_path, tool, lines, key, expected):
    message = load_error(with_lines(tmp_path, tool, lines))
    assert key in message
    assert expected in message
