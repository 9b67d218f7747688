"""The README's "Start with the servers you already have", walked end to end as a new user
would, on server-memory, whose data path is in `env:`: `init`, `check` with no variable
exported, `pytest --compensator-config`, `wire`, a real client (the MCP inspector's CLI)
making a change through the wired configuration, a new process undoing it, and `unwire`.
The README shows this run's output: the lines it quotes must be what the commands print."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, third_party_servers

MEMORY_JS = "npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
INSPECTOR = "npm/node_modules/.bin/mcp-inspector"
# The user's own knowledge graph, as server-memory writes it (one JSON object a line).
THEIR_DATA = '{"type":"entity","name":"keep-me","entityType":"note","observations":["mine"]}'
ADA = [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]


def readme_block() -> str:
    """The README's shell session under "Start with the servers you already have"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Start with the servers you already have", 1)[1]
    return section.split("```", 2)[1]


def quoted(command: str) -> list[str]:
    """What the README shows `$ command` printing (up to the next `$` line)."""
    block = readme_block().splitlines()
    start = block.index(f"$ {command}") + 1
    shown = []
    for line in block[start:]:
        if line.startswith("$ "):
            break
        shown.append(line)
    return shown


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.thorough
def test_the_readme_path_from_init_to_unwire_on_server_memory(tmp_path: Path):
    servers = third_party_servers(MEMORY_JS, INSPECTOR, node=True)
    home, project, data = tmp_path / "home", tmp_path / "demo", tmp_path / "data"
    for folder in (home, project, data):
        folder.mkdir()
    memory = data / "memory.jsonl"
    memory.write_text(THEIR_DATA, encoding="utf-8")
    mcp = {
        "mcpServers": {
            "memory": {
                "command": "node",
                "args": [str(servers / MEMORY_JS)],
                "env": {"MEMORY_FILE_PATH": str(memory)},
            }
        }
    }
    client_file = project / ".mcp.json"
    client_file.write_text(json.dumps(mcp, indent=2) + "\n", encoding="utf-8")
    client_bytes, data_hash = client_file.read_bytes(), sha256(memory)
    # The person's shell keeps state elsewhere than a client passes on to its servers.
    shell = {
        **{k: v for k, v in os.environ.items() if k != "MEMORY_FILE_PATH"},
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "COLUMNS": "100",
    }

    def run(*command: str, timeout: float = 300) -> str:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            cwd=project,
            env=shell,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    compensator = [sys.executable, "-m", "compensator"]
    made = run(*compensator, "init")
    row = next(line for line in quoted("compensator init") if line.startswith("memory"))
    assert row in made.splitlines()  # 3 read, 6 undoable: the shipped memory.yaml
    registry = (project / "compensators.yaml").read_text(encoding="utf-8")
    assert f'"MEMORY_FILE_PATH": "${{COMPENSATOR_WORKDIR:-{data}}}/memory.jsonl"' in registry

    checked = run(*compensator, "check", "--config", "compensators.yaml")
    assert quoted("compensator check --config compensators.yaml")[-1] in checked

    plugin = run(
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--compensator-seed", "3",
        "--compensator-config", "compensators.yaml",
    )  # fmt: skip
    assert re.search(r"=+ 8 passed in ", plugin), plugin[-2000:]
    for line in quoted("pytest --compensator-config compensators.yaml"):
        tool = line.split()[0]
        if tool in ("create_entities", "delete_entities"):  # every call undone and verified
            undone = re.search(rf"^{tool} +\d+ +\d+ +(\d+) +(\d+) +0 +\d+/\d+$", plugin, re.M)
            assert undone is not None and undone[1] == undone[2], plugin
    assert sha256(memory) == data_hash  # hundreds of calls, none on the user's graph

    wired = run(*compensator, "wire", "--yes")
    assert '+    "compensator": {' in wired and "--db" in wired

    # The client: the inspector's CLI through the wired file, as Claude Code would start it
    # (with only the few variables the MCP SDK passes on: no XDG_STATE_HOME).
    called = run(
        str(servers / INSPECTOR), "--cli", "--config", ".mcp.json", "--server", "compensator",
        "--method", "tools/call", "--tool-name", "create_entities",
        "--tool-arg", f"entities={json.dumps(ADA)}",
    )  # fmt: skip
    assert '"name": "Ada"' in called
    assert "Ada" in memory.read_text(encoding="utf-8")

    # A new process, from the person's shell, finds the journal and takes the change back.
    logged = run(*compensator, "log", "--config", "compensators.yaml")
    assert "create_entities" in logged
    undone = run(*compensator, "undo", "--config", "compensators.yaml", "--since", "1h", "--yes")
    for line in quoted("compensator undo --config compensators.yaml --since 1h"):
        assert line in undone.splitlines(), undone  # the plan's row and the summary
    assert memory.read_text(encoding="utf-8").strip() == THEIR_DATA

    run(*compensator, "unwire", "--yes")
    assert client_file.read_bytes() == client_bytes
