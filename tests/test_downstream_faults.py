"""Downstream faults through the real proxy: servers that exit, hang, fail to start, and calls
the client cancels. The downstream is tests/servers/flaky_server.py, misbehaving on request."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from compensator.errors import RegistryError
from compensator.registry import parse_registry
from compensator.wire import sdk as _sdk

from .conftest import SERVERS

pytestmark = pytest.mark.anyio

FLAKY = """
servers:
  flaky:
    command: "@PYTHON@"
    args: ["@FLAKY_SERVER@"]
    env: {FLAKY_DIR: "@TMP@/flaky"}
    call_timeout: 2
    startup_timeout: @STARTUP@
  other:
    command: "@PYTHON@"
    args: ["@FLAKY_SERVER@"]
    env: {FLAKY_DIR: "@TMP@/other"}
tools:
  flaky__get: {classification: read}
  flaky__put:
    classification: reversible
    inverse_tool: flaky__restore
    inverse_args: {key: "{args.key}", value: "{result.previous}"}
  other__get: {classification: read}
  other__put:
    classification: reversible
    inverse_tool: other__restore
    inverse_args: {key: "{args.key}", value: "{result.previous}"}
"""


@pytest.fixture
def flaky_config(write_registry, tmp_path: Path) -> Callable[..., Path]:
    def make(startup_timeout: float = 20) -> Path:
        text = FLAKY.replace("@FLAKY_SERVER@", str(SERVERS / "flaky_server.py"))
        return write_registry(text.replace("@STARTUP@", str(startup_timeout)))

    for name in ("flaky", "other"):
        (tmp_path / name).mkdir()
    return make


@pytest.fixture
def flaky_dir(tmp_path: Path) -> Path:
    return tmp_path / "flaky"


def starts(folder: Path) -> int:
    """How many times the server in `folder` was started."""
    log = folder / "starts.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def stored(folder: Path) -> dict[str, Any]:
    path = folder / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def events(folder: Path) -> list[str]:
    path = folder / "events.log"
    return path.read_text().splitlines() if path.exists() else []


async def eventually(check: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    """Poll `check` until it holds; a process's side effect has no event to await. The
    deadline only bounds a failure: a check that holds returns at once."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} did not happen within {deadline} s")
        await anyio.sleep(0.05)


def window(failed_starts: int) -> float:
    """The restart backoff after `failed_starts` failed starts in a row: 0.5 s, doubling."""
    return 0.5 * 2 ** (failed_starts - 1)


def longest_wait(texts: list[str]) -> float:
    """The longest "in N s or later" the proxy gave: when every backoff it stated is over."""
    stated = [float(n) for text in texts for n in re.findall(r"in ([\d.]+) s or later", text)]
    assert stated, f"no backoff stated in {texts}"
    return max(stated)


STUCK = 60.0
"""Seconds after which a call that should answer counts as stuck behind a hung one: it only
bounds a failure, a call that answers returns at once."""


def names(tools: list[Any]) -> list[str]:
    return sorted(tool.name for tool in tools)


