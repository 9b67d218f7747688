"""The registry `compensator init` proposes for servers a user already has: the shipped
policies for servers this project knows, `read` for tools annotated read-only, and a
commented skeleton for every other tool, which stays `unknown` until a person classifies it.

It never guesses an inverse. It works on plain data (tools as their wire JSON) and writes
YAML text; starting the servers is the command line's job.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..names import META_TOOLS, exposed_name, split_name
from ..scratch import has_url
from .sources import ClientServer

__all__ = [
    "SHIPPED",
    "Proposal",
    "ServerReport",
    "data_path",
    "matching_registry",
    "prefixed",
    "propose",
    "secret_values",
    "variables",
]

SHIPPED = {
    "duckdb.yaml": "mcp-server-duckdb",
    "filesystem.yaml": "@modelcontextprotocol/server-filesystem",
    "memory.yaml": "@modelcontextprotocol/server-memory",
    "redis.yaml": "@modelcontextprotocol/server-redis",
    "sqlite.yaml": "mcp-server-sqlite",
}
"""The registries in compensator/registries/ and the package each one is for."""

_VERSION = re.compile(r"(?<=.)@[^/@]*$")  # `pkg@1.2.3` -> `pkg`, `@scope/pkg@latest` too


def matching_registry(server: ClientServer) -> str | None:
    """The shipped registry for `server`, matched by the package or command it runs
    (`npx -y @modelcontextprotocol/server-filesystem`, `uvx mcp-server-sqlite`, a path to
    `.../node_modules/<package>/...` or `.../bin/<command>`), or None."""
    file = _package_registry(server)
    return None if file is None or _unsupported(file, server) else file


def _package_registry(server: ClientServer) -> str | None:
    words = [server.command or "", *server.args]
    for file, package in SHIPPED.items():
        for word in words:
            bare = _VERSION.sub("", word)
            if bare == package or Path(bare).name == package or f"/{package}/" in bare:
                return file
    return None


UNSUPPORTED = {
    "duckdb.yaml": {
        "--keep-connection": "its undo runs in a transaction of its own, and a refused undo "
        "would leave a kept connection's transaction aborted: every later call would fail",
    },
}
"""Options of a server that its shipped registry's policies do not hold under, and why."""


def _unsupported(file: str, server: ClientServer) -> str | None:
    """Why `file` does not apply to `server` as the client starts it, or None."""
    for option, reason in UNSUPPORTED.get(file, {}).items():
        if any(arg == option or arg.startswith(option + "=") for arg in server.args):
            return f"compensator's {file} does not apply with {option}: {reason}"
    return None


def _shipped(file: str) -> dict[str, Any]:
    text = resources.files("compensator").joinpath("registries").joinpath(file).read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def variables(servers: Mapping[str, ClientServer]) -> dict[str, dict[str, str]]:
    """For each server, the keys of `secret_values` whose values look secret (`secret`) ->
    the `${VAR}` name the registry uses: an env key itself unless another server sets it to
    something else, then SERVER_NAME; a header or a command-line argument SERVER_NAME (an
    argument's name is its option's, its header's, or URL), with _2, _3... where that name
    is taken. Every other value is written out as it is, a data path redirected
    (`data_path`): a mode or a log level made a required variable only stopped `check` until
    someone exported it."""
    values: dict[str, set[str]] = {}
    for server in servers.values():
        for key, value in server.env.items():
            values.setdefault(key, set()).add(value)
    names: dict[str, dict[str, str]] = {}
    for registry_name, server in servers.items():
        names[registry_name] = {
            key: key if len(values[key]) == 1 and _plain(key) else prefixed(registry_name, key)
            for key, value in server.env.items()
            if data_path(key, value) is None and secret(key, value)
        }
        names[registry_name].update(
            {
                key: prefixed(registry_name, key)
                for key, v in server.headers.items()
                if secret(key, v)
            }
        )
    # Every server's env and header names first: an argument's may not take one of them.
    taken = {variable for found in names.values() for variable in found.values()}
    for registry_name, server in servers.items():
        for key, (name, _, _) in _secret_args(server).items():
            variable = base = prefixed(registry_name, name)
            count = 1
            while variable in taken:  # two URLs, or an env key of that name
                count += 1
                variable = f"{base}_{count}"
            taken.add(variable)
            names[registry_name][key] = variable
    return names


