"""JMESPath expressions and `{expr}` templates evaluated over a tool call's context."""

from __future__ import annotations

import ast
import copy
import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jmespath
from jmespath import exceptions as jexc
from jmespath import functions as jfun
from jmespath.parser import ParsedResult, Parser

from ..errors import ExpressionError, did_you_mean

__all__ = [
    "CONTEXT_NAMES",
    "Expression",
    "Template",
    "compile_expression",
    "compile_template",
    "is_truthy",
]

CONTEXT_NAMES = ("args", "result", "snapshot", "snapshot_error", "change")

# Node types whose first child is evaluated against the current value and the rest
# against what that child produced.
_LEFT_ROOTED = frozenset(
    {"subexpression", "index_expression", "pipe", "projection", "value_projection"}
    | {"filter_projection"}
)
# Node types whose children all see the same value as the node itself.
_INHERITING = frozenset(
    {"function_expression", "comparator", "and_expression", "or_expression", "not_expression"}
    | {"multi_select_list", "multi_select_dict", "key_val_pair", "flatten"}
)
# Node types that narrow into their first child: `x[0]`, `x[*]`, `x.*`, `x[?c]`, `x[]`.
_SPINE = frozenset(
    {"index_expression", "projection", "value_projection", "filter_projection", "flatten"}
)

_PARSE_FIX = (
    "Check the JMESPath syntax (https://jmespath.org/specification.html): "
    "number and JSON literals go in backticks like `0`, strings in 'single quotes'"
)
_TEMPLATE_FIX = (
    "A string that is exactly {...} is an expression; to send that text literally "
    "write it as a raw string inside braces: \"{'text'}\""
)
_BRACED_CONDITION_FIX = "Conditions are plain JMESPath: drop the surrounding braces"


class _Functions(jfun.Functions):
    """The custom functions available to every expression."""

    @jfun.signature({"types": ["string", "null"]}, {"types": ["string"]})
    def _func_regex(self, text: str | None, pattern: str) -> str | None:
        if text is None:
            return None
        match = re.search(pattern, text)
        if match is None:
            return None
        return match.group(1) if match.re.groups else match.group(0)

    @jfun.signature({"types": ["string", "null"]}, {"types": ["string"]})
    def _func_regex_all(self, text: str | None, pattern: str) -> list[str] | None:
        """Every match of `pattern` in `text`, left to right, each as `regex` gives it (the
        first capture group, else the whole match): a list of the file names in a listing."""
        if text is None:
            return None
        return [m.group(1) if m.re.groups else m.group(0) for m in re.finditer(pattern, text)]

    @jfun.signature({"types": ["array", "null"]}, {"types": ["array", "null"]})
    def _func_intersection(self, first: list[Any] | None, second: list[Any] | None) -> list[Any]:
        """The items of `first` that are also in `second`, in `first`'s order, each once (null
        counts as an empty list): which staged files also have unstaged changes, in linear
        time where a backreference regex over the listing would be quadratic."""
        if not first or not second:
            return []
        keys = {json.dumps(item, sort_keys=True) for item in second}
        seen: set[str] = set()
        found = []
        for item in first:
            key = json.dumps(item, sort_keys=True)
            if key in keys and key not in seen:
                seen.add(key)
                found.append(item)
        return found

    @jfun.signature({"types": ["array", "null"]}, {"types": ["expref"]})
    def _func_first_by(self, items: list[Any] | None, key: Any) -> list[Any]:
        """The items of the list, each dropped when an earlier one has the same `&key`
        (null counts as an empty list): the server-memory graph may hold two entities named
        alike, and its tools always act on the first, so a restore must address only that."""
        seen: set[str] = set()
        kept = []
        for item in items or []:
            found = json.dumps(key.visit(key.expression, item), sort_keys=True)
            if found not in seen:
                seen.add(found)
                kept.append(item)
        return kept

    @jfun.signature({"types": []})
    def _func_to_json(self, value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)

    @jfun.signature({"types": ["string", "null"]})
    def _func_json_parse(self, text: str | None) -> Any:
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise jexc.JMESPathError(f"json_parse(): not valid JSON ({exc.msg})") from None

    @jfun.signature({"types": []})
    def _func_py_literal(self, text: Any) -> Any:
        """Parse the text of a Python literal (a `repr` such as `[{'id': 1, 'x': None}]`) with
        `ast.literal_eval`, never `eval`. Tuples become arrays; bytes stay bytes (for
        sql_literal). A value that is not a string is returned as it is: result parsing already
        turned text that happens to be JSON (`[]`, `1`) into a value."""
        if not isinstance(text, str):
            return text
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            reason = type(exc).__name__
            raise jexc.JMESPathError(f"py_literal(): not a Python literal ({reason})") from None
        return _plain(value)

    @jfun.signature({"types": []})
    def _func_sql_literal(self, value: Any) -> str:
        """`value` written as an SQL literal: NULL, 1/0 for booleans, numbers as Python's repr
        writes them (infinities as 9e999, NaN as NULL), 'text' with quotes doubled, X'hex' for
        bytes. Arrays and objects are an error."""
        return _sql_literal(value)

    @jfun.signature({"types": []})
    def _func_pg_literal(self, value: Any) -> str:
        """`value` written as a PostgreSQL literal that reads the same whatever
        standard_conforming_strings says: NULL, TRUE/FALSE, numbers as Python's repr writes
        them (non-finite floats as 'NaN'/'Infinity'/'-Infinity'::float8), text as E'...' with
        backslashes and quotes doubled. NUL characters (PostgreSQL text cannot hold them),
        bytes, arrays and objects are an error."""
        return _pg_literal(value)

    @jfun.signature({"types": ["string"]})
    def _func_sql_identifier(self, name: str) -> str:
        """`name` as a quoted SQL identifier: `"name"`, with `"` doubled."""
        return '"' + name.replace('"', '""') + '"'

    @jfun.signature({"types": ["array"]}, {"types": ["array-string"]})
    def _func_sql_values(self, rows: list[Any], columns: list[str]) -> str:
        """The rows (objects) as the tuples of an SQL VALUES clause, each with the values of
        `columns` in that order: `(1, 'it''s', NULL), (2, 'b', 0.5)`; "" for no rows."""
        tuples = []
        for number, row in enumerate(rows, start=1):
            if not isinstance(row, Mapping):
                raise jexc.JMESPathError(f"sql_values(): row {number} is not an object")
            missing = [c for c in columns if c not in row]
            if missing:
                raise jexc.JMESPathError(f"sql_values(): row {number} has no column {missing[0]!r}")
            tuples.append("(" + ", ".join(_sql_literal(row[c]) for c in columns) + ")")
        return ", ".join(tuples)

    @jfun.signature({"types": ["string"]})
    def _func_fail(self, message: str) -> Any:
        """Stop with `message` as the whole error: in a `when`, `ok || fail('why')` makes undo
        report the change as skipped for that reason instead of skipping the step silently."""
        raise ExpressionError(message, detail=message)


