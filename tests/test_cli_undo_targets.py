"""`compensator undo --change N` and `--since WHEN`, run as real subprocesses on journals a
real proxy wrote in front of examples/tasks_server.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from .conftest import by_id
from .test_cli_human import WIDE, cli

pytestmark = pytest.mark.anyio

# A zone without daylight saving that is not UTC, spelt so no tz database is needed
# (POSIX counts west as positive): a naive --since is read in it, not as UTC.
LOCAL_TZ = {"TZ": "XYZ-5:30"}
LOCAL = timezone(timedelta(hours=5, minutes=30))


def undo(config: Path, db: Path, *args: str, env: dict[str, str]) -> Any:
    return cli("undo", "--config", str(config), "--db", str(db), *args, env={**WIDE, **env})


async def titles(client) -> list[str]:
    tasks = by_id((await client.call_ok("tasks__list_tasks"))["tasks"])
    return sorted(task["title"] for task in tasks.values())


async def test_undo_change_refuses_with_the_reason_and_force_undoes_it(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        await client.call_ok("tasks__add_task", {"title": "a"})
        await client.call_ok("tasks__add_task", {"title": "b"})
        newer, older = [c["id"] for c in await client.list_changes()]

    refused = undo(tasks_config, db, "--change", str(older), "--yes", env=tasks_env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"change {older} tasks__add_task" in refused.stdout and "alone" in refused.stdout
    assert f"skipped change {older} tasks__add_task: not undone alone" in refused.stdout
    assert f"{newer} (tasks__add_task)" in refused.stdout
    assert "Done: 0 undone, 1 skipped" in refused.stdout

    forced = undo(tasks_config, db, "--change", str(older), "--force", "--yes", env=tasks_env)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"undone change {older} tasks__add_task" in forced.stdout

    unknown = undo(tasks_config, db, "--change", str(older), "--yes", env=tasks_env)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert f"change {older} was undone already" in unknown.stderr
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        assert await titles(client) == ["b"]
        assert [c["id"] for c in await client.list_changes()] == [newer]


async def test_undo_since_a_local_time_undoes_what_came_at_or_after_it(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        for title in ("before", "at", "after"):
            await client.call_ok("tasks__add_task", {"title": title})
        after, at, before = await client.list_changes()
    assert before["created_at"] < at["created_at"]  # distinct moments, or the test means nothing
    moment = datetime.fromisoformat(at["created_at"]).astimezone(LOCAL).replace(tzinfo=None)
    since = moment.isoformat(timespec="milliseconds")  # naive: this terminal's local time

    plan = undo(tasks_config, db, "--since", since, "--dry-run", env={**tasks_env, **LOCAL_TZ})
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"every change since {moment:%Y-%m-%d %H:%M:%S}" in plan.stdout
    assert "Plan: 2 to undo, 0 to skip" in plan.stdout

    done = undo(tasks_config, db, "--since", since, "--yes", env={**tasks_env, **LOCAL_TZ})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"undone change {after['id']}" in done.stdout
    assert f"undone change {at['id']}" in done.stdout
    assert f"change {before['id']}" not in done.stdout
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        assert await titles(client) == ["before"]
        assert [c["id"] for c in await client.list_changes()] == [before["id"]]

    # A duration reaching back past every change leaves nothing now.
    again = undo(tasks_config, db, "--since", "1h", "--yes", env=tasks_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "undone change" in again.stdout and "Done: 1 undone" in again.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--since", "yesterday"], "neither a duration"),
        (["--since", "2h30"], "neither a duration"),
        (["--since", "2999-01-01T00:00"], "is in the future"),
        (["--change", "0"], "is not a change id"),
        (["--change", str(2**63)], "is not a change id"),  # past SQLite's integers
        (["--to", str(2**63)], "is not a checkpoint id"),
        (["--change", "3", "--to", "1"], "not allowed with argument"),
        (["--turns", "0"], "is not a number of turns"),
        (["--turns", "two"], "is not a number of turns"),
        ([], "one of the arguments --to --since --turns --change is required"),
    ],
)
def test_bad_undo_targets_are_usage_errors(tmp_path: Path, args: list[str], expected: str):
    result = cli("undo", "--db", str(tmp_path / "none.db"), "--config", "x.yaml", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert expected in result.stderr and "usage: compensator undo" in result.stderr
    assert not (tmp_path / "none.db").exists()
