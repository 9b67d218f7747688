"""Failure paths through the real proxy: restarts and the agent they continue, a journal that
cannot write, an expression that breaks after the server answered, a surprise in one
compensation, and calls that overlap (their order, and a checkpoint taken meanwhile)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from pytest_compensator.client import ProxyClient, proxy_parameters
from pytest_compensator.client import _relay as relay_messages  # mcp 1.x shutdown, as launch_proxy

from .conftest import SERVERS, by_id
from .faults import tally
from .test_cli_human import WIDE, cli
from .test_downstream_faults import FLAKY, events, eventually, stored

pytestmark = pytest.mark.anyio

# The fault tests' registry, with time for a call that waits at the server on purpose.
REGISTRY = (
    FLAKY.replace("call_timeout: 2", "call_timeout: 30")
    + """\
  flaky__put_after_change:
    classification: reversible
    inverse_tool: flaky__restore
    inverse_args: {key: "{args.key}", value: "{result.previous}"}
"""
)


@pytest.fixture
def flaky_config(write_registry) -> Callable[..., Path]:
    def make(extra: str = "") -> Path:
        text = REGISTRY.replace("@FLAKY_SERVER@", str(SERVERS / "flaky_server.py"))
        return write_registry(text.replace("@STARTUP@", "20") + extra)

    return make


def arrived(flaky: Path, key: str) -> Callable[[], bool]:
    """Whether put_after_change for `key` has reached the server."""
    return lambda: f"waiting {key}" in events(flaky)


# -- 0: a restarted proxy continues its agent ---------------------------------------------


async def test_a_proxy_restarted_twice_still_undoes_to_the_first_ones_checkpoint(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    async with proxy(tasks_config, db=db, env=tasks_env) as first:
        cp = await first.checkpoint("before the restarts")
        before = await first.call_ok("tasks__list_tasks")
    added = []
    for title in ("second process", "third process"):
        async with proxy(tasks_config, db=db, env=tasks_env) as restarted:
            added.append((await restarted.call_ok("tasks__add_task", {"title": title}))["id"])
    # What a person sees after the checkpoint is what undo takes back, from the terminal ...
    config = ["--config", str(tasks_config), "--db", str(db)]
    logged = cli("log", *config, "--checkpoint", str(cp), "--json", env={**WIDE, **tasks_env})
    assert logged.returncode == 0, logged.stderr
    assert sorted(c["id"] for c in json.loads(logged.stdout)["changes"]) == [1, 2]
    plan = cli("undo", *config, "--to", str(cp), "--dry-run", env={**WIDE, **tasks_env})
    assert plan.returncode == 0, plan.stderr
    assert "Plan: 2 to undo, 0 to skip" in plan.stdout, plan.stdout
    assert "AGENT" not in plan.stdout, "one agent's changes were shown as several agents'"
    # ... and from a fourth process of the same agent.
    async with proxy(tasks_config, db=db, env=tasks_env) as fourth:
        assert sorted(c["id"] for c in await fourth.list_changes(cp)) == [1, 2]
        report = await fourth.undo_to(cp)
        assert report["skipped"] == []
        assert sorted(c["id"] for c in report["undone"]) == [1, 2]
        assert await fourth.call_ok("tasks__list_tasks") == before
    assert len(added) == 2


async def test_the_terminal_sees_and_undoes_every_agents_changes_saying_whose(
    proxy, tasks_config, tasks_env, tmp_path: Path
):
    db = tmp_path / "journal.db"
    env_b = {"COMPENSATOR_WORKDIR": str(tmp_path / "b")}
    (tmp_path / "b").mkdir()
    async with (
        proxy(tasks_config, db=db, env=tasks_env) as a,
        proxy(tasks_config, db=db, env=env_b) as b,
    ):
        cp = await a.checkpoint("shared moment")
        await a.call_ok("tasks__add_task", {"title": "A's"})
        await b.call_ok("tasks__add_task", {"title": "B's"})
        assert [c["tool"] for c in await a.list_changes(cp)] == ["tasks__add_task"]
        # An agent's undo_to takes back its own changes only, even to another's checkpoint.
        report = await b.undo_to(cp)
        assert [c["args"]["title"] for c in report["undone"]] == ["B's"]
        await b.call_ok("tasks__add_task", {"title": "B's again"})
        agents = {c["agent"] for c in (await a.list_changes()) + (await b.list_changes())}
        assert len(agents) == 2
    config = ["--config", str(tasks_config), "--db", str(db)]
    plan = cli("undo", *config, "--to", str(cp), "--dry-run", env={**WIDE, **tasks_env})
    assert "AGENT" in plan.stdout and "Plan: 2 to undo" in plan.stdout, plan.stdout
    (agent_a,) = {
        c["agent"]
        for c in json.loads(cli("log", *config, "--json", env={**WIDE, **tasks_env}).stdout)[
            "changes"
        ]
        if c["args"]["title"] == "A's"
    }
    only_a = cli(
        "undo", *config, "--to", str(cp), "--agent", agent_a, "--dry-run", env={**WIDE, **tasks_env}
    )
    assert "Plan: 1 to undo" in only_a.stdout, only_a.stdout


# -- 1: the server answered, so the client gets that answer --------------------------------


async def test_an_expression_that_breaks_after_the_call_still_returns_the_answer(
    proxy, flaky_config, tmp_path: Path, proxy_log
):
    config = flaky_config(
        """
  flaky__restore:
    classification: reversible
    inverse_tool: flaky__put
    inverse_args: {key: "{args.key}", value: "x"}
    error_when: "to_json(py_literal('b\\\\'x\\\\''))"
