"""compensator/clients: JSONC, the proposal's rules, and `wire`/`unwire` on copies of every
client configuration shape (in process: wiring starts no server)."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from compensator.cli import main
from compensator.cli import wire as wire_module
from compensator.cli.init import _expanded as expanded
from compensator.clients import (
    ClientServer,
    Source,
    backup_of,
    jsonc,
    matching_registry,
    propose,
    variables,
)
from compensator.clients.proposal import secret, secret_values
from compensator.journal import default_journal_path
from compensator.registry import parse_registry

JSONC = """{
  // a comment with "quotes" and a , comma
  "url": "http://example.com/a//b",   /* not a comment: inside a string */
  "servers": {
    "a": {"command": "x", "args": ["\\"//\\"",],},
  },
}
"""


def test_jsonc_reads_comments_and_trailing_commas_and_finds_spans() -> None:
    data = jsonc.loads(JSONC)
    assert data["url"] == "http://example.com/a//b"
    assert data["servers"] == {"a": {"command": "x", "args": ['"//"']}}
    start, end = jsonc.span(JSONC, ["servers", "a"]) or (0, 0)
    assert JSONC[start:end].startswith('{"command"') and JSONC[start:end].endswith("}")
    assert jsonc.span(JSONC, ["servers", "b"]) is None
    assert len(jsonc.blank(JSONC)) == len(JSONC)
    with pytest.raises(ValueError, match="never ends"):
        jsonc.loads('{"a": 1 /* open')


def server(name: str = "s", client: str = "claude-code", **fields: Any) -> ClientServer:
    source = Source(path=Path("/p/.mcp.json"), keys=("mcpServers",), client=client)
    return ClientServer(name=name, source=source, **fields)


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (
            "npx",
            ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/d"],
            "filesystem.yaml",
        ),
        ("npx", ["@modelcontextprotocol/server-filesystem", "/d"], "filesystem.yaml"),
        (
            "node",
            ["/x/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"],
            "filesystem.yaml",
        ),
        ("uvx", ["mcp-server-sqlite", "--db-path", "d.db"], "sqlite.yaml"),
        ("/venv/bin/mcp-server-sqlite", ["--db-path", "d.db"], "sqlite.yaml"),
        ("npx", ["-y", "@modelcontextprotocol/server-memory"], "memory.yaml"),
        ("uvx", ["mcp-server-duckdb", "--db-path", "/d/x.duckdb"], "duckdb.yaml"),
        # Its undo needs a connection per call (duckdb.yaml's header): no policies then.
        ("uvx", ["mcp-server-duckdb", "--db-path", "/d/x.duckdb", "--keep-connection"], None),
        ("npx", ["-y", "@someone/server-filesystem-plus"], None),
    ],
)
def test_a_shipped_registry_is_matched_by_package_or_command(
    command: str, args: list[str], expected: str | None
) -> None:
    assert matching_registry(server(command=command, args=tuple(args))) == expected


def test_secrets_on_the_command_line_become_references_and_plain_options_stay(
    tmp_path: Path,
) -> None:
    args = (
        "--db-path", "/data/x.db",  # a data path, redirected
        "--author-name", "Ann",  # no secret: `auth` is not a word of it
        "--passthrough", "yes",
        "--token=t0k", "--api-key", "k3y",
        "redis://:pw@h:6379/0", "https://h/mcp", "postgres://me:pw2@h/db",
        "--password",  # with no value after it: kept
    )  # fmt: skip
    servers = {"db": server("db", command="x", args=args, env={"DB_URL": "plain"})}
    names = variables(servers)
    assert names == {
        "db": {
            "args[6]": "DB_TOKEN",
            "args[8]": "DB_API_KEY",
            "args[9]": "DB_URL",  # the env's DB_URL is no secret: no variable
            "args[11]": "DB_URL_2",
        }
    }
    assert secret_values(servers["db"])["args[11]"] == "postgres://me:pw2@h/db"
    text = propose(servers, {"db": []}, {}, project=tmp_path, home=tmp_path, header="").text
    assert "pw" not in text.replace("--password", "") and "t0k" not in text and "k3y" not in text
    environ = {
        "DB_TOKEN": "t0k",
        "DB_API_KEY": "k3y",
        "DB_URL": "redis://:pw@h:6379/0",
        "DB_URL_2": "postgres://me:pw2@h/db",
        "COMPENSATOR_PYTHON": "python3",
    }
    loaded = parse_registry(text, tmp_path / "r.yaml", environ).servers["db"]
    # A Redis URL among them: started through the scratch wrapper, which runs the command
    # as it is while COMPENSATOR_WORKDIR is unset (yours), with a scratch Redis in test runs.
    assert loaded.args[:6] == ("-m", "compensator.scratch", "redis", "", "--", "x")
    assert loaded.args[6:] == ("--db-path", "/data/x.db", *args[2:])  # WORKDIR unset: yours


def test_argument_secrets_in_other_forms_and_names_that_clash_across_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = (
        "--token", "${env:GITHUB_TOKEN}",  # the client's own reference: translated, kept
        "--key-prefix", "app:", "--no-auth", "/data", "--pass-env", "FOO",  # no secrets
        "--header", "Authorization: Bearer sk-abc123def456ghi789",  # as mcp-remote takes it
        "-e", "GITHUB_TOKEN=ghp_x1", "NODE_ENV=production",  # as docker run takes them
    )  # fmt: skip
    vscode = server("r", client="vscode", command="x", args=args)
    text = propose({"r": vscode}, {"r": []}, {}, project=tmp_path, home=tmp_path, header="").text
    assert "sk-abc" not in text and "ghp_x1" not in text
    assert (
        '["--token", "${GITHUB_TOKEN}", "--key-prefix", "app:", "--no-auth", "/data", '
        '"--pass-env", "FOO", "--header", "Authorization: ${R_AUTHORIZATION}", '
        '"-e", "GITHUB_TOKEN=${R_GITHUB_TOKEN}", "NODE_ENV=production"]'
    ) in text
    # Whichever server comes first, an argument's variable never takes an env key's name.
    github = server("github", command="x", args=("--token", "ghp_AAA111"))
    issues = server("issues", command="y", env={"GITHUB_TOKEN": "ghp_BBB222"})
    for servers in ({"github": github, "issues": issues}, {"issues": issues, "github": github}):
        assert variables(servers) == {
            "github": {"args[1]": "GITHUB_TOKEN_2"},
            "issues": {"GITHUB_TOKEN": "GITHUB_TOKEN"},
        }
    # What init starts the servers with: Claude Code's references filled in, nothing else.
    monkeypatch.setenv("PW", "from-env")
    assert expanded("p$HOME/x ${PW} ${NOPE:-dflt} ${NOPE}") == "p$HOME/x from-env dflt ${NOPE}"


def test_a_shipped_registry_that_does_not_hold_under_an_option_says_so(tmp_path: Path) -> None:
    args = ("mcp-server-duckdb", "--db-path", "/d/x.duckdb", "--keep-connection")
    tools = {"db": [{"name": "query", "inputSchema": {"type": "object"}}]}
    servers = {"db": server("db", command="uvx", args=args)}
    proposal = propose(servers, tools, {}, project=tmp_path, home=tmp_path, header="")
    [report] = proposal.reports
    assert report.shipped is None and report.unknown == ["query"]
    assert report.unsupported is not None
    assert report.unsupported.startswith("compensator's duckdb.yaml does not apply with --keep")
    assert "  # compensator's duckdb.yaml does not apply with --keep-connection:" in proposal.text


def test_secrets_become_references_and_clashing_names_get_the_server_prefix(tmp_path: Path) -> None:
    token = "ghp_0123456789abcdefABCDEF"
    servers = {
        "a": server("a", command="x", env={"TOKEN": "one-secret", "MODE": "fast"}),
        "b": server("b", command="y", env={"TOKEN": "two-secret", "MODE": "fast"}),
        "c": server("c", command="z", env={"GH": token, "DSN": "pg://me:pw@h/db", "N": "7"}),
        "kv": server(
            "kv",
            url="http://h/mcp",
            headers={"Authorization": "Bearer three-secret", "X-Org": "acme"},
        ),
    }
    names = variables(servers)
    # Only what looks secret: by its name, a token-like value, a URL with a password.
    assert names == {
        "a": {"TOKEN": "A_TOKEN"},
        "b": {"TOKEN": "B_TOKEN"},
        "c": {"GH": "GH", "DSN": "DSN"},
        "kv": {"Authorization": "KV_AUTHORIZATION"},
    }
    tools = {name: [] for name in servers}
    text = propose(servers, tools, {}, project=tmp_path, home=tmp_path, header="h").text
    assert "secret" not in text and token not in text and ":pw@" not in text
    environ = {"A_TOKEN": "1", "B_TOKEN": "2", "KV_AUTHORIZATION": "z", "GH": "g", "DSN": "d"}
    registry = parse_registry(text, tmp_path / "r.yaml", environ)
    # Other ways a secret shows, each kept out of the file.
    for key, value in (
        ("REDIS_URL", "redis://:hunter2@host"),
        ("DB_PASS", "x"),
        ("MYSQL_PWD", "x"),
        ("GITHUB_PAT", "x"),
        ("SERVER_URL", "https://h/mcp?token=abc"),
        ("DSN", "https://key@o1.example/1"),
        ("B64", "aGVsbG8gd29ybGQhIQ=="),
    ):
        assert secret(key, value), (key, value)
    for key, value in (("DATA_DIR", "/home/u1/data2/x"), ("URL", "http://localhost:3/mcp")):
        assert not secret(key, value), (key, value)
    # The rest is written as it is: nothing to export for a mode or a number.
    assert registry.servers["a"].env == {"TOKEN": "1", "MODE": "fast"}
    assert registry.servers["c"].env == {"GH": "g", "DSN": "d", "N": "7"}
    assert registry.servers["kv"].headers == {"Authorization": "z", "X-Org": "acme"}


def test_the_data_of_a_known_server_moves_to_the_workdir_under_pytest(tmp_path: Path) -> None:
    sqlite = server("db", command="uvx", args=("mcp-server-sqlite", "--db-path", "/data/x.db"))
    files = server(
        "files", command="npx", args=("-y", "@modelcontextprotocol/server-filesystem", "/d", "e")
    )
    text = propose(
        {"db": sqlite, "files": files}, {}, {}, project=tmp_path, home=tmp_path, header=""
    ).text
    yours = parse_registry(text, tmp_path / "r.yaml", {}).servers
    assert yours["db"].args == ("mcp-server-sqlite", "--db-path", "/data/x.db")
    assert yours["files"].args[2:] == ("/d", "e")
    tests = parse_registry(text, tmp_path / "r.yaml", {"COMPENSATOR_WORKDIR": "/w"}).servers
    assert tests["db"].args == ("mcp-server-sqlite", "--db-path", "/w/x.db")
    assert tests["files"].args[2:] == ("/w", "/w")
    assert "- tool: db__read_query" in text and "- tool: files__directory_tree" in text


def test_without_builtin_no_shipped_policy_or_probe_is_written_but_data_still_moves(
    tmp_path: Path,
) -> None:
    sqlite = server("db", command="uvx", args=("mcp-server-sqlite", "--db-path", "/data/x.db"))
    listed = {
        "db": [
            {"name": "read_query", "inputSchema": {"type": "object"}},
            {"name": "create_table", "inputSchema": {"type": "object"}},
        ]
    }
    shipped = propose({"db": sqlite}, listed, {}, project=tmp_path, home=tmp_path, header="")
    bare = propose(
        {"db": sqlite}, listed, {}, project=tmp_path, home=tmp_path, header="", builtin=False
    )
    assert "\nstate:" in shipped.text
    assert shipped.reports[0].shipped is not None
    assert "\nstate:" not in bare.text and bare.reports[0].shipped is None
    assert sorted(bare.reports[0].unknown) == ["create_table", "read_query"]
    tests = parse_registry(bare.text, tmp_path / "r.yaml", {"COMPENSATOR_WORKDIR": "/w"})
    assert tests.servers["db"].args == ("mcp-server-sqlite", "--db-path", "/w/x.db")


def test_data_paths_in_env_and_options_move_to_the_workdir_under_pytest(tmp_path: Path) -> None:
    memory = server(
        "m",
        command="npx",
        args=("-y", "@modelcontextprotocol/server-memory"),
        env={"MEMORY_FILE_PATH": "/home/u/graph.jsonl", "API_TOKEN": "tok-secret"},
    )
    default = server("d", command="npx", args=("-y", "@modelcontextprotocol/server-memory"))
    other = server(
        "o",
        command="uvx",
        args=("some-server", "--data-dir", "/srv/data", "--db=/srv/x.db", "--mode", "fast"),
        env={"STORE_PATH": "/var/lib/s", "LOG_LEVEL": "debug", "DB_URL": "pg://h/db"},
    )
    servers = {"m": memory, "d": default, "o": other}
    text = propose(servers, {}, {}, project=tmp_path, home=tmp_path, header="").text
    assert "tok-secret" not in text
    # data paths are written out, so nothing needs exporting for them
    assert variables(servers) == {"m": {"API_TOKEN": "API_TOKEN"}, "d": {}, "o": {}}
    environ = {"API_TOKEN": "t"}
    yours = parse_registry(text, tmp_path / "r.yaml", environ).servers
    assert yours["m"].env == {"MEMORY_FILE_PATH": "/home/u/graph.jsonl", "API_TOKEN": "t"}
    # unset, the memory server's own default file: a relative path is taken from its code
    assert yours["d"].env == {"MEMORY_FILE_PATH": "./memory.jsonl"}
    assert yours["o"].args[2:5] == ("/srv/data", "--db=/srv/x.db", "--mode")
    assert yours["o"].env["STORE_PATH"] == "/var/lib/s"
    tests = parse_registry(
        text, tmp_path / "r.yaml", {**environ, "COMPENSATOR_WORKDIR": "/w"}
    ).servers
    assert tests["m"].env["MEMORY_FILE_PATH"] == "/w/graph.jsonl"
    assert tests["d"].env == {"MEMORY_FILE_PATH": "/w/memory.jsonl"}
    assert tests["o"].args[1:] == ("--data-dir", "/w", "--db=/w/x.db", "--mode", "fast")
    assert tests["o"].env == {"STORE_PATH": "/w", "LOG_LEVEL": "debug", "DB_URL": "pg://h/db"}


def test_client_references_are_translated_or_kept_literally(tmp_path: Path) -> None:
    vscode = server(
        "v",
        client="vscode",
        command="${userHome}/bin/x",
        args=("${workspaceFolder}/a", "${env:DATA}", "${input:token}", "$HOME"),
    )
    claude = server("c", command="x", args=("${DATA:-/d}",))
    text = propose(
        {"v": vscode, "c": claude}, {}, {}, project=Path("/proj"), home=Path("/h"), header=""
    ).text
    registry = parse_registry(text, tmp_path / "r.yaml", {"DATA": "/data"})
    assert registry.servers["v"].command == "/h/bin/x"
    assert registry.servers["v"].args == ("/proj/a", "/data", "${input:token}", "$HOME")
    assert registry.servers["c"].args == ("/data",)


def test_tools_read_when_annotated_else_left_unknown_and_failures_commented(tmp_path: Path) -> None:
    tools = {
        "a": [
            {"name": "look", "annotations": {"readOnlyHint": True}},
            {"name": "change", "annotations": {"readOnlyHint": False}},
            {"name": "plain"},
        ]
    }
    servers = {"a": server("a", command="x"), "down": server("down", command="y")}
    made = propose(
        servers, tools, {"down": "no such file"}, project=tmp_path, home=tmp_path, header=""
    )
    registry = parse_registry(made.text, tmp_path / "r.yaml", {})
    assert set(registry.servers) == {"a"}
    # The one server that started keeps its tools' own names (prefix: "").
    assert registry.servers["a"].prefix == ""
    assert {name: p.classification.value for name, p in registry.tools.items()} == {"look": "read"}
    assert "# change:" in made.text and "# plain:" in made.text
    assert "# down: failed to start, so it is left out: no such file" in made.text
    (report, failed) = sorted(made.reports, key=lambda r: r.name)
    assert (report.read, report.unknown, failed.failure) == (
        ["look"],
        ["change", "plain"],
        "no such file",
    )


def test_one_server_whose_names_clash_with_nothing_keeps_them(tmp_path: Path) -> None:
    # a and b share a name; d has a meta tool's name; e one that starts with `c__`: only c's
    # tools can keep their own names, and its entries are written by those names.
    tools = {
        "a": [{"name": "same"}],
        "b": [{"name": "same"}, {"name": "x"}],
        "d": [{"name": "undo_to"}],
        "e": [{"name": "c__y"}],
        "c": [{"name": "y", "annotations": {"readOnlyHint": True}}, {"name": "z"}],
    }
    servers = {name: server(name, command="x") for name in tools}
    text = propose(servers, tools, {}, project=tmp_path, home=tmp_path, header="").text
    lines = text.splitlines()
    unprefixed = [lines[i - 2].strip() for i, line in enumerate(lines) if "prefix:" in line]
    assert unprefixed == ["c:"]
    assert "  y: {classification: read}   # annotated readOnlyHint: true" in lines
    assert "  # z:   # unknown until classified: journaled, and undo refuses it" in lines
    assert "  # b__x:" in text
    assert "  # e__c__y:" in text


def test_a_lone_server_keeps_its_names_and_a_failed_one_is_never_chosen(tmp_path: Path) -> None:
    tools = {"only": [{"name": "t"}]}
    servers = {name: server(name, command="x") for name in ("broken", "only")}
    text = propose(servers, tools, {"broken": "exit 1"}, project=tmp_path, home=tmp_path, header="")
    assert text.text.count('prefix: ""') == 1
    assert "  # t:   # unknown until classified" in text.text
    assert "#   inverse_tool: ...   #" in text.text


# --- wire and unwire on every shape ----------------------------------------------------

REGISTRY = "servers:\n  mine:\n    command: x\n  other:\n    command: y\n"
ENTRY = {"command": "node", "args": ["server.js"], "env": {"TOKEN": "abc-secret"}}
SHAPES = {
    "claude-code project": (".mcp.json", lambda s: {"mcpServers": s, "keep": [1, 2]}),
    "claude.json user": ("~/.claude.json", lambda s: {"numStartups": 3, "mcpServers": s}),
    "claude.json project": (
        "~/.claude.json",
        lambda s: {"projects": {"@PROJECT@": {"mcpServers": s, "history": ["x"]}}},
    ),
    "claude desktop linux": (
        "~/.config/Claude/claude_desktop_config.json",
        lambda s: {"mcpServers": s, "theme": "dark"},
    ),
    "claude desktop macos": (
        "~/Library/Application Support/Claude/claude_desktop_config.json",
        lambda s: {"mcpServers": s},
    ),
    "cursor project": (".cursor/mcp.json", lambda s: {"mcpServers": s}),
    "cursor user": ("~/.cursor/mcp.json", lambda s: {"mcpServers": s}),
}


def place(tmp_path: Path, where: str, data: Any) -> tuple[Path, Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(exist_ok=True)
    project.mkdir(exist_ok=True)
    path = home / where[2:] if where.startswith("~/") else project / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4).replace("@PROJECT@", str(project.resolve())) + "\n")
    (project / "r.yaml").write_text(REGISTRY)
    return home, project, path


def cli(project: Path, *args: str) -> int:
    return main([*args, "--project", str(project)])


def round_trip(
    home: Path, project: Path, path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[str, str]:
    """wire --dry-run, wire --yes, unwire --yes; returns the wired text and wire's output."""
    original = path.read_bytes()
    assert cli(project, "wire", "--config", "r.yaml", "--dry-run", *extra) == 0
    dry = capsys.readouterr().out
    assert (
        path.read_bytes() == original
        and f"--- {path} (now)" in dry
        and "+" in dry
        and '"compensator": {' in dry
    )
    assert cli(project, "wire", "--config", "r.yaml", "--yes", *extra) == 0
    wired = path.read_bytes().decode()
    backup = path.with_name(path.name + ".compensator-backup")
    assert backup.read_bytes() == original
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # it may hold tokens
    assert cli(project, "wire", "--config", "r.yaml", "--yes", *extra) == 1  # once only
    assert "wired already" in capsys.readouterr().err
    assert cli(project, "unwire", "--yes", *extra) == 0
    assert path.read_bytes() == original and not backup.exists()
    return wired, capsys.readouterr().out


@pytest.mark.parametrize("shape", SHAPES)
def test_wire_then_unwire_leaves_each_shape_byte_identical(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where, wrap = SHAPES[shape]
    servers = {"mine": ENTRY, "theirs": {"command": "z"}}
    home, project, path = place(tmp_path, where, wrap(servers))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    before = json.loads(path.read_text())
    # The journal, named as this shell finds it: a client passes few variables on.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    db = str(default_journal_path(project / "r.yaml"))
    assert db.startswith(str(tmp_path / "state"))
    wired, _ = round_trip(home, project, path, capsys)
    assert Path(db).parent.is_dir()  # made by wire: serve refuses a --db in a missing folder
    after = json.loads(wired)
    proxy = {
        "command": main.__globals__["sys"].executable,
        "args": ["-m", "compensator", "serve", "--config", str(project / "r.yaml"), "--db", db],
        "env": {"TOKEN": "abc-secret"},
    }
    if shape.startswith("claude") and "desktop" not in shape:
        proxy = {"type": "stdio", **proxy}
    expected = wrap({"theirs": {"command": "z"}, "compensator": proxy})
    assert after == json.loads(json.dumps(expected).replace("@PROJECT@", str(project.resolve())))
    assert set(before) == set(after)  # the other keys are still there


def test_vscode_jsonc_keeps_its_comments_and_from_file_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '{\n\t// my servers\n\t"servers": {\n\t\t"mine": {"type": "stdio", '
        '"command": "x",}, /* keep */\n\t},\n\t"inputs": [],\n}\n'
    )
    home, project, _ = place(tmp_path, ".cursor/unused.json", {})
    path = project / ".vscode" / "mcp.json"
    path.parent.mkdir()
    path.write_text(text)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    wired, _ = round_trip(home, project, path, capsys)
    assert wired.startswith(
        '{\n\t// my servers\n\t"servers": {\n\t\t"compensator": {\n\t\t\t"type"'
    )
    assert wired.endswith('\n\t},\n\t"inputs": [],\n}\n')
    assert jsonc.loads(wired)["servers"]["compensator"]["type"] == "stdio"
    elsewhere = tmp_path / "copy.json"  # with Windows line ends, which it keeps
    elsewhere.write_bytes(text.replace('"servers"', '"mcpServers"').replace("\n", "\r\n").encode())
    wired, _ = round_trip(home, project, elsewhere, capsys, "--from", str(elsewhere))
    assert wired.count("\r\n") == wired.count("\n")


def test_unwire_keeps_what_the_client_changed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, project, path = place(
        tmp_path, "~/.claude.json", {"numStartups": 3, "mcpServers": {"mine": ENTRY}}
    )
    monkeypatch.setenv("HOME", str(home))
    assert cli(project, "wire", "--config", str(project / "r.yaml"), "--yes") == 0
    path.write_text(path.read_text().replace('"numStartups": 3', '"numStartups": 4'))
    assert cli(project, "unwire", "--yes") == 0
    assert json.loads(path.read_text()) == {"numStartups": 4, "mcpServers": {"mine": ENTRY}}


def test_wire_asks_and_refuses_what_it_cannot_do_safely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, project, path = place(tmp_path, ".mcp.json", {"mcpServers": {"mine": ENTRY}})
    monkeypatch.setenv("HOME", str(home))
    path.write_text(json.dumps({"mcpServers": {"mine": ENTRY}}))  # one line: no indentation
    original = path.read_bytes()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    assert cli(project, "wire", "--config", str(project / "r.yaml")) == 2
    assert "--yes" in capsys.readouterr().err and path.read_bytes() == original
    assert cli(project, "wire", "--config", str(project / "r.yaml"), "--yes") == 0
    assert '{"mcpServers": {\n  "compensator": {\n    "type": "stdio",' in path.read_text()
    assert cli(project, "unwire", "--yes") == 0 and path.read_bytes() == original
    path.write_text(json.dumps({"mcpServers": {"mine": ENTRY, "compensator": {"command": "c"}}}))
    assert cli(project, "wire", "--config", str(project / "r.yaml"), "--yes") == 1
    assert "already has a server named 'compensator'" in capsys.readouterr().err
    path.write_text(json.dumps({"mcpServers": {"unrelated": ENTRY}}))
    assert cli(project, "wire", "--config", str(project / "r.yaml"), "--yes") == 1
    assert "nothing to wire" in capsys.readouterr().err
    assert cli(project, "unwire", "--yes") == 1
    assert "nothing to unwire" in capsys.readouterr().err


def test_unwire_elsewhere_keeps_another_projects_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # ~/.claude.json holds every project's lists: unwire run from project B, which was never
    # wired, must neither write it nor drop the backup that is A's only way back.
    data = {
        "mcpServers": {"theirs": {"command": "z"}},  # the user's list: every project reads it
        "projects": {"@PROJECT@": {"mcpServers": {"mine": ENTRY}}},
    }
    home, project, path = place(tmp_path, "~/.claude.json", data)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    original = path.read_bytes()
    assert cli(project, "wire", "--config", "r.yaml", "--yes") == 0
    wired_bytes, backup = path.read_bytes(), backup_of(path)
    other = tmp_path / "other"
    other.mkdir()
    assert cli(other, "unwire", "--yes") == 1
    assert "nothing to unwire" in capsys.readouterr().err
    assert path.read_bytes() == wired_bytes and backup.read_bytes() == original
    assert cli(project, "unwire", "--yes") == 0
    assert path.read_bytes() == original and not backup.exists()


def test_a_failed_unwire_write_keeps_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home, project, path = place(tmp_path, ".mcp.json", {"mcpServers": {"mine": ENTRY}})
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    original = path.read_bytes()
    assert cli(project, "wire", "--config", "r.yaml", "--yes") == 0
    wired_bytes = path.read_bytes()

    def full_disk(target: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wire_module, "replace_atomically", full_disk)
    assert cli(project, "unwire", "--yes") == 1
    assert "No space left on device" in capsys.readouterr().err
    assert path.read_bytes() == wired_bytes and backup_of(path).read_bytes() == original


def test_tool_names_yaml_would_misread_are_quoted(tmp_path: Path) -> None:
    names = ["on", "null", "yes", "a: b", "plain"]
    tools = {"one": [{"name": n, "annotations": {"readOnlyHint": True}} for n in names]}
    servers = {"one": server("one", command="x")}
    made = propose(servers, tools, {}, project=tmp_path, home=tmp_path, header="")
    registry = parse_registry(made.text, tmp_path / "r.yaml", {})
    assert sorted(registry.tools) == sorted(names)
    assert '  "on": {classification: read}' in made.text and "  plain: {" in made.text


def test_a_literal_value_reads_back_as_written(tmp_path: Path) -> None:
    # A `$` that starts no reference is doubled, so the loader gives back the value itself.
    values = {"A": "x${y", "B": "a$$b", "C": "cost $5", "D": "caf\u00e9"}
    servers = {"s": server("s", command="x", env=values)}
    text = propose(servers, {}, {}, project=tmp_path, home=tmp_path, header="").text
    assert "caf\u00e9" in text  # as the character, not a \u escape
    assert parse_registry(text, tmp_path / "r.yaml", {}).servers["s"].env == values
