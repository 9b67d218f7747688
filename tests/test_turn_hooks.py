"""Undo by turn in Claude Code: `wire --hooks` writes a UserPromptSubmit hook that calls the
proxy's `checkpoint` with the prompt, `unwire` takes it out byte for byte, `undo --turns N`
undoes the last N turns, and `log` shows each turn's prompt. The turns are driven the way the
hook drives them: its `input`, with `${prompt}` filled in, sent to its `tool`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compensator.cli import main

from .broken import write_example
from .test_cli_human import WIDE, cli

pytestmark = pytest.mark.anyio

SETTINGS_TEXT = (
    '{\n    "permissions": {"allow": ["Bash(ls)"]},\n    "hooks": {\n'
    '        "UserPromptSubmit": [\n'
    '            {"hooks": [{"type": "command", "command": "echo mine"}]}\n'
    "        ]\n    }\n}\n"
)


def project_with_claude_code(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose .mcp.json starts the example's task server, and its registry."""
    project = tmp_path / "project"
    project.mkdir()
    registry = write_example(project, "compensators")
    entry = {"command": "python3", "args": ["tasks_server.py", "--db", "tasks.db"]}
    text = registry.read_text()
    # The registry's one server is `tasks`; the client starts it under the same name.
    assert "\n  tasks:\n" in text
    mcp = {"mcpServers": {"tasks": entry}}
    (project / ".mcp.json").write_text(json.dumps(mcp, indent=2) + "\n", encoding="utf-8")
    return project, registry


def hook_of(settings: dict[str, Any]) -> dict[str, Any]:
    found = [
        handler
        for group in settings["hooks"]["UserPromptSubmit"]
        for handler in group["hooks"]
        if handler.get("type") == "mcp_tool"
    ]
    assert len(found) == 1, settings
    return found[0]


