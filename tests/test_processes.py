"""Server processes: their environment, how they are stopped, and `compensator serve`
starting them before it imports the MCP SDK (compensator/processes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compensator.processes import INHERITED, PASS_ENV, environment, start_process, stop_process

WAIT = 60.0
"""Seconds a test waits for something a process does; generous for a busy machine."""


def test_the_inherited_variables_are_the_sdks():
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    assert set(INHERITED) == set(DEFAULT_INHERITED_ENV_VARS)


def test_a_servers_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("SHELL", "() { echo exported function; }")
    monkeypatch.setenv("SECRET", "not passed")
    monkeypatch.setenv("TOKEN", "passed")
    monkeypatch.setenv(PASS_ENV, " TOKEN , MISSING,")
    env = environment({"HOME": "/srv", "EXTRA": "1"})
    assert env["HOME"] == "/srv"  # the registry's `env` wins
    assert env["TOKEN"] == "passed"
    assert env["EXTRA"] == "1"
    assert "SHELL" not in env and "SECRET" not in env and "MISSING" not in env
    assert env["PATH"] == os.environ["PATH"]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT} s for {what}"
        time.sleep(0.02)


STUBBORN = """
import pathlib, signal, subprocess, sys, time
log = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: log.write_text("SIGTERM, ignored"))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
sys.stdin.read()  # its stdin closing does not stop it either
while True:
    time.sleep(600)
"""


@pytest.mark.anyio
async def test_a_server_that_ignores_its_stdin_and_sigterm_is_killed_with_its_children(
    tmp_path: Path,
):
    log = tmp_path / "signals"
    process = await start_process(sys.executable, ["-c", STUBBORN, str(log)], {}, tmp_path)
    assert process.stdout is not None
    child = int(await process.stdout.readline())
    assert alive(process.pid) and alive(child)
    await stop_process(process, "stubborn", grace=0.2, kill_grace=2.0)
    assert log.read_text() == "SIGTERM, ignored"  # SIGTERM came first, and was ignored
    assert process.returncode == -9  # then SIGKILL
    wait_until(lambda: not alive(child), f"the server's child {child} to die")
    assert await process.stdout.read() == b""  # its stdout has ended for any reader


LEFT_BEHIND = """
import subprocess, sys, time
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True)"
child = subprocess.Popen([sys.executable, "-c", code + "; time.sleep(600)"], stdout=subprocess.PIPE)
child.stdout.readline()  # from here on the child ignores SIGTERM
print(child.pid, flush=True)
while True:
    time.sleep(600)
"""


@pytest.mark.anyio
async def test_a_child_that_ignores_sigterm_is_killed_when_its_server_died_of_it(tmp_path: Path):
    process = await start_process(sys.executable, ["-c", LEFT_BEHIND], {}, tmp_path)
    assert process.stdout is not None
    child = int(await process.stdout.readline())
    assert alive(child)
    await stop_process(process, "leaving", grace=0.2, kill_grace=1.0)
    assert process.returncode == -15  # the server died of SIGTERM
    wait_until(lambda: not alive(child), f"the child {child} that ignored SIGTERM to die")


@pytest.mark.anyio
async def test_a_server_that_exits_when_its_stdin_closes_is_not_signalled():
    process = await start_process(sys.executable, ["-c", "import sys; sys.stdin.read()"], {}, "/")
    await stop_process(process, "polite", grace=WAIT)
    assert process.returncode == 0


REUSED = """
import os, signal, sys
from compensator import processes
class Ended:  # what asyncio's Process shows of a server that ended and was reaped
    returncode = 0
    def __init__(self, pid): self.pid = pid
# A server that ended long ago (reaped, its returncode known) and whose pid the kernel has
# since given to another process, which leads a group of its own: here a sleep of the test's.
processes._RUNNING.add(Ended(int(sys.argv[1])))
processes.stop_on_sigterm()
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_sigterm_leaves_alone_a_group_that_took_the_number_of_an_ended_server():
    """The proxy's SIGTERM handler signals the groups of the servers it started. One whose
    server ended, and whose number now names someone else's group (a database started with a
    session of its own, say: pid_max is 32768 on many machines), must not be signalled."""
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        done = subprocess.run(
            [sys.executable, "-c", REUSED, str(other.pid)], capture_output=True, timeout=WAIT
        )
        assert done.returncode == -15, done.stderr  # the proxy itself died of the SIGTERM
        assert other.poll() is None, "the other group was signalled"
    finally:
        other.kill()
        other.wait()


