"""examples/registries/sqlite.yaml against the real mcp-server-sqlite (from PyPI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import REGISTRIES, use_third_party_servers
from .test_plugin import caught_undoing, run_quick

REGISTRY = REGISTRIES / "sqlite.yaml"
BINARY = "sqlite/bin/mcp-server-sqlite"

# The second inverse step of write_query: re-insert the rows the snapshot saw.
REINSERT_STEP = (
    "      - tool: sqlite__write_query\n        args:\n          query: >-\n            {{table"
)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_third_party_servers(monkeypatch, BINARY)


def without_reinsert(folder: Path) -> Path:
    """The registry with write_query's re-insert step removed: deleted rows stay deleted."""
    text = REGISTRY.read_text()
    start = text.index(REINSERT_STEP)
    end = text.index("    test:\n", start)
    path = folder / "sqlite_no_reinsert.yaml"
    path.write_text(text[:start] + text[end:])
    return path


@pytest.mark.thorough
def test_sqlite_registry_passes(pytester: pytest.Pytester, servers: Path):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "5")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "left out: sqlite__append_insight (irreversible)" in out
    assert "sqlite__read_query" in out and "left out: sqlite__read_query" not in out


@pytest.mark.thorough
def test_sqlite_registry_without_reinsert_fails_naming_the_tool(
    pytester: pytest.Pytester, servers: Path
):
    config = without_reinsert(pytester.path)
    out = caught_undoing(pytester, config, "sqlite__write_query")
    assert "tools undone: sqlite__write_query" in out


@pytest.mark.anyio
async def test_ddl_is_journaled_and_refused_loudly(proxy, servers: Path, tmp_path: Path):
    env = {"COMPENSATOR_WORKDIR": str(tmp_path)}
    async with proxy(REGISTRY, env=env) as client:
        create = "CREATE TABLE t1 (id INTEGER PRIMARY KEY, name TEXT)"
        assert await client.call_ok("sqlite__create_table", {"query": create})
        insert = "INSERT INTO t1 (id, name) VALUES (1, 'a')"
        await client.call_ok("sqlite__write_query", {"query": insert})
        checkpoint = await client.checkpoint()
        again = "CREATE TABLE IF NOT EXISTS t1 (id INTEGER PRIMARY KEY)"
        await client.call_ok("sqlite__create_table", {"query": again})
        await client.call_ok("sqlite__write_query", {"query": "ALTER TABLE t1 ADD COLUMN c"})
        failed = await client.call_ok("sqlite__write_query", {"query": "DELETE FROM nope"})
        assert failed.startswith("Database error: no such table")

        report = await client.undo_to(checkpoint)

        [skipped] = report["skipped"]
        assert skipped["args"] == {"query": "ALTER TABLE t1 ADD COLUMN c"}
        assert "irreversible: write_query undoes only INSERT, UPDATE, DELETE" in skipped["reason"]
        assert [c["args"]["query"] for c in report["nothing_to_undo"]] == ["DELETE FROM nope"]
        # IF NOT EXISTS found the table there: the undo leaves it (and its row) alone.
        [create_again] = report["undone"]
        assert create_again["calls"] == []
        rows = await client.call_ok("sqlite__read_query", {"query": "SELECT * FROM t1"})
        assert rows == "[{'id': 1, 'name': 'a', 'c': None}]"
