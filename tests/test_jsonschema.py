"""The JSON Schema to Hypothesis converter and the narrowing of tool schemas.

The oracle: every value `from_schema(schema)` draws is valid under `schema` for jsonschema's
Draft 2020-12 validator, over hand-written schemas (one or more per keyword), the inputSchemas
of the real servers the registries use (tests/data/schemas/, dumped from the running servers),
their narrowed versions, and small schemas Hypothesis writes itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from pytest_compensator.jsonschema import UnsupportedSchema, from_schema
from pytest_compensator.strategies import STRING_POOL, narrow

SCHEMAS = Path(__file__).resolve().parent / "data" / "schemas"

FASTMCP_LIKE = {
    "type": "object",
    "title": "add_taskArguments",
    "properties": {
        "title": {"type": "string", "title": "Title"},
        "parent_id": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "maxItems": 2},
        "mode": {"enum": ["fast", "slow"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
        "ratio": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "n": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4},
    },
    "required": ["title", "n"],
    "additionalProperties": False,
    "$defs": {"Tag": {"type": "object", "properties": {"k": {"const": "v"}}, "required": ["k"]}},
}

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
        }
    },
    "$ref": "#/$defs/node",
}

# One or more schemas per keyword; the comment says what the converter once got wrong there.
HAND: dict[str, Any] = {
    "fastmcp-like": FASTMCP_LIKE,
    # allOf was a dict update: the last part's properties and required won.
    "allOf-properties-required": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        ]
    },
    "allOf-shared-property": {
        "type": "object",
        "allOf": [
            {"properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
            {"properties": {"n": {"maximum": 5}}},
        ],
    },
    "allOf-bounds": {"type": "integer", "allOf": [{"minimum": 3}, {"minimum": 1, "maximum": 9}]},
    "allOf-types": {"allOf": [{"type": ["integer", "string"]}, {"type": ["number", "null"]}]},
    "allOf-additionalProperties-false": {
        "allOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "additionalProperties": False,
            },
            {"properties": {"a": {"minimum": 5}, "b": {"type": "string"}}},
        ]
    },
    "allOf-ref": {
        "$defs": {
            "base": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            }
        },
        "allOf": [
            {"$ref": "#/$defs/base"},
            {"properties": {"name": {"type": "string"}}, "required": ["name"]},
        ],
    },
    "ref-with-siblings": {
        "$defs": {"small": {"type": "integer", "maximum": 10}},
        "$ref": "#/$defs/small",
        "minimum": 8,
    },
    "allOf-two-patterns": {
        "type": "string",
        "maxLength": 8,
        "allOf": [{"pattern": "a"}, {"pattern": "b"}],
    },
    "allOf-two-anyOfs": {
        "allOf": [
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]},
        ]
    },
    "allOf-multipleOf": {"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]},
    "allOf-items": {
        "type": "array",
        "allOf": [
            {"prefixItems": [{"type": "integer"}], "items": {"type": "string"}},
            {"items": {"type": ["integer", "string"], "maximum": 3, "maxLength": 2}},
        ],
    },
    # Required names missing from properties were dropped.
    "required-not-in-properties": {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a", "b"],
    },
    "required-from-additionalProperties": {
        "type": "object",
        "required": ["x"],
        "additionalProperties": {"type": "integer"},
    },
    "additionalProperties-never-a-declared-name": {
        "type": "object",
        "properties": {"0": {"type": "integer"}, "": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    },
    "boolean-subschemas": {
        "type": "object",
        "properties": {"x": False, "y": True},
        "required": ["y"],
    },
    # A float exclusiveMinimum was inclusive and overrode minimum.
    "number-exclusiveMinimum": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "number-exclusiveMaximum": {"type": "number", "minimum": -1, "exclusiveMaximum": 0},
    "number-minimum-tighter": {
        "type": "number",
        "minimum": 5,
        "exclusiveMinimum": 1,
        "maximum": 6,
    },
    "number-exclusive-tighter": {
        "type": "number",
        "minimum": 1,
        "exclusiveMinimum": 5,
        "maximum": 6,
    },
    "integer-float-exclusive-bounds": {
        "type": "integer",
        "exclusiveMinimum": 0.5,
        "exclusiveMaximum": 3.5,
    },
    "integer-minimum-tighter": {"type": "integer", "minimum": 4, "exclusiveMinimum": 1},
    "integer-float-bounds": {"type": "integer", "minimum": -2.5, "maximum": 2.5},
    # A recursive $ref raised RecursionError.
    "recursive-tree": TREE,
    "recursive-root": {
        "type": "object",
        "properties": {"next": {"$ref": "#"}, "v": {"type": "string"}},
    },
    "recursive-required-list": {
        "$defs": {
            "n": {
                "type": "object",
                "properties": {
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 3}
                },
                "required": ["kids"],
            }
        },
        "$ref": "#/$defs/n",
    },
    "recursive-mutual": {
        "$defs": {
            "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}},
            "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 2},
        },
        "$ref": "#/$defs/a",
    },
    # Other keywords.
    "number-multipleOf-float": {
        "type": "number",
        "multipleOf": 0.1,
        "minimum": 0,
        "maximum": 2,
    },
    "number-multipleOf-exclusive": {
        "type": "number",
        "multipleOf": 0.25,
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 1,
    },
    "integer-multipleOf": {"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 50},
    "integer-multipleOf-float": {"type": "integer", "multipleOf": 1.5, "maximum": 30},
    "string-pattern-length": {
        "type": "string",
        "pattern": "^[a-z]+$",
        "minLength": 2,
        "maxLength": 4,
    },
    "string-pattern-unanchored": {"type": "string", "pattern": "[0-9]{2}", "maxLength": 3},
    "string-lengths": {"type": "string", "minLength": 3, "maxLength": 4},
    "uniqueItems-json-equality": {
        "type": "array",
        "items": {"enum": [1, 1.0, True, False, 0]},
        "uniqueItems": True,
    },
    "uniqueItems-nested": {
        "type": "array",
        "items": {"type": "array", "items": {"enum": [0, 0.0, False, 1]}, "maxItems": 1},
        "uniqueItems": True,
        "maxItems": 6,
    },
    "uniqueItems-few-values": {
        "type": "array",
        "items": {"type": "boolean"},
        "uniqueItems": True,
        "maxItems": 5,
    },
    "prefixItems": {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": {"type": "boolean"},
        "minItems": 1,
    },
    "prefixItems-closed": {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "null"}],
        "items": False,
    },
    "anyOf-with-siblings": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
        "anyOf": [{"required": ["b"]}, {"properties": {"a": {"minimum": 5}}}],
    },
    "oneOf-overlapping": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]},
    "oneOf-discriminated": {
        "$defs": {
            "Cat": {
                "type": "object",
                "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                "required": ["kind"],
            },
            "Dog": {
                "type": "object",
                "properties": {"kind": {"const": "dog"}},
                "required": ["kind"],
            },
        },
        "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
        "discriminator": {"propertyName": "kind"},
    },
    "type-list": {"type": ["string", "integer", "null"], "minimum": 3, "maxLength": 2},
    "enum-with-type": {"type": "string", "enum": ["a", 1, None, "b"]},
    "enum-with-pattern": {"type": "string", "pattern": "^a", "enum": ["ab", "ba", "ac"]},
    "const-with-type-list": {"type": ["integer", "null"], "const": None},
    "untyped-bounds": {"minimum": 30},
    "untyped-mixed-keywords": {"maxLength": 2, "maximum": 0},
    "ref-escaped-pointer": {
        "type": "object",
        "$defs": {"a/b~c": {"type": "integer", "minimum": 1}},
        "properties": {"x": {"$ref": "#/$defs/a~1b~0c"}},
        "required": ["x"],
    },
    "empty": {},
}


def _server_schemas() -> dict[str, Any]:
    corpus = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        for tool, schema in json.loads(path.read_text()).items():
            corpus[f"{path.stem}/{tool}"] = schema
    return corpus


SERVERS = _server_schemas()


def _assert_draws_are_valid(strategy_schema: Any, *against: Any, max_examples: int) -> None:
    validators = [Draft202012Validator(schema) for schema in against]

    # No example database: every corpus entry runs this one inner function, so a saved
    # failure of one schema would be replayed against all the others.
    @settings(max_examples=max_examples, deadline=None, database=None)
    @given(from_schema(strategy_schema))
    def check(value: Any) -> None:
        for validator in validators:
            errors = [error.message for error in validator.iter_errors(value)]
            assert not errors, f"{value!r} is invalid: {errors}"

    check()


@pytest.mark.parametrize("schema", HAND.values(), ids=HAND.keys())
def test_every_drawn_value_is_valid(schema):
    _assert_draws_are_valid(schema, schema, max_examples=40)


@pytest.mark.parametrize("schema", SERVERS.values(), ids=SERVERS.keys())
def test_every_value_drawn_for_a_real_server_is_valid(schema):
    _assert_draws_are_valid(schema, schema, max_examples=10)


@pytest.mark.parametrize("schema", [*SERVERS.values(), FASTMCP_LIKE], ids=[*SERVERS, "fastmcp"])
def test_narrowed_schemas_draw_values_valid_under_the_original(schema):
    _assert_draws_are_valid(narrow(schema), narrow(schema), schema, max_examples=10)


def test_the_server_corpus_is_there():
    assert {"filesystem", "sqlite", "tasks"} <= {name.split("/")[0] for name in SERVERS}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_values_follow_the_schema(data):
    value = data.draw(from_schema(FASTMCP_LIKE))
    assert set(value) <= set(FASTMCP_LIKE["properties"]) and {"title", "n"} <= set(value)
    assert isinstance(value["title"], str)
    assert 0 < value["n"] < 4
    assert value.get("parent_id") is None or isinstance(value["parent_id"], int)
    assert all(tag == {"k": "v"} for tag in value.get("tags", []))
    assert value.get("mode", "fast") in ("fast", "slow")
    assert "code" not in value or re.search(r"[A-Z]{2}[0-9]", value["code"])
    ratio = value.get("ratio")
    assert ratio is None or 0 <= ratio <= 1


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_narrowed_schema_draws_from_small_pools(data):
    value = data.draw(from_schema(narrow(FASTMCP_LIKE)))
    assert value["title"] in STRING_POOL
    assert value.get("parent_id") in (None, 1, 2, 3)
    assert 0 < value["n"] < 4  # the schema's own bounds win over the pool


def test_recursive_schemas_stay_small():
    def depth(node):
        return 1 + max((depth(child) for child in node.get("children", [])), default=0)

    @settings(max_examples=30, deadline=None)
    @given(from_schema(TREE))
    def check(tree):
        assert depth(tree) <= 3  # the recursion is unrolled three levels deep

    check()


def test_additional_properties_are_allowed_when_the_schema_says_so():
    schema = {"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}}

    @settings(max_examples=30, deadline=None)
    @given(from_schema(schema))
    def check(value):
        assert all(isinstance(v, int) for v in value.values())

    check()
    assert narrow({"type": "object", "properties": {}})["additionalProperties"] is False


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"x": {"not": {"type": "string"}}}}, "keyword(s) not"),
        ({"$ref": "https://example.com/s.json"}, "only local $ref"),
        ({"$ref": "#/$defs/Missing"}, "points nowhere"),
        ({"type": "tuple"}, "unknown type 'tuple'"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}, "cycle"),
        ({"type": "array", "items": [{"type": "integer"}]}, "write prefixItems"),
    ],
)
def test_unsupported_schemas_name_the_keyword_and_the_fix(schema, message):
    with pytest.raises(UnsupportedSchema, match=re.escape(message)):
        from_schema(schema, where="t__x inputSchema")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
            "required property 'b' is not in properties and additionalProperties is false",
        ),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "no value in common"),
        ({"type": "integer", "minimum": 5, "maximum": 3}, "no integer lies between"),
        ({"type": "number", "exclusiveMinimum": 1, "maximum": 1}, "no number lies between"),
        ({"type": "string", "enum": [1, 2]}, "none of the values [1, 2]"),
        (
            {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 3},
            "no array has between 3 and 2",
        ),
        (
            {
                "$defs": {"n": {"properties": {"n": {"$ref": "#/$defs/n"}}, "required": ["n"]}},
                "$ref": "#/$defs/n",
            },
            "recursion through $ref '#/$defs/n' has no end",
        ),
    ],
)
def test_unsatisfiable_schemas_say_why(schema, message):
    with pytest.raises(UnsupportedSchema, match=re.escape(message)):
        from_schema(schema, where="t__x inputSchema")


# -- schemas Hypothesis writes ----------------------------------------------------------

_NAMES = st.sampled_from(["a", "b", "c"])
_BOUND = st.none() | st.integers(-3, 3) | st.sampled_from([-1.5, 0.5, 2.25])


def _with(schema: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {**schema, **{k: v for k, v in optional.items() if v is not None}}


_LEAVES = st.one_of(
    st.builds(
        lambda kind, low, high, xlow, xhigh, step: _with(
            {"type": kind},
            minimum=low,
            maximum=high,
            exclusiveMinimum=xlow,
            exclusiveMaximum=xhigh,
            multipleOf=step,
        ),
        st.sampled_from(["integer", "number"]),
        _BOUND,
        _BOUND,
        _BOUND,
        _BOUND,
        st.none() | st.sampled_from([2, 3, 0.5]),
    ),
    st.builds(
        lambda low, high, pattern: _with(
            {"type": "string"}, minLength=low, maxLength=high, pattern=pattern
        ),
        st.none() | st.integers(0, 3),
        st.none() | st.integers(0, 4),
        st.none() | st.sampled_from(["^a", "b$", "[0-9]"]),
    ),
    st.builds(dict, type=st.sampled_from(["boolean", "null", ["integer", "string"]])),
    st.builds(dict, enum=st.lists(st.sampled_from([0, 1, 1.0, True, "a", None]), min_size=1)),
    st.just({}),
)


def _branches(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    objects = st.builds(
        lambda props, required, extra: _with(
            {"type": "object", "properties": props, "required": required},
            additionalProperties=extra,
        ),
        st.dictionaries(_NAMES, inner, max_size=3),
        st.lists(_NAMES, max_size=2, unique=True),
        st.none() | st.booleans() | inner,
    )
    arrays = st.builds(
        lambda items, low, high, unique: _with(
            {"type": "array", "items": items},
            minItems=low,
            maxItems=high,
            uniqueItems=unique,
        ),
        inner,
        st.none() | st.integers(0, 2),
        st.none() | st.integers(0, 3),
        st.none() | st.booleans(),
    )
    combined = st.builds(
        lambda key, parts: {key: parts},
        st.sampled_from(["allOf", "anyOf", "oneOf"]),
        st.lists(inner, min_size=1, max_size=3),
    )
    return objects | arrays | combined


GRAMMAR = st.recursive(_LEAVES, _branches, max_leaves=6)


# Many drawn schemas are contradictory (oneOf options that always overlap, bounds that leave
# one value a filter must find): those draws are rejected, which is what filter_too_much and
# too_slow measure. The hand and server corpora hold the schemas that matter.
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(schema=GRAMMAR, data=st.data())
def test_schemas_hypothesis_writes_draw_valid_values(schema, data):
    try:
        strategy = from_schema(schema)
    except UnsupportedSchema:
        return
    value = data.draw(strategy, label="value")
    errors = [error.message for error in Draft202012Validator(schema).iter_errors(value)]
    assert not errors, f"{value!r} is invalid under {schema!r}: {errors}"