def secret_values(server: ClientServer) -> dict[str, str]:
    """A server's values that `variables` may make `${VAR}`s of, by key: its env and headers,
    and the secret part of each command-line argument that carries one as `args[N]`."""
    values = {**server.env, **server.headers}
    values.update({key: value for key, (_, value, _) in _secret_args(server).items()})
    return values


def _secret_args(server: ClientServer) -> dict[str, tuple[str, str, str]]:
    """The command-line arguments that carry a secret, as `args[N]` -> (the name of its
    variable, the secret, what comes before it in the argument):
    - a URL with credentials in it (redis://:pw@host), whole;
    - the value of an option named for a secret (`--password=pw`, or the argument after
      `--api-key`);
    - a secret header after --header or -H (`Authorization: Bearer ...`, as mcp-remote takes
      it), and a secret `NAME=value` (`docker run -e GITHUB_TOKEN=...`), as `secret` decides
      for env and header values.
    A value holding a reference of the client's own (`${env:TOKEN}`) is no secret: it is
    translated as every other reference is. A bare token among the arguments is not found."""
    found = {}
    previous = ""
    for at, arg in enumerate(server.args):
        flag, equals, value = arg.partition("=")
        header = re.fullmatch(r"([A-Za-z][\w-]*):\s*(\S.*)", arg)
        assignment = re.fullmatch(r"([A-Za-z_]\w*)=(.+)", arg)
        if "${" in arg:
            pass
        elif equals and value and _secret_option(flag):
            found[f"args[{at}]"] = (_upper(flag.lstrip("-")), value, flag + "=")
        elif _secret_option(previous) and not arg.startswith("-"):
            found[f"args[{at}]"] = (_upper(previous.lstrip("-")), arg, "")
        elif previous in ("--header", "-H") and header and secret(header[1], header[2]):
            found[f"args[{at}]"] = (_upper(header[1]), header[2], arg[: header.start(2)])
        elif assignment and secret(assignment[1], assignment[2]):
            found[f"args[{at}]"] = (_upper(assignment[1]), assignment[2], assignment[1] + "=")
        elif _CREDENTIALS_IN_URL.search(arg):
            found[f"args[{at}]"] = ("URL", arg, "")
        previous = arg
    return found


# The last word of an option's name that says its value is a secret (--password, --api-key,
# --db-password, --auth-token), unlike --author-name, --passthrough, --key-prefix, --no-auth.
_SECRET_OPTION_WORDS = frozenset(
    ["password", "passwd", "pass", "pwd", "token", "secret", "key", "apikey", "auth", "pat"]
)


def _secret_option(arg: str) -> bool:
    """Whether `arg` is an option (--x, no `=value`) whose name says it holds a secret."""
    words = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", arg)
    return (
        arg.startswith("-")
        and "=" not in arg
        and bool(words)
        and words[0].lower() != "no"
        and words[-1].lower() in _SECRET_OPTION_WORDS
    )


# Names that hold secrets, anywhere in the name (APIKEY, PGPASS, MYSQL_PWD)...
_SECRET_PARTS = (
    "KEY", "TOKEN", "SECRET", "PASS", "PWD", "AUTH", "CREDENTIAL", "COOKIE", "PRIVATE",
    "SESSION", "DSN",
)  # fmt: skip
# ... or as a word of it (GITHUB_PAT; not PATH).
_SECRET_WORDS_IN_NAME = frozenset(["pat"])
# A value that looks like a token: one long run of letters and digits (and _-.=+), with both.
# A URL that carries credentials (postgres://user:pw@host/db, redis://:pw@host, a Sentry
# DSN's key@host) or a query string (https://h/mcp?token=...).
_CREDENTIALS_IN_URL = re.compile(r"://[^/\s]*@|://[^\s]*\?")
_BASE64 = re.compile(r"[A-Za-z0-9+][A-Za-z0-9+/]{14,}={0,2}")
_TOKEN = re.compile(r"(?:bearer\s+|basic\s+)?([A-Za-z0-9_\-.=+]{16,})", re.IGNORECASE)