def by_tool(changes: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    [change] = [c for c in changes if c["tool"] == tool]
    return change


# -- a server that exits is restarted ---------------------------------------------------------


async def test_exited_server_is_restarted_on_the_next_call(proxy, flaky_config, flaky_dir, faults):
    faults.kind = "server exited mid-call"
    crashes = [
        ("flaky__crash", {"code": 3}),
        ("flaky__crash", {"code": 5, "delay": 0.2}),
        ("flaky__put_then_crash", {"key": "c", "value": "3", "code": 1}),
    ]
    async with proxy(flaky_config()) as client:
        before = await client.list_tools()
        await client.call_ok("flaky__put", {"key": "a", "value": "1"})
        for number, (tool, args) in enumerate(crashes, 1):
            faults.injected += 1
            crashed = await client.call(tool, args)
            assert crashed.is_error
            short = tool.removeprefix("flaky__")
            assert f"server 'flaky' exited while handling '{short}'" in crashed.text
            assert "restarted on the next call" in crashed.text
            assert starts(flaky_dir) == number
            assert (await client.call_ok("flaky__get", {"key": "a"}))["value"] == "1"
            assert starts(flaky_dir) == number + 1
            assert names(await client.list_tools()) == names(before)
            faults.survived += 1
        changes = await client.list_changes()
    # The call that hit the exit may have applied (put_then_crash did): journaled as unknown.
    assert stored(flaky_dir) == {"a": "1", "c": "3"}
    hit = [c for c in changes if c["tool"] in {tool for tool, _ in crashes}]
    assert [c["status"] for c in hit] == ["unknown"] * len(crashes)
    assert by_tool(changes, "flaky__put_then_crash")["args"] == crashes[2][1]


async def test_a_tool_gone_after_a_restart_gets_a_clear_error(
    proxy, flaky_config, flaky_dir, faults
):
    faults.kind = "server restarted without one of its tools"
    async with proxy(flaky_config()) as client:
        before = await client.list_tools()
        (flaky_dir / "drop-get").touch()
        faults.injected += 1
        assert (await client.call("flaky__crash", {})).is_error
        reply = await client.call("flaky__get", {"key": "a"})
        assert reply.is_error
        assert "no longer offers tool 'get'" in reply.text
        assert names(await client.list_tools()) == names(before)  # the client's list is stable
        await client.call_ok("flaky__put", {"key": "a", "value": "1"})  # the rest still works
    assert starts(flaky_dir) == 2
    faults.survived += 1


async def test_restarts_back_off_while_the_server_keeps_failing(
    proxy, flaky_config, flaky_dir, proxy_log, faults
):
    faults.kind = "server failing to restart"
    async with proxy(flaky_config()) as client:
        before = await client.list_tools()
        (flaky_dir / "fail-start").touch()
        assert (await client.call("flaky__crash", {})).is_error
        faults.injected += 1

        first = await client.call("flaky__get", {"key": "a"})
        assert first.is_error
        assert "could not be restarted: exited during start-up" in first.text
        assert "in 0.5 s or later" in first.text
        assert starts(flaky_dir) == 2

        # Within the backoff window: an immediate answer, and no attempt to start it. A call
        # that a busy machine sends after the window is an attempt, which fails and doubles
        # the window: call again until one lands inside a window.
        failed = 1
        during = await client.call("flaky__put", {"key": "a", "value": "1"})
        while "could not be restarted" in during.text and failed < 6:
            failed += 1
            assert f"in {window(failed):g} s or later" in during.text  # doubled
            during = await client.call("flaky__put", {"key": "a", "value": "1"})
        assert during.is_error
        assert "server 'flaky' is down: exited during start-up" in during.text
        assert "next restart attempt" in during.text
        assert starts(flaky_dir) == 1 + failed

        # Sleeping past the window is what is tested: the next attempt waits for a call, so
        # a busy machine sleeping longer changes nothing.
        await anyio.sleep(window(failed) + 0.1)
        second = await client.call("flaky__get", {"key": "a"})
        assert second.is_error and f"in {window(failed + 1):g} s or later" in second.text
        assert starts(flaky_dir) == 2 + failed

        (flaky_dir / "fail-start").unlink()
        await anyio.sleep(window(failed + 1) + 0.1)
        await client.call_ok("flaky__put", {"key": "a", "value": "1"})
        assert starts(flaky_dir) == 3 + failed
        assert names(await client.list_tools()) == names(before)
        # A refused mutating call was never sent: nothing is journaled for it.
        puts = [c for c in await client.list_changes() if c["tool"] == "flaky__put"]
        assert [c["status"] for c in puts] == ["ok"]
    assert "server 'flaky' restarted" in proxy_log()
    faults.survived += 1


# -- hung servers: call_timeout and startup_timeout --------------------------------------------


async def test_call_timeout_abandons_a_hung_call_without_blocking_others(
    proxy, flaky_config, flaky_dir, tmp_path, faults
):
    faults.kind, faults.injected = "hung call (call_timeout)", 1
    other_dir = tmp_path / "other"
    async with proxy(flaky_config()) as client:
        hung: dict[str, Any] = {}

        async def hang() -> None:
            started = time.monotonic()
            hung["reply"] = await client.call("flaky__hang", {})
            hung["seconds"] = time.monotonic() - started

        async with anyio.create_task_group() as group:
            group.start_soon(hang)
            # `other` has no call_timeout: its hung call is in flight for as long as the calls
            # below take, however slow the machine, on its server and on flaky.
            group.start_soon(client.call, "other__hang", {})
            await eventually(lambda: "hanging" in events(flaky_dir), "flaky's hang starting")
            await eventually(lambda: "hanging" in events(other_dir), "other's hang starting")
            with anyio.fail_after(STUCK):
                # Reads overlap a hung call, on its own server and on another.
                beside = await client.call_ok("other__get", {"key": "k"})
                elsewhere = await client.call_ok("flaky__get", {"key": "k"})
            assert beside == elsewhere == {"key": "k", "value": None}
            await eventually(lambda: "reply" in hung, "flaky's call_timeout")
            # The timed-out call no longer holds back flaky's mutating calls (they go one at
            # a time per server), and other's hung call never held them back.
            with anyio.fail_after(STUCK):
                await client.call_ok("flaky__put", {"key": "after", "value": "x"})
            group.cancel_scope.cancel()  # other's hang, which nothing times out
        reply = hung["reply"]
        assert reply.is_error
        assert "server 'flaky' did not answer 'hang' within 2 s" in reply.text
        assert hung["seconds"] > 1.9  # not before its timeout; a busy machine only adds to it
        assert by_tool(await client.list_changes(), "flaky__hang")["status"] == "unknown"
    assert stored(flaky_dir) == {"after": "x"}
    assert starts(flaky_dir) == 1  # a timeout is not a death
    faults.survived += 1


async def test_server_hanging_at_startup_is_retried_in_the_background(
    proxy, flaky_config, flaky_dir, proxy_log, faults
):
    faults.kind, faults.injected = "hung start-up (startup_timeout)", 1
    (flaky_dir / "hang-start").touch()
    # The proxy serves at all while the server sleeps its hour: it gave up on the start.
    async with proxy(flaky_config(startup_timeout=1.5)) as client:
        tools = names(await client.list_tools())
        assert not [t for t in tools if t.startswith("flaky__")]
        assert "other__put" in tools
        reply = await client.call("flaky__get", {"key": "a"})
        assert reply.is_error and "failed to start" in reply.text
        assert "did not finish starting within 1.5 s" in reply.text
        assert "retries it in the background" in reply.text
        await client.call_ok("other__put", {"key": "a", "value": "1"})
    assert "server 'flaky' failed to start: did not finish starting" in proxy_log()
    faults.survived += 1


async def test_server_that_failed_its_first_start_is_offered_once_it_starts(
    proxy, flaky_config, flaky_dir, proxy_log, faults
):
    faults.kind, faults.injected = "server failing its first start", 1
    (flaky_dir / "fail-start").touch()
    told: list[str] = []

    async def message_handler(message: Any) -> None:
        told.append(getattr(_sdk.notification_of(message), "method", ""))

    options = {"message_handler": message_handler}
    async with proxy(flaky_config(), session_options=options) as client:
        assert not [t for t in names(await client.list_tools()) if t.startswith("flaky__")]
        reply = await client.call("flaky__put", {"key": "a", "value": "1"})
        assert reply.is_error and "failed to start" in reply.text
        assert "retries it in the background" in reply.text
        await eventually(lambda: starts(flaky_dir) >= 3, "two background retries")
        cp = await client.checkpoint()
        (flaky_dir / "fail-start").unlink()
        await eventually(
            lambda: "notifications/tools/list_changed" in told, "tools/list_changed", 60
        )
        assert {"flaky__get", "flaky__put"} <= set(names(await client.list_tools()))
        await client.call_ok("flaky__put", {"key": "a", "value": "1"})
        assert stored(flaky_dir) == {"a": "1"}
        report = await client.undo_to(cp)
        assert [c["tool"] for c in report["undone"]] == ["flaky__put"]
        assert stored(flaky_dir) == {}
    log = proxy_log()
    assert "server 'flaky' started on attempt" in log
    # The same reason, attempt after attempt, is reported once, not on every retry.
    assert log.count("server 'flaky' is unavailable") == 1, log
    assert "still fails to start" not in log
    faults.survived += 1


# -- client cancellation ------------------------------------------------------------------------


async def test_client_cancellation_reaches_the_downstream(proxy, flaky_config, flaky_dir, faults):
    faults.kind, faults.injected = "client cancelled a forwarded call", 1
    async with proxy(flaky_config()) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call, "flaky__sleep", {"seconds": 30, "tag": "c1"})
            await eventually(lambda: "started c1" in events(flaky_dir), "the sleep starting")
            # Cancelling the awaiting task sends notifications/cancelled to the proxy.
            group.cancel_scope.cancel()
        await eventually(lambda: "cancelled c1" in events(flaky_dir), "the downstream cancel")
        assert "finished c1" not in events(flaky_dir)
        assert by_tool(await client.list_changes(), "flaky__sleep")["status"] == "unknown"
        assert (await client.call_ok("flaky__sleep", {"seconds": 0, "tag": "c2"})) == {"slept": 0}
    assert events(flaky_dir)[-1] == "finished c2"
    faults.survived += 1


