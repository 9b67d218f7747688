"""`include:`: registries shipped in the package (`builtin:NAME`) and other files, merged into
the including one, with every mistake named in the file where it is written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from compensator.classification import Classification
from compensator.errors import RegistryError
from compensator.registry import load_registry
from compensator.registry.loader import builtin_names

from .conftest import REGISTRIES, third_party_servers
from .test_plugin import run_quick
from .test_registry import load_error, write

SHIPPED = REGISTRIES.resolve()
ENV = {
    "COMPENSATOR_SERVERS": "/opt/servers",
    "COMPENSATOR_WORKDIR": "/work/dir",
    "COMPENSATOR_POSTGRES_URL": "postgresql:///x",
    "COMPENSATOR_PYTHON": "/usr/bin/python3",
}

TASKS = """\
servers:
  tasks:
    command: /usr/bin/python3
    args: [tasks.py]
state:
  - tool: tasks__list
reset:
  - tool: tasks__reset
tools:
  tasks__list: {classification: read}
  tasks__add:
    classification: reversible
    inverse_tool: tasks__delete
    inverse_args: {id: "{result.id}"}
  tasks__delete: {classification: irreversible}
"""


def test_every_shipped_registry_is_a_builtin():
    assert builtin_names() == sorted(p.stem for p in SHIPPED.glob("*.yaml"))


@pytest.mark.parametrize("name", builtin_names())
def test_a_builtin_include_is_the_shipped_registry(tmp_path: Path, name: str):
    shipped = load_registry(SHIPPED / f"{name}.yaml", ENV)
    including = load_registry(write(tmp_path, f"include: builtin:{name}\n"), ENV)
    assert including.servers == shipped.servers
    assert including.tools == shipped.tools
    assert (including.state, including.reset) == (shipped.state, shipped.reset)
    keys = [f"servers.{s}" for s in shipped.servers] + [f"tools.{t}" for t in shipped.tools]
    keys += [f"state[{i}]" for i in range(len(shipped.state))]
    keys += [f"reset[{i}]" for i in range(len(shipped.reset))]
    assert dict(including.origins) == {key: (SHIPPED / f"{name}.yaml", key) for key in keys}
    assert including.path == tmp_path / "compensators.yaml"


def test_local_entries_win_and_lists_come_after_the_included(tmp_path: Path):
    write(tmp_path, TASKS, "tasks.yaml")
    config = write(
        tmp_path,
        """\
        include: [tasks.yaml]
        servers:
          tasks: {command: /bin/other, args: [--fast]}
          notes: {command: /bin/notes}
        state:
          - tool: notes__list
        tools:
          tasks__delete: {classification: read}
          notes__list: {classification: read}
        """.replace("        ", ""),
    )
    registry = load_registry(config, {})
    assert registry.servers["tasks"].command == "/bin/other"
    assert registry.servers["tasks"].args == ("--fast",)
    assert list(registry.servers) == ["tasks", "notes"]
    assert registry.tools["tasks__delete"].classification is Classification.READ
    assert registry.tools["tasks__add"].classification is Classification.REVERSIBLE
    assert [probe.tool for probe in registry.state] == ["tasks__list", "notes__list"]
    assert [call.tool for call in registry.reset] == ["tasks__reset"]
    tasks = tmp_path / "tasks.yaml"
    assert dict(registry.origins) == {  # what this file replaces is its own
        "tools.tasks__list": (tasks, "tools.tasks__list"),
        "tools.tasks__add": (tasks, "tools.tasks__add"),
        "state[0]": (tasks, "state[0]"),
        "reset[0]": (tasks, "reset[0]"),
        "state[1]": (config, "state[0]"),  # this file's own, after the included one
    }


def test_a_replaced_server_needs_none_of_the_included_entrys_variables(tmp_path: Path):
    text = "include: builtin:sqlite\nservers:\n  sqlite: {command: uvx, args: [mcp-server-sqlite]}"
    registry = load_registry(write(tmp_path, text), {})  # neither COMPENSATOR_ variable set
    assert registry.servers["sqlite"].args == ("mcp-server-sqlite",)
    with pytest.raises(RegistryError, match="COMPENSATOR_SERVERS is not set"):
        load_registry(write(tmp_path, "include: builtin:sqlite\n", "bare.yaml"), {})


def test_a_mistake_in_an_included_file_names_that_file_and_line(tmp_path: Path):
    broken = write(tmp_path, TASKS.replace("reversible", "reversable"), "tasks.yaml")
    config = write(tmp_path, "include: tasks.yaml\n")
    with pytest.raises(RegistryError) as info:
        load_registry(config, {})
    assert (info.value.path, info.value.line) == (str(broken.resolve()), 12)
    assert info.value.key == "tools.tasks__add.classification"
    assert "Did you mean 'reversible'?" in str(info.value)


@pytest.mark.parametrize(
    ("text", "key", "needle", "message"),
    [
        (
            "include: builtin:sqlit\n",
            "include",
            "include",
            "there is no shipped registry 'sqlit'. Did you mean 'builtin:sqlite'?",
        ),
        (
            "include: [builtin:nothing-like-it]\n",
            "include[0]",
            "include",
            "Shipped registries: builtin:duckdb, builtin:filesystem, ",
        ),
        (
            "include: [builtin:sqlite, builtin:sqlite]\n",
            "include[1]",
            "include",
            "builtin:sqlite is included twice. Remove one of them.",
        ),
        ("include: {a: 1}\n", "include", "include", "expected a string or a list, got a mapping"),
        ("include: []\n", "servers", "include", "missing required key. Add 'servers:'"),
        (
            "include: [nowhere.yaml]\n",
            "include[0]",
            "include",
            "nowhere.yaml is not a file (",
        ),
        ("include: ''\n", "include", "include", "the empty path is not a file"),
        (
            "include: builtin:sqlite\nservers:\n  sqlite:\n    command: x\n    prefix: db\n",
            "servers.sqlite.prefix",
            "prefix",
            "would expose them as db__<tool>. Remove prefix: here",
        ),
        (
            "tools: {}\n",
            "servers",
            "tools",
            "missing required key. Add 'servers:' naming the servers to start, or 'include:",
        ),
    ],
)
def test_include_mistakes_name_the_key_and_the_fix(
    tmp_path: Path, text: str, key: str, needle: str, message: str
):
    error = load_error(tmp_path, text, key, needle, ENV)
    assert message in str(error)


def test_two_included_files_may_not_bring_the_same_server(tmp_path: Path):
    write(tmp_path, TASKS, "a.yaml")
    write(tmp_path, TASKS, "b.yaml")
    error = load_error(tmp_path, "include:\n  - a.yaml\n  - b.yaml\n", "include[1]", "b.yaml")
    assert "server 'tasks' comes from both a.yaml and b.yaml" in str(error)


def test_the_same_file_spelt_twice_is_included_twice(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", TASKS, "x.yaml")
    text = "include:\n  - sub/x.yaml\n  - ./sub/../sub/x.yaml\n"
    error = load_error(tmp_path, text, "include[1]", "./sub")
    assert "./sub/../sub/x.yaml is included twice (as sub/x.yaml)" in str(error)


def test_clashing_prefixes_of_two_included_files_name_both(tmp_path: Path):
    write(tmp_path, TASKS, "a.yaml")
    write(tmp_path, "servers:\n  notes: {command: /bin/notes, prefix: tasks}\n", "b.yaml")
    error = load_error(tmp_path, "include: [a.yaml, b.yaml]\n", "include[1]", "include")
    assert "server 'notes' of b.yaml and server 'tasks' of a.yaml would both expose" in str(error)


def test_a_cycle_through_a_parent_folder_is_refused(tmp_path: Path):
    for folder, name, other in (("a", "x.yaml", "../b/y.yaml"), ("b", "y.yaml", "../a/x.yaml")):
        (tmp_path / folder).mkdir()
        write(tmp_path / folder, f"include: {other}\n", name)
    with pytest.raises(RegistryError, match=r"the include makes a cycle \(x.yaml -> y.yaml"):
        load_registry(tmp_path / "a" / "x.yaml", {})


def test_an_include_cycle_is_refused_where_it_leads_back(tmp_path: Path):
    other = write(tmp_path, "include: compensators.yaml\n", "other.yaml")
    with pytest.raises(RegistryError) as info:
        load_registry(write(tmp_path, "include: other.yaml\n"), {})
    assert str(info.value).startswith(f"{other}:1: include: the include makes a cycle")
    assert "(compensators.yaml -> other.yaml -> compensators.yaml)" in str(info.value)


def test_check_names_the_included_file_of_a_finding(tmp_path: Path):
    """`compensator check` against the real example server, with entries in an included
    file: a finding about a misspelt tool or state probe points into that file, and one
    about this file's own state probe (numbered after the included ones) into this one."""
    tasks = (REGISTRIES.parent / "tasks_server.py").resolve()
    write(
        tmp_path,
        f"servers:\n  tasks:\n    command: {sys.executable}\n    args: [{tasks}, --db, t.db]\n"
        "state:\n  - tool: tasks__list_tasks\n  - tool: tasks__get_tsk\n"
        "tools:\n  tasks__list_tasks: {classification: read}\n"
        "  tasks__add_tsk: {classification: read}\n",
        "base.yaml",
    )
    config = write(tmp_path, "include: base.yaml\nstate:\n  - tool: tasks__lst_tasks\n")
    result = subprocess.run(
        [sys.executable, "-m", "compensator", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    shown = " ".join(result.stdout.split())  # the table wraps long lines
    base = tmp_path / "base.yaml"
    assert f"tools.tasks__add_tsk ({base}, line 10): " in shown
    assert f"state[1].tool ({base}, line 7): " in shown
    assert "state[2].tool (line 3): " in shown


@pytest.mark.thorough
def test_a_registry_of_one_include_passes_the_plugin_from_an_empty_folder(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("COMPENSATOR_SERVERS", str(third_party_servers("git/bin/mcp-server-git")))
    config = pytester.path / "mine.yaml"
    config.write_text("include: builtin:git\n")
    result = run_quick(pytester, config, "--compensator-examples", "5")
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    assert "left out: git_commit (irreversible)" in out
    for tool in ("git_add", "git_reset", "git_checkout"):  # the included entries were proven
        row = re.search(rf"^{tool} +\d+ +\d+ +\d+ +(\d+) +0 +\d+/\d+$", out, re.M)
        assert row is not None and int(row[1]) > 0, out