def _plain(value: Any) -> Any:
    """A Python literal as a JMESPath value: tuples become lists; sets, complex numbers and
    Ellipsis have no counterpart and are refused."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    raise jexc.JMESPathError(f"py_literal(): no JSON counterpart for {type(value).__name__}")


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NULL"  # what SQLite stores for NaN
        return repr(value) if math.isfinite(value) else ("9e999" if value > 0 else "-9e999")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (bytes, bytearray)):
        return "X'" + bytes(value).hex().upper() + "'"
    kind = "array" if isinstance(value, list) else "object"
    raise jexc.JMESPathError(f"sql_literal(): an {kind} is not an SQL value")


def _pg_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        word = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"'{word}'::float8"
    if isinstance(value, str):
        if "\0" in value:
            raise jexc.JMESPathError("pg_literal(): PostgreSQL text cannot hold a NUL character")
        return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    kind = "a bytes value" if isinstance(value, (bytes, bytearray)) else "an array or object"
    raise jexc.JMESPathError(f"pg_literal(): {kind} is not a PostgreSQL literal")


_OPTIONS = jmespath.Options(custom_functions=_Functions())
_FUNCTION_TABLE: Mapping[str, Any] = _Functions.FUNCTION_TABLE
_CUSTOM_FUNCTIONS = tuple(name[6:] for name in vars(_Functions) if name.startswith("_func_"))


def is_truthy(value: Any) -> bool:
    """JMESPath truthiness: null, false, "", [] and {} are false; all else (0 too) is true."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, tuple, Mapping)):
        return len(value) > 0
    return True


_TYPES_FIX = "Check the types the expression receives"


