"""examples/registries/redis.yaml against the real @modelcontextprotocol/server-redis and a
real redis-server; test runs get scratch ones through compensator/scratch.py and never touch
the Redis a client's configuration names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compensator import scratch
from compensator.scratch import scratch_redis, with_url

from .conftest import REGISTRIES, processes, third_party_servers
from .test_plugin import broken_variant, caught_undoing, run_quick
from .test_unavailable import running_with

REGISTRY = REGISTRIES / "redis.yaml"
SERVER_JS = "npm/node_modules/@modelcontextprotocol/server-redis/dist/index.js"
SHIPPED_URL = "redis://127.0.0.1:6379"

# set's second inverse step: a key that was new is deleted again.
DELETE_STEP = "      - tool: redis__delete\n"


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    root = third_party_servers(SERVER_JS, node=True)
    monkeypatch.setenv("COMPENSATOR_SERVERS", str(root))
    return root


@pytest.fixture
def yours(servers: Path, tmp_path: Path) -> Iterator[str]:
    """A Redis standing for the person's own: its URL."""
    with scratch_redis(tmp_path / "yours") as url:
        yield url


def redis(url: str, *command: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-u", url, "--raw", *command], capture_output=True, text=True, check=True
    )
    return done.stdout


def contents(url: str) -> dict[str, str]:
    keys = sorted(key for key in redis(url, "KEYS", "*").splitlines() if key)
    return {key: redis(url, "GET", key).removesuffix("\n") for key in keys}


def test_a_redis_url_is_replaced_or_added() -> None:
    url = "redis://127.0.0.1:5"
    assert with_url(["node", "x.js", "redis://:pw@host:6379/2"], url) == ["node", "x.js", url]
    assert with_url(["npx", "-y", "@modelcontextprotocol/server-redis"], url)[-1] == url
    assert with_url(["node", "x.js", "REDISS://h"], url) == ["node", "x.js", url]


def test_a_redis_named_in_an_option_or_the_environment_is_replaced() -> None:
    url = "redis://127.0.0.1:5"
    command = ["redis-mcp-server", "--url=redis://:pw@h:6379/0", "--db", "1"]
    assert with_url(command, url) == ["redis-mcp-server", f"--url={url}", "--db", "1"]
    env = {"REDIS_URL": "rediss://h", "REDIS_PORT": "6380", "HOME": "/h"}
    # The URL is added all the same: a server that reads neither variable must not fall back
    # on its default (a Redis on this machine's 6379) but fail on an argument it refuses.
    assert with_url(["server"], url, env) == ["server", url]
    assert env == {"REDIS_URL": url, "REDIS_HOST": "127.0.0.1", "REDIS_PORT": "5", "HOME": "/h"}
    alone = {"REDIS_HOST": "h"}  # host alone: the port is set too, or it would be 6379
    with_url(["server", "--url", "redis://h/0"], "redis://127.0.0.1:7/0", alone)
    assert alone == {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": "7"}
    assert scratch.has_url(["--url", "redis://h"], {})
    assert scratch.has_url([], {"REDIS_HOST": "h"})
    assert not scratch.has_url(["--url", "http://h", "--x=redis"], {"HOME": "/h"})


@pytest.mark.anyio
async def test_undo_puts_back_exact_values_on_your_redis(proxy, yours: str, tmp_path: Path):
    # Without COMPENSATOR_WORKDIR (the proxy a client starts), the server works on yours.
    config = tmp_path / "redis.yaml"
    config.write_text(REGISTRY.read_text().replace(SHIPPED_URL, yours))
    redis(yours, "SET", "a", "1.50")
    redis(yours, "SET", "b", "true")
    async with proxy(config) as client:
        checkpoint = await client.checkpoint()
        await client.call_ok("redis__set", {"key": "a", "value": "2"})
        await client.call_ok("redis__set", {"key": "c", "value": "new"})
        await client.call_ok("redis__delete", {"key": "b"})
        assert contents(yours) == {"a": "2", "c": "new"}
        report = await client.undo_to(checkpoint)
        assert report["skipped"] == [] and len(report["undone"]) == 3
        assert contents(yours) == {"a": "1.50", "b": "true"}

        checkpoint = await client.checkpoint()
        await client.call_ok("redis__delete", {"key": ["a", "b"]})
        report = await client.undo_to(checkpoint)
    [skipped] = report["skipped"]
    assert "cannot undo delete of several keys at once" in skipped["reason"]
    assert contents(yours) == {}


@pytest.mark.thorough
def test_redis_registry_passes(pytester: pytest.Pytester, servers: Path):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "10")
    result.assert_outcomes(passed=4)  # load, two round trips, the state machine


@pytest.mark.thorough
def test_redis_registry_without_the_delete_step_fails_naming_the_tool(
    pytester: pytest.Pytester, servers: Path
):
    reads_instead = "      - tool: redis__get\n"
    broken = broken_variant(pytester.path, REGISTRY, DELETE_STEP, reads_instead)
    out = caught_undoing(pytester, broken, "redis__set")
    assert "tools undone: redis__set" in out