# -- undo while the target server is down -------------------------------------------------------


async def test_undo_with_the_server_down_is_finished_by_a_later_undo(
    proxy, flaky_config, flaky_dir, faults
):
    faults.kind, faults.injected = "undo with the server down", 1
    async with proxy(flaky_config()) as client:
        await client.call_ok("flaky__put", {"key": "a", "value": "0"})
        cp = await client.checkpoint()
        await client.call_ok("flaky__put", {"key": "a", "value": "1"})
        await client.call_ok("flaky__put", {"key": "b", "value": "2"})
        (flaky_dir / "fail-start").touch()
        assert (await client.call("flaky__crash", {})).is_error

        report = await client.undo_to(cp)
        assert report["undone"] == []
        skipped = {s["id"]: s for s in report["skipped"] if s["tool"] == "flaky__put"}
        assert len(skipped) == 2
        assert all("server 'flaky'" in s["reason"] for s in skipped.values())
        assert any("could not be restarted" in s["reason"] for s in skipped.values())
        assert stored(flaky_dir) == {"a": "1", "b": "2"}

        (flaky_dir / "fail-start").unlink()
        # Past every backoff the undo was told of (one, or more if a busy machine let the
        # first window close between its steps): the window is what is tested, and sleeping
        # longer changes nothing, since the next attempt waits for a call.
        await anyio.sleep(longest_wait([s["reason"] for s in skipped.values()]) + 0.1)
        again = await client.undo_to(cp)
        assert sorted(c["id"] for c in again["undone"]) == sorted(skipped)
        assert stored(flaky_dir) == {"a": "0"}
        left = await client.list_changes(cp)
        assert [c["tool"] for c in left] == ["flaky__crash"]
        third = await client.undo_to(cp)
        faults.twice = len(third["undone"])
        assert third["undone"] == [] and stored(flaky_dir) == {"a": "0"}
    faults.survived += 1