@dataclass(frozen=True, kw_only=True)
class Expression:
    """A compiled JMESPath expression with the package's custom functions."""

    source: str
    where: str = ""
    parsed: ParsedResult = field(repr=False, compare=False)

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """Search `context` (a dict holding some of CONTEXT_NAMES); missing names are null."""
        try:
            return self.parsed.search(context, options=_OPTIONS)
        except (jexc.JMESPathError, re.error) as exc:
            detail = f"failed to evaluate: {_runtime_complaint(exc)}"
            raise _error(self.source, self.where, detail, _TYPES_FIX) from None
        except ExpressionError:
            raise  # fail() said why
        except Exception as exc:
            # A function met a value it cannot take (to_json of bytes, a huge number, deep
            # nesting): still this expression's failure, never a crash of the call around it.
            detail = f"failed to evaluate: {type(exc).__name__}: {exc}"
            raise _error(self.source, self.where, detail, _TYPES_FIX) from None

    def truthy(self, context: Mapping[str, Any]) -> bool:
        """Evaluate and apply JMESPath truthiness (0 is true, [] is false)."""
        return is_truthy(self.evaluate(context))

    def root_paths(self) -> tuple[tuple[str, ...], ...]:
        """The plain field chains read from the root, e.g. `args.id` -> ("args", "id")."""
        found: list[tuple[str, ...]] = []
        for path in _paths(self.parsed.parsed):
            if path not in found:
                found.append(path)
        return tuple(found)


@dataclass(frozen=True, kw_only=True)
class Template:
    """A JSON-like value whose `"{EXPR}"` strings are expressions, rendered per call."""

    source: Any
    where: str = ""
    tree: Any = field(repr=False, compare=False)

    def render(self, context: Mapping[str, Any]) -> Any:
        """A fresh structure with every expression replaced by its (native) value."""
        return _render(self.tree, context)

    def expressions(self) -> tuple[Expression, ...]:
        """Every expression in the template, in document order."""
        return tuple(_expressions(self.tree))

    @property
    def is_literal(self) -> bool:
        """True when the template contains no expression."""
        return not self.expressions()


def compile_expression(source: str, *, where: str, check_roots: bool = True) -> Expression:
    """Parse `source`; with `check_roots`, its root fields must be in CONTEXT_NAMES."""
    return _compile(source, where, check_roots, source)


def compile_template(value: Any, *, where: str) -> Template:
    """Compile a JSON-like value; strings that are exactly `{EXPR}` become expressions."""
    return Template(source=copy.deepcopy(value), where=where, tree=_compile_node(value, where))


