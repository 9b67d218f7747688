"""The command line and the demo, run as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_bad_log_level_is_a_usage_error_not_a_traceback(tmp_path: Path):
    config = EXAMPLES / "compensators.yaml"
    for command in (("-m", "compensator", "serve"), ("-m", "compensator.proxy")):
        result = run(
            *command, "--config", str(config), "--db", "x.db", "--log-level", "nonsense",
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""  # stdout belongs to the MCP wire
        assert "usage:" in result.stderr and "--log-level" in result.stderr
        assert "invalid choice" in result.stderr and "DEBUG" in result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "x.db").exists()


def test_the_log_level_is_case_insensitive(tmp_path: Path):
    # A registry that fails to load after the arguments are parsed: a level argparse turned
    # away would end in its usage error instead of the registry's.
    config = tmp_path / "broken.yaml"
    config.write_text("servers: {}\n")
    result = run(
        "-m", "compensator", "serve", "--config", str(config), "--log-level", "debug",
        cwd=tmp_path,
    )  # fmt: skip
    assert "invalid choice" not in result.stderr
    assert result.returncode == 2 and "no servers are defined" in result.stderr, result.stderr


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


_IMPORTS_OF = """
import sys
from compensator.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted(name for name in ("mcp", "hypothesis", "anyio", "pydantic") if name in sys.modules)
print("heavy:", ",".join(heavy) or "none", "exit:", code, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "words",
    [["--version"], ["--help"], ["log", "--help"], ["explain", "--help"], ["undo", "--help"], []],
    ids=["version", "help", "log-help", "explain-help", "undo-help", "no-command"],
)
def test_help_and_version_never_import_the_sdk(words: list[str]):
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_OF, *words], capture_output=True, text=True, timeout=60
    )
    assert "heavy: none" in done.stderr, done.stderr
    assert done.stdout or "usage: compensator" in done.stderr


def test_log_and_the_undo_plan_read_a_journal_without_importing_the_sdk(tmp_path: Path):
    from compensator.journal import Intent, SQLiteJournal, Status

    journal = SQLiteJournal(tmp_path / "j.db")
    journal.create_checkpoint("before")
    change = journal.record_intent(
        Intent(tool="tasks__add_task", classification="reversible", args={"title": "x"})
    )
    journal.record_outcome(change, status=Status.OK, result={"id": 7})
    journal.close()

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _IMPORTS_OF, *words],
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = run("log", "--db", str(tmp_path / "j.db"), "--json")
    assert "heavy: none exit: 0" in listed.stderr, listed.stderr
    assert '"tool": "tasks__add_task"' in listed.stdout
    config = str(EXAMPLES / "compensators.yaml")
    plan = run("undo", "--config", config, "--db", str(tmp_path / "j.db"), "--to", "1", "--dry-run")
    assert "exit: 0" in plan.stderr and "mcp" not in plan.stderr.split("heavy:")[1], plan.stderr
    assert 'call tasks__delete_task {"id": 7}' in plan.stdout
