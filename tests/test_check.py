"""`compensator check`: the schema-fit functions, then the command against real servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compensator.cli.check import render_table
from compensator.registry import compile_expression, parse_registry
from compensator.registry.lint import (
    Finding,
    LiveTool,
    LiveView,
    Severity,
    accepts,
    lint,
    missing_arguments,
    unknown_arguments,
    unknown_reads,
)
from compensator.registry.loader import builtin_names

from .conftest import EXAMPLES, REGISTRIES, SERVERS, third_party_servers

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "title": {"type": "string"}},
    "required": ["id"],
}

TASKS = """\
servers:
  tasks:
    command: "@PYTHON@"
    args: ["@TASKS_SERVER@", "--db", "@TMP@/tasks.db"]
"""

LINT = """\
servers:
  lint:
    command: "@PYTHON@"
    args: ["@LINT_SERVER@"{flags}]
"""


# -- pure functions -------------------------------------------------------------------


def test_accepts_listed_properties_only_unless_the_schema_allows_more():
    assert accepts(SCHEMA, "id") and not accepts(SCHEMA, "idd")
    assert accepts({"type": "object"}, "anything")  # no properties listed: nothing to check
    assert accepts({**SCHEMA, "additionalProperties": True}, "idd")
    assert accepts({**SCHEMA, "additionalProperties": {"type": "string"}}, "idd")
    assert not accepts({**SCHEMA, "additionalProperties": False}, "idd")
    assert accepts({**SCHEMA, "patternProperties": {"^x-": {}}}, "x-trace")
    assert not accepts({**SCHEMA, "patternProperties": {"(": {}}}, "x-trace")


def test_missing_and_unknown_arguments_of_literal_mappings():
    assert missing_arguments({"title": "{args.title}"}, SCHEMA) == ["id"]
    assert missing_arguments({"id": None}, SCHEMA) == []
    assert unknown_arguments({"id": 1, "force": True, "titel": "x"}, SCHEMA) == ["force", "titel"]
    # A whole-mapping expression such as "{snapshot}" cannot be checked before it runs.
    assert missing_arguments("{snapshot}", SCHEMA) == [] == unknown_arguments("{snapshot}", SCHEMA)


def test_unknown_reads_look_at_the_first_field_after_args():
    expression = compile_expression(
        "!(args.dry_run) && args.id.deep && length(args.tags[*].x) > `0`", where="k"
    )
    assert unknown_reads(expression, SCHEMA) == ["dry_run", "tags"]
    assert unknown_reads(compile_expression("args", where="k"), SCHEMA) == []
    assert unknown_reads(compile_expression("result.nope", where="k"), SCHEMA) == []


def live(*tools: LiveTool, failures: dict[str, str] | None = None) -> LiveView:
    return LiveView(tools={t.name: t for t in tools}, failures=failures or {})


def tool(name: str, annotations: dict[str, Any] | None = None, **schema: Any) -> LiveTool:
    server = name.split("__")[0]
    return LiveTool(name=name, server=server, input_schema=schema, annotations=annotations)


def registry(body: str) -> Any:
    head = "servers:\n  s:\n    command: /bin/true\n  down:\n    command: /bin/true\n"
    return parse_registry(head + textwrap.dedent(body), Path("r.yaml"), {})


def brief(findings: list[Finding]) -> list[tuple[str, str | None, str | None]]:
    return [(f.severity.value, f.tool, f.key) for f in findings]


@pytest.mark.parametrize(
    ("annotations", "warned"),
    [
        (None, False),  # no annotations at all: nothing to contradict
        ({}, True),  # present but empty: the defaults say destructive
        ({"destructiveHint": True}, True),
        ({"readOnlyHint": True}, False),
        ({"destructiveHint": False}, False),
    ],
)
def test_read_classification_against_annotations(annotations, warned):
    found = lint(
        registry("tools:\n  s__wipe: {classification: read}\n"), live(tool("s__wipe", annotations))
    )
    expected = [("warning", "s__wipe", "tools.s__wipe.classification")] if warned else []
    assert brief(found) == expected


def test_tools_of_a_failed_server_are_not_reported_missing():
    reg = registry(
        """
        tools:
          down__x: {classification: read}
          s__y: {classification: read}
        """
    )
    found = lint(reg, live(failures={"down": "boom"}))
    assert brief(found) == [("error", None, "servers.down"), ("error", "s__y", "tools.s__y")]
    assert "failed to start: boom" in found[0].message


def test_table_keeps_long_names_on_their_own_line_and_counts_in_words():
    long = "s__" + "n" * 61
    findings = [
        Finding(severity=Severity.ERROR, tool=long, key="servers.s", message="too long", line=3),
        Finding(severity=Severity.WARNING, tool="s__x", key=None, message="unregistered"),
    ]
    table = render_table(findings, Path("r.yaml")).splitlines()
    assert table[2].split() == ["SEVERITY", "TOOL", "PROBLEM"]
    assert table[3].split() == ["error", long]
    assert table[4].strip() == "servers.s (line 3): too long"
    assert table[5].split() == ["warning", "s__x", "unregistered"]
    assert table[-1] == "1 error, 1 warning"
    assert render_table([], Path("r.yaml")).splitlines()[-1] == "0 errors, 0 warnings"


# -- the command, against real servers ----------------------------------------------------


def run_check(config: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "compensator.cli", "check", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def check_json(config: Path, *, code: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = run_check(config, "--json", env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def by_key(document: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {finding["key"]: finding for finding in document["findings"]}


Writer = Callable[[str], Path]


@pytest.fixture
def tasks_registry(write_registry: Writer) -> Writer:
    """A registry for the example task server; the text given is appended to `servers:`."""
    return lambda body: write_registry(TASKS + textwrap.dedent(body).lstrip("\n"))


@pytest.fixture
def lint_registry(write_registry: Writer) -> Callable[..., Path]:
    def write(body: str, *, long_name: bool = False) -> Path:
        head = LINT.replace("{flags}", ', "--long-name"' if long_name else "")
        head = head.replace("@LINT_SERVER@", str(SERVERS / "lint_server.py"))
        return write_registry(head + textwrap.dedent(body).lstrip("\n"))

    return write


def test_example_registry_passes_with_one_warning_for_restore_tasks(tmp_path: Path):
    env = {"COMPENSATOR_WORKDIR": str(tmp_path)}
    result = run_check(EXAMPLES / "compensators.yaml", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["warning", "tasks__restore_tasks", "not", "in", "the", "registry"] in [
        row[:6] for row in rows
    ]
    assert "undo refuses them" in result.stdout
    assert result.stdout.rstrip().endswith("0 errors, 1 warning")
    document = check_json(EXAMPLES / "compensators.yaml", code=0, env=env)
    assert [(f["severity"], f["tool"]) for f in document["findings"]] == [
        ("warning", "tasks__restore_tasks")
    ]
    assert (tmp_path / "tasks.db").exists()  # the server ran, with its db out of examples/


def test_json_document_shape(tasks_registry: Writer):
    config = tasks_registry("tools:\n  tasks__add_tsk: {classification: read}\n")
    document = check_json(config, code=1)
    assert set(document) == {"registry", "findings", "errors", "warnings"}
    assert document["registry"] == str(config)
    severities = [f["severity"] for f in document["findings"]]
    assert document["errors"] == severities.count("error") == 1
    assert document["warnings"] == severities.count("warning") > 0
    assert severities == sorted(severities)  # errors first
    for finding in document["findings"]:
        assert set(finding) == {"severity", "tool", "key", "message", "line", "file"}
        assert finding["file"] is None  # the entry is in the registry itself
    first = document["findings"][0]
    assert (first["tool"], first["key"], first["line"]) == (
        "tasks__add_tsk",
        "tools.tasks__add_tsk",
        6,
    )


def test_tools_no_server_offers_are_errors_with_a_suggestion(tasks_registry: Writer):
    config = tasks_registry(
        """
        state:
          - tool: tasks__list_taks
        reset:
          - tool: tasks__rest
        tools:
          tasks__add_tsk: {classification: read}
          tasks__complete_task:
            classification: compensable
            snapshot_tool: tasks__get_tsk
            snapshot_args: {id: "{args.id}"}
            inverse:
              - tool: tasks__set_stat
                args: {id: "{args.id}", status: "{snapshot.status}"}
          tasks__add_task:
            classification: reversible
            inverse_tool: tasks__delete_task
            inverse_args: {id: "{result.id}"}
            verify: {tool: tasks__get_tas, args: {id: "{result.id}"}}
        """
    )
    found = by_key(check_json(config, code=1))
    expected = {
        "tools.tasks__add_task.verify.tool": ("tasks__get_tas", "tasks__get_task"),
        "state[0].tool": ("tasks__list_taks", "tasks__list_tasks"),
        "reset[0].tool": ("tasks__rest", "tasks__reset"),
        "tools.tasks__add_tsk": ("tasks__add_tsk", "tasks__add_task"),
        "tools.tasks__complete_task.snapshot_tool": ("tasks__get_tsk", "tasks__get_task"),
        "tools.tasks__complete_task.inverse[0].tool": ("tasks__set_stat", "tasks__set_status"),
    }
    for key, (name, close) in expected.items():
        finding = found[key]
        assert finding["severity"] == "error" and finding["tool"] == name
        assert f"no server offers {name}" in finding["message"]
        assert f"Did you mean '{close}'?" in finding["message"]


def test_args_paths_the_tool_does_not_take_are_errors(tasks_registry: Writer):
    config = tasks_registry(
        """
        tools:
          tasks__rename_task:
            classification: compensable
            mutating_when: "!(args.dryrun)"
            error_when: "args.force && result.ok == `false`"
            deny_when: "args.titel == 'x'"
            approve_when: "args.dry_run"
            snapshot_tool: tasks__get_task
            snapshot_args: {id: "{args.idd}"}
            inverse:
              - tool: tasks__rename_task
                args: {id: "{args.id}", title: "{snapshot.title}"}
                when: "args.title != snapshot.title"
        """
    )
    found = by_key(check_json(config, code=1))
    base = "tools.tasks__rename_task"
    for key, name, fix in [
        (f"{base}.mutating_when", "dryrun", "Did you mean 'args.dry_run'?"),
        (f"{base}.error_when", "force", "It takes: dry_run, id, title."),
        (f"{base}.snapshot_args.id", "idd", "Did you mean 'args.id'?"),
        (f"{base}.deny_when", "titel", "Did you mean 'args.title'?"),  # it would never deny
    ]:
        finding = found[key]
        assert finding["severity"] == "error" and finding["tool"] == "tasks__rename_task"
        assert f"reads args.{name}, but tasks__rename_task takes no argument" in finding["message"]
        assert fix in finding["message"]
    assert f"{base}.inverse[0].when" not in found  # args.title exists
    assert f"{base}.approve_when" not in found  # args.dry_run exists


def test_inverse_args_that_do_not_fit_the_target_schema_are_errors(tasks_registry: Writer):
    config = tasks_registry(
        """
        tools:
          tasks__add_task:
            classification: reversible
            inverse_tool: tasks__delete_task
            inverse_args: {id: "{result.id}", force: true}
          tasks__delete_task:
            classification: compensable
            snapshot_tool: tasks__get_task_tree
            snapshot_args: {id: "{args.id}", depth: 2}
            inverse:
              - tool: tasks__restore_task
                args: {id: "{snapshot.task.id}", title: "{snapshot.task.title}"}
        """
    )
    document = check_json(config, code=1)
    found = by_key(document)
    unknown = found["tools.tasks__add_task.inverse_args.force"]
    assert unknown["tool"] == "tasks__delete_task"
    assert "tasks__delete_task takes no argument 'force'" in unknown["message"]
    depth = found["tools.tasks__delete_task.snapshot_args.depth"]
    assert "tasks__get_task_tree takes no argument 'depth'" in depth["message"]
    missing = found["tools.tasks__delete_task.inverse[0].args"]
    assert missing["tool"] == "tasks__restore_task" and missing["severity"] == "error"
    assert "requires argument 'status'" in missing["message"]
    assert document["errors"] == 3


def test_unregistered_tools_warn_unless_annotated_read_only(lint_registry: Callable[..., Path]):
    config = lint_registry(
        """
        tools:
          lint__wipe: {classification: irreversible}
          lint__strict: {classification: irreversible}
        """
    )
    document = check_json(config, code=0)  # warnings alone do not fail the check
    assert [(f["severity"], f["tool"]) for f in document["findings"]] == [
        ("warning", "lint__plain")
    ]
    message = document["findings"][0]["message"]
    assert "journaled as unknown and undo refuses" in message and "Add it under tools:" in message


def test_read_classification_of_a_destructive_tool_warns(lint_registry: Callable[..., Path]):
    config = lint_registry(
        """
        tools:
          lint__wipe: {classification: read}
          lint__plain: {classification: read}
          lint__peek: {classification: read}
          lint__strict: {classification: read}
        """
    )
    document = check_json(config, code=0)
    assert [(f["tool"], f["key"], f["line"]) for f in document["findings"]] == [
        ("lint__wipe", "tools.lint__wipe.classification", 6)
    ]
    assert "annotates it destructive" in document["findings"][0]["message"]


def test_exposed_names_over_64_characters_are_errors(lint_registry: Callable[..., Path]):
    config = lint_registry("defaults: {trust_read_only_hint: true}\n", long_name=True)
    found = [f for f in check_json(config, code=1)["findings"] if f["severity"] == "error"]
    long = "lint__a_tool_name_that_is_sixty_characters_long_to_trip_the_linter"
    assert [(f["tool"], f["key"]) for f in found] == [(long, "servers.lint")]
    assert "66 characters" in found[0]["message"] and "over 64" in found[0]["message"]
    # mcp__compensator__ (18) + lint__ (6) + the 60-character tool: even a one-letter
    # prefix: leaves it 17 over, so only renaming the tool helps.
    assert "mcp__compensator__lint__a_tool" in found[0]["message"]
    assert "84 characters" in found[0]["message"]
    assert "Have the server rename the tool" in found[0]["message"]


def test_servers_that_fail_to_start_are_errors(write_registry: Writer):
    config = write_registry(
        TASKS
        + textwrap.dedent(
            """\
              missing:
                command: "@TMP@/no-such-binary"
              crashing:
                command: "@PYTHON@"
                args: ["-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
            tools:
              missing__anything: {classification: read}
              crashing__anything: {classification: read}
              tasks__get_task: {classification: read}
            """
        )
    )
    result = run_check(config, "--startup-timeout", "20")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "boom" in result.stderr  # the server's own stderr is passed through
    document = check_json(config, code=1)
    errors = [f for f in document["findings"] if f["severity"] == "error"]
    assert [f["key"] for f in errors] == ["servers.missing", "servers.crashing"]
    assert "server 'missing' failed to start" in errors[0]["message"]
    assert "no-such-binary" in errors[0]["message"]
    assert "server 'crashing' failed to start" in errors[1]["message"]
    assert "2 errors" in result.stdout
    assert not any("no server offers" in f["message"] for f in document["findings"])


def test_a_registry_that_does_not_load_exits_1_with_the_loader_message(tmp_path: Path):
    config = tmp_path / "broken.yaml"
    config.write_text(
        "servers:\n  tasks:\n    command: python\n"
        "tools:\n  tasks__add_task:\n    clasification: x\n"
    )
    result = run_check(config)
    assert result.returncode == 1 and result.stdout == ""
    assert "broken.yaml:6" in result.stderr and "Did you mean 'classification'" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_names_the_check_command():
    helped = subprocess.run(
        [sys.executable, "-m", "compensator", "--help"], capture_output=True, text=True
    )
    assert "compensator check --config" in helped.stdout
    check_help = subprocess.run(
        [sys.executable, "-m", "compensator", "check", "--help"], capture_output=True, text=True
    )
    assert check_help.returncode == 0
    assert "--json" in check_help.stdout and "inputSchema" in check_help.stdout


SHIPPED_NEEDS = {
    "duckdb": "duckdb/bin/mcp-server-duckdb",
    "filesystem": "npm/node_modules/@modelcontextprotocol/server-filesystem",
    "git": "git/bin/mcp-server-git",
    "memory": "npm/node_modules/@modelcontextprotocol/server-memory",
    "postgres": "postgres/bin/postgres-mcp",
    "redis": "npm/node_modules/@modelcontextprotocol/server-redis",
    "sqlite": "sqlite/bin/mcp-server-sqlite",
}


def test_every_shipped_registry_is_checked():
    assert sorted(SHIPPED_NEEDS) == builtin_names()


@pytest.mark.parametrize(("name", "needs"), SHIPPED_NEEDS.items())
def test_check_is_clean_on_a_shipped_registry(
    tmp_path: Path, request: pytest.FixtureRequest, name: str, needs: str
):
    """Every tool the real server offers is classified, and every template fits its schema."""
    if name == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    root = third_party_servers(needs, node=name in ("filesystem", "memory", "redis"))
    # COMPENSATOR_WORKDIR: data in a temporary folder, a scratch Redis (compensator/scratch.py)
    env = {"COMPENSATOR_SERVERS": str(root), "COMPENSATOR_WORKDIR": str(tmp_path)}
    if name == "postgres":
        env["COMPENSATOR_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    document = check_json(REGISTRIES / f"{name}.yaml", code=0, env=env)
    assert (document["errors"], document["warnings"]) == (0, 0), document["findings"]
