"""Per-server `prefix:` and long tool names.

Claude Code shows a tool as `mcp__<client>__<exposed name>` and rejects names over 64
characters. `prefix:` replaces the server's name in exposed names (`prefix: td` exposes
`td__add_task`), and everything in the registry (`tools:`, inverses, snapshots, `state:`,
`reset:`) names tools by their exposed name. `compensator serve` warns at start-up about each
tool whose Claude Code name is too long; `compensator check` reports it as an error, counting
the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.errors import RegistryError
from compensator.registry import parse_registry

from .conftest import EXAMPLES, Launcher

pytestmark = pytest.mark.anyio

LONG_SERVER = "a_rather_long_server_name_for_tests"  # 35 characters


def _tasks_registry(tmp_path: Path, server: str, prefix: str | None) -> Path:
    """examples/compensators.yaml for a server entry `server` with `prefix:`, its tools named
    by the exposed prefix throughout."""
    exposed = prefix or server
    text = (EXAMPLES / "compensators.yaml").read_text().replace("tasks__", f"{exposed}__")
    head = "servers:\n  tasks:\n"
    assert head in text
    extra = f"    cwd: {EXAMPLES}\n" + (f"    prefix: {prefix}\n" if prefix else "")
    text = text.replace(head, f"servers:\n  {server}:\n{extra}")
    path = tmp_path / f"{server}.yaml"
    path.write_text(text)
    return path


async def test_prefixed_server_lists_calls_and_undoes(
    proxy: Launcher, tmp_path: Path, tasks_env: dict[str, str], proxy_log: Callable[[], str]
) -> None:
    config = _tasks_registry(tmp_path, "tasks", "td")
    async with proxy(config, env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"td__add_task", "td__delete_task", "td__list_tasks"} <= names
        assert not any(name.startswith("tasks__") for name in names)

        kept = await client.call_ok("td__add_task", {"title": "kept"})
        checkpoint = await client.checkpoint()
        added = await client.call_ok("td__add_task", {"title": "undo me"})
        await client.call_ok("td__complete_task", {"id": kept["id"]})

        changes = await client.list_changes(checkpoint)
        assert [c["tool"] for c in changes] == ["td__complete_task", "td__add_task"]
        assert [c["classification"] for c in changes] == ["compensable", "reversible"]

        # The server's own name is not a route: the error names the known prefix.
        wrong = await client.call("tasks__list_tasks")
        assert wrong.is_error and "known servers: td" in wrong.text, wrong.text

        report = await client.undo_to(checkpoint)
        tasks = (await client.call_ok("td__list_tasks"))["tasks"]
        assert [(t["id"], t["title"], t["status"]) for t in tasks] == [
            (kept["id"], "kept", "open")
        ], report
        assert added["id"] not in [t["id"] for t in tasks]

        explained = await client.call_ok("explain_blast_radius", {"tool": "td__delete_task"})
        assert explained["classification"] == "compensable"
    assert "over its limit" not in proxy_log()


async def test_long_names_are_warned_about_at_start_up(
    proxy: Launcher, tmp_path: Path, tasks_env: dict[str, str], proxy_log: Callable[[], str]
) -> None:
    config = _tasks_registry(tmp_path, LONG_SERVER, None)
    async with proxy(config, env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
    too_long = sorted(n for n in names if len(f"mcp__compensator__{n}") > 64)
    fitting = sorted(n for n in names if n not in too_long and n.startswith(LONG_SERVER))
    assert too_long and fitting  # the server name is chosen so that both kinds exist
    log = proxy_log()
    warnings = [line for line in log.splitlines() if "over its limit of 64" in line]
    assert len(warnings) == len(too_long), warnings
    for name in too_long:
        line = next(w for w in warnings if f"tool {name} " in w)
        assert f"mcp__compensator__{name} in Claude Code: {len(name) + 18} characters" in line
        room = len(LONG_SERVER) - (len(name) + 18 - 64)
        assert f"set a prefix: of at most {room} characters on servers.{LONG_SERVER}" in line
    for name in fitting:
        assert not any(f"tool {name} " in w for w in warnings)


async def test_serve_counts_with_the_client_name_it_is_given(
    tmp_path: Path, tasks_env: dict[str, str]
) -> None:
    config = _tasks_registry(tmp_path, LONG_SERVER, None)
    client_name = "my_long_named_compensator"  # 25 characters: 14 more than "compensator"
    serve = ["-m", "compensator", "serve", "--config", str(config), "--db", str(tmp_path / "j.db")]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*serve, "--client-name", client_name],
        env={**os.environ, **tasks_env},
    )
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
    warned = {
        line.split("tool ", 1)[1].split(" ", 1)[0]
        for line in log_path.read_text().splitlines()
        if "over its limit of 64" in line
    }
    expected = {n for n in names if len(f"mcp__{client_name}__{n}") > 64}
    by_default = {n for n in names if len(f"mcp__compensator__{n}") > 64}
    assert expected != by_default  # the name given changes which tools are too long
    assert warned == expected
    assert f"mcp__{client_name}__{sorted(expected)[0]}" in log_path.read_text()


async def test_prefix_silences_the_warning(
    proxy: Launcher, tmp_path: Path, tasks_env: dict[str, str], proxy_log: Callable[[], str]
) -> None:
    config = _tasks_registry(tmp_path, LONG_SERVER, "t")
    async with proxy(config, env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert "t__get_task_tree" in names
    assert "over its limit" not in proxy_log()


# -- compensator check counts the same way ------------------------------------------------------


def _check(config: Path, env: dict[str, str], *extra: str) -> tuple[int, dict[str, Any]]:
    command = [sys.executable, "-m", "compensator.cli", "check", "--config", str(config)]
    result = subprocess.run(
        [*command, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def test_check_counts_the_client_prefix(tmp_path: Path, tasks_env: dict[str, str]) -> None:
    config = _tasks_registry(tmp_path, LONG_SERVER, None)
    code, document = _check(config, tasks_env)
    long_names = {
        f["tool"]: f for f in document["findings"] if "Claude Code shows it" in f["message"]
    }
    assert code == 1
    assert long_names and all(len(f"mcp__compensator__{n}") > 64 for n in long_names)
    assert all(len(n) <= 64 for n in long_names)  # caught only because the prefix is counted
    name, finding = next(iter(long_names.items()))
    assert finding["severity"] == "error" and finding["key"] == f"servers.{LONG_SERVER}"
    assert f"{len(name) + 18} characters" in finding["message"]
    assert "prefix:" in finding["message"]

    # A longer client name catches more; a prefixed server fits.
    _, wider = _check(config, tasks_env, "--client-name", "my-compensating-proxy")
    wider_names = {f["tool"] for f in wider["findings"] if "Claude Code shows" in f["message"]}
    assert wider_names > set(long_names)
    code, fixed = _check(_tasks_registry(tmp_path, LONG_SERVER, "t"), tasks_env)
    assert not [f for f in fixed["findings"] if "Claude Code shows" in f["message"]]
    assert code == 0, fixed


# -- registry: prefix values, clashes, and names ------------------------------------------------


def _load(text: str, tmp_path: Path) -> Any:
    return parse_registry(text, tmp_path / "r.yaml", {})


def _error(text: str, tmp_path: Path) -> str:
    with pytest.raises(RegistryError) as info:
        _load(text, tmp_path)
    return str(info.value)


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        ("a__b", "must not contain '__'"),
        ("ab_", "must not contain '__' or end with '_'"),
        ("'a b'", "may only contain letters, digits"),
        ("a.b", "may only contain letters, digits"),
        ("42", "expected a string"),
        ("[fs]", "expected a string"),
    ],
)
def test_bad_prefix(tmp_path: Path, prefix: str, words: str) -> None:
    message = _error(f"servers:\n  files:\n    command: x\n    prefix: {prefix}\n", tmp_path)
    assert "servers.files.prefix" in message and words in message, message
    assert "r.yaml:4" in message  # the line of the prefix


@pytest.mark.parametrize(
    ("servers", "key"),
    [
        ("  a: {command: x, prefix: fs}\n  b: {command: y, prefix: fs}\n", "servers.b.prefix"),
        ("  fs: {command: x}\n  b: {command: y, prefix: fs}\n", "servers.b.prefix"),
        ("  a: {command: x, prefix: fs}\n  fs: {command: y}\n", "servers.fs"),
        ("  a: {command: x, prefix: fs}\n  b: {url: 'http://h/mcp', prefix: fs}\n", "servers.b"),
    ],
)
def test_two_servers_with_the_same_effective_prefix(tmp_path: Path, servers: str, key: str) -> None:
    message = _error(f"servers:\n{servers}", tmp_path)
    assert key in message and "would both expose their tools as 'fs__...'" in message, message
    assert "different prefix" in message


def test_the_registry_names_tools_by_prefix(tmp_path: Path) -> None:
    registry = _load(
        "servers:\n  filesystem:\n    command: x\n    prefix: fs\n  other: {command: y}\n"
        "state:\n  - tool: fs__list\n"
        "tools:\n"
        "  fs__write:\n    classification: reversible\n"
        "    inverse_tool: fs__delete\n    inverse_args: {path: '{args.path}'}\n"
        "  other__read: {classification: read}\n",
        tmp_path,
    )
    assert registry.servers["filesystem"].prefix == "fs"
    assert registry.servers["filesystem"].exposed_prefix == "fs"
    assert registry.servers["other"].exposed_prefix == "other"
    assert registry.policy("fs__write").inverse[0].tool == "fs__delete"
    assert registry.state[0].tool == "fs__list"


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("tools", "tools:\n  filesystem__write: {classification: irreversible}\n"),
        ("state", "state:\n  - tool: filesystem__list\n"),
        (
            "inverse",
            "tools:\n  fs__write:\n    classification: reversible\n"
            "    inverse_tool: filesystem__delete\n",
        ),
    ],
)
def test_naming_a_prefixed_server_by_its_name_is_an_error(
    tmp_path: Path, where: str, line: str
) -> None:
    message = _error("servers:\n  filesystem:\n    command: x\n    prefix: fs\n" + line, tmp_path)
    assert "server 'filesystem' has prefix: fs" in message, message
    assert "Write 'fs__" in message


def test_unknown_prefix_suggests_a_known_one(tmp_path: Path) -> None:
    message = _error(
        "servers:\n  filesystem:\n    command: x\n    prefix: files\n"
        "tools:\n  filez__write: {classification: irreversible}\n",
        tmp_path,
    )
    assert "names unknown server 'filez'" in message, message
    assert "Did you mean 'files__write'?" in message
