"""`redact:` keeps named values out of the journal, and a registry that would need them to
undo is refused at load time."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from compensator.errors import RegistryError
from compensator.registry import REDACTED, load_registry, parse_registry, redact
from tests.conftest import EXAMPLES

SECRET = "hunter2-title-nobody-may-read"


def registry_with(tmp_path: Path, tool: str, lines: str) -> Path:
    text = (EXAMPLES / "compensators.yaml").read_text()
    text = text.replace('"tasks_server.py"', f'"{EXAMPLES / "tasks_server.py"}"')
    head = f"  {tool}:\n    classification: "
    assert head in text
    text = text.replace(head, f"  {tool}:\n{lines}    classification: ", 1)
    path = tmp_path / "redacting.yaml"
    path.write_text(text)
    return path


@pytest.mark.anyio
async def test_redacted_values_never_reach_the_journal_file(proxy, tmp_path, tasks_env):
    # rename_task's inverse puts back snapshot.title, so its new title is not needed to undo.
    config = registry_with(
        tmp_path, "tasks__rename_task", "    redact: [args.title, result.title]\n"
    )
    db = tmp_path / "journal.db"
    async with proxy(config, db=db, env=tasks_env) as client:
        task = await client.call_ok("tasks__add_task", {"title": "plain"})
        cp = await client.checkpoint()
        renamed = await client.call_ok("tasks__rename_task", {"id": task["id"], "title": SECRET})
        assert renamed["title"] == SECRET  # the client still sees the real result
        [change] = await client.list_changes(cp)
        assert change["args"] == {"id": task["id"], "title": REDACTED}
        report = await client.undo_to(cp)
        assert [c["tool"] for c in report["undone"]] == ["tasks__rename_task"]
        assert (await client.call_ok("tasks__get_task", {"id": task["id"]}))["title"] == "plain"
    # Whatever SQLite kept (main file, WAL), the secret is in none of it.
    for path in tmp_path.rglob("journal.db*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    with sqlite3.connect(db) as conn:
        args, result = conn.execute(
            "SELECT args, result FROM changes WHERE tool = 'tasks__rename_task'"
        ).fetchone()
    conn.close()
    assert REDACTED in args
    assert REDACTED in result


def test_an_inverse_that_needs_a_redacted_value_is_a_load_error(tmp_path):
    # add_label's inverse is remove_label(name: args.name): redacting args.name breaks undo.
    config = registry_with(tmp_path, "tasks__add_label", "    redact: [args.name]\n")
    with pytest.raises(RegistryError) as caught:
        load_registry(config, environ={"COMPENSATOR_PYTHON": sys.executable})
    message = str(caught.value)
    assert f"{config}:" in message
    assert "tools.tasks__add_label.redact" in message
    assert "args.name" in message
    assert "Remove the path from redact" in message


@pytest.mark.parametrize(
    "path", ["password", "args", "snapshot.x", "args..x", "args.x[", "args x", "[0]"]
)
def test_a_malformed_redact_path_is_located(tmp_path, path):
    text = f"""\
servers:
  s: {{command: x}}
tools:
  s__t:
    classification: irreversible
    redact: ["{path}"]
"""
    with pytest.raises(RegistryError) as caught:
        parse_registry(text, tmp_path / "r.yaml")
    message = str(caught.value)
    assert "r.yaml:6" in message
    assert "not a path into args or result" in message


def test_redact_replaces_nested_and_listed_values_without_touching_the_original():
    registry = parse_registry(
        """\
servers:
  s: {command: x}
tools:
  s__t:
    classification: irreversible
    redact: [args.auth.token, "args.items[*].key", "result.rows[1]", args.absent.deeper]
""",
        Path("r.yaml"),
    )
    paths = registry.tools["s__t"].redact
    args = {"auth": {"token": "t", "user": "u"}, "items": [{"key": 1, "v": 2}, {"v": 3}]}
    cleaned = redact(args, "args", paths)
    assert cleaned == {
        "auth": {"token": REDACTED, "user": "u"},
        "items": [{"key": REDACTED, "v": 2}, {"v": 3}],
    }
    assert args["auth"]["token"] == "t"
    assert redact({"rows": [1, 2, 3]}, "result", paths) == {"rows": [1, REDACTED, 3]}
    assert redact(None, "result", paths) is None
