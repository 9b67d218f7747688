"""examples/registries/postgres.yaml against the real postgres-mcp (PyPI) and a real PostgreSQL
(the suite's shared server, tests/postgres.py: a fresh database per test)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from compensator.registry.expressions import compile_expression

from .conftest import REGISTRIES, use_third_party_servers
from .test_plugin import broken_variant, caught_undoing, run_quick

REGISTRY = REGISTRIES / "postgres.yaml"
BINARY = "postgres/bin/postgres-mcp"

# What the DML inverse writes after `DELETE FROM <table>`: the rows of the snapshot, if any.
REINSERT = "s.rows && join('', ["

TRICKY_TABLE = (
    "CREATE TABLE tricky (id int PRIMARY KEY, d date, ts timestamptz, tsl timestamp,"
    " n numeric(12,3), f float8, j jsonb, js json, tags text[], ok boolean, note text,"
    " raw bytea, span interval, serial_no int GENERATED ALWAYS AS IDENTITY,"
    " twice numeric GENERATED ALWAYS AS (n * 2) STORED)"
)
TRICKY_ROWS = (
    "INSERT INTO tricky (id, d, ts, tsl, n, f, j, js, tags, ok, note, raw, span) VALUES"
    " (1, '2024-02-29', '2024-03-10 01:59:59.999999-05', '0044-03-15 12:00:00.000001 BC',"
    '  12.300, 0.1, \'{"a": [1, 2.50, null], "b": "it\'\'s"}\', \'{"k":  1 , "k": 2}\','
    "  ARRAY['x', 'it''s', NULL, 'back\\slash', '\"q\"', ''], true,"
    "  E'tab\\there\\nnew ''q'' \"dq\" \\\\ \\u00e9 $$ ;', '\\x00ff27', '1 mon 2 days 03:04:05.5'),"
    " (2, 'infinity', NULL, NULL, -0.001, 'NaN', '[]', 'null', '{}', false, '', '\\x', '-1 day'),"
    " (3, NULL, NULL, NULL, NULL, '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_third_party_servers(monkeypatch, BINARY)


@pytest.fixture
def pg_env(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The test's fresh database, for the proxy (env) and for pytester's subprocess."""
    monkeypatch.setenv("COMPENSATOR_POSTGRES_URL", postgres_url)
    return {"COMPENSATOR_POSTGRES_URL": postgres_url}


def rows(connection: Any, table: str, columns: str = "*") -> list[Any]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} ORDER BY id")
        return cursor.fetchall()


def json_rows(connection: Any, table: str) -> list[str]:
    """Every row as PostgreSQL's JSON text: equal texts mean equal values, NaN included."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT row_to_json(r.*)::text FROM {table} AS r ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def exists(connection: Any, table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        return bool(cursor.fetchone()[0])


def sql(text: str) -> dict[str, str]:
    return {"sql": text}


def text_of(value: Any) -> str:
    """The server's answer: one text, wrapped as structuredContent {result: [{text}]}."""
    return str(value["result"][0]["text"])


@pytest.mark.thorough
def test_postgres_registry_passes(pytester: pytest.Pytester, servers: Path, pg_env: dict):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "5")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "left out: pg__explain_query (irreversible)" in out
    assert "pg__list_schemas" in out and "left out: pg__list_schemas" not in out


@pytest.mark.thorough
def test_postgres_registry_without_reinsert_fails_naming_the_tool(
    pytester: pytest.Pytester, servers: Path, pg_env: dict
):
    broken = broken_variant(pytester.path, REGISTRY, REINSERT, "`false` && join('', [")
    out = caught_undoing(pytester, broken, "pg__execute_sql")
    assert "tools undone: pg__execute_sql" in out


@pytest.mark.anyio
async def test_dml_with_tricky_types_is_undone_exactly(
    proxy, servers: Path, pg_env: dict, postgresql: Any
):
    postgresql.autocommit = True
    async with proxy(REGISTRY, env=pg_env) as client:
        await client.call_ok("pg__execute_sql", sql(TRICKY_TABLE))
        await client.call_ok("pg__execute_sql", sql(TRICKY_ROWS))
        before = json_rows(postgresql, "tricky")
        # The values went in as meant, so equal JSON afterwards means these exact values.
        [(d, ts, n, f, tags, note, raw, span), second, third] = rows(
            postgresql, "tricky", "d::text, ts, n, f, tags, note, raw, span"
        )
        assert d == "2024-02-29"  # as text: psycopg loads neither BC nor infinite dates
        assert ts == datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=timezone.utc)
        assert str(n) == "12.300" and f == 0.1
        assert tags == ["x", "it's", None, "back\\slash", '"q"', ""]
        assert note == "tab\there\nnew 'q' \"dq\" \\ \u00e9 $$ ;"
        assert bytes(raw) == b"\x00\xff\x27" and span == timedelta(32, 11045.5)
        assert math.isnan(second[3]) and third[3] == -math.inf
        assert str(second[2]) == "-0.001" and second[0] == "infinity"
        assert '"tsl":"0044-03-15T12:00:00.000001 BC"' in before[0]
        assert '"js":{"k":  1 , "k": 2}' in before[0]
        checkpoint = await client.checkpoint()

        changes = [
            "UPDATE tricky SET note = 'changed', n = n * 2, j = j || '{\"c\": true}', tags = NULL",
            "DELETE FROM tricky WHERE id = 2",
            "INSERT INTO tricky (id, f) VALUES (4, 1e308), (5, 5e-324)",
            "insert into TRICKY (id) values (1) on conflict (id) do update set raw = NULL",
        ]
        for change in changes:
            assert text_of(await client.call_ok("pg__execute_sql", sql(change))) == "No results"
        assert json_rows(postgresql, "tricky") != before

        report = await client.undo_to(checkpoint)

        assert report["skipped"] == [] and report["nothing_to_undo"] == []
        assert [c["args"]["sql"] for c in report["undone"]] == changes[::-1]
        assert json_rows(postgresql, "tricky") == before
        # The identity column kept its values, the generated one was computed again.
        assert rows(postgresql, "tricky", "id, serial_no, twice") == [
            (1, 1, Decimal("24.600")),
            (2, 2, Decimal("-0.002")),
            (3, 3, None),
        ]


