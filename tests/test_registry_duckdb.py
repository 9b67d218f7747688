"""examples/registries/duckdb.yaml against the real mcp-server-duckdb (from PyPI). The tests
read the database with the DuckDB in the server's own venv, not through the registry."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import REGISTRIES, use_third_party_servers
from .test_plugin import broken_variant, caught_undoing, run_quick

REGISTRY = REGISTRIES / "duckdb.yaml"
BINARY = "duckdb/bin/mcp-server-duckdb"

# What the DML inverse writes after `DELETE FROM <table>`: the rows of the snapshot, if any.
REINSERT = "length(rows) > `0` && join('', ["

TRICKY_TABLE = (
    "CREATE TABLE tricky (id INTEGER PRIMARY KEY, name VARCHAR, qty DECIMAL(12, 3), f DOUBLE,"
    " ts TIMESTAMP, day DATE, tags VARCHAR[], meta STRUCT(k VARCHAR, n INTEGER),"
    " m MAP(VARCHAR, INTEGER), raw BLOB, span INTERVAL, big HUGEINT, u UUID, j JSON, ok BOOLEAN)"
)
TRICKY_ROWS = (
    "INSERT INTO tricky VALUES (1, 'it''s \"q\" \\ \u00e9', 12.300, 0.1,"
    " '2024-02-29 23:59:59.999999', '0044-03-15 (BC)', ['a,b', NULL, 'c''d', ''],"
    " {'k': 'x, y', 'n': NULL}, MAP {'a': 1, 'b''c': NULL}, unhex('00ff27'),"
    " INTERVAL '1 year 2 months 3 days 04:05:06.5', 170141183460469231731687303715884105727,"
    " 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6', '{\"k\":  1 , \"k\": 2}', true),"
    " (2, NULL, -0.001, 'nan', NULL, 'infinity', [], NULL, MAP {}, unhex(''), NULL, -1, NULL,"
    " 'null', false),"
    " (3, '', NULL, '-inf', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_third_party_servers(monkeypatch, BINARY)


def duckdb(servers: Path, database: Path, statement: str, *, write: bool = False) -> str:
    """The rows `statement` gives, as the repr of the Python values DuckDB hands out (dates
    BC do not fit Python's dates: cast them to VARCHAR in the statement)."""
    code = (
        "import sys, duckdb\n"
        "with duckdb.connect(sys.argv[1], read_only=sys.argv[3] == 'r') as db:\n"
        "    print(repr(db.execute(sys.argv[2]).fetchall()))\n"
    )
    mode = "w" if write else "r"
    python = servers / "duckdb" / "bin" / "python"
    done = subprocess.run(
        [python, "-c", code, database, statement, mode], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def query(text: str) -> dict[str, str]:
    return {"query": text}


@pytest.mark.thorough
def test_duckdb_registry_passes(pytester: pytest.Pytester, servers: Path):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "5")
    result.assert_outcomes(passed=3)
    assert "duckdb__query" in result.stdout.str()


@pytest.mark.thorough
def test_duckdb_registry_without_reinsert_fails_naming_the_tool(
    pytester: pytest.Pytester, servers: Path
):
    broken = broken_variant(pytester.path, REGISTRY, REINSERT, "`false` && join('', [")
    out = caught_undoing(pytester, broken, "duckdb__query")
    assert "tools undone: duckdb__query" in out


def test_a_reset_that_the_server_refuses_in_its_text_stops_the_run(
    pytester: pytest.Pytester, servers: Path
):
    """The server answers a bad statement with isError false; without its `error_when` read,
    every example would start from a state nobody meant, and the run would pass."""
    broken = broken_variant(
        pytester.path, REGISTRY, "ts TIMESTAMP", "at TIMESTAMP"
    )  # AT: a keyword
    result = run_quick(pytester, broken, "--compensator-examples", "2", "-k", "roundtrip")
    assert result.ret == 1
    out = result.stdout.str()
    assert f"reset call in {broken} failed: duckdb__query(" in out
    assert "answered 'Database error: Parser Error: syntax error at or near" in out
    assert "which the tool's error_when counts as a failure" in out


@pytest.mark.anyio
async def test_dml_with_tricky_types_is_undone_exactly(proxy, servers: Path, tmp_path: Path):
    database = tmp_path / "db.duckdb"
    read = "SELECT * REPLACE (day::VARCHAR AS day) FROM tricky ORDER BY id"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(tmp_path)}) as client:
        await client.call_ok("duckdb__query", query(TRICKY_TABLE))
        assert await client.call_ok("duckdb__query", query(TRICKY_ROWS)) == "[(3,)]"
        before = duckdb(servers, database, read)
        # The values went in as meant, so an equal text afterwards means these exact values.
        for value in [
            "'it\\'s \"q\" \\\\ \u00e9'",
            "Decimal('12.300')",
            "datetime.datetime(2024, 2, 29, 23, 59, 59, 999999)",
            "'0044-03-15 (BC)'",
            "['a,b', None, \"c'd\", '']",
            "{'k': 'x, y', 'n': None}",
            "{'a': 1, \"b'c\": None}",
            'b"\\x00\\xff\'"',
            "170141183460469231731687303715884105727",
            '\'{"k":  1 , "k": 2}\'',
            "nan",
            "'infinity'",
            "-inf",
        ]:
            assert value in before
        checkpoint = await client.checkpoint()

        changes = [
            "UPDATE tricky SET name = 'changed', qty = qty * 2, tags = NULL, m = MAP {'z': 9}",
            "DELETE FROM tricky WHERE id = 2",
            "INSERT INTO tricky (id, f) VALUES (4, 1e308), (5, 5e-324)",
            "insert or replace into TRICKY (id, raw) values (1, NULL)",
            "TRUNCATE tricky",
        ]
        for change in changes:
            assert (await client.call_ok("duckdb__query", query(change))).startswith("[(")
        assert duckdb(servers, database, read) == "[]"

        report = await client.undo_to(checkpoint)

        assert report["skipped"] == [] and report["nothing_to_undo"] == []
        assert [c["args"]["query"] for c in report["undone"]] == changes[::-1]
        assert duckdb(servers, database, read) == before


