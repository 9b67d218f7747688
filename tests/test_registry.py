"""Unit tests for compensator.registry: the format, and one test per validation rule."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compensator.errors import RegistryError
from compensator.names import META_TOOLS
from compensator.registry import (
    Classification,
    Defaults,
    Registry,
    TestSpec,
    load_registry,
    parse_registry,
    registry_environment,
)

HEAD = """\
servers:
  tasks:
    command: /usr/bin/python3
  notes:
    command: /usr/bin/python3
"""

FULL = """\
servers:
  tasks:
    command: /usr/bin/python3
    args: ["server.py", "--db", "${TASKS_DB:-tasks.db}"]
    env: {API_TOKEN: "${API_TOKEN}", PLAIN: "cost $$5"}
    cwd: sub
  notes:
    command: ${NOTES_BIN}
defaults:
  trust_read_only_hint: true
state:
  - tool: tasks__list_tasks
    args: {}
    select: "tasks"
    unordered: true
  - tool: notes__list_notes
tools:
  tasks__list_tasks:
    classification: read
  tasks__add_task:
    classification: reversible
    inverse_tool: tasks__delete_task
    inverse_args: {id: "{result.id}"}
  tasks__delete_task:
    classification: compensable
    snapshot_tool: tasks__get_task_tree
    snapshot_args: {id: "{args.id}"}
    inverse:
      - tool: tasks__restore_task
        args: {id: "{snapshot.task.id}"}
      - tool: tasks__restore_tasks
        args: {tasks: "{snapshot.children}"}
        when: "length(snapshot.children) > `0`"
    error_when: "result.ok == `false`"
    mutating_when: "!(args.dry_run)"
    test:
      schema: {type: object, properties: {id: {type: integer, enum: [1, 2, 3]}}}
      examples: [{id: 1}]
  notes__send:
    classification: irreversible
