"""`compensator log`, `undo` and `explain`, run as real subprocesses on journals a real proxy
wrote in front of examples/tasks_server.py."""

from __future__ import annotations

import functools
import io
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from compensator.cli.terminal import Cell, Column, Rule, Styler, confirm, render_table, wants_colour
from compensator.journal import Intent, Status, default_journal_path
from compensator.journal import SQLiteJournal as Journal

from .conftest import by_id

WIDE = {"COLUMNS": "160"}


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Any:
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COMPENSATOR_DB")}
    return subprocess.run(
        [sys.executable, "-m", "compensator.cli", *args],
        capture_output=True,
        text=True,
        env={**environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


async def acli(*args: str, env: dict[str, str] | None = None) -> Any:
    """`cli` off the event loop, so an open proxy session keeps being served meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(cli, *args, env=env))


async def state(client) -> dict[str, Any]:
    tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
    labels = (await client.call_ok("tasks__list_labels"))["labels"]
    return {"tasks": by_id(tasks), "labels": labels}


async def story(client) -> dict[str, Any]:
    """cp1, two changes, cp2, a delete that cascades and a call that fails in-band."""
    keep = await client.call_ok("tasks__add_task", {"title": "existing"})
    before = await state(client)
    cp1 = await client.checkpoint("before the agent")
    report = await client.call_ok("tasks__add_task", {"title": "write report"})
    await client.call_ok("tasks__add_task", {"title": "sub", "parent_id": keep["id"]})
    await client.call_ok("tasks__complete_task", {"id": report["id"]})
    cp2 = await client.checkpoint("second")
    await client.call_ok("tasks__delete_task", {"id": keep["id"]})
    await client.call("tasks__set_status", {"id": report["id"], "status": "bogus"})
    return {"cp1": cp1, "cp2": cp2, "before": before, "keep": keep["id"]}


def order(text: str, *needles: str) -> list[int]:
    """The line number of the first line holding each needle."""
    lines = text.splitlines()
    return [next(i for i, line in enumerate(lines) if needle in line) for needle in needles]


pytestmark = pytest.mark.anyio


# -- log ----------------------------------------------------------------------------------


async def test_log_while_the_proxy_runs(proxy, tasks_config, tasks_env, tmp_path: Path):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
        shown = await acli("log", "--db", str(db), env=WIDE)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        assert "\x1b" not in out  # not a terminal: no colour
        rows = order(
            out,
            "tasks__delete_task",
            f'checkpoint {ids["cp2"]} "second"',
            "tasks__complete_task",
            '{"title": "write report"}',
            f'checkpoint {ids["cp1"]} "before the agent"',
            '{"title": "existing"}',
        )
        assert rows == sorted(rows)
        assert "tasks__set_status" not in out  # a failed call changed nothing
        assert "1 failed call not shown; --all shows them." in out

        everything = await acli("log", "--db", str(db), "--all", env=WIDE)
        assert "tasks__set_status" in everything.stdout and "error" in everything.stdout

        after = await acli("log", "--db", str(db), "--checkpoint", str(ids["cp2"]), env=WIDE)
        assert "tasks__delete_task" in after.stdout
        assert "tasks__complete_task" not in after.stdout
        assert "before the agent" not in after.stdout and '"second"' in after.stdout

        await client.undo_to(ids["cp2"])
        undone = await acli("log", "--db", str(db), env=WIDE)
        assert "tasks__delete_task" not in undone.stdout
        assert "2 undone changes not shown" in undone.stdout
        listed = await acli("log", "--db", str(db), "--all", env=WIDE)
        assert "compensated" in listed.stdout and "error, undone" in listed.stdout


async def test_log_json_has_checkpoints_and_changes_with_full_args(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    long_title = "a title long enough to be cut short in any table " * 3
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
        await client.call_ok("tasks__add_task", {"title": long_title})
        result = await acli("log", "--db", str(db), "--json")
        document = json.loads(result.stdout)
        assert document["journal"] == str(db)
        assert [cp["id"] for cp in document["checkpoints"]] == [ids["cp2"], ids["cp1"]]
        assert document["checkpoints"][0]["label"] == "second"
        assert "last_change_id" in document["checkpoints"][0]
        changes = document["changes"]
        assert [c["id"] for c in changes] == sorted((c["id"] for c in changes), reverse=True)
        assert changes[0]["args"] == {"title": long_title}
        assert set(changes[0]) >= {"tool", "classification", "status", "created_at", "undone_at"}
        assert document["hidden"] == {"undone": 0, "failed": 1}
        table = await acli("log", "--db", str(db), env={"COLUMNS": "100"})
        assert all(len(line) <= 100 for line in table.stdout.splitlines())
        assert "…" in table.stdout and long_title not in table.stdout


async def test_log_finds_the_journal_of_a_config_like_serve(
    proxy, tasks_config, tasks_env, tmp_path: Path, monkeypatch
):
    monkeypatch.delenv("COMPENSATOR_DB", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    db = default_journal_path(tasks_config)
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        await client.call_ok("tasks__add_task", {"title": "found"})
    env = {**WIDE, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = await acli("log", "--config", str(tasks_config), env=env)
    assert result.returncode == 0 and '{"title": "found"}' in result.stdout
    explicit = await acli("log", "--config", "elsewhere.yaml", env={"COMPENSATOR_DB": str(db)})
    assert explicit.returncode == 0 and "tasks__add_task" in explicit.stdout


@pytest.mark.postgres_journal
async def test_log_and_undo_on_a_postgres_journal_two_hosts_wrote(
    proxy, tasks_config, tasks_env, postgres_url: str
):
    """Two proxies on different hosts write one PostgreSQL journal: log shows where each
    change came from, and `compensator undo` undoes them from the terminal."""
    async with proxy(
        tasks_config, db=postgres_url, env={**tasks_env, "COMPENSATOR_HOST": "laptop"}
    ) as client:
        ids = await story(client)
    async with proxy(
        tasks_config, db=postgres_url, env={**tasks_env, "COMPENSATOR_HOST": "build-box"}
    ) as client:
        await client.call_ok("tasks__add_label", {"name": "from the build box"})
    shown = cli("log", "--db", postgres_url, env=WIDE)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("compensator log: postgresql://") and "FROM" in shown.stdout
    line = next(row for row in shown.stdout.splitlines() if "from the build box" in row)
    assert "build-box" in line and "laptop" not in line
    assert "sessions (oldest first):" in shown.stdout
    assert shown.stdout.count("ended") == 2 and "running" not in shown.stdout
    document = json.loads(cli("log", "--db", postgres_url, "--json").stdout)
    # A proxy never carries on an agent of another host: two hosts, two agents.
    assert len({c["agent"] for c in document["changes"]}) == 2
    hosts = {c["tool"]: c["host"] for c in document["changes"]}
    assert hosts["tasks__add_label"] == "build-box" and hosts["tasks__add_task"] == "laptop"
    assert [s["host"] for s in document["sessions"]] == ["laptop", "build-box"]
    done = undo(tasks_config, postgres_url, ids["cp1"], "--yes", env=tasks_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Done: 5 undone, 0 skipped, 1 with nothing to undo." in done.stdout
    async with proxy(tasks_config, db=postgres_url, env=tasks_env) as client:
        assert await state(client) == ids["before"]
        assert await client.list_changes(ids["cp1"]) == []


def test_log_never_creates_a_journal(tmp_path: Path):
    missing = tmp_path / "sub" / "nope.db"
    result = cli("log", "--db", str(missing))
    assert result.returncode == 1 and result.stdout == ""
    assert f"no journal at {missing}" in result.stderr and "Traceback" not in result.stderr
    assert not missing.parent.exists()
    state_home = tmp_path / "state"
    by_config = cli("log", "--config", "x.yaml", env={"XDG_STATE_HOME": str(state_home)})
    assert by_config.returncode == 1 and not state_home.exists()
    neither = cli("log")
    assert neither.returncode == 2 and "--db" in neither.stderr


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path: Path):
    pty = pytest.importorskip("pty")
    db = tmp_path / "j.db"
    journal = Journal(db)
    change = journal.record_intent(
        Intent(tool="tasks__add_task", classification="reversible", args={})
    )
    journal.record_outcome(change, status=Status.OK)
    journal.close()

    def on_a_terminal(env: dict[str, str]) -> str:
        leader, follower = pty.openpty()
        environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        process = subprocess.Popen(
            [sys.executable, "-m", "compensator.cli", "log", "--db", str(db)],
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env={**environ, **env},
        )
        os.close(follower)
        output = _read_all(leader, process)
        os.close(leader)
        return output

    assert "\x1b[" in on_a_terminal({})
    coloured_off = on_a_terminal({"NO_COLOR": "1"})
    assert "tasks__add_task" in coloured_off and "\x1b[" not in coloured_off


def _read_all(fd: int, process: subprocess.Popen, timeout: float = 30) -> str:
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:  # Linux: the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    process.wait(timeout=10)
    return b"".join(chunks).decode()


# -- undo ---------------------------------------------------------------------------------


def undo(config: Path, db: Path | str, checkpoint: int, *flags: str, env: dict[str, str]) -> Any:
    args = ["undo", "--config", str(config), "--db", str(db), "--to", str(checkpoint), *flags]
    return cli(*args, env={**WIDE, **env})


async def test_dry_run_shows_the_plan_and_changes_nothing(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
        before, changes = await state(client), await client.list_changes()
        plan = await anyio.to_thread.run_sync(
            functools.partial(undo, tasks_config, db, ids["cp1"], "--dry-run", env=tasks_env)
        )
        assert plan.returncode == 0, plan.stderr
        out = plan.stdout
        assert 'to checkpoint 1 "before the agent"' in out
        assert "call tasks__restore_task" in out and "call tasks__restore_tasks" in out
        assert "nothing to undo: the call failed" in out
        assert "Plan: 4 to undo, 0 to skip, 1 with nothing to undo." in out
        assert "Dry run: nothing was changed." in out
        assert await state(client) == before
        assert await client.list_changes() == changes


async def test_undo_yes_restores_the_checkpoint_and_a_second_run_has_nothing_to_do(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
    done = undo(tasks_config, db, ids["cp1"], "--yes", env=tasks_env)
    assert done.returncode == 0, done.stdout + done.stderr
    progress = order(
        done.stdout,
        "nothing to undo for change 6 tasks__set_status: the call failed",
        "undone change 5 tasks__delete_task",
        "undone change 4 tasks__complete_task",
        "undone change 3 tasks__add_task",
        "undone change 2 tasks__add_task",
        "Done: 4 undone, 0 skipped, 1 with nothing to undo.",
    )
    assert progress == sorted(progress)
    again = undo(tasks_config, db, ids["cp1"], "--yes", env=tasks_env)
    assert again.returncode == 0 and "Nothing to undo after checkpoint 1." in again.stdout
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        assert await state(client) == ids["before"]
        assert await client.list_changes(ids["cp1"]) == []


async def test_undo_from_the_terminal_while_a_proxy_is_idle(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
        assert len(await client.list_changes(ids["cp1"])) == 5
        done = await anyio.to_thread.run_sync(
            functools.partial(undo, tasks_config, db, ids["cp1"], "--yes", env=tasks_env)
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert await client.list_changes(ids["cp1"]) == []
        assert await state(client) == ids["before"]
        # The proxy still journals, and its own undo_to sees the same journal.
        cp = await client.checkpoint()
        await client.call_ok("tasks__add_task", {"title": "after"})
        assert len((await client.undo_to(cp))["undone"]) == 1


async def test_an_irreversible_change_is_skipped_with_its_reason(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        old = await client.call_ok("tasks__add_task", {"title": "old"})
        await client.call_ok("tasks__complete_task", {"id": old["id"]})
        cp = await client.checkpoint()
        await client.call_ok("tasks__add_task", {"title": "new"})
        await client.call_ok("tasks__purge_completed")
    done = undo(tasks_config, db, cp, "--yes", env=tasks_env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skip: irreversible" in done.stdout  # in the plan
    assert "skipped change 4 tasks__purge_completed: irreversible" in done.stdout
    assert "undone change 3 tasks__add_task" in done.stdout
    assert "Done: 1 undone, 1 skipped" in done.stdout
    assert "Skipped, still open" in done.stdout
    left = cli("log", "--db", str(db), "--checkpoint", str(cp), env=WIDE)
    assert "tasks__purge_completed" in left.stdout and "tasks__add_task" not in left.stdout


async def test_undo_asks_and_refuses_without_a_terminal(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        ids = await story(client)
        changes = await client.list_changes()
        refused = await anyio.to_thread.run_sync(
            functools.partial(undo, tasks_config, db, ids["cp1"], env=tasks_env)
        )
        assert refused.returncode == 2
        assert "Pass --yes" in refused.stderr and "tasks__delete_task" in refused.stdout
        assert await client.list_changes() == changes


async def test_an_unknown_checkpoint_lists_the_valid_ones(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as client:
        await story(client)
    for result in (
        undo(tasks_config, db, 99, "--yes", env=tasks_env),
        cli("log", "--db", str(db), "--checkpoint", "99"),
    ):
        assert result.returncode == 1 and result.stdout == ""
        assert "no checkpoint 99" in result.stderr
        assert 'checkpoint 2 "second"' in result.stderr
        assert 'checkpoint 1 "before the agent"' in result.stderr


# -- explain ------------------------------------------------------------------------------


async def test_explain_says_what_the_meta_tool_says(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        expected = await client.call_ok("explain_blast_radius", {"tool": "tasks__delete_task"})
    raw = await acli(
        "explain", "--config", str(tasks_config), "tasks__delete_task", "--json", env=tasks_env
    )
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout) == expected
    shown = await acli(
        "explain", "--config", str(tasks_config), "tasks__delete_task", env=tasks_env
    )
    out = shown.stdout
    assert out.startswith("tasks__delete_task: compensable")
    assert "journaled  yes" in out and "undoable   yes" in out
    assert 'snapshot   tasks__get_task_tree {"id": "{args.id}"}' in out
    assert "1. tasks__restore_task" in out and "2. tasks__restore_tasks" in out
    assert "when length(snapshot.children) > `0`" in out
    assert expected["explanation"] in " ".join(out.split()) and "\x1b" not in out


def test_explain_an_unknown_tool_fails_with_a_suggestion(tasks_config, tasks_env):
    result = cli("explain", "--config", str(tasks_config), "tasks__delete_tsk", env=tasks_env)
    assert result.returncode == 1 and result.stdout == ""
    assert "no tool named 'tasks__delete_tsk'" in result.stderr
    assert "Did you mean 'tasks__delete_task'?" in result.stderr


def test_explain_works_when_a_server_does_not_start(write_registry, tasks_env):
    config = write_registry(
        """
        servers:
          tasks:
            command: "@PYTHON@"
            args: ["@TASKS_SERVER@", "--db", "@TMP@/t.db"]
          gone:
            command: "@TMP@/no-such-binary"
            prefix: g
        tools:
          g__wipe: {classification: irreversible}
        """
    )
    result = cli("explain", "--config", str(config), "g__wipe", "--startup-timeout", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("g__wipe: irreversible")
    assert "undoable   no" in result.stdout
    # The message names the server, found through its prefix.
    assert "server 'gone' did not start" in result.stderr
    unlisted = cli("explain", "--config", str(config), "tasks__restore_tasks", "--json")
    assert json.loads(unlisted.stdout)["classification"] == "unknown"


def test_every_command_has_help_with_examples():
    for command, example in [
        ("log", "compensator log --db ./journal.db --checkpoint 3"),
        ("undo", "compensator undo --config compensators.yaml --to 3 --dry-run"),
        ("explain", "compensator explain --config compensators.yaml tasks__delete_task"),
    ]:
        helped = cli(command, "--help")
        assert helped.returncode == 0 and "examples:" in helped.stdout
        assert example in helped.stdout
    top = cli("--help")
    assert "log" in top.stdout and "undo" in top.stdout and "explain" in top.stdout


# -- terminal helpers ---------------------------------------------------------------------


def test_tables_fit_the_width_by_truncating_and_wrapping():
    columns = [
        Column(header="ID"),
        Column(header="NOTE", overflow="wrap", min_width=10),
        Column(header="ARGS", overflow="truncate", min_width=10),
    ]
    rows = [
        ["1", "a note that needs more than one line", '{"k": "a long value here"}'],
        Rule(text="-- a separator --"),
        ["22", Cell(text="short", style="red"), "{}"],
    ]
    lines = render_table(columns, rows, width=30, style=Styler(enabled=False))
    assert all(len(line) <= 30 for line in lines)
    assert lines[0].split() == ["ID", "NOTE", "ARGS"]
    assert lines[1].endswith("…") and "a note" in lines[1]
    assert lines[2].strip() and not lines[2].startswith("1")  # the note's second line
    assert "-- a separator --" in lines
    coloured = render_table(columns, rows, width=30, style=Styler(enabled=True))
    assert "\x1b[31mshort\x1b[0m" in coloured[-1]


def test_colour_decision_and_the_question(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_colour(Terminal()) and not wants_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour(Terminal())
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value counts
    assert wants_colour(Terminal())
    out = io.StringIO()
    assert confirm("Go?", stdin=io.StringIO("yes\n"), stdout=out) and out.getvalue() == "Go? [y/N] "
    assert not confirm("Go?", stdin=io.StringIO("\n"), stdout=io.StringIO())
    assert not confirm("Go?", stdin=io.StringIO(""), stdout=io.StringIO())
