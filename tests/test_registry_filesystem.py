"""examples/registries/filesystem.yaml against the real @modelcontextprotocol/server-filesystem."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import REGISTRIES, third_party_servers
from .test_plugin import caught_undoing, run_quick

REGISTRY = REGISTRIES / "filesystem.yaml"
SERVER_JS = "npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


@pytest.fixture
def fs_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    servers = third_party_servers(SERVER_JS, node=True)
    monkeypatch.setenv("COMPENSATOR_SERVERS", str(servers))
    root = tmp_path / "root"
    root.mkdir()
    return {"COMPENSATOR_SERVERS": str(servers), "COMPENSATOR_WORKDIR": str(root)}


@pytest.mark.anyio
async def test_undo_restores_overwritten_text_and_moves_new_files_to_trash(proxy, fs_env):
    root = Path(fs_env["COMPENSATOR_WORKDIR"])
    (root / "notes.txt").write_text("original")
    async with proxy(REGISTRY, env=fs_env) as client:
        cp = await client.checkpoint()
        await client.call_ok("fs__write_file", {"path": "notes.txt", "content": "agent's"})
        await client.call_ok("fs__write_file", {"path": str(root / "new.txt"), "content": "x"})
        await client.call_ok("fs__create_directory", {"path": "made"})
        await client.call_ok("fs__move_file", {"source": "notes.txt", "destination": "moved.txt"})
        edit = {"path": "moved.txt", "edits": [{"oldText": "agent", "newText": "bot"}]}
        await client.call_ok("fs__edit_file", {**edit, "dryRun": True})
        await client.call_ok("fs__edit_file", edit)
        assert [c["tool"] for c in await client.list_changes(cp)] == [
            "fs__edit_file",  # the dry run is not journaled
            "fs__move_file",
            "fs__create_directory",
            "fs__write_file",
            "fs__write_file",
        ]

        report = await client.undo_to(cp)

    assert report["skipped"] == []
    assert len(report["undone"]) == 5
    assert (root / "notes.txt").read_text() == "original"
    assert sorted(p.name for p in root.iterdir()) == [".trash", "notes.txt"]
    trashed = sorted(p.name.split("-", 1)[1] for p in (root / ".trash").iterdir())
    assert trashed == ["made", "new.txt"]


@pytest.mark.anyio
async def test_a_failed_write_is_not_undone(proxy, fs_env):
    async with proxy(REGISTRY, env=fs_env) as client:
        cp = await client.checkpoint()
        reply = await client.call("fs__write_file", {"path": "no/such/dir.txt", "content": "x"})
        assert reply.is_error
        report = await client.undo_to(cp)
    assert report["undone"] == [] and report["skipped"] == []
    assert [c["tool"] for c in report["nothing_to_undo"]] == ["fs__write_file"]


@pytest.mark.thorough
def test_plugin_passes_the_registry(pytester: pytest.Pytester, fs_env):
    result = run_quick(
        # A short run to see it pass; too few examples to require verified undos of each
        # tool (the default run does: see docs/plugin.md).
        pytester,
        REGISTRY,
        "--compensator-examples",
        "3",
        "--compensator-steps",
        "8",
        "--compensator-min-verified",
        "0",
    )
    result.assert_outcomes(passed=6)
    assert "fs__move_file" in result.stdout.str()


@pytest.mark.thorough
def test_plugin_catches_a_new_file_left_behind(pytester: pytest.Pytester, fs_env):
    text = REGISTRY.read_text()
    start = text.index("      # The file is new: no delete tool")
    end = text.index("    test:", start)
    broken = pytester.path / "broken.yaml"
    broken.write_text(text[:start] + text[end:])
    caught_undoing(pytester, broken, "fs__write_file")