"""
    )
    async with proxy(config) as client:
        answer = await client.call_ok("flaky__restore", {"key": "k", "value": "v"})
        assert answer == {"key": "k", "value": "v"}
        (change,) = await client.list_changes()
        assert change["status"] == "ok", change
    assert "error_when" in proxy_log() and "TypeError" in proxy_log()
    tally("expression error after a call", injected=1, survived=1)


# -- 2: a journal that cannot write --------------------------------------------------------

_LIMITED = """
import resource, runpy, sys
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
sys.argv[0] = "compensator.proxy"
runpy.run_module("compensator.proxy", run_name="__main__", alter_sys=True)
"""


@asynccontextmanager
async def limited_proxy(
    config: Path, db: Path, max_file_size: int, log: Path
) -> AsyncIterator[ProxyClient]:
    """The real proxy, unable to grow any file past `max_file_size` bytes (RLIMIT_FSIZE):
    its journal fills up as on a full disk."""
    from mcp.client.stdio import stdio_client

    params = proxy_parameters(config, db)
    params.args = ["-c", _LIMITED, str(max_file_size), *params.args[2:]]
    relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
    with log.open("a") as errlog:
        async with anyio.create_task_group() as relays:
            async with stdio_client(params, errlog=errlog) as (read, write):
                relays.start_soon(relay_messages, read, relay_in)
                async with ClientSession(relay_out, write) as session:
                    await session.initialize()
                    yield ProxyClient(session, None)
            relays.cancel_scope.cancel()


async def test_a_full_journal_refuses_mutating_calls_keeps_reads_and_loses_nothing(
    proxy, flaky_config, tmp_path: Path
):
    config, db = flaky_config(), tmp_path / "journal.db"
    answered: list[str] = []
    refusal = None
    async with limited_proxy(config, db, 160 * 1024, tmp_path / "limited.log") as client:
        cp = await client.checkpoint("before the disk fills")
        for number in range(400):
            key = f"k{number}"
            result = await client.call("flaky__put", {"key": key, "value": "v"})
            if result.is_error:
                refusal = (key, result.text)
                break
            answered.append(key)
        assert refusal is not None, "the journal never filled up"
        key, text = refusal
        assert "was not called, because the journal cannot record it" in text, text
        assert "disk" in text, text
        assert key not in stored(tmp_path / "flaky"), "a call the journal could not record was sent"
        assert await client.call_ok("flaky__get", {"key": answered[0]}) == {
            "key": answered[0],
            "value": "v",
        }, "a read failed while the journal was full"
    assert answered and sorted(stored(tmp_path / "flaky")) == sorted(answered)
    async with proxy(config, db=db) as client:
        changes = await client.list_changes(cp)
        journaled = {c["args"]["key"]: c["status"] for c in changes}
        lost = sorted(set(answered) - set(journaled))
        assert lost == [], f"applied but not journaled: {lost}"
        assert set(journaled.values()) <= {"ok", "unknown"}, journaled
        report = await client.undo_to(cp)
        undone = {c["args"]["key"] for c in report["undone"]}
        assert undone == {k for k, s in journaled.items() if s == "ok"}
        assert sorted(stored(tmp_path / "flaky")) == sorted(
            k for k, s in journaled.items() if s != "ok"
        )
    tally("journal full", injected=1, survived=1, lost=len(lost))


async def test_an_outcome_the_journal_cannot_take_is_written_once_it_can(
    proxy, flaky_config, tmp_path: Path
):
    """The server answers while another process holds the journal's write lock for longer
    than the proxy waits (10 s): the client still gets the server's answer, the outcome is
    written once the journal can take it, and meanwhile mutating calls are refused unsent."""
    config, db = flaky_config(), tmp_path / "journal.db"
    async with proxy(config, db=db) as client:
        cp = await client.checkpoint()
        answers: list[Any] = []

        async def slow_put() -> None:
            answers.append(
                await client.call("flaky__put_after_change", {"key": "k", "value": "A", "wait": 1})
            )

        locker = sqlite3.connect(db, isolation_level=None)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(slow_put)
                await eventually(
                    arrived(tmp_path / "flaky", "k"), "the call to arrive", deadline=60
                )
                locker.execute("BEGIN IMMEDIATE")  # held until released below
            (answer,) = answers
            assert not answer.is_error, answer.text
            assert answer.value == {"key": "k", "value": "A", "previous": None}
            assert stored(tmp_path / "flaky") == {"k": "A"}
            (change,) = await client.list_changes(cp)
            assert change["status"] == "pending"  # not written yet, and not claimed otherwise
            refused = await client.call("flaky__put", {"key": "j", "value": "B"})
            assert refused.is_error and "locked by another process" in refused.text, refused.text
            assert "j" not in stored(tmp_path / "flaky"), (
                "a call the journal could not record was sent"
            )
            assert (await client.call_ok("flaky__get", {"key": "k"}))["value"] == "A"
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        await client.call_ok("flaky__put", {"key": "j", "value": "B"})
        statuses = {c["args"]["key"]: c["status"] for c in await client.list_changes(cp)}
        assert statuses == {"k": "ok", "j": "ok"}
        report = await client.undo_to(cp)
        assert report["skipped"] == [] and stored(tmp_path / "flaky") == {}
    tally("journal locked after a call", injected=1, survived=1)


# -- 3: one change's surprise does not end the undo ----------------------------------------


async def test_a_surprise_in_one_compensation_skips_that_change_and_the_rest_run(
    proxy, flaky_config, tmp_path: Path
):
    config, db = flaky_config(), tmp_path / "journal.db"
    async with proxy(config, db=db) as client:
        cp = await client.checkpoint()
        for key in ("a", "b", "c"):
            await client.call_ok("flaky__put", {"key": key, "value": "v"})
        (damaged,) = [c["id"] for c in await client.list_changes(cp) if c["args"]["key"] == "b"]
        # A compensation record whose arguments are not JSON: what a damaged row reads as.
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT INTO compensations (change_id, step, tool, args, status, created_at) "
                "VALUES (?, 0, 'flaky__restore', '{not json', 'error', '2026-01-01')",
                (damaged,),
            )
        conn.close()
        report = await client.undo_to(cp)
        assert sorted(c["args"]["key"] for c in report["undone"]) == ["a", "c"]
        (skipped,) = report["skipped"]
        assert skipped["id"] == damaged
        assert "failed unexpectedly (JSONDecodeError" in skipped["reason"], skipped
        assert stored(tmp_path / "flaky") == {"b": "v"}
    tally("unexpected error in one compensation", injected=1, survived=1)


# -- 5 and 6: calls that overlap ------------------------------------------------------------


async def test_undo_reverses_the_order_the_server_applied_overlapping_calls(
    proxy, flaky_config, tmp_path: Path
):
    config = flaky_config()
    async with proxy(config) as client:
        await client.call_ok("flaky__put", {"key": "k", "value": "original"})
        cp = await client.checkpoint()
        async with anyio.create_task_group() as group:
            # The first call waits at the server for the key to change: sent concurrently,
            # the second would be applied first, and undo (newest intent first) would put
            # the first call's `previous` (the second's value) back last.
            group.start_soon(
                client.call_ok, "flaky__put_after_change", {"key": "k", "value": "A", "wait": 3}
            )
            await eventually(
                arrived(tmp_path / "flaky", "k"), "the first call to arrive", deadline=60
            )
            group.start_soon(client.call_ok, "flaky__put", {"key": "k", "value": "B"})
        assert stored(tmp_path / "flaky") == {"k": "B"}, "the calls were applied out of order"
        report = await client.undo_to(cp)
        assert report["skipped"] == []
        assert stored(tmp_path / "flaky") == {"k": "original"}


async def test_a_checkpoint_waits_for_a_mutating_call_in_flight(
    proxy, flaky_config, tmp_path: Path
):
    config = flaky_config()
    async with proxy(config) as client:
        finished: list[str] = []
        checkpoints: list[int] = []

        async def slow_put() -> None:
            await client.call_ok("flaky__put_after_change", {"key": "k", "value": "A", "wait": 2})
            finished.append("call")

        async def checkpoint() -> None:
            checkpoints.append(await client.checkpoint("meanwhile"))
            finished.append("checkpoint")

        async with anyio.create_task_group() as group:
            group.start_soon(slow_put)
            await eventually(arrived(tmp_path / "flaky", "k"), "the call to arrive", deadline=60)
            group.start_soon(checkpoint)
        assert finished == ["call", "checkpoint"]
        # The call falls before the checkpoint: nothing to undo after it.
        assert await client.list_changes(checkpoints[0]) == []
        (change,) = await client.list_changes()
        assert change["status"] == "ok"
        assert by_id(await client.list_checkpoints())[checkpoints[0]]["label"] == "meanwhile"