"""

ENV = {"API_TOKEN": "s3cr3t-t0ken", "NOTES_BIN": "/opt/notes"}


def norm(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def write(tmp_path: Path, text: str, name: str = "compensators.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def line_with(text: str, needle: str) -> int:
    for number, content in enumerate(text.splitlines(), 1):
        if needle in content:
            return number
    raise AssertionError(f"{needle!r} not in the YAML")


def load_error(
    tmp_path: Path, text: str, key: str, needle: str, environ: dict[str, str] | None = None
) -> RegistryError:
    """Load `text`; assert the error names the file, the line holding `needle`, and `key`."""
    path = write(tmp_path, text)
    with pytest.raises(RegistryError) as info:
        load_registry(path, {} if environ is None else environ)
    error = info.value
    line = line_with(text, needle)
    assert str(error).startswith(f"{path}:{line}: {key}: "), str(error)
    assert (error.path, error.line, error.key) == (str(path), line, key)
    assert error.fix and str(error).endswith(error.fix)
    return error


def tools(body: str) -> str:
    return HEAD + "tools:\n" + textwrap.indent(norm(body), "  ")


# -- a valid registry --------------------------------------------------------------------


@pytest.fixture
def full(tmp_path: Path) -> Registry:
    return load_registry(write(tmp_path, FULL), {**ENV, "TASKS_DB": "/data/t.db"})


def test_servers(full: Registry, tmp_path: Path) -> None:
    tasks = full.servers["tasks"]
    assert tasks.name == "tasks"
    assert tasks.command == "/usr/bin/python3"
    assert tasks.args == ("server.py", "--db", "/data/t.db")
    assert dict(tasks.env) == {"API_TOKEN": "s3cr3t-t0ken", "PLAIN": "cost $5"}
    assert tasks.cwd == tmp_path / "sub"
    assert tasks.line == line_with(FULL, "  tasks:")
    notes = full.servers["notes"]
    assert (notes.command, notes.args, dict(notes.env)) == ("/opt/notes", (), {})
    assert notes.cwd == tmp_path


def test_defaults_and_state(full: Registry) -> None:
    assert full.defaults == Defaults(trust_read_only_hint=True)
    first, second = full.state
    assert (first.tool, first.unordered, first.line) == ("tasks__list_tasks", True, 12)
    assert first.select is not None
    assert first.select.evaluate({"tasks": [1]}) == [1]
    assert first.args.render({}) == {}
    assert (second.tool, second.select, second.unordered) == ("notes__list_notes", None, False)
    assert second.args.render({}) == {}


def test_reversible_policy_is_normalised_to_one_step(full: Registry) -> None:
    policy = full.policy("tasks__add_task")
    assert policy is not None
    assert policy.classification is Classification.REVERSIBLE
    assert policy.line == line_with(FULL, "tasks__add_task:")
    (step,) = policy.inverse
    assert (step.tool, step.when) == ("tasks__delete_task", None)
    assert step.args.render({"result": {"id": 9}}) == {"id": 9}
    assert policy.snapshot_tool is None and policy.snapshot_args is None
    assert policy.error_when is None and policy.mutating_when is None and policy.test is None


def test_compensable_policy(full: Registry) -> None:
    policy = full.policy("tasks__delete_task")
    assert policy is not None
    assert policy.classification is Classification.COMPENSABLE
    assert policy.snapshot_tool == "tasks__get_task_tree"
    assert policy.snapshot_args is not None
    assert policy.snapshot_args.render({"args": {"id": 4}}) == {"id": 4}
    first, second = policy.inverse
    context = {"snapshot": {"task": {"id": 4}, "children": [{"id": 5}]}}
    assert first.tool == "tasks__restore_task" and first.when is None
    assert first.args.render(context) == {"id": 4}
    assert second.args.render(context) == {"tasks": [{"id": 5}]}
    assert second.when is not None and second.when.truthy(context)
    assert not second.when.truthy({"snapshot": {"children": []}})
    assert policy.error_when is not None
    assert policy.error_when.truthy({"result": {"ok": False}})
    assert policy.mutating_when is not None
    assert not policy.mutating_when.truthy({"args": {"dry_run": True}})
    assert policy.test == TestSpec(
        schema={"type": "object", "properties": {"id": {"type": "integer", "enum": [1, 2, 3]}}},
        examples=({"id": 1},),
    )


def test_other_policies_and_lookup(full: Registry) -> None:
    assert full.policy("tasks__list_tasks").classification is Classification.READ
    assert full.policy("notes__send").classification is Classification.IRREVERSIBLE
    assert full.policy("tasks__unlisted") is None
    assert full.path.name == "compensators.yaml"


def test_classification_values() -> None:
    assert [c.value for c in Classification] == [
        "read",
        "reversible",
        "compensable",
        "irreversible",
        "unknown",
    ]
    assert Classification("read") is Classification.READ
    assert TestSpec.__test__ is False


def test_minimal_registry_and_parse_registry(tmp_path: Path) -> None:
    registry = parse_registry(HEAD, tmp_path / "r.yaml", {})
    assert set(registry.servers) == {"tasks", "notes"}
    assert registry.state == () and dict(registry.tools) == {}
    assert registry.defaults == Defaults(trust_read_only_hint=False)
    assert registry.servers["tasks"].cwd == tmp_path


def test_empty_optional_sections_are_allowed(tmp_path: Path) -> None:
    registry = parse_registry(HEAD + "tools:\nstate:\ndefaults:\n", tmp_path / "r.yaml", {})
    assert dict(registry.tools) == {} and registry.state == ()


def test_braced_inverse_args_string_is_a_template(tmp_path: Path) -> None:
    text = tools("""
        tasks__put:
          classification: compensable
          snapshot_tool: tasks__get
          inverse_tool: tasks__put
          inverse_args: "{snapshot}"
        """)
    registry = parse_registry(text, tmp_path / "r.yaml", {})
    step = registry.policy("tasks__put").inverse[0]
    assert step.args.render({"snapshot": {"a": 1}}) == {"a": 1}


def test_anchors_and_merge_keys(tmp_path: Path) -> None:
    text = norm("""
        servers:
          tasks: &base
            command: /bin/x
            env: {A: "1"}
          notes:
            <<: *base
            args: ["n"]
        """)
    registry = parse_registry(text, tmp_path / "r.yaml", {})
    notes = registry.servers["notes"]
    assert (notes.command, notes.args, dict(notes.env)) == ("/bin/x", ("n",), {"A": "1"})


def test_merge_keys_keep_lines_for_errors(tmp_path: Path) -> None:
    text = norm("""
        servers:
          tasks: &base
            command: /bin/x
          notes:
            <<: *base
            commnd: /bin/y
        """)
    load_error(tmp_path, text, "servers.notes.commnd", "commnd", {})


# -- environment variables ---------------------------------------------------------------


def test_env_default_used_when_unset_or_empty(tmp_path: Path) -> None:
    text = HEAD.replace("/usr/bin/python3\n  notes", "${PY:-/usr/bin/env}\n  notes")
    assert parse_registry(text, tmp_path / "r", {}).servers["tasks"].command == "/usr/bin/env"
    assert parse_registry(text, tmp_path / "r", {"PY": ""}).servers["tasks"].command == (
        "/usr/bin/env"
    )
    assert parse_registry(text, tmp_path / "r", {"PY": "/x"}).servers["tasks"].command == "/x"


def test_env_defaults_to_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPENSATOR_TEST_BIN", "/from/os")
    text = HEAD.replace("/usr/bin/python3\n  notes", "${COMPENSATOR_TEST_BIN}\n  notes")
    assert parse_registry(text, tmp_path / "r").servers["tasks"].command == "/from/os"


def test_missing_variable(tmp_path: Path) -> None:
    text = HEAD.replace("  notes:\n", "  notes:\n    env: {TOKEN: '${API_TOKEN}'}\n")
    error = load_error(tmp_path, text, "servers.notes.env.TOKEN", "TOKEN:", {})
    message = str(error)
    assert "environment variable API_TOKEN is not set" in message
    assert "export API_TOKEN=" in message
    assert "${API_TOKEN:-default}" in message
    # It says who needs it, and who does not.
    assert "serve, check" in message and "undo --dry-run does not" in message


def test_a_command_that_starts_no_server_needs_none_of_their_variables(tmp_path: Path) -> None:
    text = HEAD.replace("  notes:\n", "  notes:\n    env: {TOKEN: '${API_TOKEN}', M: '${M:-x}'}\n")
    path = tmp_path / "r.yaml"
    path.write_text(text)
    environ = registry_environment({}, starts_servers=False)
    environ.pop("API_TOKEN", None)
    environ.pop("M", None)
    env = load_registry(path, environ).servers["notes"].env
    assert env["TOKEN"] == "${API_TOKEN}"  # stands as its reference
    assert env["M"] == "x"  # a default still applies
    remote = "servers:\n  kv:\n    url: '${KV_URL}'\n"
    path.write_text(remote)
    assert load_registry(path, environ).servers["kv"].url == "${KV_URL}"  # no address yet
    with pytest.raises(RegistryError, match="KV_URL is not set"):
        load_registry(path, {})


def test_malformed_variable(tmp_path: Path) -> None:
    text = HEAD.replace("  notes:\n", "  notes:\n    args: ['${1BAD}']\n")
    load_error(tmp_path, text, "servers.notes.args[0]", "1BAD", {})
    text = HEAD.replace("  notes:\n", "  notes:\n    args: ['${OPEN']\n")
    error = load_error(tmp_path, text, "servers.notes.args[0]", "OPEN", {})
    assert "${NAME:-default}" in str(error)


@pytest.mark.parametrize(
    ("extra", "key", "needle"),
    [
        ("    args: ['${SECRET}', '${MISSING}']\n", "servers.notes.args[1]", "MISSING"),
        ("    env: {A: '${SECRET}', B: 5}\n", "servers.notes.env.B", "B: 5"),
        ("    env: {A: '${SECRET}', B: '${NOPE}'}\n", "servers.notes.env.B", "NOPE"),
        ("    command: '${SECRET}'\n    args: ['${SECRET}${', x]\n", "servers.notes.args[0]", "x]"),
    ],
)
def test_secret_values_never_appear_in_errors(
    tmp_path: Path, extra: str, key: str, needle: str
) -> None:
    text = HEAD.replace("  notes:\n    command: /usr/bin/python3\n", "  notes:\n" + extra)
    if "command" not in extra:
        text = text.replace("  notes:\n", "  notes:\n    command: /bin/true\n")
    error = load_error(tmp_path, text, key, needle, {"SECRET": "hunter2-secret"})
    assert "hunter2" not in str(error) and "hunter2" not in (error.fix or "")


# -- cwd ---------------------------------------------------------------------------------


def test_cwd_absolute_home_and_variable(tmp_path: Path) -> None:
    text = HEAD.replace(
        "  notes:\n    command: /usr/bin/python3\n",
        "  notes:\n    command: /usr/bin/python3\n    cwd: ${WORK}/../w\n",
    )
    text = text.replace("  tasks:\n", "  tasks:\n    cwd: ~/here\n")
    registry = parse_registry(text, tmp_path / "r.yaml", {"WORK": "/srv/data"})
    assert registry.servers["notes"].cwd == Path("/srv/data/../w")
    assert registry.servers["tasks"].cwd == Path("~/here").expanduser()


def test_cwd_relative_to_a_relative_registry_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    write(tmp_path / "conf", HEAD.replace("  notes:\n", "  notes:\n    cwd: ./srv\n"), "r.yaml")
    monkeypatch.chdir(tmp_path)
    registry = load_registry("conf/r.yaml", {})
    assert registry.servers["notes"].cwd == tmp_path / "conf" / "srv"
    assert registry.servers["tasks"].cwd == tmp_path / "conf"
    assert registry.servers["tasks"].cwd.is_absolute()


# -- file and YAML errors ----------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(RegistryError, match=r"nope\.yaml: registry file not found") as info:
        load_registry(path, {})
    assert info.value.path == str(path)


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read"):
        load_registry(tmp_path, {})


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    text = HEAD + "tools:\n  a: [1, 2\n  b: c\n"
    path = write(tmp_path, text)
    with pytest.raises(RegistryError) as info:
        load_registry(path, {})
    assert str(info.value).startswith(f"{path}:")
    assert str(info.value).startswith(f"{path}:8: (top level): invalid YAML: expected ','")
    assert "while parsing a flow sequence started on line 7" in str(info.value)
    assert info.value.line == 8


def test_tab_indentation_error_line(tmp_path: Path) -> None:
    text = HEAD + "tools:\n\ttasks__x: 1\n"
    path = write(tmp_path, text)
    with pytest.raises(RegistryError, match=r":7: \(top level\): invalid YAML"):
        load_registry(path, {})


def test_duplicate_key_line_is_the_second_key(tmp_path: Path) -> None:
    text = HEAD + "  tasks: {command: /bin/other}\n"
    error = load_error(tmp_path, text, "servers.tasks", "/bin/other", {})
    assert error.line == 6
    assert "duplicate key. Keep only one (the first is on line 2)." in str(error)


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing yet\n")
    with pytest.raises(RegistryError) as info:
        load_registry(path, {})
    assert str(info.value).startswith(f"{path}:1: servers: missing required key. Add 'servers:'")
    assert (info.value.line, info.value.key) == (1, "servers")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    error = load_error(tmp_path, "- a\n- b\n", "(top level)", "- a", {})
    assert "expected a mapping, got a list" in str(error)


def test_unsupported_tag(tmp_path: Path) -> None:
    text = HEAD.replace("/usr/bin/python3\n  notes", "!!python/name:os.system\n  notes")
    load_error(tmp_path, text, "servers.tasks.command", "python/name", {})


# -- unknown keys ------------------------------------------------------------------------


def test_typo_in_classification_key(tmp_path: Path) -> None:
    text = tools("""
        tasks__add_task:
          clasification: reversible
        """)
    error = load_error(tmp_path, text, "tools.tasks__add_task.clasification", "clasification")
    assert str(error).endswith("unknown key. Did you mean 'classification'?")
    assert f"compensators.yaml:{line_with(text, 'clasification')}:" in str(error)


def policy_yaml(*lines: str) -> str:
    """HEAD plus a policy for tasks__x whose body is `lines`."""
    return HEAD + "tools:\n  tasks__x:\n" + "".join(f"    {line}\n" for line in lines)


def server_yaml(*lines: str) -> str:
    """HEAD with `lines` added to the notes server."""
    return HEAD.replace("  notes:\n", "  notes:\n" + "".join(f"    {line}\n" for line in lines))


@pytest.mark.parametrize(
    ("text", "key", "needle", "suggestion"),
    [
        (HEAD + "tool: {}\n", "tool", "tool:", "'tools'"),
        (server_yaml("comand: x"), "servers.notes.comand", "comand", "'command'"),
        (
            HEAD + "defaults: {trust_readonly_hint: true}\n",
            "defaults.trust_readonly_hint",
            "trust_",
            "'trust_read_only_hint'",
        ),
        (
            HEAD + "state:\n  - tool: tasks__x\n    selct: a\n",
            "state[0].selct",
            "selct",
            "'select'",
        ),
        (
            policy_yaml("classification: read", "eror_when: a"),
            "tools.tasks__x.eror_when",
            "eror_when",
            "'error_when'",
        ),
        (
            policy_yaml(
                "classification: reversible", "inverse:", "  - tool: tasks__y", "    wen: a"
            ),
            "tools.tasks__x.inverse[0].wen",
            "wen",
            "'when'",
        ),
        (
            policy_yaml("classification: read", "test: {shema: {}}"),
            "tools.tasks__x.test.shema",
            "shema",
            "'schema'",
        ),
    ],
)
def test_unknown_keys_everywhere(
    tmp_path: Path, text: str, key: str, needle: str, suggestion: str
) -> None:
    error = load_error(tmp_path, text, key, needle, {})
    assert f"unknown key. Did you mean {suggestion}?" in str(error)


def test_unknown_key_without_close_match_lists_allowed(tmp_path: Path) -> None:
    error = load_error(tmp_path, HEAD + "zzz: 1\n", "zzz", "zzz", {})
    allowed = "include, servers, defaults, checkpoints, retention, state, reset, tools"
    assert f"Allowed keys: {allowed}." in str(error)


def test_retention_is_read_and_its_mistakes_say_how_to_write_it(tmp_path: Path) -> None:
    registry = load_registry(
        write(tmp_path, HEAD + "retention: {older_than: 2w, keep_checkpoints: [3, 7]}\n"), {}
    )
    assert registry.retention is not None
    assert (registry.retention.older_than, registry.retention.keep_checkpoints) == (
        14 * 86400,
        (3, 7),
    )
    assert load_registry(write(tmp_path, HEAD), {}).retention is None
    error = load_error(
        tmp_path, HEAD + "retention:\n  older_than: 30 days\n", "retention.older_than", "30 days"
    )
    assert "expected a duration of at most 100 years, got '30 days'" in str(error)
    assert "e.g. 30d" in str(error)
    error = load_error(
        tmp_path,
        HEAD + "retention:\n  older_than: 30d\n  keep_checkpoints: [3, x]\n",
        "retention.keep_checkpoints[1]",
        "keep_checkpoints",
    )
    assert "expected a checkpoint id, got 'x'" in str(error)
    error = load_error(tmp_path, HEAD + "retention:\n  keep: 30d\n", "retention.keep", "keep:")
    assert "Allowed keys: older_than, keep_checkpoints" in str(error)


# -- types and required keys -------------------------------------------------------------

STRING, NUMBER, LIST, MAPPING, BOOLEAN = "a string", "a number", "a list", "a mapping", "a boolean"


@pytest.mark.parametrize(
    ("text", "key", "needle", "expected", "got"),
    [
        ("servers: []\n", "servers", "servers", MAPPING, LIST),
        (HEAD + "  more:\n    command: 5\n", "servers.more.command", "5", STRING, NUMBER),
        (server_yaml("args: x.py"), "servers.notes.args", "x.py", LIST, STRING),
        (server_yaml("args: [1]"), "servers.notes.args[0]", "[1]", STRING, NUMBER),
        (server_yaml("env: [A]"), "servers.notes.env", "[A]", MAPPING, LIST),
        (server_yaml("env: {PORT: 80}"), "servers.notes.env.PORT", "PORT", STRING, NUMBER),
        (server_yaml("cwd: [a]"), "servers.notes.cwd", "cwd", STRING, LIST),
        (HEAD + "  more: /bin/x\n", "servers.more", "more", MAPPING, STRING),
        (
            HEAD + "defaults:\n  trust_read_only_hint: 'yes'\n",
            "defaults.trust_read_only_hint",
            "trust",
            "true or false",
            STRING,
        ),
        (HEAD + "state: {tool: x}\n", "state", "state", LIST, MAPPING),
        (HEAD + "state:\n  - tasks__x\n", "state[0]", "- tasks__x", MAPPING, STRING),
        (
            HEAD + "state:\n  - tool: tasks__x\n    unordered: 1\n",
            "state[0].unordered",
            "unordered",
            "true or false",
            NUMBER,
        ),
        (
            HEAD + "state:\n  - tool: tasks__x\n    args: [1]\n",
            "state[0].args",
            "args",
            MAPPING,
            LIST,
        ),
        (HEAD + "state:\n  - tool: 7\n", "state[0].tool", "tool", STRING, NUMBER),
        (
            HEAD + "state:\n  - tool: tasks__x\n    select: 3\n",
            "state[0].select",
            "select",
            STRING,
            NUMBER,
        ),
        (HEAD + "tools: [a]\n", "tools", "tools", MAPPING, LIST),
        (HEAD + "tools:\n  tasks__x: read\n", "tools.tasks__x", "tasks__x", MAPPING, STRING),
        (
            policy_yaml("classification: [read]"),
            "tools.tasks__x.classification",
            "classification",
            STRING,
            LIST,
        ),
        (
            policy_yaml("classification: reversible", "inverse: {tool: tasks__y}"),
            "tools.tasks__x.inverse",
            "inverse",
            LIST,
            MAPPING,
        ),
        (
            policy_yaml("classification: read", "error_when: true"),
            "tools.tasks__x.error_when",
            "error_when",
            STRING,
            BOOLEAN,
        ),
        (
            policy_yaml("classification: read", "test: {schema: [1]}"),
            "tools.tasks__x.test.schema",
            "schema",
            MAPPING,
            LIST,
        ),
        (
            policy_yaml("classification: read", "test:", "  examples:", "    - {id: 1}", "    - 2"),
            "tools.tasks__x.test.examples[1]",
            "- 2",
            MAPPING,
            NUMBER,
        ),
        (
            policy_yaml("classification: read", "test: {examples: {id: 1}}"),
            "tools.tasks__x.test.examples",
            "examples",
            LIST,
            MAPPING,
        ),
    ],
)
def test_wrong_types(
    tmp_path: Path, text: str, key: str, needle: str, expected: str, got: str
) -> None:
    error = load_error(tmp_path, text, key, needle, {})
    assert f"expected {expected}, got {got}." in str(error)


def test_literal_string_as_arguments(tmp_path: Path) -> None:
    text = HEAD + "state:\n  - tool: tasks__x\n    args: just text\n"
    error = load_error(tmp_path, text, "state[0].args", "just text", {})
    assert "expected a mapping of arguments, got a string" in str(error)
    assert '"{expression}"' in str(error)


def test_null_value_is_named(tmp_path: Path) -> None:
    error = load_error(tmp_path, server_yaml("args:"), "servers.notes.args", "args", {})
    assert "expected a list, got nothing (null)" in str(error)


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        ("defaults: {}\n", "servers", "defaults"),
        (HEAD + "  more:\n    args: []\n", "servers.more.command", "more:"),
        (HEAD + "state:\n  - args: {}\n", "state[0].tool", "- args"),
        (policy_yaml("inverse_tool: tasks__y"), "tools.tasks__x.classification", "tasks__x"),
        (
            policy_yaml("classification: reversible", "inverse:", "  - args: {}"),
            "tools.tasks__x.inverse[0].tool",
            "- args",
        ),
    ],
)
def test_missing_required_keys(tmp_path: Path, text: str, key: str, needle: str) -> None:
    error = load_error(tmp_path, text, key, needle, {})
    name = key.rsplit(".", 1)[-1]
    assert "missing required key" in str(error)
    assert f"Add '{name}:'" in str(error)


def test_servers_must_not_be_empty(tmp_path: Path) -> None:
    error = load_error(tmp_path, "servers: {}\n", "servers", "servers", {})
    assert "no servers are defined" in str(error)


def test_empty_command(tmp_path: Path) -> None:
    text = HEAD.replace("/usr/bin/python3\n  notes", "'${EMPTY:-}'\n  notes")
    error = load_error(tmp_path, text, "servers.tasks.command", "EMPTY", {})
    assert "the command is empty" in str(error)


@pytest.mark.parametrize("name", ["my server", "a__b", "a_", "tâches"])
def test_bad_server_names(tmp_path: Path, name: str) -> None:
    text = HEAD.replace("  notes:", f"  '{name}':")
    error = load_error(tmp_path, text, f"servers.{name}", name, {})
    assert "server name" in str(error) and "Rename the server" in str(error)


@pytest.mark.parametrize("name", ["a-b", "A_1", "x"])
def test_good_server_names(tmp_path: Path, name: str) -> None:
    text = (
        HEAD.replace("  notes:", f"  {name}:")
        + f"tools:\n  {name}__do:\n    classification: read\n"
    )
    assert name in parse_registry(text, tmp_path / "r", {}).servers


# -- classification and policy shape -----------------------------------------------------


def test_misspelt_classification(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversable
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.classification", "reversable", {})
    assert "'reversable' is not a classification. Did you mean 'reversible'?" in str(error)


def test_unknown_cannot_be_written(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: unknown
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.classification", "unknown", {})
    assert "Remove the entry" in str(error)
    assert "read, reversible, compensable, irreversible" in str(error)


@pytest.mark.parametrize("kind", ["reversible", "compensable"])
def test_undoable_without_inverse(tmp_path: Path, kind: str) -> None:
    text = tools(f"""
        tasks__x:
          classification: {kind}
          snapshot_tool: tasks__get
        """)
    if kind == "reversible":
        text = text.replace("    snapshot_tool: tasks__get\n", "")
    error = load_error(tmp_path, text, "tools.tasks__x", "tasks__x:", {})
    assert f"a {kind} tool needs an inverse. Add inverse_tool" in str(error)


def test_compensable_without_snapshot(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: compensable
          inverse_tool: tasks__y
        """)
    error = load_error(tmp_path, text, "tools.tasks__x", "tasks__x:", {})
    assert "a compensable tool needs snapshot_tool. Add snapshot_tool" in str(error)
    assert "classify the tool reversible" in str(error)


