"""Settings.changes_only, which `compensator infer` sets: an undo vouches for a tool only when
the call under test changed what the state probes show. On the real task server behind the
real proxy, a call that changed nothing is undone and checked as ever, but not counted."""

from __future__ import annotations

from pathlib import Path

from pytest_compensator.harness import Harness
from pytest_compensator.plan import Plan
from pytest_compensator.recorder import Recorder
from pytest_compensator.report import Coverage

from .conftest import EXAMPLES


def test_only_an_undo_of_a_call_that_changed_something_is_verified(tmp_path: Path) -> None:
    coverage = Coverage()
    with Harness(EXAMPLES / "compensators.yaml") as harness:
        harness.offered_tools()
        with harness.example() as driver:
            recorder = Recorder(driver, coverage, harness.registry, Plan.of(harness))
            before = recorder.observe()
            checkpoint = recorder.checkpoint()
            # A label nobody made: the call works and changes nothing.
            assert recorder.call("tasks__remove_label", {"name": "x"})
            assert not recorder.changed_since(before)
            recorder.undo_and_verify(checkpoint, before, vouches=False)
            assert coverage.stats("tasks__remove_label").undone == 1
            assert coverage.stats("tasks__remove_label").verified == 0
            assert coverage.stats("tasks__remove_label").failures == 0
            checkpoint = recorder.checkpoint()
            assert recorder.call("tasks__add_label", {"name": "x"})
            assert recorder.changed_since(before)
            recorder.undo_and_verify(checkpoint, before, vouches=True)
            assert coverage.stats("tasks__add_label").verified == 1
