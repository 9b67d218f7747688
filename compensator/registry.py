"""The YAML registry: downstream servers, state probes and per-tool undo policies."""

from __future__ import annotations

import difflib
import enum
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._yamlnodes import join_key, line_of, load_with_lines, located_error
from .errors import ExpressionError, RegistryError
from .templates import CONTEXT_NAMES, Expression, Template, compile_expression, compile_template

__all__ = [
    "META_TOOLS",
    "Classification",
    "Defaults",
    "InverseStep",
    "RedactPath",
    "Registry",
    "ResetCall",
    "ServerSpec",
    "StateProbe",
    "TestSpec",
    "ToolPolicy",
    "load_registry",
    "parse_registry",
]

META_TOOLS = frozenset(
    {"checkpoint", "list_checkpoints", "list_changes", "undo_to", "explain_blast_radius"}
)


class Classification(str, enum.Enum):
    """How a tool's effects can be undone; UNKNOWN is for tools with no registry entry."""

    READ = "read"
    REVERSIBLE = "reversible"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """How to start one downstream server."""

    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    line: int
    call_timeout: float | None = None
    """Seconds a call may take before it is abandoned (its effect then unknown); None: no limit."""
    startup_timeout: float | None = None
    """Seconds to spawn, initialize and list tools; None: the pool's (or CLI's) default."""
    expanded: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The `${NAME}` values this entry expanded, so messages can hide them again."""
    url: str | None = None
    """A streamable HTTP endpoint to connect to instead of starting `command` (then empty)."""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """HTTP headers sent with every request to `url`, `${NAME}` expanded."""
    prefix: str | None = None
    """Replaces `name` in the exposed tool names: `prefix__tool`."""

    @property
    def exposed_prefix(self) -> str:
        """What exposed tool names of this server start with (before `__`)."""
        return self.prefix or self.name


@dataclass(frozen=True, kw_only=True)
class StateProbe:
    """A read-only call whose (selected) result describes the world's state."""

    tool: str
    args: Template
    select: Expression | None
    unordered: bool
    line: int


@dataclass(frozen=True, kw_only=True)
class ResetCall:
    """A call that puts a server back to its empty state (used by the pytest plugin)."""

    tool: str
    args: Template
    line: int


@dataclass(frozen=True, kw_only=True)
class InverseStep:
    """One call of an inverse, skipped when `when` is given and falsy."""

    tool: str
    args: Template
    when: Expression | None


@dataclass(frozen=True, kw_only=True)
class TestSpec:
    """Hints for generated tests: an input JSON Schema and example arguments."""

    __test__ = False

    schema: Mapping[str, Any] | None
    examples: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, kw_only=True)
class ToolPolicy:
    """What the proxy does around calls to one downstream tool."""

    name: str
    classification: Classification
    snapshot_tool: str | None
    snapshot_args: Template | None
    inverse: tuple[InverseStep, ...]
    error_when: Expression | None
    mutating_when: Expression | None
    test: TestSpec | None
    line: int
    verify_tool: str | None = None
    """The read the drift check repeats (with `verify_args`): `verify: {tool, args}`, else
    the tool's snapshot_tool and snapshot_args; None when verify is off."""
    verify_args: Template | None = None
    idempotent: bool = False
    redact: tuple[RedactPath, ...] = ()

    @property
    def verify(self) -> bool:
        """Whether undo checks this tool's changes for drift."""
        return self.verify_tool is not None

    @property
    def verify_names_its_read(self) -> bool:
        """`verify: {tool, args}`, rather than `verify: true` repeating the snapshot read."""
        return self.verify_tool is not None and self.verify_args is not self.snapshot_args


@dataclass(frozen=True, kw_only=True)
class RedactPath:
    """A path into a call's args or result whose value is never stored, e.g. `args.password`.

    `parts` are field names, `"*"` for every item of a list, or ints for one item."""

    source: str
    root: str
    parts: tuple[str | int, ...]

    def fields(self) -> tuple[str, ...]:
        """The leading field names, up to the first list step: what a template could read."""
        leading: list[str] = [self.root]
        for part in self.parts:
            if not isinstance(part, str) or part == "*":
                break
            leading.append(part)
        return tuple(leading)


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """Registry-wide settings."""

    trust_read_only_hint: bool = False
    verify: bool = False


