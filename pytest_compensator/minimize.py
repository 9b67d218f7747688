"""The failing sequence a person reads, made minimal: after Hypothesis has shrunk a failure,
its calls are replayed on fresh state with one left out at a time, and every call whose
removal keeps the same failure goes, until none can.

Hypothesis shrinks the choices that produced the calls, not the calls: a call drawn early
(an empty list, a read of nothing, a call that failed) can stay in its smallest example
because removing its draw changes what the later draws mean. Replaying the calls themselves
has no such coupling."""

from __future__ import annotations

import re
from typing import Any

from .harness import Harness
from .plan import Plan
from .recorder import Recorder, Step
from .report import Blaming, Coverage

__all__ = ["MAX_REPLAYS", "minimal"]

MAX_REPLAYS = 150
"""Replays one failure may take; each is one fresh state and the calls left. A sequence of
n calls needs n replays a pass, and a pass more once nothing more goes."""


def minimal(harness: Harness, plan: Plan, failure: Blaming) -> Blaming:
    """The same failure from the fewest calls found (the replay's own, message and all), or
    `failure` itself when replaying its steps does not fail the same way (a failure that
    depends on more than the calls: time, ids the servers hand out)."""
    steps = list(failure.steps)
    if not any(step.kind == "call" for step in steps):
        return failure
    kind = _kind(failure)
    best = _replay(harness, plan, steps)
    if best is None or _kind(best) != kind:
        return failure
    left = MAX_REPLAYS - 1
    removed = True
    while removed and left > 0:
        removed = False
        index = 0
        while index < len(steps) and left > 0:
            if steps[index].kind != "call":
                index += 1
                continue
            trial = steps[:index] + steps[index + 1 :]
            left -= 1
            found = _replay(harness, plan, trial)
            if found is not None and _kind(found) == kind:
                steps, best, removed = trial, found, True
            else:
                index += 1
    gone = _calls(failure.steps) - _calls(steps)
    if gone:
        _note(
            best,
            f"Then {gone} of the {_calls(failure.steps)} calls Hypothesis's shrinking left "
            "were taken out, each replayed on fresh state: leaving out any call still shown "
            "loses the failure.",
        )
    else:
        _note(best, "Leaving out any call shown loses the failure (each was replayed).")
    return best


def _note(failure: Blaming, text: str) -> None:
    # BaseException.add_note is Python 3.11's; 3.10 reads the same attribute.
    setattr(failure, "__notes__", [*getattr(failure, "__notes__", []), text])  # noqa: B010


def _replay(harness: Harness, plan: Plan, steps: list[Step]) -> Blaming | None:
    """Do `steps` again on fresh state; the failure they raise, if any. A replay that
    crashed (a server that died) proves nothing: it counts as not failing the same way, and
    what was found so far is kept."""
    try:
        return _replayed(harness, plan, steps)
    except Exception:
        return None


def _replayed(harness: Harness, plan: Plan, steps: list[Step]) -> Blaming | None:
    with harness.example() as driver:
        recorder = Recorder(driver, Coverage(), harness.registry, plan)
        taken: dict[int, tuple[int, Any]] = {}  # recorded checkpoint id -> (new id, state)
        try:
            for step in steps:
                if step.kind == "call":
                    recorder.call(step.tool, step.args)
                elif step.kind == "checkpoint":
                    state = recorder.observe()
                    taken[step.checkpoint] = (recorder.checkpoint(), state)
                elif step.kind == "undo":
                    recorder.undo_and_verify(*taken[step.checkpoint])
                elif step.kind == "again":
                    recorder.repeat_idempotent(*taken[step.checkpoint])
        except Blaming as exc:
            return exc
    return None


def _kind(failure: Blaming) -> tuple[type, str]:
    """What makes two failures the same: the class and the headline, numbers aside (the
    checkpoint ids differ from replay to replay)."""
    headline = str(failure).split("\n", 1)[0]
    return type(failure), re.sub(r"\d+", "#", headline)


def _calls(steps: Any) -> int:
    return sum(1 for step in steps if step.kind == "call")