def test_inverse_tool_and_inverse_together(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse_tool: tasks__y
          inverse:
            - tool: tasks__y
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse", "inverse:", {})
    assert "inverse_tool and inverse are both given" in str(error)
    assert "not both" in str(error)


def test_inverse_args_without_inverse_tool(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse_args: {id: 1}
          inverse:
            - tool: tasks__y
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse_args", "inverse_args", {})
    assert "inverse_args without inverse_tool. Add inverse_tool" in str(error)


def test_snapshot_args_without_snapshot_tool(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: compensable
          inverse_tool: tasks__y
          snapshot_args: {id: "{args.id}"}
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.snapshot_args", "snapshot_args", {})
    assert "snapshot_args without snapshot_tool. Add snapshot_tool" in str(error)


@pytest.mark.parametrize("kind", ["read", "irreversible"])
@pytest.mark.parametrize(
    "extra",
    [
        "inverse_tool: tasks__y",
        "inverse_args: {}",
        "inverse: []",
        "snapshot_tool: tasks__get",
        "snapshot_args: {}",
    ],
)
def test_never_undone_with_undo_keys(tmp_path: Path, kind: str, extra: str) -> None:
    text = tools(f"""
        tasks__x:
          classification: {kind}
          {extra}
        """)
    name = extra.split(":")[0]
    error = load_error(tmp_path, text, f"tools.tasks__x.{name}", extra, {})
    article = "an" if kind == "irreversible" else "a"
    assert f"{article} {kind} tool is never undone, so {name} would never run" in str(error)
    assert "classify the tool reversible or compensable" in str(error)


def test_reversible_with_snapshot_tool(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse_tool: tasks__y
          snapshot_tool: tasks__get
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.snapshot_tool", "snapshot_tool", {})
    assert "Classify the tool compensable" in str(error)


def test_empty_inverse_list(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse: []
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse", "inverse", {})
    assert "the inverse list is empty" in str(error)


# -- expressions and contexts ------------------------------------------------------------


def test_reversible_template_reading_snapshot(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse_tool: tasks__y
          inverse_args:
            keep: 1
            id: "{snapshot.id}"
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse_args.id", "snapshot.id", {})
    assert "`snapshot.id` reads `snapshot`, but a reversible tool takes no snapshot" in str(error)
    assert "classify it compensable" in str(error)


def test_reversible_when_reading_snapshot_error(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse:
            - tool: tasks__y
              when: "!snapshot_error"
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse[0].when", "when", {})
    assert "reads `snapshot_error`" in str(error)


@pytest.mark.parametrize(
    ("extra", "name", "root"),
    [
        ("error_when: 'snapshot.gone'", "error_when", "snapshot"),
        ("mutating_when: 'result.ok'", "mutating_when", "result"),
    ],
)
def test_conditions_see_only_their_context(
    tmp_path: Path, extra: str, name: str, root: str
) -> None:
    text = tools(f"""
        tasks__x:
          classification: read
          {extra}
        """)
    error = load_error(tmp_path, text, f"tools.tasks__x.{name}", name, {})
    assert f"reads `{root}`, but {name} sees only" in str(error)


def test_snapshot_args_see_only_args(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: compensable
          snapshot_tool: tasks__get
          snapshot_args: {id: "{result.id}"}
          inverse_tool: tasks__y
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.snapshot_args.id", "snapshot_args", {})
    assert "the snapshot is taken before the call" in str(error)


def test_template_rooted_outside_context(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse_tool: tasks__y
          inverse_args:
            other: 1
            id: "{argz.id}"
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse_args.id", "argz", {})
    assert "`{argz.id}` names `argz`; expressions start from one of args, result" in str(error)
    assert str(error).endswith("Did you mean 'args'?")


def test_template_parse_error_in_nested_list(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: reversible
          inverse:
            - tool: tasks__y
              args:
                ids:
                  - 1
                  - "{result.}"
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse[0].args.ids[1]", "result.", {})
    assert "does not parse" in str(error) and "JMESPath syntax" in str(error)


def test_condition_parse_error(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: read
          error_when: "{result.ok}"
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.error_when", "error_when", {})
    assert "drop the surrounding braces" in str(error)


def test_select_has_no_root_check_but_must_parse(tmp_path: Path) -> None:
    ok = HEAD + "state:\n  - tool: tasks__x\n    select: 'items[*].id'\n"
    probe = parse_registry(ok, tmp_path / "r", {}).state[0]
    assert probe.select is not None
    assert probe.select.evaluate({"items": [{"id": 1}]}) == [1]
    bad = HEAD + "state:\n  - tool: tasks__x\n    select: 'items[*'\n"
    error = load_error(tmp_path, bad, "state[0].select", "select", {})
    assert "does not parse" in str(error)


# -- tool names --------------------------------------------------------------------------


def test_tool_key_with_unknown_server(tmp_path: Path) -> None:
    text = tools("""
        taks__add_task:
          classification: read
        """)
    error = load_error(tmp_path, text, "tools.taks__add_task", "taks__add_task", {})
    assert "'taks__add_task' names unknown server 'taks'" in str(error)
    assert "Did you mean 'tasks__add_task'?" in str(error)


def test_tool_name_without_server(tmp_path: Path) -> None:
    text = tools("""
        add_task:
          classification: read
        """)
    error = load_error(tmp_path, text, "tools.add_task", "add_task", {})
    assert "is not of the form server__tool" in str(error)
    assert "'tasks__add_task'" in str(error)


def test_unknown_server_far_from_any(tmp_path: Path) -> None:
    text = HEAD + "state:\n  - tool: zzzzzz__list\n"
    error = load_error(tmp_path, text, "state[0].tool", "zzzzzz", {})
    assert "Known servers: tasks, notes." in str(error)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("inverse_tool: taskss__y", "inverse_tool"),
        ("inverse:\n    - tool: notes_y", "inverse[0].tool"),
    ],
)
def test_inverse_tool_names_are_checked(tmp_path: Path, extra: str, key: str) -> None:
    text = HEAD + "tools:\n  tasks__x:\n    classification: reversible\n    " + extra + "\n"
    load_error(tmp_path, text, f"tools.tasks__x.{key}", extra.rsplit(":", 1)[-1].strip(), {})


def test_snapshot_tool_name_is_checked(tmp_path: Path) -> None:
    text = tools("""
        tasks__x:
          classification: compensable
          snapshot_tool: nots__get
          inverse_tool: tasks__y
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.snapshot_tool", "nots__get", {})
    assert "Did you mean 'notes__get'?" in str(error)


@pytest.mark.parametrize("meta", sorted(META_TOOLS))
def test_meta_tools_are_never_targets(tmp_path: Path, meta: str) -> None:
    text = tools(f"""
        tasks__x:
          classification: reversible
          inverse_tool: {meta}
        """)
    error = load_error(tmp_path, text, "tools.tasks__x.inverse_tool", meta, {})
    assert f"'{meta}' is a compensator meta tool" in str(error)


def test_meta_tool_as_policy_key(tmp_path: Path) -> None:
    text = tools("""
        undo_to:
          classification: read
        """)
    load_error(tmp_path, text, "tools.undo_to", "undo_to", {})


def test_reset_calls_are_parsed_and_checked(tmp_path):
    text = """\
servers:
  tasks: {command: python}
reset:
  - tool: tasks__reset
  - tool: tasks__seed
    args: {rows: 3}
"""
    registry = parse_registry(text, tmp_path / "r.yaml", {})
    assert [call.tool for call in registry.reset] == ["tasks__reset", "tasks__seed"]
    assert registry.reset[1].args.render({}) == {"rows": 3}
    with pytest.raises(RegistryError, match=r"r\.yaml:4: reset\[0\]\.tool: 'task__reset'"):
        parse_registry(text.replace("tasks__reset", "task__reset"), tmp_path / "r.yaml", {})


def test_the_registry_reference_loads(tmp_path: Path) -> None:
    """The annotated registry in docs/registry.md is one the loader accepts, as written."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "registry.md"
    text = docs.read_text(encoding="utf-8").split("```yaml\n", 1)[1].split("```", 1)[0]
    environ = {"COMPENSATOR_PYTHON": "/usr/bin/python3", "API_TOKEN": "t", "REMOTE_TOKEN": "r"}
    environ |= {"COMPENSATOR_SERVERS": "/opt", "COMPENSATOR_WORKDIR": "/w"}  # builtin:sqlite's
    registry = parse_registry(text, tmp_path / "compensators.yaml", environ)
    assert list(registry.servers) == ["sqlite", "tasks", "remote"]
    assert registry.tools["sqlite__write_query"].classification is Classification.COMPENSABLE
    remote = registry.servers["remote"]
    assert (remote.url, remote.exposed_prefix) == ("https://mcp.example.com/mcp", "rm")
    assert dict(remote.headers) == {"Authorization": "Bearer r"}
    assert registry.servers["tasks"].call_timeout == 60
    assert registry.tools["tasks__rename_task"].redact
    added = registry.tools["tasks__add_task"]
    assert (added.verify, added.verify_tool) == (True, "tasks__get_task")
    assert added.verify_args is not None and added.verify_args.source == {"id": "{result.id}"}


# -- guardrails: approve, deny and their defaults ----------------------------------------


def test_guard_keys_are_read(tmp_path: Path) -> None:
    text = HEAD + norm(
        """
        defaults:
          approve: [irreversible, unknown]
          on_no_approval: allow
        tools:
          tasks__drop: {classification: irreversible, approve: false}
          tasks__query:
            classification: irreversible
            approve_when: "regex(args.sql, '(?i)^\\\\s*drop') != `null`"
            deny_when: "args.table == 'users'"
          tasks__wipe: {classification: irreversible, deny: "wipes every project"}
          tasks__nuke: {classification: irreversible, deny: true}
          tasks__read: {classification: read, approve: true}
        """
    )
    registry = load_registry(write(tmp_path, text), {})
    assert registry.defaults.approve == {Classification.IRREVERSIBLE, Classification.UNKNOWN}
    assert registry.defaults.on_no_approval == "allow"
    drop, query = registry.policy("tasks__drop"), registry.policy("tasks__query")
    assert drop.approve is False and drop.deny is None and drop.approve_when is None
    assert query.approve is None and query.approve_when is not None
    assert query.approve_when.truthy({"args": {"sql": "  DROP TABLE t"}})
    assert not query.approve_when.truthy({"args": {"sql": "select 1"}})
    assert query.deny_when is not None and query.deny_when.truthy({"args": {"table": "users"}})
    assert registry.policy("tasks__wipe").deny == "wipes every project"
    assert registry.policy("tasks__nuke").deny == ""
    assert registry.policy("tasks__read").approve is True
    plain = load_registry(write(tmp_path, HEAD, "plain.yaml"), {})
    assert plain.defaults == Defaults()
    assert (plain.defaults.approve, plain.defaults.on_no_approval) == (frozenset(), "deny")


@pytest.mark.parametrize(
    ("text", "key", "needle", "message"),
    [
        (
            HEAD + "defaults: {approve: irreversible}\n",
            "defaults.approve",
            "approve",
            "expected a list of classifications, got a string. Write e.g. approve: "
            "[irreversible, unknown]",
        ),
        (
            HEAD + "defaults:\n  approve: [irreversible, unknwn]\n",
            "defaults.approve[1]",
            "unknwn",
            "'unknwn' is not a classification. Did you mean 'unknown'?",
        ),
        (
            HEAD + "defaults: {on_no_approval: alow}\n",
            "defaults.on_no_approval",
            "alow",
            "'alow' is not deny or allow. Did you mean 'allow'?",
        ),
        (
            HEAD + "defaults: {approval_timeout: 0}\n",
            "defaults.approval_timeout",
            "approval_timeout",
            "expected a number of seconds greater than 0, got 0",
        ),
        (
            HEAD + "defaults: {on_no_approval: maybe}\n",
            "defaults.on_no_approval",
            "maybe",
            "Write deny (refuse such a call, the default) or allow",
        ),
        (
            policy_yaml("classification: irreversible", "approve: yes please"),
            "tools.tasks__x.approve",
            "approve",
            "expected true or false, got a string",
        ),
        (
            policy_yaml("classification: irreversible", "deny: 3"),
            "tools.tasks__x.deny",
            "deny",
            "expected true, false or a reason, got a number",
        ),
        (
            policy_yaml("classification: irreversible", 'deny: "  "'),
            "tools.tasks__x.deny",
            "deny",
            "the reason is empty",
        ),
        (
            policy_yaml("classification: irreversible", "approve: true", "approve_when: args.a"),
            "tools.tasks__x.approve_when",
            "approve_when",
            "approve and approve_when are both given",
        ),
        (
            policy_yaml("classification: irreversible", "deny: true", "deny_when: args.a"),
            "tools.tasks__x.deny_when",
            "deny_when",
            "deny and deny_when are both given",
        ),
        (
            policy_yaml("classification: irreversible", "deny: never", "approve: true"),
            "tools.tasks__x.approve",
            "approve:",
            "the tool is denied, so approve would never be asked",
        ),
        (
            policy_yaml("classification: irreversible", "approve_when: result.ok"),
            "tools.tasks__x.approve_when",
            "approve_when",
            "approve_when is decided before the call, when only args is known",
        ),
        (
            policy_yaml("classification: irreversible", "deny_when: 'args.a =='"),
            "tools.tasks__x.deny_when",
            "deny_when",
            "`args.a ==`",
        ),
        (
            policy_yaml("classification: irreversible", "aprove: true"),
            "tools.tasks__x.aprove",
            "aprove",
            "unknown key. Did you mean 'approve'?",
        ),
    ],
)
def test_guard_mistakes_are_located_errors(
    tmp_path: Path, text: str, key: str, needle: str, message: str
) -> None:
    error = load_error(tmp_path, text, key, needle, {})
    assert message in str(error)
