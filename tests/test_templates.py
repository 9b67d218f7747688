"""Unit tests for compensator.templates: expressions, templates, custom functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from compensator.errors import ExpressionError, RegistryError
from compensator.registry import parse_registry
from compensator.registry.expressions import (
    CONTEXT_NAMES,
    compile_expression,
    compile_template,
    is_truthy,
)

CONTEXT = {
    "args": {"id": 7, "title": "buy milk", "tags": ["a", "b"], "dry_run": False},
    "result": {"id": 42, "ok": True, "items": [{"id": 1, "done": True}, {"id": 2, "done": False}]},
    "snapshot": {"task": {"id": 7, "title": "old"}, "children": [], "links": [3, 4]},
}


def expr(source: str, **kwargs: bool):
    return compile_expression(source, where="test", **kwargs)


def test_context_names() -> None:
    assert CONTEXT_NAMES == ("args", "result", "snapshot", "snapshot_error", "change")


# -- templates ---------------------------------------------------------------------------


def test_braced_string_keeps_native_type() -> None:
    template = compile_template(
        {"id": "{result.id}", "tags": "{args.tags}", "task": "{snapshot.task}"}, where="t"
    )
    rendered = template.render(CONTEXT)
    assert rendered == {"id": 42, "tags": ["a", "b"], "task": {"id": 7, "title": "old"}}
    assert isinstance(rendered["id"], int)


def test_partial_strings_and_other_values_are_literal() -> None:
    value = {
        "note": "task {args.id} removed",
        "brace": "{",
        "empty": "{}",
        "blank": "{  }",
        "open": "{args.id",
        "n": 3,
        "flag": None,
    }
    template = compile_template(value, where="t")
    assert template.is_literal
    assert template.expressions() == ()
    assert template.render(CONTEXT) == value


def test_nested_walk_renders_lists_and_dicts() -> None:
    template = compile_template(
        {"outer": {"ids": ["{args.id}", "{result.id}", 5], "name": "{args.title}"}}, where="t"
    )
    assert template.render(CONTEXT) == {"outer": {"ids": [7, 42, 5], "name": "buy milk"}}
    assert not template.is_literal


def test_whole_value_template_and_missing_names_render_null() -> None:
    assert compile_template("{args}", where="t").render({"args": {"x": 1}}) == {"x": 1}
    assert compile_template({"x": "{snapshot_error}"}, where="t").render({}) == {"x": None}


def test_render_returns_a_fresh_structure() -> None:
    context = {"args": {"tags": ["a"]}}
    template = compile_template({"tags": "{args.tags}", "fixed": [1]}, where="t")
    first = template.render(context)
    first["tags"].append("mutated")
    first["fixed"].append(2)
    assert context["args"]["tags"] == ["a"]
    assert template.render(context) == {"tags": ["a"], "fixed": [1]}


def test_expressions_carry_nested_locations() -> None:
    template = compile_template(
        {"id": "{args.id}", "list": ["x", "{result.items}"]}, where="tools.t.inverse_args"
    )
    wheres = [e.where for e in template.expressions()]
    sources = [e.source for e in template.expressions()]
    assert wheres == ["tools.t.inverse_args.id", "tools.t.inverse_args.list[1]"]
    assert sources == ["args.id", "result.items"]


def test_template_error_names_nested_location() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_template({"a": {"b": ["ok", "{argz.id}"]}}, where="root")
    assert info.value.where == "root.a.b[1]"
    assert "`{argz.id}` at root.a.b[1]" in str(info.value)


def test_template_keeps_source() -> None:
    value = {"id": "{args.id}"}
    template = compile_template(value, where="t")
    value["id"] = "changed"
    assert template.source == {"id": "{args.id}"}


def test_double_braces_give_a_multiselect_hash() -> None:
    rendered = compile_template("{{key: args.id}}", where="t").render(CONTEXT)
    assert rendered == {"key": 7}


# -- evaluation --------------------------------------------------------------------------


def test_projection_and_filter() -> None:
    assert expr("result.items[*].id").evaluate(CONTEXT) == [1, 2]
    assert expr("result.items[?done].id").evaluate(CONTEXT) == [1]
    assert expr("result.items[?id > `1`] | [0].id").evaluate(CONTEXT) == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        (False, False),
        ("", False),
        ([], False),
        ({}, False),
        (0, True),
        (0.0, True),
        ("0", True),
        ([0], True),
        (True, True),
        ({"a": None}, True),
    ],
)
def test_truthiness(value: object, expected: bool) -> None:
    assert is_truthy(value) is expected
    assert expr("args.v").truthy({"args": {"v": value}}) is expected


def test_conditions() -> None:
    assert expr("length(snapshot.children) > `0`").truthy(CONTEXT) is False
    assert expr("length(snapshot.links) > `0`").truthy(CONTEXT) is True
    assert expr("!(args.dry_run)").truthy(CONTEXT) is True
    assert expr("result.ok == `false`").truthy(CONTEXT) is False


def test_runtime_type_error_is_expression_error_without_the_value() -> None:
    with pytest.raises(ExpressionError) as info:
        expr("abs(args.secret)").evaluate({"args": {"secret": "hunter2"}})
    assert "abs() got string" in str(info.value)
    assert "hunter2" not in str(info.value)


# -- custom functions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("created task id=42 ok", r"id=(\d+)", "42"),
        ("created task id=42 ok", r"id=\d+", "id=42"),
        ("a1 b2", r"([a-z])(\d)", "a"),
        ("nothing here", r"id=(\d+)", None),
        (None, r"id=(\d+)", None),
    ],
)
def test_regex(text: str | None, pattern: str, expected: str | None) -> None:
    found = expr("regex(args.text, args.pattern)").evaluate(
        {"args": {"text": text, "pattern": pattern}}
    )
    assert found == expected


def test_regex_with_literal_pattern() -> None:
    assert expr(r"regex(args.text, 'n=(\d+)')").evaluate({"args": {"text": "n=5"}}) == "5"


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        (
            "\tmodified: a.txt\n\tnew file: b c.txt\n",
            r"(?m)^\t[a-z ]+: (.+)$",
            ["a.txt", "b c.txt"],
        ),
        ("a1 b2", r"[a-z]\d", ["a1", "b2"]),
        ("a1 b2", r"([a-z])(\d)", ["a", "b"]),
        ("nothing here", r"id=(\d+)", []),
        (None, r"id=(\d+)", None),
    ],
)
def test_regex_all(text: str | None, pattern: str, expected: list[str] | None) -> None:
    found = expr("regex_all(args.text, args.pattern)").evaluate(
        {"args": {"text": text, "pattern": pattern}}
    )
    assert found == expected


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (["a", "b", "c", "b"], ["c", "b", "x"], ["b", "c"]),  # first's order, each once
        (["a"], ["b"], []),
        ([], ["a"], []),
        (None, ["a"], []),
        (["a"], None, []),
        ([1, "1", {"k": [1]}, True], ["1", {"k": [1]}, 1], [1, "1", {"k": [1]}]),
    ],
)
def test_intersection(first: object, second: object, expected: list[object]) -> None:
    found = expr("intersection(args.first, args.second)").evaluate(
        {"args": {"first": first, "second": second}}
    )
    assert found == expected


def test_intersection_refuses_what_is_not_a_list() -> None:
    with pytest.raises(ExpressionError, match=r"intersection\(\) got string"):
        expr("intersection(args.a, args.b)").evaluate({"args": {"a": "ab", "b": ["a"]}})


def test_to_json_is_compact_and_sorted() -> None:
    value = expr("to_json(args)").evaluate({"args": {"b": [1, 2], "a": "x"}})
    assert value == '{"a":"x","b":[1,2]}'


def test_json_parse() -> None:
    assert expr("json_parse(args.t)").evaluate({"args": {"t": '{"a": [1]}'}}) == {"a": [1]}
    assert expr("json_parse(args.t)").evaluate({"args": {}}) is None
    with pytest.raises(ExpressionError, match="not valid JSON"):
        expr("json_parse(args.t)").evaluate({"args": {"t": "{nope"}})


# -- root paths --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "paths"),
    [
        ("args.id", (("args", "id"),)),
        ("length(snapshot.links)", (("snapshot", "links"),)),
        ("snapshot.children[*].id", (("snapshot", "children"),)),
        ("result.items[?done].id", (("result", "items"),)),
        ("args.items[0].name", (("args", "items"),)),
        ("[args.a, result.b.c]", (("args", "a"), ("result", "b", "c"))),
        ("sort_by(snapshot.rows, &id)", (("snapshot", "rows"),)),
        ("args.x | y", (("args", "x"),)),
        ("args.a == args.a", (("args", "a"),)),
        ("`1`", ()),
        ("@", ()),
        ("{k: change.id}", (("change", "id"),)),
    ],
)
def test_root_paths(source: str, paths: tuple[tuple[str, ...], ...]) -> None:
    assert expr(source).root_paths() == paths


# -- compile errors ----------------------------------------------------------------------


def test_root_check_with_did_you_mean() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_template("{argz.id}", where="tools.x.inverse_args.id")
    message = str(info.value)
    assert message.startswith("`{argz.id}` at tools.x.inverse_args.id: names `argz`;")
    assert "expressions start from one of args, result, snapshot, snapshot_error, change" in message
    assert message.endswith("Did you mean 'args'?")
    assert info.value.fix == "Did you mean 'args'?"


@pytest.mark.parametrize(
    "source",
    [
        "length(other)",
        "args.a == other",
        "[args.a, other]",
        "other[0]",
        "other[*].x",
        "other | args",
        "!other",
        "args && other",
        "{k: other}",
        "other[]",
    ],
)
def test_root_check_everywhere_at_the_root(source: str) -> None:
    with pytest.raises(ExpressionError, match="names `other`"):
        expr(source)


@pytest.mark.parametrize(
    "source",
    [
        "args.other",
        "args[?other == `1`]",
        "args[*].other",
        "args.*.other",
        "sort_by(args, &other)",
        "args | other",
        '`"other"`',
        "'other'",
    ],
)
def test_relative_names_are_not_root_checked(source: str) -> None:
    expr(source)


def test_no_close_name_gives_general_hint() -> None:
    with pytest.raises(ExpressionError) as info:
        expr("zzzz")
    assert "Did you mean" not in str(info.value)
    assert "args.zzzz" in str(info.value)


def test_check_roots_can_be_disabled() -> None:
    assert expr("tasks[*].id", check_roots=False).evaluate({"tasks": [{"id": 1}]}) == [1]


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("args.", "does not parse"),
        ("args[", "ends too early"),
        ("args ~ x", "Unknown token ~"),
        ("", "empty"),
    ],
)
def test_parse_errors(source: str, complaint: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(source, where="tools.t.when")
    message = str(info.value)
    assert complaint in message
    assert "at tools.t.when" in message
    assert f"`{source}`" in message
    assert "JMESPath syntax" in message


def test_braced_parse_error_explains_literal_text() -> None:
    with pytest.raises(ExpressionError, match="raw string"):
        compile_template('{"a":1}', where="t")


def test_unknown_function_suggests() -> None:
    with pytest.raises(ExpressionError, match=r"unknown function lenght.*Did you mean 'length'"):
        expr("lenght(args)")


def test_wrong_arity_is_caught_at_compile_time() -> None:
    with pytest.raises(ExpressionError, match=r"regex\(\) takes 2"):
        expr("regex(args.text)")


@pytest.mark.parametrize("function", ["regex", "regex_all"])
def test_bad_literal_regex_is_caught_at_compile_time(function: str) -> None:
    with pytest.raises(ExpressionError, match=rf"{function}\(\) pattern is not a valid regular"):
        expr(f"{function}(args.text, '(')")


@pytest.mark.parametrize("function", ["regex", "regex_all"])
def test_bad_literal_regex_is_a_registry_load_error(tmp_path: Path, function: str) -> None:
    text = (
        "servers:\n  s:\n    command: /bin/true\n"
        "tools:\n  s__x:\n    classification: reversible\n"
        "    inverse:\n      - tool: s__x\n"
        f"        when: \"{function}(result, '(')\"\n"
    )
    with pytest.raises(RegistryError) as info:
        parse_registry(text, tmp_path / "r.yaml", {})
    assert "r.yaml:9: tools.s__x.inverse[0].when" in str(info.value)
    assert f"{function}() pattern is not a valid regular expression" in str(info.value)


def test_negation_precedence_trap_is_rejected() -> None:
    with pytest.raises(ExpressionError, match=r"write `!\(a.b\)`"):
        expr("!args.dry_run")


# -- Python literals and SQL text (for servers that answer with reprs) ---------------------


def test_py_literal_parses_reprs_without_eval() -> None:
    text = "[{'id': 1, 'name': \"it's\", 'data': b'\\x00\\xff', 'gone': None, 'pair': (1, 2.5)}]"
    assert expr("py_literal(args.t)").evaluate({"args": {"t": text}}) == [
        {"id": 1, "name": "it's", "data": b"\x00\xff", "gone": None, "pair": [1, 2.5]}
    ]
    # Text that was valid JSON was parsed already; it comes back as it is.
    assert expr("py_literal(args.t)").evaluate({"args": {"t": []}}) == []
    assert expr("py_literal(args.t)").evaluate({"args": {}}) is None


@pytest.mark.parametrize("text", ["Database error: no such table: t", "__import__('os')", "[inf]"])
def test_py_literal_refuses_what_is_not_a_literal(text: str) -> None:
    with pytest.raises(ExpressionError, match=r"py_literal\(\): not a Python literal") as info:
        expr("py_literal(args.t)").evaluate({"args": {"t": text}})
    assert text not in str(info.value)


@pytest.mark.parametrize("text", ["{1, 2}", "1j", "[...]"])
def test_py_literal_refuses_values_json_cannot_hold(text: str) -> None:
    with pytest.raises(ExpressionError, match="no JSON counterpart for"):
        expr("py_literal(args.t)").evaluate({"args": {"t": text}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "NULL"),
        (True, "1"),
        (False, "0"),
        (-7, "-7"),
        (0.1, "0.1"),
        (1e16, "1e+16"),
        (float("inf"), "9e999"),
        (float("-inf"), "-9e999"),
        (float("nan"), "NULL"),
        ("it's", "'it''s'"),
        ("", "''"),
        (b"\x00\xff", "X'00FF'"),
    ],
)
def test_sql_literal(value: object, expected: str) -> None:
    assert expr("sql_literal(args.v)").evaluate({"args": {"v": value}}) == expected


def test_sql_literal_refuses_arrays_and_objects() -> None:
    with pytest.raises(ExpressionError, match=r"sql_literal\(\): an array is not an SQL value"):
        expr("sql_literal(args.v)").evaluate({"args": {"v": [1]}})
    with pytest.raises(ExpressionError, match="an object is not an SQL value"):
        expr("sql_literal(args.v)").evaluate({"args": {"v": {"a": 1}}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "NULL"),
        (True, "TRUE"),
        (False, "FALSE"),
        (-7, "-7"),
        (0.1, "0.1"),
        (float("inf"), "'Infinity'::float8"),
        (float("-inf"), "'-Infinity'::float8"),
        (float("nan"), "'NaN'::float8"),
        ("it's", "E'it''s'"),
        ("", "E''"),
        ('a\\b "c"\n', "E'a\\\\b \"c\"\n'"),
        ('[{"s":"it\'s \\"q\\""}]', 'E\'[{"s":"it\'\'s \\\\"q\\\\""}]\''),
    ],
)
def test_pg_literal(value: object, expected: str) -> None:
    assert expr("pg_literal(args.v)").evaluate({"args": {"v": value}}) == expected


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("a\0b", "PostgreSQL text cannot hold a NUL character"),
        (b"\x00", "a bytes value is not a PostgreSQL literal"),
        ([1], "an array or object is not a PostgreSQL literal"),
        ({"a": 1}, "an array or object is not a PostgreSQL literal"),
    ],
)
def test_pg_literal_refuses_what_postgresql_cannot_read(value: object, complaint: str) -> None:
    with pytest.raises(ExpressionError, match=complaint):
        expr("pg_literal(args.v)").evaluate({"args": {"v": value}})


def test_sql_identifier_quotes_and_doubles_quotes() -> None:
    assert expr("sql_identifier(args.n)").evaluate({"args": {"n": 'my "t"'}}) == '"my ""t"""'