@dataclass(frozen=True, kw_only=True)
class Registry:
    """A loaded, validated registry file."""

    path: Path
    servers: Mapping[str, ServerSpec]
    state: tuple[StateProbe, ...]
    tools: Mapping[str, ToolPolicy]
    defaults: Defaults
    reset: tuple[ResetCall, ...] = ()

    def policy(self, tool: str) -> ToolPolicy | None:
        """The policy for `tool` (as `server__tool`), or None when it has no entry."""
        return self.tools.get(tool)


def load_registry(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> Registry:
    """Read and validate the registry at `path`; `${VAR}` come from `environ` (os.environ)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _unreadable(file, "file not found", "Check the path or create the file") from None
    except UnicodeDecodeError:
        raise _unreadable(file, "not UTF-8 text", "Save the file as UTF-8") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _unreadable(
            file, f"cannot read ({reason})", "Check the path and permissions"
        ) from None
    return parse_registry(text, file, environ)


def parse_registry(text: str, path: Path, environ: Mapping[str, str] | None = None) -> Registry:
    """Validate registry YAML `text`; `path` names it in errors and anchors relative cwd."""
    data, lines = load_with_lines(text, str(path))
    env = os.environ if environ is None else environ
    return _Parser(Path(path), lines, env).registry(data)


def _unreadable(file: Path, problem: str, fix: str) -> RegistryError:
    return RegistryError(f"{file}: registry {problem}. {fix}.", path=str(file), fix=f"{fix}.")


_TOP_KEYS = ("servers", "defaults", "state", "reset", "tools")
_RESET_KEYS = ("tool", "args")
_SERVER_KEYS = (
    "command",
    "args",
    "env",
    "cwd",
    "call_timeout",
    "startup_timeout",
    "url",
    "headers",
    "prefix",
)
_COMMAND_ONLY_KEYS = ("args", "env", "cwd")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_DEFAULTS_KEYS = ("trust_read_only_hint", "verify")
_STATE_KEYS = ("tool", "args", "select", "unordered")
_POLICY_KEYS = (
    "classification",
    "inverse_tool",
    "inverse_args",
    "snapshot_tool",
    "snapshot_args",
    "inverse",
    "error_when",
    "mutating_when",
    "test",
    "verify",
    "idempotent",
    "redact",
)
_STEP_KEYS = ("tool", "args", "when")
_VERIFY_KEYS = ("tool", "args")
_TEST_KEYS = ("schema", "examples")
_UNDO_KEYS = ("inverse_tool", "inverse_args", "inverse", "snapshot_tool", "snapshot_args")
_WRITABLE = ("read", "reversible", "compensable", "irreversible")

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VARIABLE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|(\{))")
_VARIABLE_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.S)
_VARIABLE_FIX = "Write ${NAME} or ${NAME:-default}, and $$ for a literal $"

_EXPECTED = {
    dict: ("a mapping", "Write it as indented `name: value` lines or {name: value}"),
    list: ("a list", "Write it as [a, b] or as indented `- item` lines"),
    str: ("a string", "Quote the value"),
    bool: ("true or false", "Write true or false"),
}
_REQUIRED_HINTS = {
    "servers": "a mapping from server name to {command, args, env, cwd, ...}",
    "command": "the executable that starts the server",
    "classification": "one of read, reversible, compensable, irreversible",
    "tool": "a downstream tool name like server__tool",
}
_ALL_NAMES = frozenset(CONTEXT_NAMES)
_SNAPSHOT_NAMES = frozenset({"snapshot", "snapshot_error"})
_TRUST_KEY = "defaults.trust_read_only_hint"


def _describe(value: Any) -> str:
    """The YAML type of `value`, never the value itself (it may be a secret)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    for kind, (name, _) in _EXPECTED.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _did_you_mean(name: str, choices: Iterable[str], fallback: str) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"Did you mean '{close[0]}'?" if close else fallback


class _Parser:
    """Validates the plain data of one registry file and builds the Registry."""

    def __init__(self, path: Path, lines: dict[str, int], environ: Mapping[str, str]) -> None:
        self.path = path
        self.lines = lines
        self.environ = environ
        self.base = path.absolute().parent
        self.server_names: tuple[str, ...] = ()
        self.prefixes: dict[str, str] = {}
        """Exposed prefix -> server name, filled once all servers are read."""
        self.expanded: dict[str, str] = {}

    # -- generic checks -------------------------------------------------------------------

    def error(self, key: str, problem: str, fix: str) -> RegistryError:
        return located_error(str(self.path), line_of(self.lines, key), key, problem, fix)

    def expect(self, value: Any, kind: type, key: str) -> Any:
        if isinstance(value, kind):
            return value
        expected, fix = _EXPECTED[kind]
        raise self.error(key, f"expected {expected}, got {_describe(value)}", f"{fix}.")

    def mapping(
        self, value: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        self.expect(value, dict, key)
        for name in value:
            if name not in allowed:
                fallback = f"Allowed keys: {', '.join(allowed)}."
                fix = _did_you_mean(name, allowed, fallback)
                raise self.error(join_key(key, name), "unknown key", fix)
        for name in required:
            if name not in value:
                hint = _REQUIRED_HINTS.get(name, "a value")
                fix = f"Add '{name}:' with {hint}."
                raise self.error(join_key(key, name), "missing required key", fix)
        return value

    def reraise(self, exc: ExpressionError) -> RegistryError:
        return self.error(exc.where or "", f"`{exc.source}` {exc.detail}", exc.fix or "")

    def template(self, value: Any, key: str) -> Template:
        if not isinstance(value, (dict, str)):
            self.expect(value, dict, key)
        try:
            template = compile_template(value, where=key)
        except ExpressionError as exc:
            raise self.reraise(exc) from None
        if isinstance(value, str) and template.is_literal:
            fix = 'Write the arguments as `name: value` lines, or one "{expression}" string.'
            raise self.error(key, "expected a mapping of arguments, got a string", fix)
        return template

    def condition(self, value: Any, key: str, *, check_roots: bool = True) -> Expression:
        self.expect(value, str, key)
        try:
            return compile_expression(value, where=key, check_roots=check_roots)
        except ExpressionError as exc:
            raise self.reraise(exc) from None

    def optional(self, raw: dict[str, Any], name: str, key: str, build: Any) -> Any:
        return build(raw[name], join_key(key, name)) if name in raw else None

    def restrict(self, exprs: Iterable[Expression], allowed: Iterable[str], why: str) -> None:
        names = frozenset(allowed)
        for expr in exprs:
            for path in expr.root_paths():
                if path[0] not in names:
                    shown = ", ".join(sorted(names))
                    problem = f"`{expr.source}` reads `{path[0]}`, but {why}"
                    raise self.error(expr.where, problem, f"Use only {shown} here.")

    # -- sections -------------------------------------------------------------------------

    def registry(self, data: Any) -> Registry:
        top = self.mapping({} if data is None else data, "", _TOP_KEYS, ("servers",))
        servers = self.servers(top["servers"])
        defaults = self.defaults(top.get("defaults"))
        return Registry(
            path=self.path,
            servers=MappingProxyType(servers),
            state=self.state(top.get("state")),
            tools=MappingProxyType(self.tools(top.get("tools"), defaults)),
            defaults=defaults,
            reset=self.resets(top.get("reset")),
        )

    def defaults(self, raw: Any) -> Defaults:
        raw = self.mapping({} if raw is None else raw, "defaults", _DEFAULTS_KEYS)
        trust = self.expect(raw.get("trust_read_only_hint", False), bool, _TRUST_KEY)
        verify = self.expect(raw.get("verify", False), bool, "defaults.verify")
        return Defaults(trust_read_only_hint=trust, verify=verify)

    def servers(self, raw: Any) -> dict[str, ServerSpec]:
        self.expect(raw, dict, "servers")
        if not raw:
            raise self.error("servers", "no servers are defined", "Add at least one server.")
        self.server_names = tuple(raw)
        specs = {name: self.server(name, spec, f"servers.{name}") for name, spec in raw.items()}
        self.prefixes = {}
        for spec in specs.values():
            other = self.prefixes.setdefault(spec.exposed_prefix, spec.name)
            if other != spec.name:
                where = f"servers.{spec.name}" + (".prefix" if spec.prefix else "")
                problem = (
                    f"servers '{other}' and '{spec.name}' would both expose their tools as "
                    f"'{spec.exposed_prefix}__...'"
                )
                raise self.error(where, problem, "Give one of them a different prefix:.")
        return specs

    def server(self, name: str, raw: Any, key: str) -> ServerSpec:
        self.expanded = {}
        self.server_name(name, key)
        raw = self.mapping(raw, key, _SERVER_KEYS)
        if "url" in raw:
            return self.http_server(name, raw, key)
        if "command" not in raw:
            fix = (
                "Add 'command:' with the executable that starts the server, or 'url:' with "
                "the address of a running streamable HTTP server."
            )
            raise self.error(f"{key}.command", "missing required key", fix)
        if "headers" in raw:
            problem = "headers are sent to a url: server, and this server has command:"
            fix = "Remove headers (pass settings in env:), or give url: instead of command:."
            raise self.error(f"{key}.headers", problem, fix)
        command = self.expand_string(raw["command"], f"{key}.command")
        if not command.strip():
            raise self.error(f"{key}.command", "the command is empty", "Name the executable.")
        args = self.expect(raw.get("args", []), list, f"{key}.args")
        env = self.expect(raw.get("env", {}), dict, f"{key}.env")
        return ServerSpec(
            name=name,
            command=command,
            args=tuple(self.expand_string(a, f"{key}.args[{i}]") for i, a in enumerate(args)),
            env=MappingProxyType(
                {k: self.expand_string(v, f"{key}.env.{k}") for k, v in env.items()}
            ),
            cwd=self.cwd(raw.get("cwd"), f"{key}.cwd"),
            line=line_of(self.lines, key),
            call_timeout=self.optional(raw, "call_timeout", key, self.seconds),
            startup_timeout=self.optional(raw, "startup_timeout", key, self.seconds),
            expanded=MappingProxyType(dict(self.expanded)),
            prefix=self.optional(raw, "prefix", key, self.tool_prefix),
        )

    def http_server(self, name: str, raw: dict[str, Any], key: str) -> ServerSpec:
        """A server entry with `url:`: connect over streamable HTTP instead of starting it."""
        if "command" in raw:
            fix = (
                "Keep command: to start a local server over stdio, or url: to connect to a "
                "running streamable HTTP server, not both."
            )
            raise self.error(f"{key}.url", "command and url are both given", fix)
        for unused in _COMMAND_ONLY_KEYS:
            if unused in raw:
                problem = f"{unused} applies to a server started with command:, and this has url:"
                fix = f"Remove {unused}: a url: server is already running on its own."
                raise self.error(f"{key}.{unused}", problem, fix)
        url = self.expand_string(raw["url"], f"{key}.url")
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            # The value is not quoted: it may hold an expanded token.
            problem = "the url is not an http:// or https:// address with a host"
            fix = "Write the server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp."
            raise self.error(f"{key}.url", problem, fix)
        return ServerSpec(
            name=name,
            command="",
            args=(),
            env=MappingProxyType({}),
            cwd=self.base,
            line=line_of(self.lines, key),
            call_timeout=self.optional(raw, "call_timeout", key, self.seconds),
            startup_timeout=self.optional(raw, "startup_timeout", key, self.seconds),
            url=url.strip(),
            headers=MappingProxyType(self.headers(raw.get("headers", {}), f"{key}.headers")),
            prefix=self.optional(raw, "prefix", key, self.tool_prefix),
            expanded=MappingProxyType(dict(self.expanded)),
        )

    def headers(self, raw: Any, key: str) -> dict[str, str]:
        self.expect(raw, dict, key)
        headers: dict[str, str] = {}
        for name, value in raw.items():
            if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
                problem = "a header name may only contain letters, digits and !#$%&'*+-.^_`|~"
                raise self.error(join_key(key, str(name)), problem, "Fix the header name.")
            where = join_key(key, name)
            text = self.expand_string(value, where)
            if "\r" in text or "\n" in text:
                problem = "the header value holds a line break"
                raise self.error(where, problem, "Write the value on one line.")
            headers[name] = text
        return headers

    def tool_prefix(self, raw: Any, key: str) -> str:
        text = self.expect(raw, str, key)
        if not text:
            fix = "Write a short name such as fs, or remove prefix: to use the server's name."
            raise self.error(key, "the prefix is empty", fix)
        if not _SERVER_NAME.fullmatch(text):
            problem = "a prefix may only contain letters, digits, '_' and '-'"
            raise self.error(key, problem, "Write a short name such as fs.")
        if "__" in text or text.endswith("_"):
            problem = "a prefix must not contain '__' or end with '_'"
            fix = "Change the prefix: '__' separates prefix and tool in tool names."
            raise self.error(key, problem, fix)
        return text

    def seconds(self, raw: Any, key: str) -> float:
        fix = "Write a number of seconds greater than 0, e.g. 30 or 2.5."
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.error(key, f"expected a number of seconds, got {_describe(raw)}", fix)
        if not raw > 0:  # also refuses .nan
            raise self.error(key, f"expected a number of seconds greater than 0, got {raw}", fix)
        try:
            return float(raw)
        except OverflowError:  # an int beyond float's range, e.g. 10**400
            raise self.error(key, "the number of seconds is too large", fix) from None

    def server_name(self, name: str, key: str) -> None:
        if not _SERVER_NAME.fullmatch(name):
            problem = "a server name may only contain letters, digits, '_' and '-'"
            raise self.error(key, problem, "Rename the server.")
        if "__" in name or name.endswith("_"):
            problem = "a server name must not contain '__' or end with '_'"
            fix = "Rename the server: '__' separates server and tool in tool names."
            raise self.error(key, problem, fix)

    def cwd(self, raw: Any, key: str) -> Path:
        if raw is None:
            return self.base
        try:
            folder = Path(self.expand_string(raw, key)).expanduser()
        except RuntimeError:  # `~name` of no known user, or `~` without a home folder
            problem = "a leading ~ names a user (or home folder) that is not known here"
            raise self.error(key, problem, "Write the folder as an absolute path.") from None
        return folder if folder.is_absolute() else self.base / folder

    def expand_string(self, value: Any, key: str) -> str:
        return _VARIABLE.sub(lambda m: self.substitute(m, key), self.expect(value, str, key))

    def substitute(self, match: re.Match[str], key: str) -> str:
        if match.group(1):
            return "$"
        body = _VARIABLE_BODY.fullmatch(match.group(2) or "")
        if match.group(3) or body is None:
            raise self.error(key, "malformed ${...} reference", f"{_VARIABLE_FIX}.")
        name, default = body.groups()
        value = self.environ.get(name)
        if value or (value is not None and default is None):
            self.expanded[name] = value
            return value
        if default is not None:
            return default
        fix = f"Export it before starting (export {name}=...) or write ${{{name}:-default}}."
        raise self.error(key, f"environment variable {name} is not set", fix)

    def state(self, raw: Any) -> tuple[StateProbe, ...]:
        items = self.expect([] if raw is None else raw, list, "state")
        return tuple(self.probe(item, f"state[{i}]") for i, item in enumerate(items))

    def probe(self, raw: Any, key: str) -> StateProbe:
        raw = self.mapping(raw, key, _STATE_KEYS, ("tool",))
        select = self.optional(raw, "select", key, self.select)
        return StateProbe(
            tool=self.target(raw["tool"], f"{key}.tool"),
            args=self.template(raw.get("args", {}), f"{key}.args"),
            select=select,
            unordered=self.expect(raw.get("unordered", False), bool, f"{key}.unordered"),
            line=line_of(self.lines, key),
        )

    def resets(self, raw: Any) -> tuple[ResetCall, ...]:
        items = self.expect([] if raw is None else raw, list, "reset")
        return tuple(self.reset_call(item, f"reset[{i}]") for i, item in enumerate(items))

    def reset_call(self, raw: Any, key: str) -> ResetCall:
        raw = self.mapping(raw, key, _RESET_KEYS, ("tool",))
        return ResetCall(
            tool=self.target(raw["tool"], f"{key}.tool"),
            args=self.template(raw.get("args", {}), f"{key}.args"),
            line=line_of(self.lines, key),
        )

    def select(self, value: Any, key: str) -> Expression:
        return self.condition(value, key, check_roots=False)

    def target(self, value: Any, key: str) -> str:
        name = self.expect(value, str, key)
        if name in META_TOOLS:
            problem = f"'{name}' is a compensator meta tool, not a downstream tool"
            raise self.error(key, problem, "Name a downstream tool as server__tool.")
        prefixes = list(self.prefixes) or list(self.server_names)
        if any(name.startswith(f"{s}__") and len(name) > len(s) + 2 for s in prefixes):
            return name
        server, sep, rest = name.partition("__")
        if not (server and sep and rest):
            fix = f"Prefix it with its server's name, e.g. '{prefixes[0]}__{name}'."
            raise self.error(key, f"'{name}' is not of the form server__tool", fix)
        renamed = next((p for p, s in self.prefixes.items() if s == server and p != s), None)
        if renamed is not None:
            problem = f"server '{server}' has prefix: {renamed}, so its tools are {renamed}__..."
            fix = f"Write '{renamed}__{rest}': the registry names tools as clients see them."
            raise self.error(key, problem, fix)
        close = difflib.get_close_matches(server, prefixes, n=1)
        fix = f"Did you mean '{close[0]}__{rest}'?" if close else self.known_servers()
        raise self.error(key, f"'{name}' names unknown server '{server}'", fix)

    def known_servers(self) -> str:
        shown = [p if p == s else f"{p} (server {s})" for p, s in self.prefixes.items()]
        return f"Known servers: {', '.join(shown or self.server_names)}."

    def tools(self, raw: Any, defaults: Defaults) -> dict[str, ToolPolicy]:
        raw = self.expect({} if raw is None else raw, dict, "tools")
        policies = {
            name: self.policy(name, value, f"tools.{name}", defaults) for name, value in raw.items()
        }
        for policy in policies.values():
            read = policies.get(policy.verify_tool or "")
            if read is not None and read.classification is not Classification.READ:
                where = f"tools.{policy.name}.verify"
                where += ".tool" if policy.verify_names_its_read else ""
                problem = (
                    f"the drift check calls {read.name} before each undo, and the registry "
                    f"classifies it {read.classification.value}: it must only read"
                )
                raise self.error(where, problem, "Name a read tool, or drop verify.")
        return policies

    # -- tool policies --------------------------------------------------------------------

    def policy(self, name: str, raw: Any, key: str, defaults: Defaults) -> ToolPolicy:
        self.target(name, key)
        raw = self.mapping(raw, key, _POLICY_KEYS, ("classification",))
        kind = self.classification(raw["classification"], f"{key}.classification")
        self.shape(raw, kind, key)
        snapshot_args = self.snapshot_args(raw, key)
        verify_tool, verify_args = self.verify(raw, key, defaults, snapshot_args)
        policy = ToolPolicy(
            name=name,
            classification=kind,
            snapshot_tool=self.optional(raw, "snapshot_tool", key, self.target),
            snapshot_args=snapshot_args,
            inverse=self.inverse(raw, key),
            error_when=self.optional(raw, "error_when", key, self.condition),
            mutating_when=self.optional(raw, "mutating_when", key, self.condition),
            test=self.optional(raw, "test", key, self.test_spec),
            line=line_of(self.lines, key),
            verify_tool=verify_tool,
            verify_args=verify_args,
            idempotent=self.expect(raw.get("idempotent", False), bool, f"{key}.idempotent"),
            redact=self.redactions(raw.get("redact", []), f"{key}.redact"),
        )
        self.check_contexts(policy)
        self.check_redactions(policy, f"{key}.redact")
        return policy

    def verify(
        self, raw: dict[str, Any], key: str, defaults: Defaults, snapshot_args: Template | None
    ) -> tuple[str | None, Template | None]:
        """`verify:` of the tool as (read tool, read args), both None when off. `true`
        repeats the snapshot read; `{tool, args}` names a read of its own (so reversible tools
        can be verified); the registry default applies to tools that take a snapshot."""
        where = f"{key}.verify"
        value = raw.get("verify", defaults.verify and "snapshot_tool" in raw)
        if isinstance(value, dict):
            read = self.mapping(value, where, _VERIFY_KEYS, ("tool",))
            tool = self.target(read["tool"], f"{where}.tool")
            return tool, self.template(read.get("args", {}), f"{where}.args")
        if not isinstance(value, bool):
            problem = f"expected true, false or a {{tool, args}} read, got {_describe(value)}"
            fix = "Write verify: true, or verify: {tool: server__read_tool, args: {...}}."
            raise self.error(where, problem, fix)
        if not value:
            return None, None
        if "snapshot_tool" not in raw:
            problem = (
                "verify: true reads the state again with snapshot_tool, and this tool has none"
            )
            fix = (
                'Name the read: verify: {tool: server__read_tool, args: {id: "{args.id}"}}, '
                "or add snapshot_tool (compensable tools), or drop verify."
            )
            raise self.error(where, problem, fix)
        return self.target(raw["snapshot_tool"], f"{key}.snapshot_tool"), snapshot_args

    def redactions(self, raw: Any, key: str) -> tuple[RedactPath, ...]:
        items = self.expect(raw, list, key)
        return tuple(self.redact_path(item, f"{key}[{i}]") for i, item in enumerate(items))

    def redact_path(self, value: Any, key: str) -> RedactPath:
        text = self.expect(value, str, key)
        parts = _parse_redact_path(text)
        if parts is None or parts[0] not in ("args", "result") or len(parts) < 2:
            problem = f"'{text}' is not a path into args or result"
            fix = "Write a dotted path such as args.password, result.token or result.items[*].key."
            raise self.error(key, problem, fix)
        root = parts[0]
        assert isinstance(root, str)
        return RedactPath(source=text, root=root, parts=parts[1:])

    def check_redactions(self, policy: ToolPolicy, key: str) -> None:
        """An inverse that needs a value the journal never stores could never be built."""
        hidden = [path.fields() for path in policy.redact]
        needed = _step_expressions(policy.inverse)
        if policy.verify_args is not None:
            needed.extend(policy.verify_args.expressions())  # the drift check reads it again
        for expr in needed:
            for read in expr.root_paths():
                read = read[1:] if read[:2] == ("change", "args") else read
                for fields in hidden:
                    common = min(len(read), len(fields))
                    if read[:common] == fields[:common]:
                        problem = (
                            f"`{expr.source}` reads `{'.'.join(read)}`, which redact keeps out "
                            "of the journal, so undo could never build this call"
                        )
                        fix = "Remove the path from redact, or build the inverse without it."
                        raise self.error(key, problem, fix)

    def classification(self, value: Any, key: str) -> Classification:
        text = self.expect(value, str, key)
        if text in _WRITABLE:
            return Classification(text)
        fallback = f"Use one of {', '.join(_WRITABLE)}."
        if text == Classification.UNKNOWN.value:
            fallback = f"Remove the entry to leave the tool unknown. {fallback}"
        fix = _did_you_mean(text, _WRITABLE, fallback)
        raise self.error(key, f"'{text}' is not a classification", fix)

    def shape(self, raw: dict[str, Any], kind: Classification, key: str) -> None:
        if kind in (Classification.READ, Classification.IRREVERSIBLE):
            self.never_runs(raw, kind, key)
            return
        self.pairs(raw, key)
        if "inverse_tool" not in raw and "inverse" not in raw:
            fix = "Add inverse_tool (with inverse_args) or an inverse list of {tool, args, when}."
            raise self.error(key, f"a {kind.value} tool needs an inverse", fix)
        if kind is Classification.COMPENSABLE and "snapshot_tool" not in raw:
            fix = (
                "Add snapshot_tool (and snapshot_args) to capture what the inverse restores, "
                "or classify the tool reversible if args and result are enough."
            )
            raise self.error(key, "a compensable tool needs snapshot_tool", fix)
        if kind is Classification.REVERSIBLE and "snapshot_tool" in raw:
            problem = "a reversible tool takes no snapshot, so snapshot_tool would never run"
            fix = "Classify the tool compensable, or remove snapshot_tool."
            raise self.error(f"{key}.snapshot_tool", problem, fix)

    def never_runs(self, raw: dict[str, Any], kind: Classification, key: str) -> None:
        a_kind = f"{'an' if kind.value[0] in 'aeiou' else 'a'} {kind.value} tool"
        for name in _UNDO_KEYS:
            if name in raw:
                problem = f"{a_kind} is never undone, so {name} would never run"
                fix = "Remove it, or classify the tool reversible or compensable."
                raise self.error(f"{key}.{name}", problem, fix)
        if raw.get("verify", False) is not False:
            problem = f"{a_kind} is never undone, so there is no undo to verify"
            fix = "Remove verify, or classify the tool reversible or compensable."
            raise self.error(f"{key}.verify", problem, fix)

    def pairs(self, raw: dict[str, Any], key: str) -> None:
        if "inverse_tool" in raw and "inverse" in raw:
            fix = "Use inverse_tool with inverse_args for one step, or an inverse list, not both."
            raise self.error(f"{key}.inverse", "inverse_tool and inverse are both given", fix)
        if "inverse_args" in raw and "inverse_tool" not in raw:
            fix = "Add inverse_tool, or write the step in an inverse list as {tool, args}."
            raise self.error(f"{key}.inverse_args", "inverse_args without inverse_tool", fix)
        if "snapshot_args" in raw and "snapshot_tool" not in raw:
            fix = "Add snapshot_tool, or remove snapshot_args."
            raise self.error(f"{key}.snapshot_args", "snapshot_args without snapshot_tool", fix)

    def snapshot_args(self, raw: dict[str, Any], key: str) -> Template | None:
        if "snapshot_tool" not in raw:
            return None
        return self.template(raw.get("snapshot_args", {}), f"{key}.snapshot_args")

    def inverse(self, raw: dict[str, Any], key: str) -> tuple[InverseStep, ...]:
        if "inverse_tool" in raw:
            tool = self.target(raw["inverse_tool"], f"{key}.inverse_tool")
            args = self.template(raw.get("inverse_args", {}), f"{key}.inverse_args")
            return (InverseStep(tool=tool, args=args, when=None),)
        if "inverse" not in raw:
            return ()
        steps = self.expect(raw["inverse"], list, f"{key}.inverse")
        if not steps:
            fix = "Add at least one {tool, args} step, or remove the key."
            raise self.error(f"{key}.inverse", "the inverse list is empty", fix)
        return tuple(self.step(step, f"{key}.inverse[{i}]") for i, step in enumerate(steps))

    def step(self, raw: Any, key: str) -> InverseStep:
        raw = self.mapping(raw, key, _STEP_KEYS, ("tool",))
        return InverseStep(
            tool=self.target(raw["tool"], f"{key}.tool"),
            args=self.template(raw.get("args", {}), f"{key}.args"),
            when=self.optional(raw, "when", key, self.condition),
        )

    def test_spec(self, value: Any, key: str) -> TestSpec:
        raw = self.mapping(value, key, _TEST_KEYS)
        schema = self.optional(raw, "schema", key, lambda v, k: self.expect(v, dict, k))
        examples = self.expect(raw.get("examples", []), list, f"{key}.examples")
        for index, example in enumerate(examples):
            self.expect(example, dict, f"{key}.examples[{index}]")
        return TestSpec(schema=schema, examples=tuple(examples))

    def check_contexts(self, policy: ToolPolicy) -> None:
        if policy.snapshot_args is not None:
            why = "the snapshot is taken before the call, when only args is known"
            self.restrict(policy.snapshot_args.expressions(), {"args"}, why)
        if policy.error_when is not None:
            why = "error_when sees only the call's result and args"
            self.restrict([policy.error_when], {"result", "args"}, why)
        if policy.mutating_when is not None:
            self.restrict([policy.mutating_when], {"args"}, "mutating_when sees only args")
        if policy.verify_args is not None:
            why = "the drift check's read is built from the call's args and result"
            self.restrict(policy.verify_args.expressions(), {"args", "result"}, why)
        if policy.classification is Classification.REVERSIBLE:
            why = "a reversible tool takes no snapshot (classify it compensable to take one)"
            self.restrict(_step_expressions(policy.inverse), _ALL_NAMES - _SNAPSHOT_NAMES, why)


_REDACT_STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\*|\d+)\]")


def _parse_redact_path(text: str) -> tuple[str | int, ...] | None:
    """`result.items[*].token` -> ("result", "items", "*", "token"); None when malformed."""
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        match = _REDACT_STEP.match(text, position)
        if match is None or (position == 0) != (text[position] not in ".["):
            return None
        name, index = match.groups()
        parts.append(name if name is not None else ("*" if index == "*" else int(index)))
        position = match.end()
    return tuple(parts) if parts and isinstance(parts[0], str) else None


def _step_expressions(steps: Iterable[InverseStep]) -> list[Expression]:
    found: list[Expression] = []
    for step in steps:
        found.extend(step.args.expressions())
        if step.when is not None:
            found.append(step.when)
    return found
