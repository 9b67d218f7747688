"""Merging `allOf` parts into one schema, keyword by keyword (a `$ref`'s siblings too)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from .vocabulary import (
    _IGNORED,
    _LOWER,
    _STRUCTURAL,
    _UPPER,
    _Contradiction,
    _json_key,
)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """One schema that holds exactly when both hold; keywords that cannot be merged move to
    `allOf`, which the converter checks with a validator."""
    merged = {**b, **a}
    residual = [*a.get("allOf", []), *b.get("allOf", [])]
    for key in (a.keys() & b.keys()) - _STRUCTURAL:
        value = _merge_keyword(key, a[key], b[key])
        if value is _UNMERGED:
            residual.append({key: b[key]})
        else:
            merged[key] = value
    _merge_properties(a, b, merged)
    _merge_items(a, b, merged)
    if residual:
        merged["allOf"] = residual
    return merged


_UNMERGED = object()


def _merge_keyword(key: str, a: Any, b: Any) -> Any:
    if key in _IGNORED or _json_key(a) == _json_key(b):
        return a
    if key == "type":
        return _intersect_types(a, b)
    if key == "enum":
        return _intersect_values(a, b)
    if key == "const":
        raise _Contradiction(f"const {a!r} and const {b!r} differ")
    if key == "required":
        return list(dict.fromkeys([*a, *b]))
    if key in _LOWER:
        return max(a, b)
    if key in _UPPER:
        return min(a, b)
    if key == "uniqueItems":
        return a or b
    if key == "multipleOf":
        return _common_multiple(a, b)
    if key == "pattern":
        return _both_patterns(a, b)
    return _UNMERGED


def _intersect_types(a: Any, b: Any) -> Any:
    common: dict[str, None] = {}
    for x in [a] if isinstance(a, str) else a:
        for y in [b] if isinstance(b, str) else b:
            if x == y or {x, y} == {"integer", "number"}:
                common["integer" if "integer" in (x, y) else x] = None
    if not common:
        raise _Contradiction(f"type {a!r} and type {b!r} have no value in common")
    return next(iter(common)) if len(common) == 1 else list(common)


def _intersect_values(a: Any, b: Any) -> list[Any]:
    keys = {_json_key(value) for value in b}
    common = [value for value in a if _json_key(value) in keys]
    if not common:
        raise _Contradiction(f"enum {a!r} and enum {b!r} have no value in common")
    return common


def _common_multiple(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return math.lcm(a, b)
    if (Fraction(a) / Fraction(b)).denominator == 1:
        return a
    if (Fraction(b) / Fraction(a)).denominator == 1:
        return b
    return _UNMERGED


def _both_patterns(a: Any, b: Any) -> Any:
    """One pattern that a string matches (re.search) exactly when it matches both: the
    lookahead finds `a` anywhere, then `b` is searched from the start too."""
    if not isinstance(a, str) or not isinstance(b, str) or re.search(r"\\[1-9]", b):
        return _UNMERGED  # b's numbered groups would shift inside the combined pattern
    both = rf"^(?=[\s\S]*?(?:{a}))[\s\S]*?(?:{b})"
    try:
        re.compile(both)
    except re.error:
        return _UNMERGED
    return both


def _merge_properties(a: Mapping[str, Any], b: Mapping[str, Any], merged: dict) -> None:
    """A name one part declares and the other does not is, for the other part, an additional
    property: that part's additionalProperties applies to it."""
    if not {"properties", "additionalProperties"} & (a.keys() | b.keys()):
        return
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
    names = dict.fromkeys([*props_a, *props_b])
    properties = {n: _both(props_a.get(n, extra_a), props_b.get(n, extra_b)) for n in names}
    merged.pop("properties", None)
    if properties:
        merged["properties"] = properties
    if "additionalProperties" in merged:
        merged["additionalProperties"] = _both(extra_a, extra_b)


def _merge_items(a: Mapping[str, Any], b: Mapping[str, Any], merged: dict) -> None:
    """Position i of the merged array follows both parts' schema for position i."""
    if not {"items", "prefixItems"} & (a.keys() | b.keys()):
        return
    prefix_a, prefix_b = a.get("prefixItems", []), b.get("prefixItems", [])
    rest_a, rest_b = a.get("items", True), b.get("items", True)
    count = max(len(prefix_a), len(prefix_b))
    merged.pop("prefixItems", None)
    if count:
        merged["prefixItems"] = [
            _both(_at(prefix_a, rest_a, i), _at(prefix_b, rest_b, i)) for i in range(count)
        ]
    merged.pop("items", None)
    rest = _both(rest_a, rest_b)
    if rest is not True:
        merged["items"] = rest


def _at(prefix: Sequence[Any], rest: Any, index: int) -> Any:
    return prefix[index] if index < len(prefix) else rest


def _both(a: Any, b: Any) -> Any:
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    return {"allOf": [a, b]}
