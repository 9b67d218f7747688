"""The converter: a JSON Schema (the subset MCP tool input schemas use) to a Hypothesis
strategy. The package docstring says what it honours."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

from hypothesis import strategies as st

from .merge import _merge
from .vocabulary import (
    _ANY_JSON,
    _HANDLED,
    _IGNORED,
    _ROOT_URI,
    UnsupportedSchema,
    _absolute_refs,
    _all_unique,
    _Contradiction,
    _count,
    _distinct_values,
    _empty_interval,
    _integer_range,
    _is_integer,
    _json_key,
    _lower,
    _number,
    _schema_list,
    _tuple_array,
    _types,
    _upper,
)

_MAX_OPEN_REFS = 3
"""How many times one `$ref` may be open on the path being built: a recursive schema is
unrolled that deep, and the innermost level draws only what needs no further recursion."""


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
