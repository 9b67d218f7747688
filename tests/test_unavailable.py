"""A proxy that cannot start still answers its client, and says why where the client shows
it: a client shows a server that just exits as "Connection closed", and hides its stderr.
Run as a real client would: the SDK's client, and the MCP inspector's CLI from npm."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from compensator.wire import sdk
from pytest_compensator.client import launch_proxy, proxy_parameters

from .conftest import SERVERS, processes, third_party_servers

pytestmark = pytest.mark.anyio

INSPECTOR = "npm/node_modules/@modelcontextprotocol/inspector/package.json"


def mistyped(tmp_path: Path) -> tuple[Path, str]:
    """A registry with an unknown key on line 4, and the sentence that names it."""
    config = tmp_path / "compensators.yaml"
    config.write_text(
        "servers:\n  notes:\n    command: notes-server\n    comand: typo\n", encoding="utf-8"
    )
    return config, f"{config}:4: servers.notes.comand: unknown key"


async def test_the_client_sees_why_in_instructions_a_log_message_and_every_answer(
    tmp_path: Path,
):
    config, sentence = mistyped(tmp_path)
    logs: list[Any] = []
    logged = anyio.Event()

    async def on_log(params: Any) -> None:
        logs.append(params.data)
        logged.set()

    with (tmp_path / "stderr.log").open("w") as stderr:
        async with launch_proxy(
            config,
            tmp_path / "journal.db",
            stderr=stderr,
            session_options={"logging_callback": on_log},
        ) as client:
            assert client.instructions is not None and sentence in client.instructions
            with pytest.raises(sdk.SDKError) as listed:
                await client.list_tools()
            assert sentence in str(listed.value)
            reply = await client.call("notes__add", {"title": "x"})
            assert reply.is_error and sentence in reply.text
            with anyio.fail_after(30):
                await logged.wait()
            assert any(sentence in str(data) for data in logs), logs
    assert sentence in (tmp_path / "stderr.log").read_text()  # and stderr has it, as before
    assert not (tmp_path / "journal.db").exists()


def running_with(marker: str) -> list[int]:
    """The processes whose command line has `marker` in it."""
    return [p.pid for p in processes() if marker in p.command]


async def test_a_journal_that_cannot_open_stops_the_servers_while_the_client_stays(
    tmp_path: Path,
):
    # serve starts its servers' processes first; when the journal then refuses, nothing
    # will use them, so they stop rather than run for as long as the client stays.
    marker = f"--unused-marker-{tmp_path.name}"
    config = tmp_path / "compensators.yaml"
    config.write_text(
        "servers:\n  flaky:\n"
        f'    command: "${{COMPENSATOR_PYTHON}}"\n'
        f'    args: ["{SERVERS / "flaky_server.py"}", "{marker}"]\n'
        f'    env: {{FLAKY_DIR: "{tmp_path / "flaky"}"}}\n',
        encoding="utf-8",
    )
    journal = tmp_path / "journal.db"
    journal.write_bytes(b"not a SQLite database, " * 64)
    with (tmp_path / "stderr.log").open("w") as stderr:
        async with launch_proxy(config, journal, stderr=stderr) as client:
            assert client.instructions is not None
            assert "compensator could not start" in client.instructions
            assert (tmp_path / "flaky" / "starts.log").exists()  # it was started, early
            assert running_with(marker) == []
    assert journal.read_bytes() == b"not a SQLite database, " * 64


def test_without_a_client_it_exits_at_once_with_2(tmp_path: Path):
    config, sentence = mistyped(tmp_path)
    params = proxy_parameters(config, tmp_path / "journal.db")
    ended = subprocess.run(
        [params.command, *params.args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert ended.returncode == 2
    assert sentence in ended.stderr and ended.stdout == ""


def inspect(tmp_path: Path, *args: str) -> str:
    """Run the MCP inspector's CLI (`mcp-inspector --cli`) against a client config that starts
    the proxy, as a client does; what it prints, with the proxy's stderr left out."""
    servers = third_party_servers(INSPECTOR, node=True)
    launcher = servers / "npm/node_modules/.bin/mcp-inspector"
    config = tmp_path / "mcp.json"
    params = proxy_parameters(args[0], args[1])
    # The proxy's own stderr goes to a file, so only what the inspector got can match.
    wrapper = tmp_path / "proxy.sh"
    wrapper.write_text(
        '#!/bin/sh\nexec "$@" 2>>"' + str(tmp_path / "proxy-stderr.log") + '"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    entry = {"command": str(wrapper), "args": [params.command, *params.args]}
    config.write_text(json.dumps({"mcpServers": {"compensator": entry}}), encoding="utf-8")
    ran = subprocess.run(
        [str(launcher), "--cli", "--config", str(config), "--server", "compensator", *args[2:]],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=120,
    )
    assert ran.returncode != 0  # the inspector fails the command, and says why
    return ran.stdout + ran.stderr


@pytest.mark.parametrize("method", ["tools/list", "tools/call"])
def test_the_inspector_shows_the_registry_mistake(tmp_path: Path, method: str):
    config, sentence = mistyped(tmp_path)
    extra = ["--tool-name", "notes__add"] if method == "tools/call" else []
    shown = inspect(tmp_path, str(config), str(tmp_path / "j.db"), "--method", method, *extra)
    assert "Connection closed" not in shown
    assert sentence in shown, shown


def test_the_inspector_shows_a_journal_folder_that_does_not_exist(tmp_path: Path):
    config = tmp_path / "compensators.yaml"
    config.write_text("servers:\n  notes:\n    command: notes-server\n", encoding="utf-8")
    db = tmp_path / "no" / "such" / "j.db"
    shown = inspect(tmp_path, str(config), str(db), "--method", "tools/list")
    assert f"the folder {db.parent} does not exist" in shown, shown
    assert "mkdir -p" in shown
