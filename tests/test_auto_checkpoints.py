"""The registry's `checkpoints:`: the proxy takes a checkpoint by itself before a session's
first mutating call and after a quiet spell. Real proxy, real tasks server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from compensator.errors import RegistryError
from compensator.registry import AutoCheckpoints, load_registry, registry_environment
from tests.test_drift import example_with

pytestmark = pytest.mark.anyio


def registry_with(tmp_path: Path, checkpoints: str) -> Path:
    """The example registry with a `checkpoints:` section."""
    return example_with(tmp_path / "auto.yaml", f"checkpoints:\n{checkpoints}")


async def test_a_checkpoint_before_each_sessions_first_change(proxy, tmp_path: Path, tasks_env):
    config = registry_with(tmp_path, "  on_session_start: true")
    db = tmp_path / "journal.db"
    async with proxy(config, db=db, env=tasks_env) as client:
        await client.call_ok("tasks__list_tasks")  # a read: no checkpoint for it
        assert await client.list_checkpoints() == []
        await client.call_ok("tasks__add_task", {"title": "a"})
        await client.call_ok("tasks__add_task", {"title": "b"})
        [first] = await client.list_checkpoints()
        assert first["label"] == "session start"
        assert [c["checkpoint"] for c in await client.list_changes()] == [first["id"]] * 2

    async with proxy(config, db=db, env=tasks_env) as client:  # the same agent, restarted
        await client.call_ok("tasks__add_task", {"title": "c"})
        second, again = await client.list_checkpoints()
        assert again == first and second["label"] == "session start"
        assert [c["args"]["title"] for c in await client.list_changes(second["id"])] == ["c"]
        report = await client.undo_to(first["id"])
        assert len(report["undone"]) == 3 and report["skipped"] == []
        assert (await client.call_ok("tasks__list_tasks"))["tasks"] == []


async def test_a_checkpoint_before_the_first_change_after_a_quiet_spell(
    proxy, tmp_path: Path, tasks_env
):
    config = registry_with(tmp_path, "  after_idle: 0.2")
    async with proxy(config, env=tasks_env) as client:
        await client.call_ok("tasks__add_task", {"title": "earlier turn"})
        # Quiet for longer than after_idle; a late wake-up only makes it quieter.
        await anyio.sleep(0.5)
        await client.call_ok("tasks__add_task", {"title": "next turn"})
        newest = (await client.list_checkpoints())[0]
        assert newest["label"] == "after 0.2 s idle"
        changes = await client.list_changes(newest["id"])
        assert [c["args"]["title"] for c in changes] == ["next turn"]


async def test_no_checkpoint_between_calls_that_keep_coming(proxy, tmp_path: Path, tasks_env):
    config = registry_with(tmp_path, "  after_idle: 3600")
    async with proxy(config, env=tasks_env) as client:
        for title in ("a", "b", "c"):
            await client.call_ok("tasks__add_task", {"title": title})
        assert await client.list_checkpoints() == []
        assert len(await client.list_changes()) == 3


async def test_without_the_section_the_proxy_takes_none(proxy, tasks_config, tasks_env):
    assert load_registry(tasks_config, registry_environment()).checkpoints == AutoCheckpoints()
    async with proxy(tasks_config, env=tasks_env) as client:
        await client.call_ok("tasks__add_task", {"title": "a"})
        assert await client.list_checkpoints() == []


@pytest.mark.parametrize(
    ("body", "key", "needle", "expected"),
    [
        ("  on_start: true", "checkpoints.on_start", "on_start", "on_session_start"),
        ("  on_session_start: yes please", "checkpoints.on_session_start", "yes", "true"),
        ("  after_idle: 0", "checkpoints.after_idle", "after_idle", "greater than 0"),
        ("  after_idle: five", "checkpoints.after_idle", "after_idle", "number of seconds"),
        ("  - on_session_start", "checkpoints", "checkpoints:", "mapping"),
    ],
)
def test_checkpoints_mistakes_are_located_load_errors(
    tmp_path: Path, body: str, key: str, needle: str, expected: str
):
    path = registry_with(tmp_path, body)
    with pytest.raises(RegistryError) as info:
        load_registry(path, registry_environment())
    error = info.value
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text)
    assert (error.path, error.line, error.key) == (str(path), line, key), str(error)
    assert expected in str(error) and error.fix, str(error)
