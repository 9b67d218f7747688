"""The command line and the demo, run as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compensator import __version__

from .conftest import EXAMPLES, REPO


def run(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_version_and_help():
    version = run("-m", "compensator", "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"compensator {__version__}"
    helped = run("-m", "compensator", "--help")
    assert helped.returncode == 0
    assert "serve" in helped.stdout and "compensator serve --config" in helped.stdout
    serve_help = run("-m", "compensator", "serve", "--help")
    assert "--db" in serve_help.stdout and "XDG_STATE_HOME" in serve_help.stdout
    module_help = run("-m", "compensator.proxy", "--help")
    assert module_help.returncode == 0 and "--config" in module_help.stdout


def test_no_command_prints_usage_and_fails():
    result = run("-m", "compensator")
    assert result.returncode == 2 and "usage:" in result.stderr


def test_serve_with_a_typo_names_file_line_and_fix(tmp_path: Path):
    config = tmp_path / "broken.yaml"
    config.write_text(
        "servers:\n"
        "  tasks:\n"
        "    command: python\n"
        "tools:\n"
        "  tasks__add_task:\n"
        "    clasification: reversible\n"
    )
    result = run(
        "-m", "compensator", "serve", "--config", str(config), "--db", "x.db", cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stdout == ""  # stdout belongs to the MCP wire
    assert "broken.yaml:6" in result.stderr
    assert "clasification" in result.stderr and "Did you mean 'classification'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.db").exists()


def test_demo_runs_from_anywhere_and_leaves_nothing_behind(tmp_path: Path):
    before = _untracked_files()
    result = run(str(EXAMPLES / "demo.py"), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "== undo_to(1)" in result.stdout
    assert "OK: the state after undo equals the state at the checkpoint." in result.stdout
    assert list(tmp_path.iterdir()) == []
    assert _untracked_files() == before


def _untracked_files() -> set[str]:
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "examples"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return set(listed.stdout.splitlines())


def test_demo_fails_when_the_registry_cannot_restore(tmp_path: Path):
    # Drop the step that re-inserts the subtasks a delete cascaded over.
    text = (EXAMPLES / "compensators.yaml").read_text()
    start = text.index("      - tool: tasks__restore_tasks")
    end = text.index("  tasks__purge_completed:")
    broken = tmp_path / "broken.yaml"
    broken.write_text(text[:start] + "\n" + text[end:])
    text = broken.read_text().replace("tasks_server.py", str(EXAMPLES / "tasks_server.py"))
    broken.write_text(text)
    result = run(str(EXAMPLES / "demo.py"), "--config", str(broken), cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED: the state after undo differs" in result.stdout