def test_sql_values_follow_the_column_order() -> None:
    rows = [{"id": 1, "name": "it's", "x": None}, {"name": "b", "id": 2, "x": 0.5}]
    context = {"args": {"rows": rows}}
    found = expr("sql_values(args.rows, ['id', 'name', 'x'])").evaluate(context)
    assert found == "(1, 'it''s', NULL), (2, 'b', 0.5)"
    assert expr("sql_values(args.rows, ['x'])").evaluate(context) == "(NULL), (0.5)"
    assert expr("sql_values(`[]`, ['id'])").evaluate({}) == ""


def test_sql_values_names_the_bad_row() -> None:
    with pytest.raises(ExpressionError, match="row 2 has no column 'name'"):
        expr("sql_values(args.rows, ['id', 'name'])").evaluate(
            {"args": {"rows": [{"id": 1, "name": "a"}, {"id": 2}]}}
        )
    with pytest.raises(ExpressionError, match="row 1 is not an object"):
        expr("sql_values(args.rows, ['id'])").evaluate({"args": {"rows": [[1]]}})
    with pytest.raises(ExpressionError, match=r"sql_values\(\) got"):
        expr("sql_values(args.rows, `[1]`)").evaluate({"args": {"rows": []}})


def test_insert_statement_from_a_repr_snapshot() -> None:
    source = (
        "{rows: py_literal(snapshot)} | join('', ['INSERT INTO t (', "
        "join(', ', map(&sql_identifier(@), keys(rows[0]))), ') VALUES ', "
        "sql_values(rows, keys(rows[0]))])"
    )
    snapshot = "[{'id': 1, 'name': None}, {'id': 2, 'name': 'b'}]"
    assert expr(source).evaluate({"snapshot": snapshot}) == (
        'INSERT INTO t ("id", "name") VALUES (1, NULL), (2, \'b\')'
    )


def test_fail_stops_with_exactly_the_message() -> None:
    condition = expr("args.ok || fail('cannot undo: DDL')")
    assert condition.truthy({"args": {"ok": True}}) is True
    with pytest.raises(ExpressionError) as info:
        condition.truthy({"args": {"ok": False}})
    assert str(info.value) == "cannot undo: DDL"


def test_fail_inside_a_template_stops_rendering() -> None:
    template = compile_template({"q": "{args.q || fail('no query')}"}, where="t")
    assert template.render({"args": {"q": "x"}}) == {"q": "x"}
    with pytest.raises(ExpressionError, match=r"^no query$"):
        template.render({"args": {}})


def test_a_pattern_with_flags_not_at_the_start_is_refused_on_every_python():
    # Python 3.10 only warns (a DeprecationWarning, an error under the test settings); 3.11
    # and later refuse it: the registry refuses it alike, with its located message.
    with pytest.raises(ExpressionError, match=r"regex\(\) pattern is not a valid regular"):
        compile_expression("regex(args.x, 'a(?m)^b')", where="tools.t.when")
