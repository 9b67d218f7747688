"""The checks every section of a registry file shares, each failing with a RegistryError that
names the file, the line, the dotted key and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..classification import Classification
from ..errors import ExpressionError, RegistryError, did_you_mean
from ..names import META_TOOLS, exposed_name, split_name
from .expressions import Expression, Template, compile_expression, compile_template
from .variables import VariableError, expand
from .yamlnodes import join_key, line_of, located_error

__all__ = ["Reader", "describe"]

T = TypeVar("T")

_EXPECTED = {
    dict: ("a mapping", "Write it as indented `name: value` lines or {name: value}"),
    list: ("a list", "Write it as [a, b] or as indented `- item` lines"),
    str: ("a string", "Quote the value"),
    bool: ("true or false", "Write true or false"),
}
_REQUIRED_HINTS = {
    "servers": "a mapping from server name to {command, args, env, cwd, ...}",
    "command": "the executable that starts the server",
    "classification": "one of " + ", ".join(kind.value for kind in Classification.writable()),
    "tool": "a downstream tool name like server__tool",
}


def describe(value: Any) -> str:
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


class Reader:
    """One registry file being read: where its keys stand, the environment its `${VAR}`
    expand from, and the servers read so far (tool names are checked against them)."""

    def __init__(self, path: Path, lines: dict[str, int], environ: Mapping[str, str]) -> None:
        self.path = path
        self.lines = lines
        self.environ = environ
        self.base = path.absolute().parent
        """The folder a relative `cwd` is taken from."""
        self.server_names: tuple[str, ...] = ()
        self.prefixes: dict[str, str] = {}
        """Exposed prefix -> server name, filled once all servers are read."""
        self.expanded: dict[str, str] = {}
        """The `${NAME}` values expanded for the server entry being read."""

    # -- shapes and types -----------------------------------------------------------------

    def error(self, key: str, problem: str, fix: str) -> RegistryError:
        return located_error(str(self.path), line_of(self.lines, key), key, problem, fix)

    def expect(self, value: Any, kind: type, key: str) -> Any:
        if isinstance(value, kind):
            return value
        expected, fix = _EXPECTED[kind]
        raise self.error(key, f"expected {expected}, got {describe(value)}", f"{fix}.")

    def mapping(
        self, value: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        self.expect(value, dict, key)
        for name in value:
            if name not in allowed:
                fallback = f"Allowed keys: {', '.join(allowed)}."
                fix = did_you_mean(name, allowed, fallback)
                raise self.error(join_key(key, name), "unknown key", fix)
        for name in required:
            if name not in value:
                hint = _REQUIRED_HINTS.get(name, "a value")
                fix = f"Add '{name}:' with {hint}."
                raise self.error(join_key(key, name), "missing required key", fix)
        return value

    def optional(
        self, raw: dict[str, Any], name: str, key: str, build: Callable[[Any, str], T]
    ) -> T | None:
        return build(raw[name], join_key(key, name)) if name in raw else None

    def flag(self, raw: dict[str, Any], name: str, key: str) -> bool:
        """The boolean `name` of `raw` (false when absent)."""
        value: bool = self.expect(raw.get(name, False), bool, join_key(key, name))
        return value

    def seconds(self, raw: Any, key: str) -> float:
        fix = "Write a number of seconds greater than 0, e.g. 30 or 2.5."
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.error(key, f"expected a number of seconds, got {describe(raw)}", fix)
        if not raw > 0:  # also refuses .nan
            raise self.error(key, f"expected a number of seconds greater than 0, got {raw}", fix)
        try:
            return float(raw)
        except OverflowError:  # an int beyond float's range, e.g. 10**400
            raise self.error(key, "the number of seconds is too large", fix) from None

    def expand(self, value: Any, key: str) -> str:
        """A string with its `${VAR}` references expanded (remembered in `expanded`)."""
        try:
            return expand(self.expect(value, str, key), self.environ, self.expanded)
        except VariableError as exc:
            raise self.error(key, exc.problem, exc.fix) from None

    # -- expressions ----------------------------------------------------------------------

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

    def select(self, value: Any, key: str) -> Expression:
        """A JMESPath over a result (not over the call context)."""
        return self.condition(value, key, check_roots=False)

    def restrict(self, exprs: Iterable[Expression], allowed: Iterable[str], why: str) -> None:
        names = frozenset(allowed)
        for expr in exprs:
            for path in expr.root_paths():
                if path[0] not in names:
                    shown = ", ".join(sorted(names))
                    problem = f"`{expr.source}` reads `{path[0]}`, but {why}"
                    raise self.error(expr.where, problem, f"Use only {shown} here.")

    # -- tool names -----------------------------------------------------------------------

    def target(self, value: Any, key: str) -> str:
        """A downstream tool name as clients see it: `<server or prefix>__<tool>`, or the
        tool's own name when a server has `prefix: ""` (see compensator/names.py)."""
        name = self.expect(value, str, key)
        unprefixed = self.prefixes.get("")
        if name in META_TOOLS:
            raise self._meta_tool(name, key, unprefixed)
        prefixes = [p for p in self.prefixes if p] if self.prefixes else list(self.server_names)
        split = split_name(name)
        if split is not None and split[0] in prefixes:
            return name
        if split is not None:
            server, rest = split
            renamed = next((p for p, s in self.prefixes.items() if s == server and p != s), None)
            if renamed is not None:
                raise self._renamed(server, renamed, rest, key)
        if unprefixed is not None:
            return name
        if split is None:
            fix = f"Prefix it with its server's name, e.g. '{exposed_name(prefixes[0], name)}'."
            raise self.error(key, f"'{name}' is not of the form server__tool", fix)
        server, rest = split
        close = difflib.get_close_matches(server, prefixes, n=1)
        fix = f"Did you mean '{exposed_name(close[0], rest)}'?" if close else self.known_servers()
        raise self.error(key, f"'{name}' names unknown server '{server}'", fix)

    def _meta_tool(self, name: str, key: str, unprefixed: str | None) -> RegistryError:
        if unprefixed is None:
            problem = f"'{name}' is a compensator meta tool, not a downstream tool"
            return self.error(key, problem, "Name a downstream tool as server__tool.")
        problem = (
            f"'{name}' is both a compensator meta tool and, unprefixed, a name of server "
            f"'{unprefixed}' (prefix: \"\"); the proxy answers a call of it itself"
        )
        fix = (
            f"Remove the entry; to reach the server's own {name}, give servers.{unprefixed} "
            f"a prefix: and write it as prefix__{name}."
        )
        return self.error(key, problem, fix)

    def _renamed(self, server: str, prefix: str, rest: str, key: str) -> RegistryError:
        """`server__tool` for a server exposed under another prefix (or none)."""
        if prefix:
            problem = f"server '{server}' has prefix: {prefix}, so its tools are {prefix}__..."
        else:
            problem = f"server '{server}' has prefix: \"\", so its tools keep their own names"
        fix = f"Write '{exposed_name(prefix, rest)}': the registry names tools as clients see them."
        return self.error(key, problem, fix)

    def known_servers(self) -> str:
        shown = [
            p if p == s else f"{p} (server {s})" if p else f'{s} (prefix: "")'
            for p, s in self.prefixes.items()
        ]
        return f"Known servers: {', '.join(shown or self.server_names)}."