@pytest.mark.parametrize("had_settings", [True, False], ids=["settings", "no-settings"])
def test_wire_hooks_writes_the_hook_and_unwire_takes_it_out_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, had_settings: bool
):
    project, registry = project_with_claude_code(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings_path = project / ".claude" / "settings.json"
    if had_settings:
        settings_path.parent.mkdir()
        settings_path.write_text(SETTINGS_TEXT, encoding="utf-8")
    mcp_before = (project / ".mcp.json").read_bytes()

    wire = ["wire", "--config", str(registry), "--project", str(project), "--yes", "--hooks"]
    assert main(wire) == 0
    settings = json.loads(settings_path.read_text())
    hook = hook_of(settings)
    wired = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert hook == {
        "type": "mcp_tool",
        "server": "compensator",
        "tool": "checkpoint",
        "input": {"prompt": "${prompt}"},
        "timeout": 30,
        "statusMessage": "compensator: checkpoint for this turn",
    }
    assert hook["server"] in wired  # the name Claude Code knows the proxy by
    if had_settings:  # what was there stays
        assert settings["permissions"] == {"allow": ["Bash(ls)"]}
        groups = settings["hooks"]["UserPromptSubmit"]
        assert {"type": "command", "command": "echo mine"} in groups[0]["hooks"]

    assert main(["unwire", "--project", str(project), "--yes"]) == 0
    assert (project / ".mcp.json").read_bytes() == mcp_before
    if had_settings:
        assert settings_path.read_text(encoding="utf-8") == SETTINGS_TEXT
    else:
        assert not settings_path.exists()
    assert not list(project.rglob("*.compensator-backup"))


def test_unwire_keeps_what_changed_in_the_settings_since(tmp_path, monkeypatch):
    project, registry = project_with_claude_code(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    wire = ["wire", "--config", str(registry), "--project", str(project), "--yes", "--hooks"]
    assert main(wire) == 0
    settings_path = project / ".claude" / "settings.json"
    edited = json.loads(settings_path.read_text())
    edited["model"] = "opus"  # the person changed a setting meanwhile
    settings_path.write_text(json.dumps(edited), encoding="utf-8")
    assert main(["unwire", "--project", str(project), "--yes"]) == 0
    assert json.loads(settings_path.read_text()) == {"model": "opus"}


def test_a_hook_taken_out_by_hand_leaves_a_backup_wire_names_not_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    project, registry = project_with_claude_code(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings_path = project / ".claude" / "settings.json"
    settings_path.parent.mkdir()
    settings_path.write_text(SETTINGS_TEXT, encoding="utf-8")
    wire = ["wire", "--config", str(registry), "--project", str(project), "--yes", "--hooks"]
    assert main(wire) == 0
    settings_path.write_text('{"model": "opus"}', encoding="utf-8")  # hook out, by hand
    assert main(["unwire", "--project", str(project), "--yes"]) == 0
    backup = project / ".claude" / "settings.json.compensator-backup"
    assert "has no turn hook to take out" in capsys.readouterr().out
    assert backup.read_text(encoding="utf-8") == SETTINGS_TEXT  # kept: it is the person's

    assert main(wire) == 1  # not "has the hook already", which would be false
    err = capsys.readouterr().err
    assert "has no turn hook, but the backup" in err and str(backup) in err
    assert backup.read_text(encoding="utf-8") == SETTINGS_TEXT
    assert not (project / ".mcp.json.compensator-backup").exists()  # nothing half-wired
    backup.unlink()
    assert main(wire) == 0
    assert hook_of(json.loads(settings_path.read_text()))["tool"] == "checkpoint"


async def test_undo_turns_undoes_the_last_turns_checkpointed_as_the_hook_does(
    proxy, tasks_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    project, registry = project_with_claude_code(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    wire = ["wire", "--config", str(registry), "--project", str(project), "--yes", "--hooks"]
    assert main(wire) == 0
    hook = hook_of(json.loads((project / ".claude" / "settings.json").read_text()))
    db = tmp_path / "journal.db"

    async def prompt(client: Any, text: str) -> None:
        """What Claude Code does on UserPromptSubmit: the hook's input, filled in, sent."""
        filled = json.loads(json.dumps(hook["input"]).replace("${prompt}", json.dumps(text)[1:-1]))
        await client.call_ok(hook["tool"], filled)

    async with proxy(registry, db=db, env=tasks_env) as client:
        await prompt(client, "Add a task for the report")
        first = await client.call_ok("tasks__add_task", {"title": "report"})
        await prompt(client, 'Rename it and add "review"\nwith a second line')
        await client.call_ok("tasks__rename_task", {"id": first["id"], "title": "final report"})
        await client.call_ok("tasks__add_task", {"title": "review"})

    common = ("--config", str(registry), "--db", str(db))
    log = cli("log", *common, env={**tasks_env, **WIDE})
    assert log.returncode == 0, log.stderr
    assert "turn: Add a task for the report" in log.stdout
    assert 'turn: Rename it and add "review"' in log.stdout
    assert "second line" not in log.stdout

    too_many = cli("undo", *common, "--turns", "3", "--yes", env=tasks_env)
    assert too_many.returncode == 1 and "holds only 2 turns" in too_many.stderr
    undone = cli("undo", *common, "--turns", "1", "--yes", env={**tasks_env, **WIDE})
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert "Rename it" in undone.stdout  # the plan's title names the turn
    async with proxy(registry, db=db, env=tasks_env) as client:
        tasks = await client.call_ok("tasks__list_tasks")
    titles = [task["title"] for task in (tasks["tasks"] if isinstance(tasks, dict) else tasks)]
    assert titles == ["report"]  # the first turn's work, as it was before the second


async def test_checkpoint_arguments_for_turns_are_checked(proxy, tasks_config, tasks_env):
    async with proxy(tasks_config, env=tasks_env) as client:
        both = await client.call("checkpoint", {"label": "x", "prompt": "y"})
        assert both.is_error and "label or prompt, not both" in both.text
        wrong = await client.call("checkpoint", {"prompt": 3})
        assert wrong.is_error and "prompt must be a string" in wrong.text
        checkpoint = await client.call_ok("checkpoint", {"prompt": "\n\n  " + "long " * 40})
        (listed,) = [
            c for c in await client.list_checkpoints() if c["id"] == checkpoint["checkpoint_id"]
        ]
        assert listed["label"].startswith("turn: long long") and listed["label"].endswith("…")
        assert len(listed["label"]) == len("turn: ") + 120


def test_a_settings_file_that_is_not_json_is_named_not_a_traceback(tmp_path, monkeypatch):
    project, registry = project_with_claude_code(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": ', encoding="utf-8")
    wire = ["wire", "--config", str(registry), "--project", str(project), "--yes", "--hooks"]
    assert main(wire) == 1
    assert settings.read_text(encoding="utf-8") == '{"hooks": '
    assert not (project / ".mcp.json.compensator-backup").exists()  # nothing half-wired
