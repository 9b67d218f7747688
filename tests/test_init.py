"""`compensator init`, `check`, `wire` and `unwire` end to end: real client configuration
files of every shape, real servers, the command line as real subprocesses."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.cli import main
from compensator.clients import jsonc

from .conftest import SERVERS, third_party_servers
from .test_http_downstream import (
    HttpServer,
    http_server,  # noqa: F401  (a fixture)
)

LINT = [sys.executable, str(SERVERS / "lint_server.py")]
SECRET = "s3cret-token-value"
BEARER = "Bearer kv-token-123"
# Secrets on a server's command line (the lint server ignores its arguments).
ARG_SECRET = "arg-s3cret-value"
URL_SECRET = "redis://:pw-in-url@127.0.0.1:1"


def run(*args: str, cwd: Path, home: Path, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "compensator", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "HOME": str(home), **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def lint(**extra: Any) -> dict[str, Any]:
    return {"command": LINT[0], "args": LINT[1:], **extra}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def clients(
    tmp_path: Path,
    http_server: HttpServer,  # noqa: F811  (the fixture imported above)
) -> tuple[Path, Path, dict[Path, bytes]]:
    """A project and a home with one server in every place init looks, each file holding
    other keys too; returns (project, home, each file's original bytes)."""
    project, home = tmp_path / "project", tmp_path / "home"
    shutil.copy(SERVERS / "lint_server.py", write(project / "lint_server.py", ""))
    desktop = "claude_desktop_config.json"
    # One server configured alike in five places is one registry server: fewer processes.
    shared = {"shared": lint()}
    files = [
        write(
            project / ".mcp.json",
            json.dumps(
                {
                    "mcpServers": {
                        "notes": {
                            "command": LINT[0],
                            "args": [*LINT[1:], "--api-key", ARG_SECRET, URL_SECRET],
                            "env": {"API_TOKEN": SECRET},
                        }
                    }
                },
                indent=2,
            ),
        ),
        write(
            home / ".claude.json",
            json.dumps(
                {
                    "numStartups": 7,
                    "mcpServers": shared,
                    "projects": {
                        str(project.resolve()): {"allowedTools": [], "mcpServers": shared}
                    },
                },
                indent=2,
            ),
        ),
        write(
            home / ".config" / "Claude" / desktop,
            json.dumps(
                {
                    "globalShortcut": "Ctrl+Space",
                    "mcpServers": {
                        **shared,
                        "broken": {"command": str(tmp_path / "no-such-server")},
                    },
                }
            ),
        ),
        write(
            home / "Library" / "Application Support" / "Claude" / desktop,
            json.dumps({"mcpServers": shared}),
        ),
        write(
            project / ".vscode" / "mcp.json",
            '{\n  // the project\'s servers\n  "inputs": [],\n  "servers": {\n'
            f'    "vs.code": {{"type": "stdio", "command": {json.dumps(LINT[0])},\n'
            '      "args": ["${workspaceFolder}/lint_server.py"],},  /* trailing comma */\n'
            "  },\n}\n",
        ),
        write(project / ".cursor" / "mcp.json", json.dumps({"mcpServers": shared})),
        write(
            home / ".cursor" / "mcp.json",
            json.dumps(
                {
                    "mcpServers": {
                        "kv": {
                            "url": f"http://127.0.0.1:{http_server.port}/mcp",
                            "headers": {"Authorization": BEARER},
                        }
                    }
                }
            ),
        ),
    ]
    return project, home, {path: path.read_bytes() for path in files}


SERVER_NAMES = ["notes", "shared", "vs-code", "kv"]
ENV = {
    "API_TOKEN": SECRET,
    "KV_AUTHORIZATION": BEARER,
    "NOTES_API_KEY": ARG_SECRET,
    "NOTES_URL": URL_SECRET,
}


def test_init_check_wire_unwire_over_every_client(
    clients: tuple[Path, Path, dict[Path, bytes]],
) -> None:
    project, home, originals = clients
    made = run("init", cwd=project, home=home)
    assert made.returncode == 0, made.stderr
    registry = (project / "compensators.yaml").read_text()
    for name in SERVER_NAMES:
        assert f"\n  {name}:\n" in registry  # started, listed: in the registry
    for name in SERVER_NAMES[:-1]:
        assert f"  {name}__peek: {{classification: read}}" in registry  # readOnlyHint
        assert f"  # {name}__wipe:" in registry  # left unknown, commented out
    # The lint servers share their tool names; kv's clash with nothing, so it keeps them.
    prefixes = {n: s.get("prefix") for n, s in yaml.safe_load(registry)["servers"].items()}
    assert prefixes == {"notes": None, "shared": None, "vs-code": None, "kv": ""}
    assert "  # get:" in registry and "  # put:" in registry
    assert "# broken: failed to start" in registry and "no-such-server" in registry
    assert SECRET not in registry and "kv-token" not in registry
    assert ARG_SECRET not in registry and "pw-in-url" not in registry
    assert '"--api-key", "${NOTES_API_KEY}", "${NOTES_URL}"]' in registry
    assert '{"API_TOKEN": "${API_TOKEN}"}' in registry
    assert '{"Authorization": "${KV_AUTHORIZATION}"}' in registry
    assert str(project.resolve() / "lint_server.py") in registry  # ${workspaceFolder}
    assert "API_TOKEN KV_AUTHORIZATION NOTES_API_KEY NOTES_URL" in made.stdout
    for path in originals:
        assert str(path) in made.stdout  # read from every place
    assert "compensator check --config compensators.yaml" in made.stdout
    assert "pytest --compensator-config compensators.yaml" in made.stdout

    checked = run("check", "--config", "compensators.yaml", cwd=project, home=home, env=ENV)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    wired = run("wire", "--config", "compensators.yaml", "--yes", cwd=project, home=home)
    assert wired.returncode == 0, wired.stderr
    for path, before in originals.items():
        assert (
            path.read_bytes() != before
            and (path.parent / f"{path.name}.compensator-backup").read_bytes() == before
        )
    claude = json.loads((home / ".claude.json").read_text())
    assert claude["numStartups"] == 7
    assert set(claude["mcpServers"]) == {"compensator"}
    desktop = json.loads(next(p for p in originals if "Claude" in str(p.parent)).read_text())
    assert set(desktop["mcpServers"]) == {"broken", "compensator"}  # broken stays as it was
    vscode = (project / ".vscode" / "mcp.json").read_text()
    assert "// the project's servers" in vscode and "/* trailing comma */" not in vscode
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["compensator"]
    assert entry["env"] == {
        "API_TOKEN": SECRET,
        "NOTES_API_KEY": ARG_SECRET,
        "NOTES_URL": URL_SECRET,
    }
    assert "also needs KV_AUTHORIZATION" in wired.stderr  # set in ~/.cursor/mcp.json only
    tools = anyio.run(_tools_through, entry, home, {"KV_AUTHORIZATION": BEARER})
    assert {f"{name}__peek" for name in SERVER_NAMES[:-1]} <= tools and "get" in tools

    unwired = run("unwire", "--yes", cwd=project, home=home)
    assert unwired.returncode == 0, unwired.stderr
    for path, before in originals.items():
        assert path.read_bytes() == before
        assert not (path.parent / f"{path.name}.compensator-backup").exists()


async def _tools_through(entry: dict[str, Any], home: Path, exported: dict[str, str]) -> set[str]:
    """Start the proxy as a client would from the wired entry, and list its tools."""
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**exported, **entry.get("env", {}), "HOME": str(home), "PATH": os.environ["PATH"]},
    )
    with (home / "proxy.log").open("w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
    return {tool.name for tool in listed.tools}


def test_init_refuses_to_overwrite_and_names_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In process: these fail before any server starts."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(write(project / "compensators.yaml", "mine\n").parent)

    def init(*args: str) -> str:
        assert main(["init", "--project", str(project), *args]) == 1
        return capsys.readouterr().err

    assert "--force" in init()
    assert (project / "compensators.yaml").read_text() == "mine\n"
    assert "found no MCP client configuration" in init("-o", "new.yaml")
    broken = write(project / ".mcp.json", '{"mcpServers": {"a": {"command": "x"}}\n')
    bad = init("-o", "new.yaml")
    assert str(broken) in bad and "line 2" in bad
    write(project / ".mcp.json", '{"mcpServers": {"a": {"args": []}}}')
    assert 'mcpServers.a: has neither "command" nor "url"' in init("-o", "new.yaml")
    write(project / ".mcp.json", '{"mcpServers": []}')
    assert "expected an object of servers, found a list" in init("-o", "new.yaml")
    assert not (project / "new.yaml").exists()


def test_init_takes_the_shipped_policies_for_a_known_server(tmp_path: Path) -> None:
    servers = third_party_servers("npm", node=True)
    script = servers / "npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    home, project, data = tmp_path / "home", tmp_path / "project", tmp_path / "data"
    home.mkdir()
    data.mkdir()
    config = {"mcpServers": {"files": {"command": "node", "args": [str(script), str(data)]}}}
    source = write(tmp_path / "elsewhere.json", json.dumps(config))
    made = run(
        "init", "--from", str(source), "--force", cwd=write(project / "x", "").parent, home=home
    )
    assert made.returncode == 0, made.stderr
    assert "policies from filesystem.yaml" in made.stdout
    registry = (project / "compensators.yaml").read_text()
    # The one server keeps its tools' own names, in its entries and the shipped policies.
    assert 'prefix: ""' in registry
    assert "\n  write_file:\n    classification: compensable" in registry
    assert "snapshot_tool: read_text_file" in registry
    assert "fs__" not in registry and "files__" not in registry
    assert "state:\n  - tool: directory_tree" in registry
    # pytest sets COMPENSATOR_WORKDIR to a new folder per example: it never touches `data`
    assert f'"${{COMPENSATOR_WORKDIR:-{data}}}"' in registry
    checked = run("check", "--config", "compensators.yaml", cwd=project, home=home)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 errors, 0 warnings" in checked.stdout
    assert jsonc.loads(source.read_text()) == config  # --from FILE is only read


# A server init has no policies for: a set of names in the file its `env:` names.
ITEMS_SERVER = """\
import json, os, sys
from pathlib import Path
from mcp.types import ToolAnnotations
try:
    from mcp.server.fastmcp import FastMCP as MCPServer
except ImportError:
    from mcp.server.mcpserver import MCPServer

store = Path(os.environ["ITEMS_FILE"])
mcp = MCPServer("items")

def load():
    return set(json.loads(store.read_text())) if store.exists() else set()

def save(items):
    store.write_text(json.dumps(sorted(items)))

@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_items() -> dict:
    return {"items": sorted(load())}

@mcp.tool()
def add_item(name: str) -> dict:
    items = load()
    added = name not in items
    save(items | {name})
    return {"name": name, "added": added}

@mcp.tool()
def remove_item(name: str) -> dict:
    items = load()
    save(items - {name})
    return {"name": name, "removed": name in items}

mcp.run()
"""


@pytest.mark.thorough
def test_init_infer_chooses_a_probe_itself_and_never_touches_the_real_data(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    real = write(tmp_path / "real" / "items.json", '["keep-me"]')
    before = real.read_bytes()
    server = write(tmp_path / "items_server.py", ITEMS_SERVER)
    config = {
        "mcpServers": {
            "items": {
                "command": sys.executable,
                "args": [str(server)],
                "env": {"ITEMS_FILE": str(real)},
            }
        }
    }
    source = write(tmp_path / "clients.json", json.dumps(config))
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "compensator",
            "init",
            "--from",
            str(source),
            "--infer",
            "--examples",
            "10",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        stdin=subprocess.DEVNULL,
        timeout=600,
        env={**os.environ, "HOME": str(home)},
    )
    assert made.returncode == 0, made.stderr[-3000:]
    # No hand edit: the argument-free read became the probe, and stdout says so and why.
    assert "state probe chosen: list_items" in made.stdout, made.stdout
    assert "2 of 2 proven" in made.stdout, made.stdout
    assert "  add_item  proven: reversible: remove_item(name={result.name})" in made.stdout
    text = (project / "compensators.yaml").read_text()
    written = yaml.safe_load(text)
    assert [p["tool"] for p in written["state"]] == ["list_items"]
    entries = written["tools"]
    assert entries["add_item"]["classification"] == "reversible"
    assert "remove_item" in json.dumps(entries["add_item"])
    assert "add_item" in json.dumps(entries["remove_item"])
    # The data path was written to move into each test run's folder, so the real file holds
    # what it held: infer made hundreds of calls, none on it.
    assert "${COMPENSATOR_WORKDIR:-" in text
    assert real.read_bytes() == before
    # While each check ran, stderr (a pipe here) had its running count, a line a quarter.
    assert re.search(r"^infer: add_item: reversible: \d+/10 examples, \d+ s$", made.stderr, re.M)
    # The plugin on the written file makes hundreds of calls too, none on the real file.
    checked = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "--compensator-config", str(project / "compensators.yaml"), "--compensator-seed", "5",
         "--compensator-examples", "10"],
        capture_output=True, text=True, cwd=project, stdin=subprocess.DEVNULL, timeout=600,
        env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "add_item" in checked.stdout and "passed" in checked.stdout
    assert real.read_bytes() == before
