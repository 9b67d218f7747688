"""Security properties through the real proxy: a private journal, expanded ${VAR} values kept
out of logs and messages, no shell anywhere, and undo confined to the registry's servers."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.errors import RegistryError
from compensator.registry import parse_registry
from compensator.registry.variables import Concealer, expand
from pytest_compensator.client import ProxyClient

from .conftest import EXAMPLES, SERVERS, Launcher

pytestmark = pytest.mark.anyio

NOISY = SERVERS / "noisy_server.py"
SECRET = "hunter2-Sekr1t-7f3c9a"
SECRET_ENV = {"SECRET_TOKEN": SECRET}


# -- the journal is private ----------------------------------------------------------------------


@asynccontextmanager
async def _proxy_with_umask(
    umask: int, config: Path, db: Path, env: dict[str, str], log: Path
) -> AsyncIterator[ProxyClient]:
    """The real proxy started by `sh -c 'umask N; exec python -m compensator.proxy ...'`."""
    command = [sys.executable, "-m", "compensator.proxy", "--config", str(config), "--db", str(db)]
    script = f"umask {umask:03o}; exec {shlex.join(command)}"
    params = StdioServerParameters(
        command="/bin/sh", args=["-c", script], env={**os.environ, **env}
    )
    with log.open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield ProxyClient(session)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o000])
async def test_journal_and_its_companions_are_private(
    tmp_path: Path, tasks_env: dict[str, str], umask: int
) -> None:
    db = tmp_path / "journal.db"
    config = EXAMPLES / "compensators.yaml"
    async with _proxy_with_umask(umask, config, db, tasks_env, tmp_path / "stderr.log") as client:
        checkpoint = await client.checkpoint("before")
        for n in range(3):
            await client.call_ok("tasks__add_task", {"title": f"t{n}"})
        assert len(await client.list_changes(checkpoint)) == 3
        files = [db, db.with_name("journal.db-wal"), db.with_name("journal.db-shm")]
        assert all(path.exists() for path in files), sorted(p.name for p in tmp_path.iterdir())
        modes = {path.name: oct(_mode(path)) for path in files}
        assert modes == dict.fromkeys(modes, oct(0o600)), modes
        # The live session's lock, in a folder only the owner can list.
        sessions = db.with_name("journal.db-sessions")
        (lock,) = sessions.iterdir()
        assert (oct(_mode(sessions)), oct(_mode(lock))) == (oct(0o700), oct(0o600))


# -- expanded ${VAR} values stay out of every message ----------------------------------------------

SECRET_REGISTRY = """
servers:
  broken:
    command: "@TMP@/no-such-dir-${SECRET_TOKEN}/server"
    args: ["--token", "${SECRET_TOKEN}"]
    env: {API_KEY: "${SECRET_TOKEN}"}
  tasks:
    command: "@PYTHON@"
    args: ["@TASKS_SERVER@", "--db", "@TMP@/tasks.db"]
    env: {API_KEY: "${SECRET_TOKEN}"}
tools:
  broken__write:
    classification: reversible
    inverse_tool: broken__unwrite
  tasks__get_task: {classification: read}
  tasks__add_task:
    classification: reversible
    inverse_tool: tasks__delete_task
    inverse_args: {id: "{result.id}"}
