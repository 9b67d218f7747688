"""examples/registries/memory.yaml against the real @modelcontextprotocol/server-memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REGISTRIES, third_party_servers
from .test_plugin import caught_undoing, run_quick

REGISTRY = REGISTRIES / "memory.yaml"
SERVER_JS = "npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js"

# delete_entities' second inverse step: the relations that went with the deleted entities.
RELATIONS_STEP = (
    '      - tool: memory__create_relations\n        args: {relations: "{snapshot.relations}"}\n'
)


@pytest.fixture
def memory_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    servers = third_party_servers(SERVER_JS, node=True)
    monkeypatch.setenv("COMPENSATOR_SERVERS", str(servers))
    return {"COMPENSATOR_SERVERS": str(servers), "COMPENSATOR_WORKDIR": str(tmp_path)}


def graph(folder: Path) -> list[dict]:
    path = folder / "memory.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.anyio
async def test_undo_restores_the_graph_file(proxy, memory_env):
    folder = Path(memory_env["COMPENSATOR_WORKDIR"])
    async with proxy(REGISTRY, env=memory_env) as client:
        people = [
            {"name": "ada", "entityType": "person", "observations": ["math"]},
            {"name": "bob", "entityType": "person", "observations": []},
        ]
        await client.call_ok("memory__create_entities", {"entities": people})
        knows = {"from": "ada", "to": "bob", "relationType": "knows"}
        await client.call_ok("memory__create_relations", {"relations": [knows]})
        before = graph(folder)
        cp = await client.checkpoint()
        await client.call_ok(
            "memory__add_observations", {"observations": [{"entityName": "bob", "contents": ["x"]}]}
        )
        await client.call_ok(
            "memory__delete_observations",
            {"deletions": [{"entityName": "ada", "observations": ["math"]}]},
        )
        await client.call_ok("memory__delete_entities", {"entityNames": ["bob"]})
        assert not any(line.get("name") == "bob" for line in graph(folder))
        assert not any(line.get("type") == "relation" for line in graph(folder))

        report = await client.undo_to(cp)

    assert report["skipped"] == [] and len(report["undone"]) == 3
    key = lambda line: json.dumps(line, sort_keys=True)  # noqa: E731 - order is not kept
    assert sorted(graph(folder), key=key) == sorted(before, key=key)


@pytest.mark.thorough
def test_memory_registry_passes(pytester: pytest.Pytester, memory_env):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "5")
    result.assert_outcomes(passed=8)


@pytest.mark.thorough
def test_memory_registry_without_the_relations_step_fails_naming_the_tool(
    pytester: pytest.Pytester, memory_env
):
    text = REGISTRY.read_text()
    delete = text.index("  memory__delete_entities:")
    start = text.index(RELATIONS_STEP, delete)
    config = pytester.path / "memory_no_relations.yaml"
    config.write_text(text[:start] + text[start + len(RELATIONS_STEP) :])
    out = caught_undoing(pytester, config, "memory__delete_entities")
    assert "memory__delete_entities" in out
