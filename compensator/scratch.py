"""`python -m compensator.scratch redis WORKDIR -- COMMAND [ARG...]`: run a server against a
scratch service in test runs, and against yours otherwise.

A server whose data lives behind a network service (here Redis, named by a `redis://` URL)
cannot be pointed into `${COMPENSATOR_WORKDIR}` the way a data file can. A registry starts such
a server through this module, with `"${COMPENSATOR_WORKDIR:-}"` as WORKDIR:

- empty (the proxy a client starts): COMMAND runs as it is, on your service;
- a folder (the pytest plugin, `compensator infer`): a new `redis-server` listens on a free
  loopback port (its files in a private temporary folder, nothing saved), every `redis://`
  or `rediss://` URL of COMMAND (an argument, an option's `--url=` value, or an environment
  variable's value) becomes its URL, and REDIS_HOST and REDIS_PORT its host and port (a URL
  is added at the end when no argument holds one), and the server is stopped when COMMAND
  ends. So no test run reaches your data.

COMMAND gets this process's stdout and stderr, and its stdin through us. The exit code is
COMMAND's (128 + the signal's number when one ended it), or 2 when the scratch service or
COMMAND cannot start (the reason on stderr, which the proxy passes on).

Imports the standard library only: it is the first thing of every start of such a server.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["has_url", "main", "scratch_redis", "with_url"]

USAGE = "usage: python -m compensator.scratch redis WORKDIR -- COMMAND [ARG...]"

READY_WITHIN = 20.0
"""Seconds a scratch redis-server gets to answer PING; a busy CI machine needs a few."""

_REDIS_URL = re.compile(r"^rediss?://", re.IGNORECASE)


class ScratchFailed(Exception):
    """The scratch service could not start; the message says why and what to do."""


def with_url(
    command: Sequence[str], url: str, env: MutableMapping[str, str] | None = None
) -> list[str]:
    """COMMAND with every Redis URL in it replaced by `url`: an argument (`redis://h:6379`) or
    an option's value (`--url=redis://h`). `env` is changed in place: its values that are a
    Redis URL (`REDIS_URL=redis://h`) become `url`, and REDIS_HOST and REDIS_PORT, when either
    is set, `url`'s host and port. `url` is added at the end when no argument held one, even
    when the environment did: a server that reads neither (redis-mcp-server 0.5.1 ignores
    REDIS_HOST) must fail on an argument it does not take rather than reach yours."""
    out = [_replaced(arg, url) for arg in command]
    if env is not None:
        for name, value in list(env.items()):
            if _replaced(value, "") != value:
                env[name] = _replaced(value, url)
        if _HOST_PORT & set(env):
            parts = urlsplit(url)
            env["REDIS_HOST"], env["REDIS_PORT"] = str(parts.hostname), str(parts.port)
    return out if out != list(command) or url in out[1:] else [*out, url]


def has_url(words: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether a Redis is named in `words` (a URL, or an option set to one: `--url=...`) or in
    `env` (a URL, or REDIS_HOST or REDIS_PORT)."""
    named = [*words, *env.values()]
    return any(_replaced(word, "") != word for word in named) or bool(_HOST_PORT & set(env))


_HOST_PORT = {"REDIS_HOST", "REDIS_PORT"}


def _replaced(arg: str, url: str) -> str:
    if _REDIS_URL.match(arg):
        return url
    option, equals, value = arg.partition("=")
    if equals and option.startswith("-") and _REDIS_URL.match(value):
        return f"{option}={url}"
    return arg


