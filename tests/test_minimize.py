"""The failing sequence shown to a person is minimal: on the real task server behind the real
proxy, a failure recorded with calls it does not need (a read, a call that failed, a task
nobody touches) is replayed without each, and only the calls it needs are shown."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from pytest_compensator.harness import Harness
from pytest_compensator.minimize import minimal
from pytest_compensator.plan import Plan
from pytest_compensator.recorder import Recorder
from pytest_compensator.report import Blaming, Coverage, UndoFailure

from .broken import VARIANTS


def shown_calls(failure: Blaming) -> list[str]:
    lines = str(failure).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Calls ("))
    calls = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        calls.append(line.strip())
    return calls


@contextlib.contextmanager
def broken_registry(folder: Path) -> Iterator[tuple[Harness, Plan]]:
    """The example registry with complete_task "undone" by completing it again: undo leaves
    the task done."""
    [variant] = [v for v in VARIANTS if v.name == "wrong_inverse_tool"]
    with Harness(variant.write(folder)) as harness:
        harness.offered_tools()
        yield harness, Plan.of(harness)


def test_calls_the_failure_does_not_need_are_left_out(tmp_path: Path) -> None:
    with broken_registry(tmp_path) as (harness, plan):
        with harness.example() as driver:
            recorder = Recorder(driver, Coverage(), harness.registry, plan)
            recorder.call("tasks__list_tasks", {})
            recorder.call("tasks__add_task", {"title": "a"})
            recorder.call("tasks__complete_task", {"id": 99})  # fails: no such task
            recorder.call("tasks__add_task", {"title": "b"})
            before = recorder.observe()
            checkpoint = recorder.checkpoint()
            recorder.call("tasks__list_labels", {})
            recorder.call("tasks__complete_task", {"id": 1})
            try:
                recorder.undo_and_verify(checkpoint, before)
            except UndoFailure as exc:
                failure = exc
            else:
                raise AssertionError("the broken registry's undo restored the state")
        assert len(shown_calls(failure)) == 8  # six calls, the checkpoint and the undo

        shorter = minimal(harness, plan, failure)

    assert shorter is not failure
    assert isinstance(shorter, UndoFailure)
    assert "did not restore the state at the checkpoint" in str(shorter).splitlines()[0]
    calls = shown_calls(shorter)
    # One task, either: with the first left out, the second gets id 1.
    assert calls[0] in ('tasks__add_task(title="a")', 'tasks__add_task(title="b")')
    assert calls[1].startswith("checkpoint() -> ")
    assert calls[2] == "tasks__complete_task(id=1)"
    assert calls[3].startswith("undo_to(")
    assert len(calls) == 4
    assert sum(step.kind == "call" for step in shorter.steps) == 2
    notes = getattr(shorter, "__notes__", [])
    assert any("4 of the 6 calls" in note for note in notes), notes


def test_a_failure_that_does_not_come_back_on_replay_is_kept_as_it_was(tmp_path: Path) -> None:
    with broken_registry(tmp_path) as (harness, plan):
        with harness.example() as driver:
            recorder = Recorder(driver, Coverage(), harness.registry, plan)
            recorder.call("tasks__add_task", {"title": "a"})
            before = recorder.observe()
            checkpoint = recorder.checkpoint()
            recorder.call("tasks__list_tasks", {})
            # A made-up failure: these steps undo cleanly when replayed.
            made_up = UndoFailure("undo_to(1) did not restore", steps=recorder.steps)
            recorder.undo_and_verify(checkpoint, before)
        assert minimal(harness, plan, made_up) is made_up
