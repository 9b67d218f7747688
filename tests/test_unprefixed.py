"""`prefix: ""`: a server whose tools and prompts keep their own names behind the proxy.

Routing: `prefix__tool` goes to the server with that prefix, a meta tool's name to the proxy,
anything else to the unprefixed server. At most one server may be unprefixed; its tools that a
meta tool or another server's prefix would shadow are left out, logged once, and reported by
`compensator check`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.names import META_TOOLS, exposed_name, hidden_by, resolve
from compensator.wire import sdk
from pytest_compensator.client import _relay as relay_messages  # mcp 1.x shutdown

from .conftest import EXAMPLES, SERVERS, Launcher, third_party_servers
from .test_notifications import Client, method_is
from .test_prefix import _error, _load
from .test_serve_http import connected, serve  # noqa: F401  (serve is a fixture)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:The .* capability is deprecated"),
]

EVERYTHING_JS = "npm/node_modules/@modelcontextprotocol/server-everything"


# -- names: pure rules ----------------------------------------------------------------------


def test_an_empty_prefix_keeps_the_name() -> None:
    assert exposed_name("", "echo") == "echo"
    assert exposed_name("fs", "echo") == "fs__echo"


@pytest.mark.parametrize(
    ("name", "routed"),
    [
        ("fs__write", ("fs", "write")),  # a known prefix wins
        ("echo", ("", "echo")),  # anything else goes to the unprefixed server
        ("xy__echo", ("", "xy__echo")),  # an unknown prefix is part of the name
        ("checkpoint", None),  # a meta tool is the proxy's
    ],
)
def test_resolve_with_an_unprefixed_server(name: str, routed: tuple[str, str] | None) -> None:
    assert resolve(name, {"fs", ""}) == routed


def test_resolve_without_an_unprefixed_server() -> None:
    assert resolve("fs__write", {"fs"}) == ("fs", "write")
    assert resolve("echo", {"fs"}) is None
    assert resolve("xy__echo", {"fs"}) is None


def test_what_hides_an_unprefixed_name() -> None:
    prefixes = {"fs": "filesystem", "": "everything"}
    assert hidden_by("undo_to", prefixes) == "the meta tool undo_to"
    assert hidden_by("fs__write", prefixes) == "server 'filesystem', whose prefix is fs"
    assert hidden_by("echo", prefixes) is None
    assert hidden_by("undo_to", prefixes, meta=False) is None  # prompts have no meta names


# -- the registry ---------------------------------------------------------------------------


def test_the_registry_names_unprefixed_tools_by_their_own_names(tmp_path: Path) -> None:
    registry = _load(
        "servers:\n"
        "  everything:\n    command: x\n    prefix: ''\n"
        "  files:\n    command: y\n    prefix: fs\n"
        "state:\n  - tool: list\n"
        "tools:\n"
        "  add:\n    classification: reversible\n"
        "    inverse_tool: remove\n    inverse_args: {id: '{result.id}'}\n"
        "  fs__write: {classification: irreversible}\n"
        "  xy__odd: {classification: read}\n",
        tmp_path,
    )
    assert registry.servers["everything"].prefix == ""
    assert registry.servers["everything"].exposed_prefix == ""
    assert registry.servers["files"].exposed_prefix == "fs"
    assert registry.policy("add").inverse[0].tool == "remove"
    assert registry.state[0].tool == "list"
    assert set(registry.tools) == {"add", "fs__write", "xy__odd"}


def test_two_unprefixed_servers_are_a_load_error(tmp_path: Path) -> None:
    message = _error(
        "servers:\n  one:\n    command: x\n    prefix: ''\n  two:\n    command: y\n"
        "    prefix: ''\n",
        tmp_path,
    )
    assert "r.yaml:7: servers.two.prefix" in message, message
    assert "servers 'one' and 'two' both have prefix: \"\"" in message, message
    assert "Give one of them a prefix:" in message


@pytest.mark.parametrize("meta", sorted(META_TOOLS))
def test_a_meta_tool_named_entry_names_the_unprefixed_server(tmp_path: Path, meta: str) -> None:
    message = _error(
        f"servers:\n  everything:\n    command: x\n    prefix: ''\n"
        f"tools:\n  {meta}: {{classification: read}}\n",
        tmp_path,
    )
    assert f"r.yaml:6: tools.{meta}" in message, message
    assert f"'{meta}' is both a compensator meta tool and" in message, message
    assert "server 'everything' (prefix: \"\")" in message
    assert f"give servers.everything a prefix: and write it as prefix__{meta}" in message


def test_naming_an_unprefixed_server_by_its_name_is_an_error(tmp_path: Path) -> None:
    message = _error(
        "servers:\n  everything:\n    command: x\n    prefix: ''\n"
        "tools:\n  everything__echo: {classification: read}\n",
        tmp_path,
    )
    assert "tools.everything__echo" in message, message
    assert "server 'everything' has prefix: \"\", so its tools keep their own names" in message
    assert "Write 'echo'" in message


# -- in front of server-everything: exactly its tools and prompts, by their own names --------


def _everything() -> Path:
    root = third_party_servers(EVERYTHING_JS, node=True)
    return root / EVERYTHING_JS / "dist" / "index.js"


def _everything_registry(tmp_path: Path) -> Path:
    path = tmp_path / "everything.yaml"
    path.write_text(
        f"servers:\n  everything:\n    command: node\n"
        f"    args: [{json.dumps(str(_everything()))}, stdio]\n    prefix: ''\n"
    )
    return path


async def _never(*args: Any) -> Any:
    raise AssertionError("server-everything asked the client something")


@asynccontextmanager
async def _direct(log: Path, *, capable: bool = False) -> AsyncIterator[ClientSession]:
    """A session with server-everything itself, no proxy between. `capable` advertises
    sampling, elicitation and roots, as `serve --http` does to its servers (server-everything
    lists some tools only then)."""
    params = StdioServerParameters(command="node", args=[str(_everything()), "stdio"])
    names = ("sampling_callback", "elicitation_callback", "list_roots_callback")
    callbacks = dict.fromkeys(names, _never) if capable else {}
    relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
    with log.open("a") as errlog:
        async with anyio.create_task_group() as relays:
            async with stdio_client(params, errlog=errlog) as (read, write):
                # The server's notifications during teardown, as launch_proxy does (mcp 1.x).
                relays.start_soon(relay_messages, read, relay_in)
                async with ClientSession(relay_out, write, **callbacks) as session:
                    await session.initialize()
                    yield session
            relays.cancel_scope.cancel()


async def _listed(session: ClientSession) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tools, prompts) by name, as wire JSON."""
    tools = {t.name: sdk.tool_to_wire(t) for t in await sdk.list_all(session, "tools")}
    prompts = {p.name: sdk.to_wire(p) for p in (await session.list_prompts()).prompts}
    return tools, prompts


