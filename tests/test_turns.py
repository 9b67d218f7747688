"""When the proxy takes a checkpoint by itself, decided on a clock the test moves."""

from __future__ import annotations

from compensator.proxy.turns import SESSION_START, Turns, idle_label
from compensator.registry import AutoCheckpoints


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def mutating_call(turns: Turns) -> str | None:
    with turns.call() as quiet:
        return turns.checkpoint_before(quiet)


def test_session_start_once_and_idle_after_a_quiet_spell() -> None:
    clock = Clock()
    turns = Turns(AutoCheckpoints(on_session_start=True, after_idle=10), clock)
    clock.now = 50  # quiet since the start, but the session-start one covers it
    assert mutating_call(turns) == SESSION_START
    clock.now = 59
    assert mutating_call(turns) is None
    clock.now = 69
    assert mutating_call(turns) == idle_label(10) == "after 10 s idle"
    assert mutating_call(turns) is None


def test_a_running_call_or_a_read_is_not_quiet() -> None:
    clock = Clock()
    turns = Turns(AutoCheckpoints(after_idle=10), clock)
    with turns.call():  # a slow call, running for 100 s
        clock.now = 100
        assert mutating_call(turns) is None
    clock.now = 105
    with turns.call():  # a read ends the quiet spell too
        pass
    clock.now = 112
    assert mutating_call(turns) is None
    clock.now = 122.5
    assert mutating_call(turns) == "after 10 s idle"


def test_off_by_default() -> None:
    clock = Clock()
    turns = Turns(AutoCheckpoints(), clock)
    clock.now = 10**6
    assert mutating_call(turns) is None
