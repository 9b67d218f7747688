"""The JSON Schema to Hypothesis converter and the narrowing of tool schemas."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_compensator.jsonschema import UnsupportedSchema, from_schema
from pytest_compensator.strategies import STRING_POOL, narrow

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
    ],
)
def test_unsupported_schemas_name_the_keyword_and_the_fix(schema, message):
    with pytest.raises(UnsupportedSchema, match=re.escape(message)):
        from_schema(schema, where="t__x inputSchema")
