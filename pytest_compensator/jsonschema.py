"""Hypothesis strategies from the JSON Schema subset that MCP tool input schemas use.

hypothesis-jsonschema 0.23 (its latest release) drives Hypothesis internals that current
Hypothesis no longer has and fails on every object schema, so the plugin carries this small
converter instead. Unsupported keywords raise `UnsupportedSchema` naming the keyword and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from compensator.errors import CompensatorError

__all__ = ["UnsupportedSchema", "from_schema"]

_IGNORED = {
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "format",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
}
_JSON_SCALARS = st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5)
_ANY_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)


class UnsupportedSchema(CompensatorError, ValueError):
    """A schema uses a keyword the converter cannot honour."""


def from_schema(schema: Any, *, where: str = "inputSchema") -> st.SearchStrategy[Any]:
    """A strategy for values valid under `schema` (Draft 2020-12 subset)."""
    return _Converter(schema if isinstance(schema, Mapping) else {}, where).build(schema, where)


class _Converter:
    def __init__(self, root: Mapping[str, Any], where: str) -> None:
        self.root = root
        self.where = where

    def build(self, schema: Any, where: str) -> st.SearchStrategy[Any]:
        if schema is True or schema == {}:
            return _ANY_JSON
        if schema is False:
            return st.nothing()
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema(f"{where}: a schema must be an object, got {schema!r}")
        if "$ref" in schema:
            return self.build(self.resolve(schema["$ref"], where), where)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(list(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key}
                options = [self.build({**rest, **o}, f"{where}.{key}") for o in schema[key]]
                return st.one_of(options)
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged.update(part)
            return self.build(merged, where)
        self.check_keywords(schema, where)
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([self.build({**schema, "type": k}, where) for k in kind])
        return self.typed(kind, schema, where)

    def resolve(self, ref: str, where: str) -> Any:
        if not ref.startswith("#/"):
            raise UnsupportedSchema(f"{where}: only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            if not isinstance(node, Mapping) or part not in node:
                raise UnsupportedSchema(f"{where}: $ref {ref!r} points nowhere")
            node = node[part]
        return node

    def check_keywords(self, schema: Mapping[str, Any], where: str) -> None:
        known = _IGNORED | set(_HANDLED)
        unknown = sorted(set(schema) - known)
        if unknown:
            raise UnsupportedSchema(
                f"{where}: cannot generate values for keyword(s) {', '.join(unknown)}. "
                "Give the tool a `test.schema` (a simpler JSON Schema) or `test.examples` "
                "in the registry."
            )

    def typed(self, kind: Any, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        if kind is None:
            return self.untyped(schema, where)
        builder = getattr(self, f"build_{kind}", None)
        if builder is None:
            raise UnsupportedSchema(f"{where}: unknown type {kind!r}")
        strategy: st.SearchStrategy[Any] = builder(schema, where)
        return strategy

    def untyped(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        if "properties" in schema:
            return self.build_object(schema, where)
        if "items" in schema:
            return self.build_array(schema, where)
        return _ANY_JSON

    def build_null(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        return st.none()

    def build_boolean(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        return st.booleans()

    def build_integer(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        low, high = _bounds(schema, integer=True)
        strategy = st.integers(low, high)
        step = schema.get("multipleOf")
        return strategy.filter(lambda n: n % step == 0) if step else strategy

    def build_number(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        low, high = _bounds(schema, integer=False)
        return st.floats(low, high, allow_nan=False, allow_infinity=False)

    def build_string(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if "pattern" in schema:
            text = st.from_regex(schema["pattern"], fullmatch=False)
            return text.filter(lambda s: low <= len(s) <= (high if high is not None else len(s)))
        return st.text(min_size=low, max_size=high if high is not None else max(low, 10))

    def build_array(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        items = self.build(schema.get("items", {}), f"{where}.items")
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, 5))
        if schema.get("uniqueItems"):
            return st.lists(items, min_size=low, max_size=high, unique_by=repr)
        return st.lists(items, min_size=low, max_size=high)

    def build_object(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        properties = schema.get("properties", {})
        required = [name for name in schema.get("required", []) if name in properties]
        optional = [name for name in properties if name not in required]
        fixed = {n: self.build(properties[n], f"{where}.{n}") for n in required}
        maybe = {n: self.build(properties[n], f"{where}.{n}") for n in optional}
        extra = schema.get("additionalProperties", False)
        base = st.fixed_dictionaries(fixed, optional=maybe)
        if extra is False or extra is None:
            return base
        values = _ANY_JSON if extra is True else self.build(extra, f"{where}.*")
        more = st.dictionaries(st.text(min_size=1, max_size=5), values, max_size=2)
        return st.tuples(more, base).map(lambda pair: {**pair[0], **pair[1]})


_HANDLED = (
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
)


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[Any, Any]:
    low = schema.get("minimum")
    high = schema.get("maximum")
    if "exclusiveMinimum" in schema:
        value = schema["exclusiveMinimum"]
        low = value + 1 if integer else value
    if "exclusiveMaximum" in schema:
        value = schema["exclusiveMaximum"]
        high = value - 1 if integer else value
    return low, high