def test_init_then_the_plugin_never_touch_your_redis(
    pytester: pytest.Pytester, servers: Path, yours: str
):
    redis(yours, "SET", "a", "mine")
    project = pytester.path
    entry = {"command": "node", "args": [str(servers / SERVER_JS), yours]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"redis": entry}}))
    made = subprocess.run(
        [sys.executable, "-m", "compensator", "init"],
        capture_output=True, text=True, cwd=project, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    registry = (project / "compensators.yaml").read_text()
    assert '"compensator.scratch", "redis", "${COMPENSATOR_WORKDIR:-}", "--", "node"' in registry
    assert "policies from redis.yaml" in made.stdout
    result = run_quick(
        pytester, project / "compensators.yaml", "--compensator-examples", "5",
        "--compensator-min-verified", "0",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    assert contents(yours) == {"a": "mine"}  # hundreds of calls, none on yours


REDIS_PY = "redis-py/bin/redis-mcp-server"


@pytest.mark.anyio
async def test_init_gives_a_server_it_does_not_know_a_scratch_redis_too(
    proxy, yours: str, tmp_path: Path
):
    """Redis' own redis-mcp-server (no shipped registry) with `--url`, as its README starts
    it. Without the scratch wrapper, infer and the plugin wrote into the person's Redis. (Its
    0.5.1 ignores REDIS_HOST and REDIS_PORT: its --host and --port defaults win.)"""
    redis(yours, "SET", "a", "mine")
    binary = str(third_party_servers(REDIS_PY) / REDIS_PY)
    entry = {"command": binary, "args": ["--url", yours]}
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"redis": entry}}))
    made = subprocess.run(
        [sys.executable, "-m", "compensator", "init"],
        capture_output=True, text=True, cwd=project, timeout=120, check=False,
        env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    registry = project / "compensators.yaml"
    wrapped = '"compensator.scratch", "redis", "${COMPENSATOR_WORKDIR:-}", "--"'
    assert wrapped in registry.read_text()
    # A test run (COMPENSATOR_WORKDIR set) writes into a scratch Redis...
    workdir = tmp_path / "work"
    async with proxy(registry, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        await client.call_ok("set", {"key": "a", "value": "scratch"})
        await client.call_ok("set", {"key": "b", "value": "new"})
        assert (await client.call("get", {"key": "a"})).text == "scratch"
    assert contents(yours) == {"a": "mine"}
    # ...and the proxy a client starts (no COMPENSATOR_WORKDIR) into yours, as configured.
    async with proxy(registry, db=tmp_path / "yours.db") as client:
        await client.call_ok("set", {"key": "b", "value": "yours"})
    assert contents(yours) == {"a": "mine", "b": "yours"}


@pytest.mark.anyio
async def test_the_scratch_redis_ends_with_the_proxy(proxy, servers: Path, tmp_path: Path):
    workdir = tmp_path / "work"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        await client.call_ok("redis__set", {"key": "a", "value": "1"})
        # The wrapper's command names the folder; it leads the group the proxy started.
        [wrapper] = running_with(str(workdir))
        commands = group(wrapper)
        assert len(commands) == 3, commands  # the wrapper, node, redis-server
        [node] = [command for command in commands if command.startswith("node ")]
        url = node.split()[-1]
        assert url.startswith("redis://127.0.0.1:") and url != SHIPPED_URL
        assert contents(url) == {"a": "1"}
    # The server outlives its stdin (it keeps its Redis connection): the wrapper stops it,
    # then its redis-server, after the proxy has gone. Wait for the group to empty.
    deadline = time.monotonic() + 30
    while group(wrapper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group(wrapper) == []


def group(leader: int) -> list[str]:
    """The command lines of the live processes in process group `leader`."""
    return [p.command for p in processes() if p.group == leader and p.state != "Z"]


def test_a_port_another_redis_took_is_never_used(
    yours: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The free port handed out is taken before our redis-server binds it (here: always, by
    # yours). Its PONG must not pass for our server's: the run would write into yours.
    taken = int(yours.rsplit(":", 1)[1])
    monkeypatch.setattr(scratch, "_free_port", lambda: taken)
    with (
        pytest.raises(scratch.ScratchFailed, match="did not start"),
        scratch_redis(tmp_path / "work"),
    ):
        pytest.fail("a scratch Redis on a port another server holds")


def test_without_redis_server_a_test_run_says_so(tmp_path: Path):
    # A run that cannot have a scratch Redis stops with the reason; it never falls back on
    # the URL in the command (yours).
    env = {**os.environ, "PATH": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-m", "compensator.scratch", "redis", str(tmp_path), "--", "true"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "redis-server is not installed" in done.stderr
