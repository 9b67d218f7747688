"""Argument strategies: drawn from each tool's inputSchema (or the registry's `test.schema`),
narrowed to small pools so that calls collide with what earlier calls created."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from compensator.registry import ToolPolicy

from .jsonschema import from_schema

__all__ = ["INTEGER_POOL", "STRING_POOL", "arguments", "narrow"]

INTEGER_POOL = (1, 3)
"""Integers without bounds are drawn from this range: small ids hit rows that exist."""

STRING_POOL = ("a", "b", "c")
"""Free-form strings are drawn from these, so a second create meets the first."""

MAX_ITEMS = 3

_COMBINATORS = ("anyOf", "oneOf", "allOf")


def narrow(schema: Any) -> Any:
    """A copy of a JSON Schema with small pools for integers, strings and arrays, and no
    undeclared object properties. Keywords the schema sets itself are kept."""
    if not isinstance(schema, Mapping):
        return schema
    out = {key: copy.deepcopy(value) for key, value in schema.items()}
    for key in _COMBINATORS:
        if isinstance(out.get(key), list):
            out[key] = [narrow(option) for option in out[key]]
    if "enum" in out or "const" in out:
        return out
    kind = out.get("type")
    if kind == "object" or "properties" in out:
        _narrow_object(out)
    elif kind in ("integer", "number"):
        _narrow_number(out)
    elif kind == "string" and not {"pattern", "format"} & out.keys():
        pool = [s for s in STRING_POOL if _fits(s, out)]
        if pool:
            return {k: v for k, v in out.items() if k not in ("minLength", "maxLength")} | {
                "enum": pool
            }
    elif kind == "array":
        out["maxItems"] = min(out.get("maxItems", MAX_ITEMS), MAX_ITEMS)
        if isinstance(out.get("items"), Mapping):
            out["items"] = narrow(out["items"])
    return out


def _narrow_number(out: dict[str, Any]) -> None:
    """Bound what the schema leaves open to a small pool: INTEGER_POOL, or a pool as wide
    next to the one bound the schema gives (so `maximum: 0` gets -2..0, not an empty 1..0)."""
    width = INTEGER_POOL[1] - INTEGER_POOL[0]
    low = out.get("minimum", out.get("exclusiveMinimum"))
    high = out.get("maximum", out.get("exclusiveMaximum"))
    numbers = (int, float)
    if low is None and high is None:
        out["minimum"], out["maximum"] = INTEGER_POOL
    elif high is None and isinstance(low, numbers):
        out["maximum"] = max(INTEGER_POOL[1], low + width)
    elif low is None and isinstance(high, numbers):
        out["minimum"] = INTEGER_POOL[0] if high >= INTEGER_POOL[1] else high - width


def _narrow_object(out: dict[str, Any]) -> None:
    properties = out.get("properties")
    if isinstance(properties, Mapping):
        out["properties"] = {name: narrow(sub) for name, sub in properties.items()}
    # Servers often reject or ignore arguments they do not declare: never invent them.
    out.setdefault("additionalProperties", False)


def _fits(text: str, schema: Mapping[str, Any]) -> bool:
    low = schema.get("minLength", 0)
    high = schema.get("maxLength", len(text))
    return bool(low <= len(text) <= high)


def arguments(
    tool: str, input_schema: Mapping[str, Any], policy: ToolPolicy | None
) -> st.SearchStrategy:
    """Arguments for one tool: the registry's `test.schema` as written when it has one, else
    the narrowed inputSchema; `test.examples` are drawn too."""
    test = policy.test if policy is not None else None
    if test is not None and test.schema is not None:
        strategy = from_schema(dict(test.schema), where=f"{tool} test.schema")
    else:
        strategy = from_schema(narrow(dict(input_schema)), where=f"{tool} inputSchema")
    if test is not None and test.examples:
        examples = [dict(example) for example in test.examples]
        strategy = st.one_of(st.sampled_from(examples), strategy)
    return strategy
