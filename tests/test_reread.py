"""The round trip's second look at a snapshot (Settings.reread_snapshots, which `compensator
infer` sets for the candidates that put text back): after the undo, the tool's own snapshot
read must answer as it did before the call, even where the state probes cannot tell (a list
of keys does not show their values). Pure logic: a stand-in driver answers the reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compensator.registry import load_registry
from pytest_compensator.client import ToolReply
from pytest_compensator.recorder import Recorder
from pytest_compensator.report import Coverage, UndoFailure

REGISTRY = """\
servers:
  kv:
    command: "true"
tools:
  kv__get: {classification: read, plain_text: true}
  kv__put:
    classification: compensable
    snapshot_tool: kv__get
    snapshot_args: {key: "{args.key}"}
    inverse_tool: kv__put
    inverse_args: {key: "{args.key}", value: "{snapshot}"}
"""


class Driver:
    """Answers kv__get with `value`; the state probes always read the same keys."""

    def __init__(self, folder: Path) -> None:
        self.value = "1.50"
        self.db = folder / "journal.db"

    def call(self, tool: str, args: dict[str, Any]) -> ToolReply:
        assert (tool, args) == ("kv__get", {"key": "a"})
        return ToolReply(is_error=False, value=self.value, text=self.value, raw={})

    def observe(self) -> Any:
        return {"keys": ["a"]}

    def undo_to(self, checkpoint: int) -> dict[str, Any]:
        return {"undone": [{"tool": "kv__put"}], "skipped": [], "nothing_to_undo": []}

    def journal_since(self, checkpoint: int) -> list[Any]:
        return []


@pytest.mark.parametrize("value_after_undo", ["1.50", "1.5"])
def test_an_undo_the_probes_cannot_see_is_checked_by_reading_the_snapshot_again(
    tmp_path: Path, value_after_undo: str
) -> None:
    config = tmp_path / "kv.yaml"
    config.write_text(REGISTRY)
    driver = Driver(tmp_path)
    recorder = Recorder(driver, Coverage(), load_registry(config), plan=None)  # type: ignore[arg-type]
    recorder.reread_snapshots = True
    before = recorder.observe()
    recorder._snapshot = recorder._read_snapshot("kv__put", {"key": "a", "value": "7"})
    driver.value = value_after_undo  # what the undo left behind
    if value_after_undo == "1.50":
        recorder.undo_and_verify(1, before)
        assert recorder.coverage.stats("kv__put").verified == 1
        return
    with pytest.raises(UndoFailure) as failure:
        recorder.undo_and_verify(1, before)
    assert (
        "the state probes agree, but kv__get(key=\"a\") read '1.50' before the call and "
        "'1.5' after the undo"
    ) in str(failure.value)
    assert recorder.coverage.stats("kv__put").verified == 0
