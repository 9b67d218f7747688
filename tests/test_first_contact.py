"""What a new user meets in the first minutes, run as real subprocesses: commands that
start no server need none of its variables, a missing one is named with the commands that
need it, and mistyped paths are reported as what they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .broken import write_example
from .test_cli_human import WIDE, cli

pytestmark = pytest.mark.anyio

LONG_TITLE = "a title long enough that a table cell cuts it " * 4


def with_a_secret(text: str) -> str:
    """The example registry, its server reading a token nobody exported here."""
    server = '"--db", "${COMPENSATOR_WORKDIR:-.}/tasks.db"]'
    assert server in text
    return text.replace(server, server + '\n    env: {API_TOKEN: "${FIRST_CONTACT_TOKEN}"}', 1)


async def test_undo_dry_run_needs_no_server_variable_and_full_shows_whole_calls(
    proxy, tasks_env, tmp_path: Path
):
    config = write_example(tmp_path, "secret", with_a_secret)
    db = tmp_path / "journal.db"
    async with proxy(config, db=db, env={**tasks_env, "FIRST_CONTACT_TOKEN": "t"}) as client:
        added = await client.call_ok("tasks__add_task", {"title": "x"})
        await client.call_ok("tasks__rename_task", {"id": added["id"], "title": LONG_TITLE})
        # Undone, this one renames the task back to the long title: a long compensating call.
        await client.call_ok("tasks__rename_task", {"id": added["id"], "title": "y"})
    common = ("undo", "--config", str(config), "--db", str(db), "--since", "1d")
    narrow = {**tasks_env, "COLUMNS": "80"}

    plan = cli(*common, "--dry-run", env=narrow)
    assert plan.returncode == 0, plan.stderr
    assert "Plan: 3 to undo" in plan.stdout and "Dry run: nothing was changed." in plan.stdout
    full = cli(*common, "--dry-run", "--full", env=narrow)
    assert full.returncode == 0, full.stderr
    # Cut to the width without --full; wrapped, every word of it there, with it.
    assert full.stdout.count("cuts") == LONG_TITLE.count("cuts") > plan.stdout.count("cuts")

    # Undoing for real starts the server, which needs the variable: the message says so.
    real = cli(*common, "--yes", env={**tasks_env, **WIDE})
    assert real.returncode == 1
    assert "FIRST_CONTACT_TOKEN is not set" in real.stderr
    assert "undo --dry-run does not" in real.stderr


def test_wire_defaults_to_the_file_init_writes_and_says_when_it_is_missing(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    missing = cli("wire", "--dry-run", "--project", str(project), env={"HOME": str(tmp_path)})
    assert missing.returncode == 1
    assert "compensators.yaml: no such file" in missing.stderr
    assert "compensator init" in missing.stderr and "Errno" not in missing.stderr
    # With the file init writes there, --config is not needed.
    (project / "compensators.yaml").write_text(
        "servers:\n  notes:\n    command: notes-server\n", encoding="utf-8"
    )
    config = {"mcpServers": {"notes": {"command": "notes-server"}}}
    (project / ".mcp.json").write_text(json.dumps(config), encoding="utf-8")
    wired = subprocess_in(project, "wire", "--dry-run", "--project", str(project), home=tmp_path)
    assert wired.returncode == 0, wired.stderr
    assert '"compensator"' in wired.stdout and "compensators.yaml" in wired.stdout


def subprocess_in(folder: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compensator.cli", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "HOME": str(home)},
        stdin=subprocess.DEVNULL,
        timeout=90,
    )


def test_log_with_a_mistyped_config_names_the_file_not_the_journal(tmp_path: Path):
    result = cli("log", "--config", str(tmp_path / "compensatrs.yaml"))
    assert result.returncode == 1
    assert "compensatrs.yaml: no such file" in result.stderr
    assert "journal" not in result.stderr.split("no such file")[0]


def test_serve_refuses_a_journal_in_a_folder_that_does_not_exist(tmp_path: Path, tasks_env):
    config = write_example(tmp_path, "plain")
    db = tmp_path / "no" / "such" / "dir" / "j.db"
    result = cli("serve", "--config", str(config), "--db", str(db), env=tasks_env)
    assert result.returncode == 2
    assert f"the folder {db.parent} does not exist" in result.stderr
    assert "mkdir -p" in result.stderr
    assert not (tmp_path / "no").exists()


ROOT = Path(__file__).resolve().parent.parent


def collect_from_root(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "COMPENSATOR_SERVERS"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environ, "HOME": str(home)},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_the_root_conftest_checks_a_registry_alone_with_the_installed_servers(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".cache" / "mcp-compensator" / "servers").mkdir(parents=True)
    example = collect_from_root("--compensator-config", "examples/compensators.yaml", home=home)
    assert example.returncode == 0, example.stdout + example.stderr
    assert "tests/" not in example.stdout  # the suite is left out ...
    assert "compensators.yaml::roundtrip[tasks__add_task]" in example.stdout  # ... not this
    # A shipped registry finds the servers where scripts/install-servers puts them.
    memory = "examples/registries/memory.yaml"
    found = collect_from_root("--compensator-config", memory, home=home)
    assert found.returncode == 0, found.stdout + found.stderr
    assert "memory.yaml::roundtrip[memory__create_entities]" in found.stdout
    nowhere = collect_from_root("--compensator-config", memory, home=tmp_path / "empty")
    assert nowhere.returncode != 0
    assert "COMPENSATOR_SERVERS is not set" in nowhere.stdout + nowhere.stderr
    # Asked for a test path, the suite is collected as usual.
    both = collect_from_root(
        "--compensator-config", "examples/compensators.yaml", "tests/test_minimize.py", home=home
    )
    assert "tests/test_minimize.py::" in both.stdout


def test_wire_passes_what_an_older_registry_reads_secret_or_not(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    # As an older init wrote it: every env value a ${VAR}, a mode included.
    (project / "compensators.yaml").write_text(
        "servers:\n  notes:\n    command: notes-server\n"
        '    env: {MODE: "${MODE}", API_TOKEN: "${API_TOKEN}", KEEP: "literal"}\n',
        encoding="utf-8",
    )
    env = {"MODE": "fast", "API_TOKEN": "t0ken", "KEEP": "literal", "OTHER": "unread"}
    config = {"mcpServers": {"notes": {"command": "notes-server", "env": env}}}
    (project / ".mcp.json").write_text(json.dumps(config), encoding="utf-8")
    wired = subprocess_in(project, "wire", "--dry-run", "--project", str(project), home=tmp_path)
    assert wired.returncode == 0, wired.stderr
    added = "\n".join(line for line in wired.stdout.splitlines() if line.startswith("+"))
    assert '"MODE": "fast"' in added and '"API_TOKEN": "t0ken"' in added
    assert "OTHER" not in added and "also needs" not in wired.stderr
