"""The JSON Schema vocabulary the converter knows, its errors, and the small helpers that
read keywords out of a schema."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from compensator.errors import CompensatorError

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
    "contentMediaType",
    "contentEncoding",
    # pydantic writes it next to `oneOf`; validators ignore it, the `oneOf` says it all.
    "discriminator",
}
# The keywords that only constrain values of one type; without `type`, they say which to draw.
_TYPE_KEYWORDS = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"},
    "string": {"minLength", "maxLength", "pattern"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
}
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_HANDLED = {"type", "enum", "const"}.union(*_TYPE_KEYWORDS.values())
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems")
# Merged by _merge_properties, _merge_items or by hand in _merge, never key by key.
_STRUCTURAL = {"allOf", "properties", "additionalProperties", "items", "prefixItems"}

_ROOT_URI = "urn:mcp-compensator:schema"

_JSON_SCALARS = st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5)
_ANY_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)


class UnsupportedSchema(CompensatorError, ValueError):
    """A schema uses a keyword the converter cannot honour, or no value satisfies it."""


class _Contradiction(Exception):
    """Two schemas merged by `allOf` that no value satisfies together."""


def _schema_list(schema: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = schema.get(key, [])
    if not isinstance(value, list):
        raise UnsupportedSchema(f"{where}: {key} must be a list of schemas, got {value!r}")
    return list(value)


def _types(schema: Mapping[str, Any], where: str) -> list[str] | None:
    """The types to draw: those `type` names, else those the keywords constrain, else any."""
    kind = schema.get("type")
    if kind is None:
        inferred = [name for name, keys in _TYPE_KEYWORDS.items() if keys & schema.keys()]
        return inferred or None
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list):
        raise UnsupportedSchema(f"{where}: type must be a name or a list, got {kind!r}")
    for name in kinds:
        if name not in _TYPES:
            raise UnsupportedSchema(f"{where}: unknown type {name!r}")
    return list(kinds)


def _number(schema: Mapping[str, Any], key: str, where: str) -> Any:
    value = schema.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UnsupportedSchema(f"{where}: {key} must be a number, got {value!r}")
    return value


def _count(schema: Mapping[str, Any], key: str, where: str) -> int | None:
    value = _number(schema, key, where)
    return None if value is None else math.ceil(value) if "min" in key else math.floor(value)


def _lower(schema: Mapping[str, Any], where: str) -> tuple[Any, bool] | None:
    """The tightest lower bound and whether it is exclusive."""
    bounds = [
        (value, exclusive)
        for key, exclusive in (("minimum", False), ("exclusiveMinimum", True))
        if (value := _number(schema, key, where)) is not None
    ]
    return max(bounds) if bounds else None


def _upper(schema: Mapping[str, Any], where: str) -> tuple[Any, bool] | None:
    bounds = [
        (value, exclusive)
        for key, exclusive in (("maximum", False), ("exclusiveMaximum", True))
        if (value := _number(schema, key, where)) is not None
    ]
    # At equal values the exclusive bound is the tighter one.
    return min(bounds, key=lambda bound: (bound[0], not bound[1])) if bounds else None


def _integer_range(lower: Any, upper: Any) -> tuple[int | None, int | None]:
    low = None if lower is None else math.floor(lower[0]) + 1 if lower[1] else math.ceil(lower[0])
    high = None if upper is None else math.ceil(upper[0]) - 1 if upper[1] else math.floor(upper[0])
    return low, high


def _empty_interval(lower: tuple[Any, bool], upper: tuple[Any, bool]) -> bool:
    return bool(lower[0] > upper[0] or (lower[0] == upper[0] and (lower[1] or upper[1])))


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) or value.is_integer()


def _json_key(value: Any) -> Any:
    """Equal for values JSON calls equal: 1 and 1.0 are, True and 1 are not."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((k, _json_key(v)) for k, v in value.items()))
    if isinstance(value, Sequence):
        return ("array", tuple(_json_key(v) for v in value))
    return ("other", repr(value))


def _all_unique(values: list[Any]) -> bool:
    return len({_json_key(v) for v in values}) == len(values)


def _distinct_values(schema: Any) -> int | None:
    """How many JSON-distinct values the items schema allows, when it is a small finite set."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return 1
    if isinstance(schema.get("enum"), list):
        return len({_json_key(v) for v in schema["enum"]})
    return {"boolean": 2, "null": 1}.get(str(schema.get("type")))


def _tuple_array(
    prefix: list[st.SearchStrategy[Any]], items: st.SearchStrategy[Any], size: int
) -> st.SearchStrategy[list[Any]]:
    parts = prefix[:size] + [items] * (size - len(prefix))
    return st.tuples(*parts).map(list)


def _absolute_refs(node: Any) -> Any:
    """A copy of a subschema whose local `$ref`s point into the root document."""
    if isinstance(node, list):
        return [_absolute_refs(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = _ROOT_URI + value
        elif key in ("enum", "const", "default", "examples"):
            out[key] = value  # values, not schemas
        else:
            out[key] = _absolute_refs(value)
    return out