def test_serve_starts_the_servers_before_the_client_speaks_and_stops_them_if_it_leaves(
    write_registry: Callable[[str], Path], tmp_path: Path
):
    """The servers' processes run before the client's `initialize` (and the SDK's import:
    `compensator.cli.serve` does not import it); a client that leaves without one leaves no
    process behind."""
    script = (  # it outlives its stdin: only the proxy's stopping it ends it
        "import os, pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(os.getpid()));"
        " sys.stdin.read(); time.sleep(600)"
    )
    config = write_registry(
        "servers:\n"
        + "".join(
            f"  s{n}:\n    command: @PYTHON@\n    args: ['-c', {script!r}, '@TMP@/pid{n}']\n"
            for n in (1, 2)
        )
    )
    command = [sys.executable, "-m", "compensator.proxy", "--config", str(config)]
    command += ["--db", str(tmp_path / "j.db"), "--log-level", "DEBUG"]
    with (
        (tmp_path / "stderr.log").open("w") as log,
        subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        ) as proxy,
    ):
        try:
            pids = tmp_path / "pid1", tmp_path / "pid2"
            wait_until(lambda: all(p.exists() and p.read_text() for p in pids), "both servers")
            servers = [int(p.read_text()) for p in pids]
            assert all(alive(pid) for pid in servers)
            assert proxy.stdin is not None
            proxy.stdin.close()  # no initialize: the client is gone
            assert proxy.wait(timeout=WAIT) == 0
        finally:
            if proxy.poll() is None:
                proxy.kill()
    for pid in servers:
        wait_until(lambda: not alive(pid), f"server process {pid} to end")  # noqa: B023
    assert "no server was initialized" in (tmp_path / "stderr.log").read_text()


def test_the_front_of_serve_imports_no_sdk():
    probe = (
        "import sys, compensator.cli.serve;"
        " print(sorted(m for m in ('mcp', 'pydantic', 'hypothesis') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.anyio
async def test_the_first_start_adopts_the_process_started_early(
    write_registry: Callable[[str], Path], tmp_path: Path, proxy, tasks_env: dict[str, str]
):
    """One process per server: the session opens on the process started first thing. (`$$$$`
    is the shell's `$$` once the registry has read `$$` as a `$`.)"""
    config = write_registry(
        "servers:\n  tasks:\n    command: sh\n"
        "    args: ['-c', 'echo $$$$ >> @TMP@/starts; exec \"$0\" \"$1\"',\n"
        "           @PYTHON@, @TASKS_SERVER@]\n"
    )
    async with proxy(config, env=tasks_env) as client:
        tools = await client.list_tools()
        assert any(tool.name == "tasks__add_task" for tool in tools)
        starts = (tmp_path / "starts").read_text().split()
        assert len(starts) == 1, starts
        assert alive(int(starts[0]))


@pytest.mark.anyio
async def test_a_server_that_outlives_its_stdin_is_stopped_when_the_client_ends_the_proxy(
    write_registry: Callable[[str], Path], tmp_path: Path
):
    """An MCP client that closes the proxy's stdin gives it 2 s, then SIGTERMs its group: the
    same 2 s the proxy gives a server before it SIGTERMs the server's own group. The proxy's
    SIGTERM handler stops the servers first, or one that outlives its stdin (server-redis,
    which keeps its Redis connection) runs on as an orphan."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    # The task server, then a sleep: it outlives its stdin, and ignores SIGTERM as well, so
    # only SIGKILL ends it. (`$$$$` is the shell's `$$` once the registry read `$$` as `$`.)
    config = write_registry(
        "servers:\n  tasks:\n    command: sh\n"
        '    args: [\'-c\', \'echo $$$$ > @TMP@/pid; trap "" TERM; "$0" "$1"; sleep 600\',\n'
        "           @PYTHON@, @TASKS_SERVER@]\n"
    )
    command = ["-m", "compensator.proxy", "--config", str(config), "--db", str(tmp_path / "j.db")]
    params = StdioServerParameters(command=sys.executable, args=command)
    with (tmp_path / "stderr.log").open("w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            assert (await session.list_tools()).tools
    server = int((tmp_path / "pid").read_text())
    wait_until(lambda: not alive(server), f"the server {server} to end")