# -- registry keys -----------------------------------------------------------------------------

SERVER = """\
servers:
  flaky:
    command: python3
    {line}
"""


def parse_server(tmp_path: Path, line: str) -> Any:
    path = tmp_path / "r.yaml"
    path.write_text(SERVER.format(line=line))
    return parse_registry(path.read_text(), path=path).servers["flaky"]


def test_timeouts_default_to_none(tmp_path: Path) -> None:
    spec = parse_server(tmp_path, "args: []")
    assert spec.call_timeout is None and spec.startup_timeout is None


def test_timeouts_are_read_as_seconds(tmp_path: Path) -> None:
    spec = parse_server(tmp_path, "call_timeout: 2\n    startup_timeout: 0.5")
    assert spec.call_timeout == 2.0 and spec.startup_timeout == 0.5


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('call_timeout: "2"', "expected a number of seconds, got a string"),
        ("call_timeout: true", "expected a number of seconds, got a boolean"),
        ("call_timeout: 0", "expected a number of seconds greater than 0, got 0"),
        ("startup_timeout: -1", "expected a number of seconds greater than 0, got -1"),
        ("startup_timeout: .nan", "expected a number of seconds greater than 0, got nan"),
        ("startup_timeout: [1]", "expected a number of seconds, got a list"),
    ],
)
def test_bad_timeouts_are_located_errors(tmp_path: Path, line: str, problem: str) -> None:
    with pytest.raises(RegistryError) as info:
        parse_server(tmp_path, line)
    key = line.split(":")[0]
    assert str(info.value) == (
        f"{tmp_path / 'r.yaml'}:4: servers.flaky.{key}: {problem}. "
        "Write a number of seconds greater than 0, e.g. 30 or 2.5."
    )
    assert info.value.key == f"servers.flaky.{key}" and info.value.line == 4


def test_misspelt_timeout_key_is_suggested(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="Did you mean 'call_timeout'"):
        parse_server(tmp_path, "call_timeot: 2")
