"""The generated checks: one round trip per undoable tool, and a stateful machine over all.

Besides undo itself they check every promise a registry makes that a call changes nothing:
reads, calls `mutating_when` turns into reads, calls `error_when` calls failed, and a second
run of an `idempotent` compensation. What to call is `plan`'s; how calls are made and checked
is `recorder`'s; the shortest failing sequence shown is `minimize`'s."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import hypothesis
import hypothesis.errors
from hypothesis import HealthCheck, Phase, given, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from .harness import Harness
from .minimize import minimal
from .plan import Plan
from .recorder import Recorder
from .report import Blaming, Coverage, NeverVerified
from .settings import Settings

__all__ = [
    "build_machine",
    "build_pre_state",
    "required_verified",
    "run_read_check",
    "run_roundtrip",
    "run_state_machine",
]

MAX_SETUP_CALLS = 14
SETUP_ATTEMPTS = 3  # calls that fail while building a pre-state are retried up to this factor
PRE_STATES = 3  # pre-states a round trip builds, each on the last, until a call of its tool works
MORE_SETUP_CALLS = 4  # the most successful calls each pre-state after the first adds
MAX_UNDO_DEPTH = 3
READ_CALLS = 3  # calls of a read per example in its own check, each must change nothing
SHOWN_ERRORS = 3  # error texts a "never verified" failure lists


def hypothesis_settings(settings: Settings) -> hypothesis.settings:
    default = hypothesis.settings.default
    assert default is not None  # a profile is always loaded
    return hypothesis.settings(
        max_examples=settings.examples,
        stateful_step_count=settings.steps,
        deadline=None,
        # Every example talks to real servers, so it takes milliseconds to seconds: Hypothesis'
        # timing checks would flag the servers, not the strategies. The other health checks
        # (filters, data size) stay on: they point at real problems in the generated data.
        suppress_health_check=[HealthCheck.too_slow],
        # Every run has a seed (shown in the header) and is reproduced from it, never from
        # failures saved in the example database.
        database=None,
        print_blob=False,
        # One failure, shrunk, is what a registry author needs; hunting for further distinct
        # failures costs minutes and reports them all at once.
        report_multiple_bugs=False,
        # The explain phase lists lines of the proxy and plugin that only failing runs
        # reached: noise to a registry author, and it traces every replay.
        phases=[p for p in default.phases if p != Phase.explain],
    )


def _size(state: Any) -> float:
    return float(len(json.dumps(state, default=str)))


def build_pre_state(data: st.DataObject, recorder: Recorder, *, more: bool = False) -> None:
    """A few successful calls (failed ones are retried), so that pre-states have depth:
    things that exist, things with children, things created twice. Calls come from every
    undoable tool, the state builders and a swarm-style pick of one to three others at
    triple weight; each tool that succeeds weighs more from then on and each one that fails
    less (what worked is what makes the next calls' preconditions hold). Reads are mixed in,
    and must change nothing.

    `more`: a few calls more on a pre-state where the tool under test failed, each undoable
    tool as likely as the next: the swarm that made this pre-state may be what left out the
    tool that makes what the one under test needs."""
    plan = recorder.plan
    if not plan.tools:
        return
    if more:
        pool = list(plan.tools)
        wanted = data.draw(st.integers(1, MORE_SETUP_CALLS), label="more setup calls")
    else:
        swarm = data.draw(
            st.lists(st.sampled_from(plan.tools), min_size=1, max_size=3, unique=True),
            label="also",
        )
        pool = [*plan.builders, *plan.builders, *swarm, *swarm, *plan.tools]
        wanted = data.draw(st.integers(0, MAX_SETUP_CALLS), label="successful setup calls")
    made = attempts = 0
    while made < wanted and attempts < SETUP_ATTEMPTS * wanted:
        if plan.reads and data.draw(st.integers(0, 7), label="a read now") == 0:
            recorder.call_read(data)
        name = data.draw(st.sampled_from(pool))
        if recorder.call(name, recorder.draw_args(data, name)):
            made += 1
            pool += [name, name]
        elif pool.count(name) > 1:
            pool.remove(name)  # what fails here weighs less, down to once
        attempts += 1


def run_roundtrip(harness: Harness, tool: str, coverage: Coverage, settings: Settings) -> None:
    """Build a random pre-state, checkpoint, call `tool`, undo: the state must be as before,
    and enough such undos must have happened to vouch for the tool."""
    plan = Plan.of(harness, also=[tool])
    coverage.reads.update(plan.reads)
    errors: dict[str, Counter[str]] = {}
    verified_before = coverage.stats(tool).verified
    calls_before = coverage.stats(tool).calls
    counted = coverage.stats(tool).examples, coverage.stats(tool).met

    def run() -> None:
        nonlocal verified_before, calls_before
        errors.clear()
        verified_before = coverage.stats(tool).verified
        calls_before = coverage.stats(tool).calls
        # A second run (after replays gave different results) counts its examples alone.
        coverage.stats(tool).examples, coverage.stats(tool).met = counted

        @hypothesis.seed(settings.seed)
        @hypothesis_settings(settings)
        @given(data=st.data())
        def roundtrip(data: st.DataObject) -> None:
            coverage.examples += 1
            with harness.example() as driver:
                recorder = Recorder(driver, coverage, harness.registry, plan, errors)
                recorder.reread_snapshots = settings.reread_snapshots
                for attempt in range(PRE_STATES):
                    # When no call of the tool worked on this pre-state, more setup calls
                    # on top of it give it another: whether its preconditions ever hold
                    # must not hang on the seed. Each failed try is undone and checked too.
                    build_pre_state(data, recorder, more=attempt > 0)
                    before = recorder.observe()
                    if attempt == 0:
                        target(_size(before), label="size of the state before the call")
                    checkpoint = recorder.checkpoint()
                    read_now = data.draw(st.booleans(), label="a read after the checkpoint")
                    if read_now and plan.reads:
                        recorder.call_read(data)
                    if settings.changes_only:
                        # A call that changed nothing proves nothing: another pre-state.
                        worked = recorder.call_drawn(data, tool, until_changed=before)
                        recorder.undo_and_verify(checkpoint, before, vouches=worked)
                    else:
                        worked = recorder.call_drawn(data, tool)
                        recorder.undo_and_verify(checkpoint, before)
                    if worked:
                        recorder.repeat_idempotent(checkpoint, before)
                        break
            # Counted once the example is through (not one Hypothesis cut short): whether a
            # call of the tool worked on one of its pre-states, i.e. its precondition held.
            stats = coverage.stats(tool)
            stats.examples += 1
            stats.met += worked

        roundtrip()

    _shown(harness, plan, run)
    stats = coverage.stats(tool)
    verified = stats.verified - verified_before
    if verified < required_verified(settings):
        raise NeverVerified(
            _never_verified(tool, verified, stats.calls - calls_before, errors.get(tool), settings)
        )


def run_read_check(
    harness: Harness, tool: str, coverage: Coverage, settings: Settings, *, need: int
) -> None:
    """Fresh pre-states, then a few calls of `tool`, each of which must leave the observed
    state as it was (the Recorder raises PromiseBroken, with the calls, when one does not).
    `need`: calls that must have worked (for `compensator infer`, a read it knows by name
    or by experiment only)."""
    plan = Plan.of(harness, also=[tool])

    def run() -> None:
        @hypothesis.seed(settings.seed)
        @hypothesis_settings(settings)
        @given(data=st.data())
        def reads(data: st.DataObject) -> None:
            coverage.examples += 1
            with harness.example() as driver:
                recorder = Recorder(driver, coverage, harness.registry, plan)
                build_pre_state(data, recorder)
                for _ in range(READ_CALLS):
                    recorder.call(tool, recorder.draw_args(data, tool))

        reads()

    _shown(harness, plan, run)
    stats = coverage.stats(tool)
    worked = stats.calls - stats.errors
    if worked < need:
        raise NeverVerified(
            f"{tool}: {worked} of its {stats.calls} calls worked, at least {need} required "
            "before calls that change nothing count as evidence that it only reads"
        )


def _shown(harness: Harness, plan: Plan, run: Callable[[], None]) -> None:
    """Run a check; a failure shrunk for a person to read is then made minimal (`minimize`):
    no call it shows can be left out and keep it."""
    try:
        _replayable(harness, run)
    except Blaming as failure:
        phases = hypothesis.settings.default.phases if hypothesis.settings.default else ()
        if Phase.shrink not in phases:
            raise  # compensator infer's quick checks: nobody reads this failure
        shorter = minimal(harness, plan, failure)
        if shorter is failure:
            raise
        raise shorter from None


def _replayable(harness: Harness, run: Callable[[], None]) -> None:
    """Run a Hypothesis test; if replaying examples gave different results while examples
    got fresh state by undo, run it again with new servers for every example. Hypothesis
    replays an example to shrink it and expects the same calls to have the same results,
    which undo cannot promise where servers keep state the probes do not show (an id
    counter hands out 4 where new servers hand out 1)."""
    rewinding = harness.rewinding
    try:
        run()
    except hypothesis.errors.Flaky:
        if not rewinding:
            raise
        harness.stop_rewinding()
        run()


def required_verified(settings: Settings) -> int:
    """--compensator-min-verified, but at most one per five examples: a short run (fewer
    examples than the default 25) asks for proportionally fewer."""
    return min(settings.min_verified, -(-settings.examples // 5))


def _never_verified(
    tool: str, verified: int, calls: int, errors: Counter[str] | None, settings: Settings
) -> str:
    failed = sum(errors.values()) if errors else 0
    undos = "undos of calls that changed the state" if settings.changes_only else "undos"
    lines = [
        f"{tool} never verified: {verified} of its {undos} restored the state, at least "
        f"{required_verified(settings)} required (--compensator-min-verified "
        f"{settings.min_verified}, at most one per five examples). Its round trip made "
        f"{calls} calls of it in {settings.examples} examples; {failed} failed, so undo had "
        "little or nothing to prove.",
    ]
    if errors:
        lines += ["", "Most common errors of its failed calls:"]
        lines += [f"  {n}x {text}" for text, n in errors.most_common(SHOWN_ERRORS)]
    lines += [
        "",
        "Make its calls succeed: give it `test.examples` or a `test.schema` with values that "
        "exist after the setup calls, or classify the tool that creates what it needs so "
        "the setup can call it.",
    ]
    return "\n".join(lines)


def build_machine(
    harness: Harness, coverage: Coverage, plan: Plan | None = None
) -> type[RuleBasedStateMachine]:
    """A state machine whose rules call each undoable tool and each read, checkpoint, and
    undo."""
    chosen = plan if plan is not None else Plan.of(harness)
    coverage.reads.update(chosen.reads)

    class RegistryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            coverage.examples += 1
            self._example = harness.example()
            driver = self._example.__enter__()
            self.recorder = Recorder(driver, coverage, harness.registry, chosen)
            self.live: list[tuple[int, Any]] = []

        def teardown(self) -> None:
            self._example.__exit__(None, None, None)

        def _checkpoint(self) -> int:
            state = self.recorder.observe()
            checkpoint = self.recorder.checkpoint()
            self.live.append((checkpoint, state))
            return checkpoint

        @initialize(data=st.data())
        def start(self, data: st.DataObject) -> None:
            build_pre_state(data, self.recorder)
            self._checkpoint()

        @rule()
        def checkpoint(self) -> None:
            self._checkpoint()

        @rule(depth=st.integers(0, MAX_UNDO_DEPTH))
        def undo(self, depth: int) -> None:
            index = max(0, len(self.live) - 1 - depth)
            checkpoint, expected = self.live[index]
            del self.live[index + 1 :]
            self.recorder.undo_and_verify(checkpoint, expected)

    for tool in chosen.tools:
        setattr(RegistryMachine, f"call_{tool}", _call_rule(tool))
        setattr(RegistryMachine, f"checkpoint_call_undo_{tool}", _guarded_rule(tool))
    if chosen.reads:
        # One rule for all reads, so that they do not crowd out the undoable tools' rules.
        RegistryMachine.call_a_read = rule(data=st.data())(_call_a_read)
    return RegistryMachine


def _call_a_read(self: Any, data: st.DataObject) -> None:
    self.recorder.call_read(data)


def _call_rule(tool: str) -> Any:
    def call(self: Any, data: st.DataObject) -> None:
        self.recorder.call(tool, self.recorder.draw_args(data, tool))

    call.__name__ = f"call_{tool}"
    return rule(data=st.data())(call)


def _guarded_rule(tool: str) -> Any:
    # A checkpoint right before the call, then undo to it: where most registry bugs show.
    def guarded(self: Any, data: st.DataObject) -> None:
        checkpoint = self._checkpoint()
        self.recorder.call_drawn(data, tool)
        expected = self.live[-1][1]
        del self.live[-1:]
        self.recorder.undo_and_verify(checkpoint, expected)
        self.live.append((checkpoint, expected))

    guarded.__name__ = f"checkpoint_call_undo_{tool}"
    return rule(data=st.data())(guarded)


def run_state_machine(harness: Harness, coverage: Coverage, settings: Settings) -> None:
    plan = Plan.of(harness)
    machine = hypothesis.seed(settings.seed)(build_machine(harness, coverage, plan))
    _shown(
        harness,
        plan,
        lambda: run_state_machine_as_test(machine, settings=hypothesis_settings(settings)),
    )