"""


def _compensator(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compensator", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_secret_stays_out_of_results_and_logs(
    proxy: Launcher,
    write_registry: Callable[[str], Path],
    tasks_env: dict[str, str],
    proxy_log: Callable[[], str],
) -> None:
    config = write_registry(SECRET_REGISTRY)
    async with proxy(config, env={**tasks_env, **SECRET_ENV}) as client:
        seen = []
        for name, args in [
            ("broken__write", {}),  # its server failed to start
            ("tasks__get_task", {"id": 424242}),  # a call that fails downstream
            ("tasks__get_task", {"id": "not a number"}),
            ("explain_blast_radius", {"tool": "broken__write"}),
            ("undo_to", {"checkpoint_id": 99}),
        ]:
            reply = await client.call(name, args)
            assert reply.is_error or name == "explain_blast_radius", (name, reply.text)
            seen.append(reply.text)
        assert "broken" in seen[0], seen[0]
        await client.call_ok("tasks__add_task", {"title": "ok"})
    leaks = [text for text in [*seen, proxy_log()] if SECRET in text]
    assert not leaks, f"the expanded secret appears in: {[t[:400] for t in leaks]}"


def test_secret_stays_out_of_check_and_registry_errors(
    write_registry: Callable[[str], Path], tasks_env: dict[str, str]
) -> None:
    env = {**tasks_env, **SECRET_ENV}
    config = write_registry(SECRET_REGISTRY)
    checked = _compensator("check", "--config", str(config), env=env)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "broken" in checked.stdout + checked.stderr
    assert SECRET not in checked.stdout + checked.stderr
    # A registry error elsewhere in the same file: the message is about that key only.
    bad = write_registry(SECRET_REGISTRY + "  tasks__delete_task: {classification: reversable}\n")
    checked = _compensator("check", "--config", str(bad), env=env)
    assert checked.returncode == 1
    assert "Did you mean 'reversible'?" in checked.stderr, checked.stderr
    assert SECRET not in checked.stdout + checked.stderr
    text = bad.read_text()
    for broken_text in [
        text,
        text.replace('args: ["--token", "${SECRET_TOKEN}"]', 'args: "${SECRET_TOKEN}"'),
        text.replace('env: {API_KEY: "${SECRET_TOKEN}"}', 'env: ["${SECRET_TOKEN}"]', 1),
        text.replace('"@TMP@', '"~no-such-user-${SECRET_TOKEN}'),
        text.replace("${SECRET_TOKEN}/server", "${SECRET_TOKEN}/${UNSET_VARIABLE}", 1),
    ]:
        with pytest.raises(RegistryError) as caught:
            parse_registry(broken_text, bad, SECRET_ENV)
        assert SECRET not in str(caught.value), str(caught.value)


# -- no shell ------------------------------------------------------------------------------------


async def test_command_with_shell_syntax_is_not_run_by_a_shell(
    proxy: Launcher,
    write_registry: Callable[[str], Path],
    tasks_env: dict[str, str],
    tmp_path: Path,
) -> None:
    pwned = [tmp_path / "pwned", tmp_path / "pwned-args", tmp_path / "pwned-backtick"]
    config = write_registry(
        f"""
        servers:
          evil:
            command: "echo hi; touch {pwned[0]}"
          echo:
            command: "@PYTHON@"
            args: ["{NOISY}", "$(touch {pwned[1]})", "`touch {pwned[2]}`", "a b", "*", "$$HOME"]
        tools:
          echo__argv: {{classification: read}}
        """
    )
    async with proxy(config, env=tasks_env) as client:
        reply = await client.call("evil__anything")
        assert reply.is_error
        assert "evil" in reply.text and "failed to start" in reply.text, reply.text
        listed = await client.call("echo__argv")
        assert not listed.is_error, listed.text
        argv = json.loads(listed.text)
        assert argv == [f"$(touch {pwned[1]})", f"`touch {pwned[2]}`", "a b", "*", "$HOME"]
    assert not [path for path in pwned if path.exists()]


# -- undo reaches only the registry's own servers -------------------------------------------------


def test_inverse_on_a_server_not_in_the_registry_is_a_load_error(
    write_registry: Callable[[str], Path], tasks_env: dict[str, str]
) -> None:
    config = write_registry(
        """
        servers:
          tasks:
            command: "@PYTHON@"
            args: ["@TASKS_SERVER@", "--db", "@TMP@/tasks.db"]
        tools:
          tasks__add_task:
            classification: reversible
            inverse:
              - tool: elsewhere__delete_everything
                args: {id: "{result.id}"}
        """
    )
    with pytest.raises(RegistryError) as caught:
        parse_registry(config.read_text(), config, {})
    message = str(caught.value)
    assert f"{config}:" in message
    assert "unknown server 'elsewhere'" in message, message
    checked = _compensator("check", "--config", str(config), env=tasks_env)
    assert checked.returncode == 1
    assert "unknown server 'elsewhere'" in checked.stderr, checked.stderr


# -- the helper that conceals expanded values (compensator/registry/variables.py) --------------


def test_concealer_puts_back_the_references_an_expansion_used() -> None:
    used: dict[str, str] = {}
    env = {**SECRET_ENV, "SHORT": "1", "NOT_A_REF": "abcdef"}
    expanded = expand("/x/${SECRET_TOKEN}/s ${SHORT} ${MISSING:-d} $${NOT_A_REF}", env, used)
    assert expanded == f"/x/{SECRET}/s 1 d ${{NOT_A_REF}}"
    assert used == {"SECRET_TOKEN": SECRET, "SHORT": "1"}  # a default is no secret
    conceal = Concealer(used)
    leaked = f"FileNotFoundError: [Errno 2] No such file or directory: '/x/{SECRET}/s'"
    assert conceal(leaked) == (
        "FileNotFoundError: [Errno 2] No such file or directory: '/x/${SECRET_TOKEN}/s'"
    )
    assert conceal("exit 1 after abcdef") == "exit 1 after abcdef"  # `$$` is no reference
    assert conceal("exit 1") == "exit 1"  # too short a value to hide without garbling
