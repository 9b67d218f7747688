"""Hypothesis strategies from the JSON Schema subset that MCP tool input schemas use.

hypothesis-jsonschema 0.23 (its latest release) drives Hypothesis internals that current
Hypothesis no longer has and fails on every object schema, so the plugin carries this small
converter instead. Unsupported keywords raise `UnsupportedSchema` naming the keyword and the fix.

Every value drawn is valid under the schema with Draft 2020-12 semantics: `allOf` parts and the
siblings of a `$ref` are merged keyword by keyword, a recursive `$ref` is unrolled a few levels
deep, and the few combinations without an exact generator (`oneOf`, two `anyOf`s, a float
`multipleOf`, `enum` next to other keywords, ...) are checked with a `jsonschema` validator.
A schema that no value satisfies raises `UnsupportedSchema` saying why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

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

_MAX_OPEN_REFS = 3
"""How many times one `$ref` may be open on the path being built: a recursive schema is
unrolled that deep, and the innermost level draws only what needs no further recursion."""

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


def from_schema(schema: Any, *, where: str = "inputSchema") -> st.SearchStrategy[Any]:
    """A strategy for values valid under `schema` (Draft 2020-12 subset)."""
    converter = _Converter(schema if isinstance(schema, Mapping) else {})
    strategy = converter.build(schema, where)
    # `is_empty` is how Hypothesis itself knows that `nothing()` reached the top.
    if strategy.is_empty:
        reasons = "; ".join(dict.fromkeys(converter.unsatisfied)) or "no reason recorded"
        raise UnsupportedSchema(
            f"{where}: no value satisfies the schema ({reasons}). Fix the schema, or give the "
            "tool a `test.schema` (a simpler JSON Schema) or `test.examples` in the registry."
        )
    return strategy


class _Converter:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.unsatisfied: list[str] = []
        self.open_refs: list[str] = []
        self.memo: dict[tuple[str, int], st.SearchStrategy[Any]] = {}
        self.registry: Any = None

    # -- combinators and references -----------------------------------------------------

    def build(self, schema: Any, where: str) -> st.SearchStrategy[Any]:
        key = self.memo_key(schema)
        if key is not None and key in self.memo:
            return self.memo[key]
        flat, refs = self.flatten(schema, where, ())
        deep = [ref for ref in refs if self.open_refs.count(ref) >= _MAX_OPEN_REFS]
        if deep:
            return self.unsat(where, f"the recursion through $ref {deep[0]!r} has no end")
        self.open_refs.extend(refs)
        try:
            strategy = self.build_flat(flat, where)
        finally:
            del self.open_refs[len(self.open_refs) - len(refs) :]
        if key is not None:
            self.memo[key] = strategy
        return strategy

    def memo_key(self, schema: Any) -> tuple[str, int] | None:
        """A bare `$ref` builds the same strategy at the same recursion depth: build it once,
        so a schema with many references to one definition stays small."""
        if not isinstance(schema, Mapping) or set(schema) - _IGNORED != {"$ref"}:
            return None
        ref = schema["$ref"]
        return (ref, self.open_refs.count(ref)) if isinstance(ref, str) else None

    def flatten(self, schema: Any, where: str, chain: tuple[str, ...]) -> tuple[Any, list[str]]:
        """`schema` with its `$ref` and `allOf` parts merged in (a dict, or False when they
        contradict each other), and the references inlined on the way."""
        if isinstance(schema, bool):
            return schema, []
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema(f"{where}: a schema must be an object, got {schema!r}")
        flat: Any = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
        refs: list[str] = []
        parts = _schema_list(schema, "allOf", where)
        if "$ref" in schema:
            parts.insert(0, {"$ref": schema["$ref"]})
        for part in parts:
            if isinstance(part, Mapping) and set(part) == {"$ref"}:
                ref = part["$ref"]
                if ref in chain:
                    cycle = " -> ".join((*chain, ref))
                    raise UnsupportedSchema(f"{where}: $ref cycle with no schema between: {cycle}")
                part, inner = self.flatten(self.resolve(ref, where), where, (*chain, ref))
                refs += [ref, *inner]
            else:
                part, inner = self.flatten(part, where, chain)
                refs += inner
            flat = self.combine(flat, part, where)
        return flat, refs

    def combine(self, flat: Any, part: Any, where: str) -> Any:
        if flat is False or part is True:
            return flat
        if part is False:
            return self.contradiction(where, "an allOf part is the schema false")
        try:
            return _merge(flat, part)
        except _Contradiction as error:
            return self.contradiction(where, str(error))

    def contradiction(self, where: str, why: str) -> bool:
        self.unsatisfied.append(f"{where}: {why}")
        return False

    def unsat(self, where: str, why: str) -> st.SearchStrategy[Any]:
        self.unsatisfied.append(f"{where}: {why}")
        return st.nothing()

    def resolve(self, ref: Any, where: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema(f"{where}: only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[1:].split("/")[1:]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise UnsupportedSchema(f"{where}: $ref {ref!r} points nowhere")
        return node

    def validator(self, schema: Any) -> Any:
        """A Draft 2020-12 validator for `schema`, its local `$ref`s resolved in the root.

        Only the combinations without an exact generator need one, so jsonschema (a
        dependency of the MCP SDK) is imported here, not with the plugin."""
        from jsonschema import Draft202012Validator
        from referencing import Registry
        from referencing.jsonschema import DRAFT202012

        if self.registry is None:
            resource = DRAFT202012.create_resource(self.root)
            self.registry = Registry().with_resource(_ROOT_URI, resource)
        return Draft202012Validator(_absolute_refs(schema), registry=self.registry)

    # -- one merged schema --------------------------------------------------------------

    def build_flat(self, flat: Any, where: str) -> st.SearchStrategy[Any]:
        if flat is True:
            return _ANY_JSON
        if flat is False:
            return self.unsat(where, "the schema is false")
        if "const" in flat or "enum" in flat:
            return self.build_enum(flat, where)
        residual = flat.get("allOf")
        strategy = self.build_plain({k: v for k, v in flat.items() if k != "allOf"}, where)
        if residual:
            # allOf parts whose keywords could not be merged (two anyOfs, two oneOfs, ...).
            strategy = strategy.filter(self.validator({"allOf": residual}).is_valid)
        return strategy

    def build_plain(self, flat: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        for key in ("anyOf", "oneOf"):
            if key in flat:
                return self.build_options(flat, key, where)
        self.check_keywords(flat, where)
        kinds = _types(flat, where)
        if kinds is None:
            return _ANY_JSON
        return st.one_of([getattr(self, f"build_{kind}")(flat, where) for kind in kinds])

    def build_options(self, flat: Mapping[str, Any], key: str, where: str) -> st.SearchStrategy:
        rest = {k: v for k, v in flat.items() if k != key}
        options = _schema_list(flat, key, where)
        strategy = st.one_of(
            [self.build({"allOf": [rest, o]}, f"{where}.{key}[{i}]") for i, o in enumerate(options)]
        )
        if key == "oneOf":
            # A value drawn for one option may match another too, and oneOf forbids that.
            strategy = strategy.filter(self.validator(flat).is_valid)
        return strategy

    def build_enum(self, flat: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        values = [flat["const"]] if "const" in flat else flat["enum"]
        if not isinstance(values, list):
            raise UnsupportedSchema(f"{where}: enum must be a list, got {values!r}")
        # The other keywords (type, bounds, pattern, ...) still apply to the listed values.
        valid = self.validator(flat).is_valid
        allowed = [value for value in values if valid(value)]
        if not allowed:
            return self.unsat(where, f"none of the values {values!r} satisfies the schema")
        return st.sampled_from(allowed)

    def check_keywords(self, schema: Mapping[str, Any], where: str) -> None:
        unknown = sorted(set(schema) - _IGNORED - _HANDLED)
        if unknown:
            raise UnsupportedSchema(
                f"{where}: cannot generate values for keyword(s) {', '.join(unknown)}. "
                "Give the tool a `test.schema` (a simpler JSON Schema) or `test.examples` "
                "in the registry."
            )

    # -- one type -----------------------------------------------------------------------

    def build_null(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        return st.none()

    def build_boolean(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        return st.booleans()

    def build_integer(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        step = _number(schema, "multipleOf", where)
        if step is not None and not _is_integer(step):
            # An integer that is a multiple of 0.5 or 1.5: let jsonschema's float check decide.
            return self.build_multiples(schema, step, where).filter(_is_integer).map(int)
        if step is not None:
            return self.build_multiples(schema, int(step), where)
        low, high = _integer_range(_lower(schema, where), _upper(schema, where))
        if low is not None and high is not None and low > high:
            return self.unsat(where, "no integer lies between the bounds")
        return st.integers(low, high)

    def build_number(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        step = _number(schema, "multipleOf", where)
        if step is not None:
            return self.build_multiples(schema, step, where)
        lower, upper = _lower(schema, where), _upper(schema, where)
        if lower and upper and _empty_interval(lower, upper):
            return self.unsat(where, "no number lies between the bounds")
        return st.floats(
            min_value=lower[0] if lower else None,
            max_value=upper[0] if upper else None,
            exclude_min=bool(lower and lower[1]),
            exclude_max=bool(upper and upper[1]),
            allow_nan=False,
            allow_infinity=False,
        )

    def build_multiples(
        self, schema: Mapping[str, Any], step: Any, where: str
    ) -> st.SearchStrategy:
        """k * step for the integers k that keep the value within the bounds."""
        if step <= 0:
            raise UnsupportedSchema(f"{where}: multipleOf must be positive, got {step!r}")
        exact = Fraction(step)
        lower, upper = _lower(schema, where), _upper(schema, where)
        scaled = [None if b is None else (Fraction(b[0]) / exact, b[1]) for b in (lower, upper)]
        low, high = _integer_range(scaled[0], scaled[1])
        if low is not None and high is not None and low > high:
            return self.unsat(where, f"no multiple of {step} lies between the bounds")
        multiples = st.integers(low, high).map(lambda k: k * step)
        if isinstance(step, int):
            return multiples
        # k * 0.1 is not always a multiple of 0.1 in floating point: jsonschema's check decides.
        return multiples.filter(self.validator({**schema, "type": "number"}).is_valid)

    def build_string(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        low = _count(schema, "minLength", where) or 0
        high = _count(schema, "maxLength", where)
        if high is not None and low > high:
            return self.unsat(where, f"minLength {low} > maxLength {high}")
        if "pattern" not in schema:
            return st.text(min_size=low, max_size=high if high is not None else max(low, 10))
        pattern = schema["pattern"]
        try:
            re.compile(pattern)
        except (re.error, TypeError) as error:
            raise UnsupportedSchema(f"{where}: pattern {pattern!r} is invalid: {error}") from None
        # A full match is short, so it meets a maxLength more often; a search match may carry
        # text around it, which a minLength may need.
        text = st.from_regex(pattern, fullmatch=True) | st.from_regex(pattern)
        if low == 0 and high is None:
            return text
        return text.filter(lambda s: low <= len(s) and (high is None or len(s) <= high))

    def build_array(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        prefix_schemas = _schema_list(schema, "prefixItems", where)
        items_schema = schema.get("items", True)
        if isinstance(items_schema, list):
            raise UnsupportedSchema(
                f"{where}: items as a list is draft-07 tuple syntax; write prefixItems instead"
            )
        prefix = [self.build(s, f"{where}.prefixItems[{i}]") for i, s in enumerate(prefix_schemas)]
        items = self.build(items_schema, f"{where}.items")
        low = _count(schema, "minItems", where) or 0
        high = _count(schema, "maxItems", where)
        high = max(low, len(prefix), 5) if high is None else high
        # Positions that nothing satisfies (false, or a recursion cut off) end the array.
        for position, strategy in enumerate([*prefix, items]):
            if strategy.is_empty:
                high = min(high, position)
                break
        unique = schema.get("uniqueItems") is True
        distinct = _distinct_values(items_schema) if unique and not prefix else None
        if distinct is not None:
            high = min(high, distinct)
        if low > high:
            return self.unsat(where, f"no array has between {low} and {high} such items")
        if not prefix:
            return st.lists(
                items, min_size=low, max_size=high, unique_by=_json_key if unique else None
            )
        arrays = st.integers(low, high).flatmap(lambda n: _tuple_array(prefix, items, n))
        return arrays.filter(_all_unique) if unique else arrays

    def build_object(self, schema: Mapping[str, Any], where: str) -> st.SearchStrategy[Any]:
        properties = schema.get("properties", {})
        if not isinstance(properties, Mapping):
            raise UnsupportedSchema(f"{where}: properties must be an object")
        extra = schema.get("additionalProperties", True)
        required = list(dict.fromkeys(schema.get("required", [])))
        fixed = {n: self.build_required(n, properties, extra, where) for n in required}
        optional = [name for name in properties if name not in fixed]
        maybe = {n: self.build(properties[n], f"{where}.{n}") for n in optional}
        base = st.fixed_dictionaries(fixed, optional=maybe)
        # Servers often reject arguments they do not declare: invent some only when told to.
        if "additionalProperties" not in schema or extra is False:
            return base
        values = self.build(extra, f"{where}.*")
        names = st.text(min_size=1, max_size=5).filter(
            lambda name: name not in properties and name not in fixed
        )
        more = st.dictionaries(names, values, max_size=2)
        return st.tuples(more, base).map(lambda pair: {**pair[0], **pair[1]})

    def build_required(
        self, name: str, properties: Mapping[str, Any], extra: Any, where: str
    ) -> st.SearchStrategy[Any]:
        if name in properties:
            return self.build(properties[name], f"{where}.{name}")
        if extra is False:
            return self.unsat(
                where,
                f"required property {name!r} is not in properties and additionalProperties "
                "is false",
            )
        # Undeclared, so additionalProperties (any value when absent) governs it.
        return self.build(extra, f"{where}.{name}")


# -- merging allOf parts ------------------------------------------------------------------


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


# -- small helpers ------------------------------------------------------------------------


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
