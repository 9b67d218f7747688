"""Load YAML (safe tags only) into plain values, keeping the line of every key and list item."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import RegistryError

__all__ = ["join_key", "line_of", "load_with_lines", "located_error"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_SCALARS = (str, int, float, bool, type(None))
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted; registries need about ten levels."""
MAX_VALUES = 100_000
"""Most values a document may hold once aliases are expanded (an alias bomb has billions)."""


def located_error(path: str, line: int, key: str, problem: str, fix: str) -> RegistryError:
    """A RegistryError reading `{path}:{line}: {key}: {problem}. {fix}`."""
    shown = key or "(top level)"
    message = f"{path}:{line}: {shown}: {problem}. {fix}"
    return RegistryError(message, path=path, line=line, key=shown, fix=fix)


def join_key(key: str, name: str) -> str:
    """The dotted key of `name` inside `key`."""
    return f"{key}.{name}" if key else name


def line_of(lines: dict[str, int], key: str) -> int:
    """The line of `key`, or of its nearest recorded parent; 1 for the document."""
    while key:
        if key in lines:
            return lines[key]
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    return 1


def load_with_lines(text: str, path: str) -> tuple[Any, dict[str, int]]:
    """Parse `text`; return its value and a map from dotted key (`a.b[0].c`) to 1-based line."""
    try:
        _check_depth(text, path)  # the composer recurses once per level: refuse deep text first
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, path) from None
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, path) from None
    except yaml.YAMLError as exc:
        raise located_error(path, 1, "", f"not valid YAML ({exc})", "Fix the file") from None
    lines: dict[str, int] = {}
    if root is None:
        return None, lines
    return _Converter(path, lines, set()).value(root, ""), lines


def _check_depth(text: str, path: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, at the line where it gets too deep."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                problem = f"lists and mappings are nested more than {MAX_DEPTH} levels deep"
                raise located_error(path, line, "", problem, "Flatten the structure")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _reader_error(exc: yaml.reader.ReaderError, text: str, path: str) -> RegistryError:
    """A character YAML does not allow (a control character, a lone surrogate)."""
    position = max(0, min(exc.position, len(text)))
    line = text.count("\n", 0, position) + 1
    problem = f"character U+{exc.character:04X} is not allowed in YAML ({exc.reason})"
    if isinstance(exc.character, bytes):
        problem = f"the file is not valid text ({exc.reason})"
    return located_error(
        path, line, "", problem, "Remove the character or escape it in a quoted string"
    )


def _syntax_error(exc: yaml.MarkedYAMLError, path: str) -> RegistryError:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else 1
    context = f" ({exc.context})" if exc.context else ""
    if exc.context and exc.context_mark is not None and exc.context_mark.line + 1 != line:
        context = f" ({exc.context} started on line {exc.context_mark.line + 1})"
    problem = f"invalid YAML: {exc.problem or 'syntax error'}{context}"
    fix = "Fix the YAML syntax here: check indentation, colons and quotes."
    return located_error(path, line, "", problem, fix)


class _Converter:
    """Turns composed nodes into dicts, lists and scalars, recording lines as it goes."""

    def __init__(self, path: str, lines: dict[str, int], active: set[int]) -> None:
        self.path = path
        self.lines = lines
        self.active = active
        self.loader = yaml.SafeLoader("")
        self.depth = 0
        self.count = 0

    def error(self, node: Node, key: str, problem: str, fix: str) -> RegistryError:
        return located_error(self.path, node.start_mark.line + 1, key, problem, fix)

    def value(self, node: Node, key: str) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            problem = f"the document holds more than {MAX_VALUES} values once aliases are expanded"
            raise self.error(node, key, problem, "Repeat fewer aliases inside aliases")
        if isinstance(node, (MappingNode, SequenceNode)):
            if id(node) in self.active:
                raise self.error(node, key, "recursive alias", "Remove the alias cycle")
            if self.depth >= MAX_DEPTH:
                problem = f"nested more than {MAX_DEPTH} levels deep once aliases are expanded"
                raise self.error(node, key, problem, "Flatten the structure")
            self.active.add(id(node))
            self.depth += 1
            try:
                return (
                    self.mapping(node, key)
                    if isinstance(node, MappingNode)
                    else self.seq(node, key)
                )
            finally:
                self.active.discard(id(node))
                self.depth -= 1
        return self.scalar(node, key)

    def mapping(self, node: MappingNode, key: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            name = self.key_name(key_node, key)
            child = join_key(key, name)
            if name in out:
                first = f"the first is on line {self.lines[child]}"
                raise self.error(key_node, child, "duplicate key", f"Keep only one ({first}).")
            self.lines[child] = key_node.start_mark.line + 1
            out[name] = self.value(value_node, child)
        for merge in merges:
            self.merge(out, merge, key)
        return out

    def key_name(self, node: Node, key: str) -> str:
        if not isinstance(node, ScalarNode):
            raise self.error(node, key, "a mapping key must be a plain name", "Use a string key")
        return str(node.value)

    def merge(self, out: dict[str, Any], node: Node, key: str) -> None:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, MappingNode):
                fix = "Merge an alias of a mapping: <<: *name"
                raise self.error(source, key, "'<<' needs a mapping or a list of mappings", fix)
            lines: dict[str, int] = {}
            inner = _Converter(self.path, lines, self.active)
            inner.depth, inner.count = self.depth, self.count  # merges count against the limits
            values = inner.value(source, key)
            self.count = inner.count
            for name, value in values.items():
                if name not in out:
                    out[name] = value
                    self.adopt_lines(lines, join_key(key, name))

    def adopt_lines(self, lines: dict[str, int], child: str) -> None:
        for key, line in lines.items():
            if key == child or key.startswith((f"{child}.", f"{child}[")):
                self.lines[key] = line

    def seq(self, node: SequenceNode, key: str) -> list[Any]:
        out: list[Any] = []
        for index, item in enumerate(node.value):
            child = f"{key}[{index}]"
            self.lines[child] = item.start_mark.line + 1
            out.append(self.value(item, child))
        return out

    def scalar(self, node: Node, key: str) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "cannot read this value"
            raise self.error(node, key, problem, "Remove the tag or quote the value") from None
        except Exception:
            # PyYAML's constructors fail with any exception on `!!int abc`, `!!int`, `!!bool x`
            problem = f"the value is not a valid {node.tag.rsplit(':', 1)[-1]}"
            raise self.error(node, key, problem, "Remove the tag or quote the value") from None
        # Timestamps, binary and the like stay the text that was written.
        return value if isinstance(value, _PLAIN_SCALARS) else str(node.value)