def secret(key: str, value: str) -> bool:
    """Whether an env or header value is kept out of the registry as a `${VAR}`: its name
    says secret, it is a URL with credentials or a query string in it, or the value looks like
    a token (`sk-...`, `ghp_...`, a long random run of letters and digits, base64)."""
    if any(part in key.upper() for part in _SECRET_PARTS):
        return True
    if _name_words(key) & _SECRET_WORDS_IN_NAME or _CREDENTIALS_IN_URL.search(value):
        return True
    run = value.strip()
    if _BASE64.fullmatch(run) and re.search(r"[+/=]", run) and re.search(r"[0-9]", run):
        return True
    token = _TOKEN.fullmatch(value.strip())
    if token is None:
        return False
    run = token.group(1)
    return any(c.isdigit() for c in run) and any(c.isalpha() for c in run)


def prefixed(server: str, key: str) -> str:
    """The `${VAR}` name of a server's env or header key when the key alone will not do:
    SERVER_KEY."""
    return f"{_upper(server)}_{_upper(key)}"


def _upper(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def _plain(key: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None


@dataclass(kw_only=True)
class ServerReport:
    """What the proposal did with one server's tools."""

    name: str
    shipped: str | None = None
    read: list[str] = field(default_factory=list)
    undoable: list[str] = field(default_factory=list)
    irreversible: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    failure: str | None = None
    unsupported: str | None = None
    """Why the shipped registry for this server's package does not apply (an option it was
    started with), or None."""


@dataclass(kw_only=True)
class Proposal:
    text: str
    reports: list[ServerReport]


def propose(
    servers: Mapping[str, ClientServer],
    tools: Mapping[str, Sequence[Mapping[str, Any]]],
    failures: Mapping[str, str],
    *,
    project: Path,
    home: Path,
    header: str,
    builtin: bool = True,
    names: Mapping[str, Mapping[str, str]] | None = None,
) -> Proposal:
    """The registry text for `servers` (registry name -> client entry), given each started
    server's tools (wire JSON) and why the others failed to start. Without `builtin`, the
    shipped registries' policies and probes are left out (their data paths still apply).
    `names`: the `${VAR}` names (`variables`) when `servers` are a part of the whole set."""
    if names is None:
        names = variables(servers)
    lines = [*(f"# {line}".rstrip() for line in header.splitlines()), "", "servers:"]
    reports = []
    unprefixed = _unprefixed({n: t for n, t in tools.items() if n not in failures})
    prefixes = {name: "" if name == unprefixed else name for name in servers}
    for name, server in servers.items():
        entry = _server_lines(server, names[name], project, home)
        if name in failures:
            reason = " ".join(failures[name].split())
            lines += [f"  # {name}: failed to start, so it is left out: {reason}"]
            lines += [f"  # {line}" for line in [f"{_key(name)}:", *entry]]
            reports.append(ServerReport(name=name, failure=reason))
            continue
        lines += [f"  {_key(name)}:", *(f"  {line}" for line in entry)]
        if name == unprefixed:
            lines.append('    prefix: ""   # its tools keep their own names: none clashes')
    lines += _state(servers, failures, prefixes) if builtin else []
    lines += ["", "tools:"]
    for name, server in servers.items():
        if name not in failures:
            package = _package_registry(server) if builtin else None
            why = _unsupported(package, server) if package else None
            shipped = package if why is None else None  # what matching_registry says
            report, block = _tools(name, prefixes[name], shipped, tools.get(name, ()))
            if why is not None:
                block[1:1] = [f"  # {line}" for line in textwrap.wrap(why + ".", 92)]
                report.unsupported = why
            reports.append(report)
            lines += block
    return Proposal(text="\n".join(lines) + "\n", reports=reports)


def _state(
    servers: Mapping[str, ClientServer], failures: Mapping[str, str], prefixes: Mapping[str, str]
) -> list[str]:
    """The shipped registries' `state:` probes for the servers that have one: the pytest
    plugin compares what they return before and after each undo."""
    probes: list[Any] = []
    for name, server in servers.items():
        shipped = matching_registry(server)
        if shipped and name not in failures:
            probes += _renamed(_shipped(shipped), prefixes[name]).get("state") or []
    if not probes:
        return []
    dumped = yaml.safe_dump(probes, sort_keys=False, width=96, default_flow_style=None)
    intro = "# What undo must restore, from the shipped registries (see their headers)."
    return ["", intro, "state:", *(f"  {line}" for line in dumped.splitlines())]


def _server_lines(
    server: ClientServer, names: Mapping[str, str], project: Path, home: Path
) -> list[str]:
    """The YAML of one server entry (indented by two), values as JSON scalars."""

    def text(value: str) -> str:
        return json.dumps(_references(value, server.source.client, project, home))

    def value(key: str, raw: str) -> str:
        """A secret as its `${VAR}`, a data path redirected, anything else as it is (a `$`
        that starts no reference doubled, so that the loader reads it back as written)."""
        if key in names:
            return f'"${{{names[key]}}}"'
        translated = _LONE_DOLLAR.sub("$$", _references(raw, server.source.client, project, home))
        return json.dumps(data_path(key, translated) or translated, ensure_ascii=False)

    def mapping(values: Mapping[str, str]) -> str:
        return "{" + ", ".join(f"{json.dumps(k)}: {value(k, v)}" for k, v in values.items()) + "}"

    if server.url is not None:
        out = [f"  url: {text(server.url)}"]
        return out + ([f"  headers: {mapping(server.headers)}"] if server.headers else [])
    shipped = matching_registry(server)
    command = _references(server.command or "", server.source.client, project, home)
    args = [_references(a, server.source.client, project, home) for a in server.args]
    for key, (_, _, before) in _secret_args(server).items():
        args[int(key[len("args[") : -1])] = f"{before}${{{names[key]}}}"
    args = _workdir(shipped, args)
    service = SCRATCH.get(shipped or "") or _service(server)
    if service is not None:
        command, args = _through_scratch(service, command, args)
    out = [f"  command: {json.dumps(command)}"]
    if args:
        out.append(f"  args: [{', '.join(json.dumps(arg) for arg in args)}]")
    values = dict(server.env)
    if shipped == "memory.yaml" and "MEMORY_FILE_PATH" not in values:
        # Unset, the memory server keeps its graph beside its own code; a relative path is
        # taken from there too, so `.` in the proxy a client starts is that same file.
        values["MEMORY_FILE_PATH"] = "./memory.jsonl"
    if values:
        out.append(f"  env: {mapping(values)}")
    if server.cwd:
        out.append(f"  cwd: {text(server.cwd)}")
    return out


SCRATCH = {"redis.yaml": "redis"}
"""The shipped registries for servers whose data is behind a service (a URL, not a path):
test runs give them a scratch one (compensator/scratch.py)."""


def _service(server: ClientServer) -> str | None:
    """The service any other server keeps its data in, when its command line or env names one
    (`--url redis://localhost:6379/0`, `REDIS_URL=redis://h`, `REDIS_HOST=h`): it gets a
    scratch one too, or infer and the plugin would write into yours."""
    return "redis" if has_url(server.args, server.env) else None


def _through_scratch(service: str, command: str, args: list[str]) -> tuple[str, list[str]]:
    """The server started through `python -m compensator.scratch`: as it is for the proxy a
    client starts (on your service), on a new scratch service when COMPENSATOR_WORKDIR is
    set (the pytest plugin, `compensator infer`)."""
    wrapper = ["-m", "compensator.scratch", service, "${COMPENSATOR_WORKDIR:-}", "--"]
    return "${COMPENSATOR_PYTHON}", [*wrapper, command, *args]


def _workdir(shipped: str | None, args: list[str]) -> list[str]:
    """The data a server works on, redirected (`_redirected`): the filesystem server's allowed
    directories (the arguments after its package), and the value of any option named for
    data (`--db-path x.db`, `--data-dir=/d`)."""
    out = list(args)
    if shipped == "filesystem.yaml":
        package = SHIPPED[shipped]
        start = next((i + 1 for i, a in enumerate(args) if package in a), len(args))
        out[start:] = [
            a if a.startswith("-") else _redirected(a, folder=True) for a in args[start:]
        ]
    else:
        for at, arg in enumerate(args):
            flag, equals, value = arg.partition("=")
            if equals and _data_flag(flag) and not _number(value):
                out[at] = f"{flag}={_redirected(value)}"
            elif at and _data_flag(args[at - 1]) and not arg.startswith("-") and not _number(arg):
                out[at] = _redirected(arg)
    return out


# Words of an option or environment variable that names where a server keeps its data.
_DATA_WORDS = frozenset(
    ["db", "database", "path", "file", "dir", "directory", "data", "store", "storage", "root"]
)
# ... and of one that holds a secret, which stays a ${VAR} whatever else its name says.
_SECRET_WORDS = frozenset(["key", "token", "secret", "password", "auth", "credential"])


def _name_words(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)}


def _number(value: str) -> bool:
    """A value no path: redis-mcp-server's `--db 1` names a database by its number."""
    return value.isdigit()


def _data_flag(arg: str) -> bool:
    found = _name_words(arg)
    return arg.startswith("-") and bool(found & _DATA_WORDS) and not found & _SECRET_WORDS


def _redirected(path: str, *, folder: bool = False) -> str:
    """A data path as `${COMPENSATOR_WORKDIR:-path}`: the proxy a client starts uses yours,
    while `pytest --compensator-config` and `compensator infer` (which set COMPENSATOR_WORKDIR
    to a new temporary folder for each example) never do. A file keeps its name in the
    folder (`${COMPENSATOR_WORKDIR:-/data}/x.db`); a path with `$` or `}` in it cannot be a
    default and is left alone."""
    if "$" in path or "}" in path:
        return path
    parent, _, file = path.rstrip("/").rpartition("/")
    if not folder and "." in file.strip("."):
        return f"${{COMPENSATOR_WORKDIR:-{parent or '.'}}}/{file}"
    return f"${{COMPENSATOR_WORKDIR:-{path}}}"


def data_path(key: str, value: str) -> str | None:
    """An `env:` value naming where a server keeps its data, redirected (`_redirected`), or
    None for any other value (a secret, a mode, a URL), which stays a `${VAR}`."""
    found = _name_words(key)
    if not found & _DATA_WORDS or found & _SECRET_WORDS or "://" in value:
        return None
    if "/" not in value and "." not in value.strip("."):
        return None
    redirected = _redirected(value)
    return redirected if redirected != value else None


# A `$` that does not start a `${NAME}` or `${NAME:-default}` reference.
_LONE_DOLLAR = re.compile(r"\$(?!\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\})")
_CLIENT_REFERENCE = re.compile(r"\$\{([^}]*)\}")


def _references(value: str, client: str, project: Path, home: Path) -> str:
    """A client's own `${...}` in a command, argument or URL, as the registry reads it.
    Claude Code expands `${VAR}` and `${VAR:-default}` from the environment, as the registry
    does; VS Code and Cursor have `${workspaceFolder}`, `${userHome}` and `${env:VAR}`.
    Anything else (`${input:...}`) is kept literally, as `$${...}`."""
    value = value.replace("$$", "$$$$") if client != "claude-code" else value

    def replace(match: re.Match[str]) -> str:
        body = match.group(1)
        if body == "workspaceFolder":
            return str(project).replace("$", "$$")
        if body == "userHome":
            return str(home).replace("$", "$$")
        if body.startswith("env:"):
            return f"${{{body[4:]}}}"
        if client == "claude-code" and re.fullmatch(r"[A-Za-z_]\w*(:-.*)?", body, re.S):
            return match.group(0)
        return f"$${{{body}}}"

    return _CLIENT_REFERENCE.sub(replace, value)


def _tools(
    name: str, prefix: str, shipped: str | None, tools: Sequence[Mapping[str, Any]]
) -> tuple[ServerReport, list[str]]:
    """The `tools:` entries of server `name`, whose tools are exposed with `prefix`, with the
    policies of the `shipped` registry."""
    report = ServerReport(name=name, shipped=shipped)
    policies = _shipped_policies(shipped, prefix) if shipped else {}
    lines = [f"  # --- {name}" + (f": policies from compensator's {shipped}" if shipped else "")]
    for tool in tools:
        tool_name = exposed_name(prefix, tool["name"])
        policy = policies.get(tool_name)
        if policy is not None:
            classification = policy.get("classification")
            bucket = {"read": report.read, "irreversible": report.irreversible}
            bucket.get(classification, report.undoable).append(tool["name"])
            dumped = yaml.safe_dump(
                {tool_name: policy}, sort_keys=False, width=96, default_flow_style=None
            )
            lines += [f"  {line}" for line in dumped.splitlines()]
        elif (tool.get("annotations") or {}).get("readOnlyHint") is True:
            report.read.append(tool["name"])
            lines.append(
                f"  {_key(tool_name)}: {{classification: read}}   # annotated readOnlyHint: true"
            )
        else:
            report.unknown.append(tool["name"])
            lines += _skeleton(tool_name, prefix)
    return report, lines


def _skeleton(tool_name: str, prefix: str) -> list[str]:
    """A commented-out entry: the tool stays `unknown` (journaled, undo refuses it) until a
    person picks a classification. See docs/writing-a-registry.md."""
    other = exposed_name(prefix, "...")
    return [
        f"  # {tool_name}:   # unknown until classified: journaled, and undo refuses it",
        "  #   classification: reversible | compensable | irreversible",
        f"  #   inverse_tool: {other}   # reversible: from {{args.x}} and {{result.x}}",
        f"  #   snapshot_tool: {other}  # compensable: read first, undo from {{snapshot.x}}",
    ]


def _shipped_policies(file: str, prefix: str) -> dict[str, Any]:
    """The `tools:` of a shipped registry, its tools exposed with `prefix`."""
    policies: dict[str, Any] = _renamed(_shipped(file), prefix).get("tools") or {}
    return policies


def _renamed(data: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A shipped registry with its one server's tool names (`fs__write`) exposed with
    `prefix` instead (`prefix__write`, or `write` when `prefix` is empty)."""
    (old,) = data["servers"]
    shipped = f"{old}__"

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {rename(k): rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, str) and value.startswith(shipped):
            return exposed_name(prefix, value[len(shipped) :])
        return value

    renamed: dict[str, Any] = rename(data)
    return renamed


def _unprefixed(tools: Mapping[str, Sequence[Mapping[str, Any]]]) -> str | None:
    """The first server whose tools can keep their own names (`prefix: ""`): none of them is
    another server's tool name, a meta tool's name, or starts with another server's
    `name__`. With one server, a client then sees exactly that server's tools."""
    for name, own in tools.items():
        mine = {tool["name"] for tool in own}
        others = {t["name"] for other, ts in tools.items() if other != name for t in ts}
        if mine & (others | META_TOOLS):
            continue
        if any((split_name(t) or ("",))[0] in tools for t in mine):
            continue
        return name
    return None


def _key(name: str) -> str:
    """`name` as a YAML mapping key: bare when YAML reads it back as that string, else
    quoted (a tool called `on`, `null` or `a: b` would otherwise be a boolean, a null or
    a syntax error)."""
    try:
        if yaml.safe_load(f"{name}: 0") == {name: 0}:
            return name
    except yaml.YAMLError:
        pass
    return json.dumps(name)