@contextlib.contextmanager
def scratch_redis(workdir: Path) -> Iterator[str]:
    """A redis-server of its own (nothing persisted), as its URL, stopped after. Its folder
    and log are private, not in `workdir`, where another server of the registry may list
    files (the filesystem server serves ${COMPENSATOR_WORKDIR})."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ScratchFailed(
            "compensator.scratch: redis-server is not installed, so there is no scratch Redis "
            "for this test run (it never uses yours). Install it (Debian: apt-get install "
            "redis-server) and run again."
        )
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compensator-scratch-redis-") as private:
        log = Path(private) / "redis-server.log"
        for _ in range(3):  # a free port can be taken between asking and binding: try another
            port = _free_port()
            server = subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", private, "--logfile", str(log),
                 "--daemonize", "no"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                if _answers(port, server):
                    yield f"redis://127.0.0.1:{port}"
                    return
            finally:
                _stop(server)
        tail = log.read_text(errors="replace")[-800:] if log.exists() else "(no log)"
    raise ScratchFailed(f"compensator.scratch: redis-server did not start; its log ends:\n{tail}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(port: int, server: subprocess.Popen[bytes]) -> bool:
    """Whether our server answers on `port` within READY_WITHIN seconds (False once it
    exited). Another process that took the port meanwhile may answer too: the answer must
    carry our server's pid, or the run would write into someone else's Redis. Polled: a
    starting process has no event to wait on but its port."""
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(b"INFO server\r\n")
            pid = _info_pid(s)
            if pid is not None:
                return pid == server.pid
        time.sleep(0.02)
    return False


def _info_pid(connection: socket.socket) -> int | None:
    """The `process_id` of an INFO answer (None when the server is still loading)."""
    answer = b""
    while b"\r\n" not in answer or len(answer) < _bulk_length(answer):
        chunk = connection.recv(1 << 14)
        if not chunk:
            break
        answer += chunk
    found = re.search(rb"process_id:(\d+)", answer)
    return int(found.group(1)) if found else None


def _bulk_length(answer: bytes) -> int:
    """How long a RESP bulk string answer (`$N\r\n...\r\n`) is in all; 0 for any other."""
    head, _, _ = answer.partition(b"\r\n")
    if not head.startswith(b"$") or not head[1:].isdigit():
        return 0
    return len(head) + 2 + int(head[1:]) + 2


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _run(command: Sequence[str]) -> int:
    """COMMAND as a child with our stdout and stderr; our stdin is relayed to it, and a SIGTERM
    or SIGINT we get is passed on. Once our stdin ends, the child gets STOP_GRACE seconds to
    exit, then SIGTERM: a server that outlives its stdin (server-redis keeps its Redis
    connection open) would otherwise run on, with its scratch service, after the proxy ended
    (the proxy's own SIGTERM to the group may never come: its client can stop it first)."""
    child = subprocess.Popen(list(command), stdin=subprocess.PIPE)

    def forward(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(number)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, forward)
    threading.Thread(target=_relay_stdin, args=(child,), daemon=True).start()
    return child.wait()


STOP_GRACE = 1.0
"""Seconds COMMAND gets to exit once its stdin ended: less than the proxy's own grace (2 s),
so that the proxy sees it go before it gives up on the group."""


def _relay_stdin(child: subprocess.Popen[bytes]) -> None:
    assert child.stdin is not None
    with contextlib.suppress(OSError, ValueError):  # the child went: nothing left to tell it
        while chunk := os.read(0, 1 << 16):
            child.stdin.write(chunk)
            child.stdin.flush()
    with contextlib.suppress(OSError, ValueError):
        child.stdin.close()
    try:
        child.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()


def _stopped(number: int, _frame: object) -> None:
    """A SIGTERM or SIGINT before COMMAND runs: unwind, so the scratch service stops too."""
    raise SystemExit(128 + number)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[0] != "redis" or argv[2] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    workdir, command = argv[1], list(argv[3:])
    try:
        if not workdir:
            os.execvp(command[0], command)  # yours: nothing to set up, nothing to wait for
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, _stopped)
        with scratch_redis(Path(workdir)) as url:
            code = _run(with_url(command, url, os.environ))
            return 128 - code if code < 0 else code  # killed by a signal: 128 + its number
    except ScratchFailed as exc:
        print(exc, file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"compensator.scratch: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
