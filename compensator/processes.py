"""A stdio server's process: started in a process group of its own, and stopped with that
group. Also the servers' processes `compensator serve` starts before anything else.

This module imports neither the MCP SDK nor the registry loader, on purpose: `compensator
serve` starts its servers' processes with it first and imports the SDK (about half a second
of CPU) while they start (compensator/cli/serve.py). The protocol over the pipes is in
compensator/wire/sdk/stdio.py; we run the processes ourselves instead of through the SDK's
`stdio_client`, which can only spawn a process of its own when it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .registry.model import ServerSpec

__all__ = [
    "INHERITED",
    "PASS_ENV",
    "Process",
    "Started",
    "environment",
    "start_process",
    "stop_on_sigterm",
    "stop_process",
]

log = logging.getLogger(__name__)

Process = asyncio.subprocess.Process

INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""The variables of our environment a server gets whatever its entry says: the allow-list the
MCP SDK's stdio client uses on POSIX (tests/test_processes.py compares the two)."""

PASS_ENV = "COMPENSATOR_PASS_ENV"
"""Names further variables to pass on, comma-separated."""

STOP_GRACE = 2.0
"""Seconds a server gets to exit once its stdin is closed, before its group gets SIGTERM."""

KILL_GRACE = 2.0
"""Seconds after SIGTERM before SIGKILL, and after SIGKILL before the process is given up."""


def environment(explicit: Mapping[str, str]) -> dict[str, str]:
    """A server's whole environment: INHERITED, the variables $COMPENSATOR_PASS_ENV names, then
    its registry `env`. An inherited value starting `()` is a function bash exported, not a
    setting, and is left out (as the SDK does)."""
    inherited = {
        name: value
        for name in INHERITED
        if (value := os.environ.get(name)) is not None and not value.startswith("()")
    }
    names = (n.strip() for n in os.environ.get(PASS_ENV, "").split(","))
    passed = {name: os.environ[name] for name in names if name and name in os.environ}
    return {**inherited, **passed, **explicit}


async def start_process(
    command: str, args: Iterable[str], env: Mapping[str, str], cwd: str | os.PathLike[str]
) -> Process:
    """Start a server: its stdin and stdout are pipes to us, its stderr is ours, and it leads a
    new session, so that stopping it reaches its children. Its lines have no length limit (a
    tool result may be a large file), as with the SDK's own stdio client."""
    process = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=_stderr(),
        cwd=cwd,
        env=environment(env),
        start_new_session=True,
        limit=sys.maxsize,
    )
    _RUNNING.add(process)
    return process


_RUNNING: set[Process] = set()
"""Every process start_process started and stop_process has not yet seen end: the ones a
SIGTERM to us must reach (`stop_on_sigterm`)."""


def stop_on_sigterm() -> None:
    """Make a SIGTERM to this process stop its servers first. An MCP client ends a stdio
    server by closing its stdin, waiting 2 s (the SDK's timeout), then SIGTERM to its process
    group; the servers lead groups of their own and are not in it, and the proxy's own stop
    gives each server the same 2 s. So a server that outlives its stdin (one holding a
    database connection) would be left running. The handler SIGTERMs every server's group,
    waits up to SIGTERM_GRACE for them, SIGKILLs what is left, and then dies of the signal as
    it would have without the handler. Main thread only (signal.signal)."""
    signal.signal(signal.SIGTERM, _stop_all_and_die)


SIGTERM_GRACE = 1.0
"""Seconds the servers get after our SIGTERM reached them, within the 2 s the client gives us
before its SIGKILL."""