@pytest.mark.anyio
async def test_ddl_is_journaled_and_refused_loudly(proxy, servers: Path, tmp_path: Path):
    database = tmp_path / "db.duckdb"
    tables = "SELECT table_name FROM duckdb_tables() ORDER BY 1"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(tmp_path)}) as client:
        await client.call_ok("duckdb__query", query("CREATE TABLE t1 (id INTEGER PRIMARY KEY)"))
        await client.call_ok("duckdb__query", query("INSERT INTO t1 VALUES (1)"))
        checkpoint = await client.checkpoint()
        again = "CREATE TABLE IF NOT EXISTS t1 (id INTEGER PRIMARY KEY)"
        await client.call_ok("duckdb__query", query(again))
        await client.call_ok("duckdb__query", query("CREATE TABLE t2 (id INTEGER)"))
        alter = "ALTER TABLE t1 ADD COLUMN c VARCHAR"
        await client.call_ok("duckdb__query", query(alter))
        two = "INSERT INTO t1 VALUES (2, NULL); INSERT INTO t1 VALUES (3, NULL)"
        await client.call_ok("duckdb__query", query(two))
        failed = await client.call_ok("duckdb__query", query("DELETE FROM nope"))
        assert failed.startswith("Database error: Catalog Error: Table with name nope")
        # A SELECT is a read: not journaled, so not in the report at all.
        await client.call_ok("duckdb__query", query("SELECT * FROM t1"))
        assert duckdb(servers, database, tables) == "[('t1',), ('t2',)]"

        report = await client.undo_to(checkpoint)

        reasons = {c["args"]["query"]: c["reason"] for c in report["skipped"]}
        assert list(reasons) == [two, alter]
        assert "irreversible: query undoes one statement per call" in reasons[two]
        only = "irreversible: query undoes only INSERT, UPDATE, DELETE, TRUNCATE and CREATE TABLE"
        assert only in reasons[alter]
        assert [c["args"]["query"] for c in report["nothing_to_undo"]] == ["DELETE FROM nope"]
        # t2 was new, so it is dropped; IF NOT EXISTS found t1 there, so its undo does
        # nothing, and t1 keeps its rows and the column the refused changes added.
        undone = {c["args"]["query"]: c["calls"] for c in report["undone"]}
        assert list(undone) == ["CREATE TABLE t2 (id INTEGER)", again]
        assert undone[again] == []
        assert duckdb(servers, database, tables) == "[('t1',)]"
        assert duckdb(servers, database, "FROM t1 ORDER BY id") == (
            "[(1, None), (2, None), (3, None)]"
        )


@pytest.mark.anyio
async def test_a_new_table_is_dropped_only_while_empty(proxy, servers: Path, tmp_path: Path):
    database = tmp_path / "db.duckdb"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(tmp_path)}) as client:
        checkpoint = await client.checkpoint()
        await client.call_ok("duckdb__query", query("CREATE TABLE kept (id INTEGER)"))
        # A row the journal never saw: written beside the proxy, between two of its calls
        # (the server holds no connection between calls).
        duckdb(servers, database, "INSERT INTO kept VALUES (7)", write=True)
        await client.call_ok("duckdb__query", query("CREATE TABLE gone (id INTEGER)"))
        await client.call_ok("duckdb__query", query("INSERT INTO gone VALUES (1)"))

        report = await client.undo_to(checkpoint)

        tables = "SELECT table_name FROM duckdb_tables()"
        assert duckdb(servers, database, tables) == "[('kept',)]"
        assert duckdb(servers, database, "FROM kept") == "[(7,)]"
        [skipped] = report["skipped"]
        assert skipped["args"] == {"query": "CREATE TABLE kept (id INTEGER)"}
        assert "table kept is not empty, so undo does not drop it" in skipped["reason"]
        assert [c["args"]["query"] for c in report["undone"]] == [
            "INSERT INTO gone VALUES (1)",
            "CREATE TABLE gone (id INTEGER)",
        ]