def _compile_node(value: Any, where: str) -> Any:
    if isinstance(value, str):
        inner = _braced(value)
        return value if inner is None else _compile(inner, where, True, value)
    if isinstance(value, Mapping):
        return {k: _compile_node(v, _join(where, str(k))) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_compile_node(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _braced(text: str) -> str | None:
    if len(text) >= 2 and text[0] == "{" and text[-1] == "}" and text[1:-1].strip():
        return text[1:-1].strip()
    return None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _render(node: Any, context: Mapping[str, Any]) -> Any:
    if isinstance(node, Expression):
        return copy.deepcopy(node.evaluate(context))
    if isinstance(node, dict):
        return {k: _render(v, context) for k, v in node.items()}
    if isinstance(node, list):
        return [_render(v, context) for v in node]
    return node


def _expressions(node: Any) -> Iterator[Expression]:
    if isinstance(node, Expression):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value)


def _compile(source: str, where: str, check_roots: bool, shown: str) -> Expression:
    if not isinstance(source, str):
        raise _error(repr(source), where, "is not a string", "Write the expression as a string")
    try:
        parsed = Parser().parse(source)
        for node in _walk(parsed.parsed):
            _check_node(node, shown, where)
        if check_roots:
            _check_roots(parsed.parsed, shown, where)
    except jexc.JMESPathError as exc:
        detail = f"does not parse: {_parse_complaint(exc)}"
        raise _error(shown, where, detail, _parse_fix(source, shown)) from None
    except RecursionError:
        # jmespath's parser recurses once per nesting level: `((((...` exhausts the stack.
        detail = "is nested too deeply to parse"
        raise _error(shown, where, detail, "Write it with fewer nested parentheses") from None
    return Expression(source=source, where=where, parsed=parsed)


def _error(shown: str, where: str, detail: str, fix: str) -> ExpressionError:
    message = f"`{shown}` at {where}: {detail}. {fix}"
    return ExpressionError(message, source=shown, where=where, detail=detail, fix=fix)


def _parse_complaint(exc: jexc.JMESPathError) -> str:
    if isinstance(exc, jexc.EmptyExpressionError):
        return "the expression is empty"
    if isinstance(exc, jexc.IncompleteExpressionError):
        return f"the expression ends too early at column {exc.lex_position + 1}"
    if isinstance(exc, jexc.LexerError):
        return f"{exc.message} at column {exc.lexer_position + 1}"
    if isinstance(exc, jexc.ParseError):
        return f"{exc.msg} at column {exc.lex_position + 1}"
    return str(exc)


def _parse_fix(source: str, shown: str) -> str:
    if shown != source:
        return f"{_PARSE_FIX}. {_TEMPLATE_FIX}"
    if source.startswith("{") and source.endswith("}"):
        return f"{_BRACED_CONDITION_FIX}. {_PARSE_FIX}"
    return _PARSE_FIX


def _runtime_complaint(exc: Exception) -> str:
    if isinstance(exc, jexc.JMESPathTypeError):
        # The offending value is left out on purpose: it may be a secret argument.
        expected = ", ".join(exc.expected_types)
        return f"{exc.function_name}() got {exc.actual_type}, expected {expected}"
    return str(exc)


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children", ()):
        if isinstance(child, dict):
            yield from _walk(child)


def _root_children(node: dict[str, Any]) -> list[dict[str, Any]]:
    kids = [c for c in node.get("children", ()) if isinstance(c, dict)]
    if node["type"] in _LEFT_ROOTED:
        return kids[:1]
    return kids if node["type"] in _INHERITING else []


def _root_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in _root_children(node):
        yield from _root_nodes(child)


def _check_node(node: dict[str, Any], shown: str, where: str) -> None:
    kind = node["type"]
    if kind == "function_expression":
        _check_call(node, shown, where)
    elif kind == "subexpression" and node["children"][0]["type"] == "not_expression":
        detail = "`!` binds tighter than `.`, so `!a.b` means `(!a).b`, which is always null"
        raise _error(shown, where, detail, "Add parentheses: write `!(a.b)`")


def _check_call(node: dict[str, Any], shown: str, where: str) -> None:
    name = node["value"]
    spec = _FUNCTION_TABLE.get(name)
    if spec is None:
        fix = did_you_mean(
            name,
            sorted(_FUNCTION_TABLE),
            f"Use a JMESPath built-in or one of {', '.join(_CUSTOM_FUNCTIONS)}.",
        )
        raise _error(shown, where, f"calls unknown function {name}()", fix)
    signature, count = spec["signature"], len(node["children"])
    variadic = bool(signature) and signature[-1].get("variadic", False)
    if count < len(signature) if variadic else count != len(signature):
        wanted = f"{'at least ' if variadic else ''}{len(signature)}"
        detail = f"{name}() takes {wanted} argument(s) but gets {count}"
        raise _error(shown, where, detail, "Fix the argument list")
    if name in ("regex", "regex_all"):
        _check_pattern(name, node["children"][1], shown, where)


def _check_pattern(name: str, node: dict[str, Any], shown: str, where: str) -> None:
    if node["type"] != "literal" or not isinstance(node["value"], str):
        return
    try:
        # Python 3.10 only warns about what later versions refuse (flags not at the start,
        # possible set operations): refused here on every version alike.
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            warnings.simplefilter("error", FutureWarning)
            re.compile(node["value"])
    except (re.error, DeprecationWarning, FutureWarning) as exc:
        detail = f"{name}() pattern is not a valid regular expression ({exc})"
        raise _error(shown, where, detail, "Fix the pattern (Python `re` syntax)") from None


def _check_roots(tree: dict[str, Any], shown: str, where: str) -> None:
    for node in _root_nodes(tree):
        if node["type"] == "field" and node["value"] not in CONTEXT_NAMES:
            name = node["value"]
            detail = f"names `{name}`; expressions start from one of {', '.join(CONTEXT_NAMES)}"
            fallback = (
                f"Start from a context name, e.g. args.{name}; for literal text write '{name}'."
            )
            raise _error(shown, where, detail, did_you_mean(name, CONTEXT_NAMES, fallback))


def _chain(node: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The field names a node reads from its input, and whether that is all it does."""
    kind = node["type"]
    if kind == "field":
        return (node["value"],), True
    if kind == "subexpression":
        names: tuple[str, ...] = ()
        for child in node["children"]:
            more, plain = _chain(child)
            names += more
            if not plain:
                return names, False
        return names, True
    if kind in _SPINE:
        return _chain(node["children"][0])[0], False
    return (), False


def _paths(node: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    names, _ = _chain(node)
    if names:
        yield names
        return
    for child in _root_children(node):
        yield from _paths(child)