def _stop_all_and_die(number: int, _frame: Any) -> None:
    live = list(_RUNNING)
    for process in live:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + SIGTERM_GRACE
    while any(_group_running(p) for p in live) and time.monotonic() < deadline:
        time.sleep(POLL)
    for process in live:
        if _group_running(process):
            _signal_group(process, signal.SIGKILL)
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def _group_running(process: Process) -> bool:
    """Whether anything of the group is left. The leader is reaped here first: the event loop
    that would reap it does not run inside a signal handler, and a zombie keeps its group."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)
    if _not_ours(process):
        return False
    try:
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stderr() -> Any:
    """Our stderr for a child to write to, or None (inherit fd 2) when sys.stderr is not a
    file (a test harness may have replaced it)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return sys.stderr


async def stop_process(
    process: Process, name: str, *, grace: float = STOP_GRACE, kill_grace: float = KILL_GRACE
) -> None:
    """Stop a server as MCP asks: close its stdin and let it exit. If it has not within `grace`
    seconds, its process group gets SIGTERM, and whatever of the group is left `kill_grace`
    seconds later gets SIGKILL. Its stdout then ends for whoever reads it, even when a child
    that left the group still holds the pipe open."""
    if process.stdin is not None:
        process.stdin.close()
    if not await _ends(lambda: process.returncode is not None, grace):
        _signal_group(process, signal.SIGTERM)
        if not await _ends(lambda: not _group_alive(process), kill_grace):
            _signal_group(process, signal.SIGKILL)
            if not await _ends(lambda: process.returncode is not None, kill_grace):
                log.warning("server %r (pid %d) survived SIGKILL; left", name, process.pid)
    if process.stdout is not None:
        process.stdout.feed_eof()
    _RUNNING.discard(process)


POLL = 0.01
"""Seconds between looks at whether a process (group) has ended."""


async def _ends(condition: Callable[[], bool], within: float) -> bool:
    """Whether `condition` holds within `within` seconds. Polled: asyncio's `Process.wait()`
    also waits for the pipes to close, which a child that outlives the server keeps open."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(POLL)
    return True


def _group_alive(process: Process) -> bool:
    """Whether any process of the group `start_process` made is left."""
    if _not_ours(process):
        return False
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return process.returncode is None
    return True


def _not_ours(process: Process) -> bool:
    """Whether the group id `process.pid` may now name someone else's group. Once the leader
    has been reaped (its returncode known), its pid is free; while members of its group live,
    the kernel does not hand that number out again, but once the group is gone it may, and a
    process given it that starts a session of its own (a daemon, a database) leads a group
    of that id. So: the leader is reaped and a process with its pid exists. A proxy runs for
    days, and with pid_max at 32768 the numbers come round."""
    if process.returncode is None:
        return False
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return False  # no process has the number: what is left of the group is ours
    except PermissionError:
        return True
    return True


def _signal_group(process: Process, number: signal.Signals) -> None:
    if _not_ours(process):
        return
    try:
        os.killpg(process.pid, number)
    except ProcessLookupError:
        pass  # the group is gone already
    except PermissionError:  # the group is not the one start_process made; the process only
        if process.returncode is None:
            process.send_signal(number)


class Started:
    """Stdio servers' processes started before their sessions open (`compensator serve`
    starts them first thing). `take` hands each over once, to the server's first start;
    `stop` ends those nobody took."""

    def __init__(self) -> None:
        self._processes: dict[str, Process] = {}

    async def start(self, specs: Iterable[ServerSpec]) -> None:
        """Start the process of every stdio server of `specs`. One that cannot start is left
        to its server's first start, which reports why in the usual way."""
        for spec in specs:
            if spec.url is not None:
                continue
            try:
                process = await start_process(spec.command, spec.args, spec.env, spec.cwd)
            except (OSError, ValueError) as exc:
                log.debug("server %r: starting its process early failed: %s", spec.name, exc)
                continue
            self._processes[spec.name] = process

    def take(self, name: str) -> Process | None:
        """The process started for server `name`, once; None when there is none (left)."""
        return self._processes.pop(name, None)

    async def stop(self) -> None:
        """Stop the processes nobody took (the proxy ended before starting their servers)."""
        left, self._processes = self._processes, {}
        await asyncio.gather(*(stop_process(process, name) for name, process in left.items()))