@pytest.mark.anyio
async def test_ddl_is_journaled_and_refused_loudly(
    proxy, servers: Path, pg_env: dict, postgresql: Any
):
    postgresql.autocommit = True
    async with proxy(REGISTRY, env=pg_env) as client:
        await client.call_ok("pg__execute_sql", sql("CREATE TABLE t1 (id int PRIMARY KEY)"))
        await client.call_ok("pg__execute_sql", sql("INSERT INTO t1 VALUES (1)"))
        checkpoint = await client.checkpoint()
        again = "CREATE TABLE IF NOT EXISTS t1 (id int PRIMARY KEY)"
        await client.call_ok("pg__execute_sql", sql(again))
        await client.call_ok("pg__execute_sql", sql("CREATE TABLE t2 (id int)"))
        alter = "ALTER TABLE t1 ADD COLUMN c text"
        await client.call_ok("pg__execute_sql", sql(alter))
        two = "INSERT INTO t1 VALUES (2); INSERT INTO t1 VALUES (3)"
        await client.call_ok("pg__execute_sql", sql(two))
        failed = await client.call_ok("pg__execute_sql", sql("DELETE FROM nope"))
        assert text_of(failed).startswith('Error: relation "nope" does not exist')
        # A SELECT is a read: not journaled, so not in the report at all.
        await client.call_ok("pg__execute_sql", sql("SELECT * FROM t1"))
        assert exists(postgresql, "t2")

        report = await client.undo_to(checkpoint)

        reasons = {c["args"]["sql"]: c["reason"] for c in report["skipped"]}
        assert list(reasons) == [two, alter]
        assert "irreversible: execute_sql undoes one statement per call" in reasons[two]
        only = "irreversible: execute_sql undoes only INSERT, UPDATE, DELETE, MERGE and CREATE"
        assert only in reasons[alter]
        assert [c["args"]["sql"] for c in report["nothing_to_undo"]] == ["DELETE FROM nope"]
        # t2 was new, so it is dropped; IF NOT EXISTS found t1 there, so its undo does
        # nothing, and t1 keeps its rows and the column the refused changes added.
        undone = {c["args"]["sql"]: c["calls"] for c in report["undone"]}
        assert list(undone) == ["CREATE TABLE t2 (id int)", again]
        assert undone[again] == []
        assert not exists(postgresql, "t2")
        assert rows(postgresql, "t1") == [(1, None), (2, None), (3, None)]


@pytest.mark.anyio
async def test_a_new_table_is_dropped_only_while_empty(
    proxy, servers: Path, pg_env: dict, postgresql: Any
):
    postgresql.autocommit = True
    async with proxy(REGISTRY, env=pg_env) as client:
        checkpoint = await client.checkpoint()
        await client.call_ok("pg__execute_sql", sql("CREATE TABLE kept (id int)"))
        # EXPLAIN ANALYZE runs the INSERT and the server commits it: journaled irreversible.
        explain = {"sql": "INSERT INTO kept VALUES (7)", "analyze": True}
        await client.call_ok("pg__explain_query", explain)
        await client.call_ok("pg__execute_sql", sql("CREATE TABLE gone (id int)"))
        await client.call_ok("pg__execute_sql", sql("INSERT INTO gone VALUES (1)"))

        report = await client.undo_to(checkpoint)

        assert not exists(postgresql, "gone")
        assert rows(postgresql, "kept") == [(7,)]
        skipped = {c["tool"]: c["reason"] for c in report["skipped"]}
        assert list(skipped) == ["pg__explain_query", "pg__execute_sql"]
        assert "table kept is not empty, so undo does not drop it" in skipped["pg__execute_sql"]
        assert [c["args"]["sql"] for c in report["undone"]] == [
            "INSERT INTO gone VALUES (1)",
            "CREATE TABLE gone (id int)",
        ]


@pytest.mark.parametrize("off", [False, True])
def test_pg_literal_reads_back_the_same_text(postgresql: Any, off: bool):
    """What pg_literal() writes, PostgreSQL reads as the same text, whether or not
    standard_conforming_strings is on (with it off, '...' would read \\ as an escape)."""
    texts = ["it's", "back\\slash \\' \\\\", '[{"s":"it\'s \\"q\\""}]', "", "\u00e9 $$ ;\n\t"]
    literal = compile_expression("pg_literal(args.v)", where="test")
    with postgresql.cursor() as cursor:
        cursor.execute(f"SET standard_conforming_strings = {'off' if off else 'on'}")
        for text in texts:
            cursor.execute(f"SELECT {literal.evaluate({'args': {'v': text}})}")
            assert cursor.fetchone()[0] == text