async def _uses_everything_by_its_names(
    session: ClientSession, direct: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    tools, prompts = await _listed(session)
    server_tools = {name: tool for name, tool in tools.items() if name not in META_TOOLS}
    assert set(tools) - set(server_tools) == META_TOOLS
    assert server_tools == direct[0]  # the same names, schemas and annotations
    assert prompts == direct[1]
    assert "echo" in tools and "simple-prompt" in prompts

    echoed = await sdk.call_tool_raw(session, "echo", {"message": "hi there"})
    assert "hi there" in json.dumps(echoed)
    summed = await sdk.call_tool_raw(session, "get-sum", {"a": 2, "b": 3})
    _, content, is_error = sdk.result_parts(summed)
    assert not is_error and "5" in content[0]["text"], content
    prompt = await session.get_prompt("simple-prompt")
    assert prompt.messages, prompt
    checkpoint = await sdk.call_tool_raw(session, "checkpoint", {})
    assert "checkpoint_id" in json.dumps(checkpoint)


async def test_through_stdio_a_client_sees_exactly_server_everything(
    proxy: Launcher, tmp_path: Path, proxy_log: Callable[[], str]
) -> None:
    async with _direct(tmp_path / "direct.log") as session:
        direct = await _listed(session)
    async with proxy(_everything_registry(tmp_path)) as client:
        await _uses_everything_by_its_names(client.session, direct)
        changes = await client.list_changes()
    # Unregistered, so journaled as unknown, under the names the client used.
    assert [c["tool"] for c in changes] == ["get-sum", "echo"]
    assert "clients cannot reach" not in proxy_log()


async def test_through_http_a_client_sees_exactly_server_everything(
    serve: Callable[..., Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    async with _direct(tmp_path / "direct.log", capable=True) as session:
        direct = await _listed(session)
    async with serve(_everything_registry(tmp_path)) as served:
        async with connected(served.url) as client:
            await _uses_everything_by_its_names(client.session, direct)
        assert await served.stop() == 0, served.log()
    assert "Traceback" not in served.log()


# -- journaling and undo, side by side with a prefixed server, and check --------------------


def _unprefixed_tasks(tmp_path: Path) -> Path:
    """examples/compensators.yaml with `prefix: ""`, its tools named as the server names them."""
    text = (EXAMPLES / "compensators.yaml").read_text().replace("tasks__", "")
    head = "servers:\n  tasks:\n"
    assert head in text
    text = text.replace(head, f"{head}    cwd: {EXAMPLES}\n    prefix: ''\n")
    path = tmp_path / "unprefixed.yaml"
    path.write_text(text)
    return path


def _side_by_side(tmp_path: Path) -> Path:
    """The example tasks server as `tasks__...`, and tests/servers/lint_server.py unprefixed,
    offering also `checkpoint` and `tasks__add_task`, which it cannot have."""
    text = (EXAMPLES / "compensators.yaml").read_text()
    lint = (
        f"  lint:\n    command: {json.dumps(sys.executable)}\n"
        f"    args: [{json.dumps(str(SERVERS / 'lint_server.py'))}, --shadowed]\n"
        "    prefix: ''\n"
    )
    text = text.replace("servers:\n", f"servers:\n{lint}", 1)
    text = text.replace("  tasks:\n", f"  tasks:\n    cwd: {EXAMPLES}\n", 1)
    path = tmp_path / "side-by-side.yaml"
    path.write_text(text)
    return path


async def test_undo_restores_what_unprefixed_tools_changed(
    proxy: Launcher, tmp_path: Path, tasks_env: dict[str, str]
) -> None:
    async with proxy(_unprefixed_tasks(tmp_path), env=tasks_env) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"add_task", "complete_task", "list_tasks", *META_TOOLS} <= names
        assert not [name for name in names if "__" in name], names

        kept = await client.call_ok("add_task", {"title": "kept"})
        checkpoint = await client.checkpoint()
        added = await client.call_ok("add_task", {"title": "undo me"})
        await client.call_ok("complete_task", {"id": kept["id"]})
        changes = await client.list_changes(checkpoint)
        assert [c["tool"] for c in changes] == ["complete_task", "add_task"]
        assert [c["classification"] for c in changes] == ["compensable", "reversible"]

        report = await client.undo_to(checkpoint)
        assert len(report["undone"]) == 2, report
        tasks = (await client.call_ok("list_tasks"))["tasks"]
        assert [(t["id"], t["title"], t["status"]) for t in tasks] == [(kept["id"], "kept", "open")]
        assert added["id"] not in [t["id"] for t in tasks]
        explained = await client.call_ok("explain_blast_radius", {"tool": "delete_task"})
        assert explained["classification"] == "compensable"


async def test_a_prefixed_and_an_unprefixed_server_side_by_side(
    proxy: Launcher, tmp_path: Path, tasks_env: dict[str, str], proxy_log: Callable[[], str]
) -> None:
    async with proxy(_side_by_side(tmp_path), env=tasks_env) as client:
        listed = [tool.name for tool in await client.list_tools()]
        assert {"wipe", "plain", "peek", "strict", "tasks__add_task", "tasks__list_tasks"} <= set(
            listed
        )
        assert len(listed) == len(set(listed)), listed  # the shadowed tools are left out
        assert not [name for name in listed if name.startswith("lint__")]

        assert await client.call_ok("plain", {}) == {"tool": "plain", "args": {}}
        added = await client.call_ok("tasks__add_task", {"title": "to the tasks server"})
        checkpoint = await client.checkpoint()  # the proxy's, not lint's `checkpoint`
        await client.call_ok("tasks__add_task", {"title": "undo me"})
        await client.call_ok("wipe", {})
        changes = await client.list_changes(checkpoint)
        assert [c["tool"] for c in changes] == ["wipe", "tasks__add_task"]

        wrong = await client.call("lint__plain")
        assert wrong.is_error and "server 'lint' does not offer tool 'lint__plain'" in wrong.text
        hidden = await client.call("tasks__zap")  # lint's, hidden by the tasks prefix
        assert hidden.is_error and hidden.text.startswith(
            "server 'lint' offers tool 'tasks__zap', but server 'tasks', whose prefix is tasks"
        ), hidden.text
        report = await client.undo_to(checkpoint)
        assert [s["tool"] for s in report["skipped"]] == ["wipe"], report  # unknown: refused
        tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
        assert [t["id"] for t in tasks] == [added["id"]]
    warnings = [line for line in proxy_log().splitlines() if "clients cannot reach" in line]
    assert len(warnings) == 3, warnings  # each shadowed tool, once
    assert any("'checkpoint'" in w and "the meta tool checkpoint" in w for w in warnings)
    assert any(
        "'tasks__add_task'" in w and "server 'tasks', whose prefix is tasks" in w for w in warnings
    )


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compensator.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def test_check_reports_shadowed_tools(tmp_path: Path, tasks_env: dict[str, str]) -> None:
    done = _cli("check", "--config", str(_side_by_side(tmp_path)), "--json", env=tasks_env)
    assert "Traceback" not in done.stderr, done.stderr
    document = json.loads(done.stdout)
    shadowed = {f["tool"]: f for f in document["findings"] if f["key"] == "servers.lint.prefix"}
    assert done.returncode == 1
    assert set(shadowed) == {"checkpoint", "tasks__add_task", "tasks__zap"}, document
    assert all(f["severity"] == "error" and f["line"] for f in shadowed.values())
    assert "the meta tool checkpoint takes that name" in shadowed["checkpoint"]["message"]
    assert "server 'tasks', whose prefix is tasks" in shadowed["tasks__add_task"]["message"]
    assert "Give servers.lint a prefix:" in shadowed["checkpoint"]["message"]


def test_check_and_explain_find_unprefixed_tools(tmp_path: Path, tasks_env: dict[str, str]) -> None:
    config = str(_unprefixed_tasks(tmp_path))
    checked = _cli("check", "--config", config, "--json", env=tasks_env)
    document = json.loads(checked.stdout)
    assert checked.returncode == 0 and document["errors"] == 0, document
    explained = _cli("explain", "--config", config, "delete_task", "--json", env=tasks_env)
    assert explained.returncode == 0, explained.stderr
    answer = json.loads(explained.stdout)
    assert answer["classification"] == "compensable"
    assert answer["snapshot"]["tool"] == "get_task_tree", answer


@pytest.mark.thorough
def test_the_pytest_plugin_proves_an_unprefixed_registry(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    config = _unprefixed_tasks(tmp_path)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--compensator-seed",
        "7",
        "--compensator-config",
        str(config),
        "--compensator-examples",
        "5",
    )
    result.assert_outcomes(passed=12)
    out = result.stdout.str()
    assert "left out: purge_completed (irreversible)" in out
    assert "left out: restore_tasks (unknown: not in the registry)" in out


async def test_unprefixed_prompts_keep_their_names_and_yield_to_a_prefix(
    proxy: Launcher, tmp_path: Path, proxy_log: Callable[[], str]
) -> None:
    # `cat` is unprefixed; labelled beta, it announces prompts/list_changed.
    catalog = json.dumps(str(SERVERS / "catalog_server.py"))
    config = tmp_path / "prompts.yaml"
    config.write_text(
        f"servers:\n"
        f"  cat:\n    command: {json.dumps(sys.executable)}\n"
        f"    args: [{catalog}, --label, beta]\n    prefix: ''\n"
        f"  alpha:\n    command: {json.dumps(sys.executable)}\n"
        f"    args: [{catalog}, --label, alpha]\n"
    )
    client = Client()
    async with proxy(config, session_options=client.options(capable=False)) as proxy_client:
        session = proxy_client.session

        async def prompt_names() -> set[str]:
            return {prompt.name for prompt in (await session.list_prompts()).prompts}

        async def text_of(name: str) -> str:
            result = await session.get_prompt(name, {"name": "ann"})
            return str(sdk.to_wire(result)["messages"][0]["content"]["text"])

        listed = await prompt_names()
        own = {"greet", "summarize", "plain"}
        assert listed == own | {f"alpha__{name}" for name in own}
        assert await text_of("greet") == "[beta] greet ann plainly"

        # cat now lists a prompt named alpha__greet: alpha's prefix keeps that name.
        await proxy_client.call_ok("add_prompt", {"name": "alpha__greet"})
        await proxy_client.call_ok("add_prompt", {"name": "fresh"})
        changed = method_is("notifications/prompts/list_changed")
        told = 0  # the proxy may fold both announcements into one refresh
        while "fresh" not in await prompt_names():
            told += 1
            await client.notifications.wait_for(changed, "prompts/list_changed", count=told)
        assert await prompt_names() == listed | {"fresh"}
        assert await text_of("alpha__greet") == "[alpha] greet ann plainly"
    warnings = [line for line in proxy_log().splitlines() if "prompt 'alpha__greet'" in line]
    assert len(warnings) == 1 and "server 'alpha', whose prefix is alpha" in warnings[0]
