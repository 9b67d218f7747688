"""A downstream server that writes garbage to stdout, or huge results, cannot take the proxy
down: its calls get answers or isError results, the other servers keep working, and the proxy
answers after. The downstream is tests/servers/noisy_server.py, written on raw stdio."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_compensator.client import ProxyClient

from .conftest import SERVERS, Faults, Launcher

pytestmark = pytest.mark.anyio

REGISTRY = """
servers:
  noisy:
    command: "@PYTHON@"
    args: ["@NOISY@"]
    call_timeout: 60
  raw:
    command: "@PYTHON@"
    args: ["@NOISY@"]
    call_timeout: 5
  silent:
    command: "@PYTHON@"
    args: ["@NOISY@"]
    call_timeout: 2
  tasks:
    command: "@PYTHON@"
    args: ["@TASKS_SERVER@", "--db", "@TMP@/tasks.db"]
tools:
  noisy__echo: {classification: read}
  noisy__stray: {classification: read}
  raw__binary: {classification: read}
  raw__echo: {classification: read}
  noisy__many_blocks: {classification: read}
  silent__echo: {classification: read}
  tasks__list_tasks: {classification: read}
  tasks__add_task:
    classification: reversible
    inverse_tool: tasks__delete_task
    inverse_args: {id: "{result.id}"}
"""
# noisy__huge_text, silent__never and raw__refuse are left unclassified: journaled with their
# results.


@pytest.fixture
def config(write_registry: Callable[[str], Path]) -> Path:
    return write_registry(REGISTRY.replace("@NOISY@", str(SERVERS / "noisy_server.py")))


async def _others_work(client: ProxyClient, title: str) -> None:
    """The tasks server and the proxy's own tools still answer."""
    added = await client.call_ok("tasks__add_task", {"title": title})
    listed = await client.call_ok("tasks__list_tasks")
    assert added["id"] in [task["id"] for task in listed["tasks"]]
    assert isinstance(await client.list_checkpoints(), list)


async def test_garbage_around_every_answer(
    proxy: Launcher, config: Path, tasks_env: dict[str, str], faults: Faults
) -> None:
    faults.kind, faults.injected = "garbage lines and stray answers on stdout", 1
    async with proxy(config, env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"noisy__echo", "noisy__never", "tasks__add_task"} <= names
        for n in range(5):
            reply = await client.call("noisy__echo", {"text": f"hello {n}"})
            assert (reply.is_error, reply.text) == (False, f"hello {n}")
        reply = await client.call("noisy__stray")
        assert (reply.is_error, reply.text) == (False, "after stray answers")
        await _others_work(client, "after garbage")
    faults.survived += 1


async def test_bytes_that_are_not_utf8(
    proxy: Launcher,
    config: Path,
    tasks_env: dict[str, str],
    proxy_log: Callable[[], str],
    faults: Faults,
) -> None:
    faults.kind, faults.injected = "non-UTF-8 bytes on stdout", 1
    async with proxy(config, env=tasks_env) as client:
        reply = await client.call("raw__binary")
        assert (reply.is_error, reply.text) == (False, "after binary"), reply.text
        await _others_work(client, "after binary")
        again = await client.call("raw__echo", {"text": "still here"})
        assert (again.is_error, again.text) == (False, "still here"), again.text
    assert "Traceback" not in proxy_log()
    faults.survived += 1


async def test_only_stray_answers_time_out(
    proxy: Launcher, config: Path, tasks_env: dict[str, str], faults: Faults
) -> None:
    """Answers to ids never sent do not complete a pending call; its call_timeout does."""
    faults.kind, faults.injected = "only answers to ids never sent", 1
    async with proxy(config, env=tasks_env) as client:
        reply = await client.call("silent__never")
        assert reply.is_error
        assert "server 'silent' did not answer 'never' within 2 s" in reply.text, reply.text
        [change] = [c for c in await client.list_changes() if c["tool"] == "silent__never"]
        assert change["status"] == "unknown"
        echo = await client.call("silent__echo", {"text": "ok"})
        assert (echo.is_error, echo.text) == (False, "ok")
        await _others_work(client, "after silence")
    faults.survived += 1


async def test_a_json_rpc_error_is_a_failed_call_not_an_unsent_one(
    proxy: Launcher, config: Path, tasks_env: dict[str, str], faults: Faults
) -> None:
    """The server got the call and answered with an error: the client must not be told that
    the call was never sent, and the journal keeps it as a failed call, not a lost one."""
    faults.kind, faults.injected = "a JSON-RPC error for a tool call", 1
    async with proxy(config, env=tasks_env) as client:
        reply = await client.call("raw__refuse")
        assert reply.is_error
        assert "server 'raw' failed on 'refuse'" in reply.text, reply.text
        assert "refused after starting" in reply.text, reply.text
        assert "not sent" not in reply.text and "a failed call" in reply.text, reply.text
        [change] = [c for c in await client.list_changes() if c["tool"] == "raw__refuse"]
        assert change["status"] == "error", change
        await _others_work(client, "after a JSON-RPC error")
    faults.survived += 1


@pytest.mark.thorough
async def test_huge_results(
    proxy: Launcher, config: Path, tasks_env: dict[str, str], faults: Faults
) -> None:
    faults.kind, faults.injected = "huge results (20 and 65 MB text, 100,000 blocks)", 1
    size = 20 * 1024 * 1024
    async with proxy(config, env=tasks_env) as client:
        huge = await client.call("noisy__huge_text", {"megabytes": 20})
        assert not huge.is_error, huge.text[:300]
        # Over the 64 MiB a client's line may have: a server's lines have no limit.
        over = await client.call("noisy__huge_text", {"megabytes": 65})
        assert not over.is_error and len(over.text) == 65 * 1024 * 1024, over.text[:300]
        assert huge.text == "x" * size
        changes = [c for c in await client.list_changes() if c["tool"] == "noisy__huge_text"]
        assert [c["status"] for c in changes] == ["ok", "ok"], changes
        many = await client.call("noisy__many_blocks", {"count": 100_000})
        assert not many.is_error, many.text[:300]
        assert len(many.raw["content"]) == 100_000
        assert many.raw["content"][-1]["text"] == "99999"
        await _others_work(client, "after huge results")
    faults.survived += 1
