"""The generated checks: one round trip per undoable tool, and a stateful machine over all.

Besides undo itself they check every promise a registry makes that a call changes nothing:
reads, calls `mutating_when` turns into reads, calls `error_when` calls failed, and a second
run of an `idempotent` compensation."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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

from compensator.errors import CompensatorError
from compensator.names import META_TOOLS
from compensator.registry import REDACTED, Registry
from compensator.wire import sdk

from .harness import Driver, Harness
from .report import (
    Coverage,
    NeverVerified,
    PromiseBroken,
    UndoFailure,
    format_call,
    format_failure,
)
from .settings import Settings
from .strategies import arguments

__all__ = [
    "Plan",
    "Recorder",
    "build_machine",
    "checked_reads",
    "exercised_tools",
    "left_out",
    "run_read_check",
    "run_roundtrip",
    "run_state_machine",
]

MAX_SETUP_CALLS = 14
SETUP_ATTEMPTS = 3  # calls that fail while building a pre-state are retried up to this factor
MAX_UNDO_DEPTH = 3
CALL_TRIES = 3  # draws of arguments for a call under test that keeps failing
READ_CALLS = 3  # calls of a read per example in its own check, each must change nothing
SEEN_TEXT_LENGTH = 64  # longer strings in results are content, not names worth reusing
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


def exercised_tools(registry: Registry, offered: Iterable[str] | None = None) -> list[str]:
    """The registered tools the generated checks call, as their classification says, sorted;
    only those a server really offers when `offered` is given."""
    known = None if offered is None else set(offered)
    return sorted(
        name
        for name, policy in registry.tools.items()
        if policy.classification.behaviour.exercised and (known is None or name in known)
    )


def state_builders(registry: Registry, tools: list[str]) -> list[str]:
    """The tools among `tools` that building a pre-state prefers (see `Behaviour`)."""
    return [t for t in tools if registry.tools[t].classification.behaviour.builds_state]


def checked_reads(harness: Harness) -> list[str]:
    """The offered tools the proxy forwards without journaling, sorted: those classified
    `read`, and unregistered ones annotated readOnlyHint when `trust_read_only_hint` is on.
    The checks call them and require that the state stays as it was."""
    registry = harness.registry
    reads = []
    for name, tool in harness.tools.items():
        policy = registry.policy(name)
        if name in META_TOOLS:
            continue
        if policy is not None:
            if not policy.classification.behaviour.journaled:
                reads.append(name)
        elif registry.defaults.trust_read_only_hint and _read_only_hint(tool):
            reads.append(name)
    return sorted(reads)


def _read_only_hint(tool: Any) -> bool:
    annotations = sdk.tool_to_wire(tool).get("annotations") or {}
    return annotations.get("readOnlyHint") is True


def left_out(harness: Harness) -> dict[str, str]:
    """Tools the generated checks do not call, with the reason."""
    reads = set(checked_reads(harness))
    out: dict[str, str] = {}
    for name, policy in harness.registry.tools.items():
        if name in reads:
            continue
        if not policy.classification.behaviour.exercised:
            out[name] = policy.classification.value
        elif name not in harness.tools:
            out[name] = "no server offers it"
    for name in harness.tools:
        unregistered = harness.registry.policy(name) is None and name not in META_TOOLS
        if unregistered and name not in reads:
            out[name] = "unknown: not in the registry"
    return out


@dataclass(frozen=True)
class Plan:
    """What the generated checks call, worked out once per test from the offered tools."""

    tools: Sequence[str]  # the undoable tools
    builders: Sequence[str]  # those preferred when building a pre-state
    reads: Sequence[str]  # called only to check that they change nothing
    strategies: Mapping[str, st.SearchStrategy]
    free_text: Mapping[str, frozenset[str]]  # string arguments that may take seen values

    @classmethod
    def of(cls, harness: Harness, also: Iterable[str] = ()) -> Plan:
        tools = exercised_tools(harness.registry, harness.tools)
        reads = checked_reads(harness)
        called = sorted({*tools, *reads, *also})
        return cls(
            tools=tools,
            builders=state_builders(harness.registry, tools),
            reads=reads,
            strategies={
                tool: arguments(tool, harness.input_schema(tool), harness.registry.policy(tool))
                for tool in called
            },
            free_text={tool: _free_text(harness, tool) for tool in called},
        )


def _free_text(harness: Harness, tool: str) -> frozenset[str]:
    """Arguments declared as plain strings (names, paths, keys), which may be drawn from the
    strings earlier results and states showed, so that calls meet what exists. Not when the
    registry gives the tool a `test.schema`: its author chose the values."""
    policy = harness.registry.policy(tool)
    if policy is not None and policy.test is not None and policy.test.schema is not None:
        return frozenset()
    properties = harness.input_schema(tool).get("properties")
    if not isinstance(properties, Mapping):
        return frozenset()
    constrained = {"enum", "const", "pattern", "format"}
    return frozenset(
        name
        for name, schema in properties.items()
        if isinstance(schema, Mapping)
        and schema.get("type") == "string"
        and not constrained & schema.keys()
    )


class Recorder:
    """Calls through a driver, keeping a readable trace, the values seen, coverage counts,
    and the error texts of failed calls; checks each promise that a call changes nothing."""

    def __init__(
        self,
        driver: Driver,
        coverage: Coverage,
        registry: Registry,
        plan: Plan,
        errors: dict[str, Counter[str]] | None = None,
    ) -> None:
        self.driver = driver
        self.coverage = coverage
        self.registry = registry
        self.plan = plan
        self.errors = errors if errors is not None else {}
        self.trace: list[str] = []
        self.seen_ids: set[int] = set()
        self.seen_text: set[str] = set()
        self._state: Any = None  # the observed state, while no call can have changed it

    def observe(self) -> Any:
        if self._state is None:
            self._state = self.driver.observe()
            self._learn(self._state)
        return self._state

    def _learn(self, value: Any) -> None:
        self.seen_ids.update(_ids(value))
        # The journal lives in the servers' folder, so a filesystem server lists it: its name
        # is never offered as an argument, or a random write would overwrite the journal.
        journal = self.driver.db.name
        self.seen_text.update(text for text in _texts(value) if journal not in text)

    def draw_args(self, data: st.DataObject, tool: str) -> dict[str, Any]:
        """Draw arguments; integers may be swapped for ids, and plain strings for strings,
        that earlier results and states showed, so that calls hit things that exist."""
        args: dict[str, Any] = dict(data.draw(self.plan.strategies[tool], label=tool))
        free_text = self.plan.free_text.get(tool, frozenset())
        for key, value in sorted(args.items()):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if is_int and self.seen_ids and data.draw(st.booleans(), label=f"reuse id: {key}"):
                args[key] = data.draw(st.sampled_from(sorted(self.seen_ids)), label=key)
            elif (
                isinstance(value, str)
                and key in free_text
                and self.seen_text
                and data.draw(st.booleans(), label=f"reuse text: {key}")
            ):
                args[key] = data.draw(st.sampled_from(sorted(self.seen_text)), label=key)
        return args

    def call(self, tool: str, args: Mapping[str, Any]) -> bool:
        """Make the call; True when it worked (not isError, and no `error_when` matched).
        A call the registry says changes nothing is checked against the state before it."""
        policy = self.registry.policy(tool)
        promise = self._promised_unchanged(tool, args)
        watch = promise is not None or (policy is not None and policy.error_when is not None)
        before = self.observe() if watch else None
        reply = self.driver.call(tool, args)
        matched = not reply.is_error and _error_when(self.registry, tool, args, reply.value)
        ok = not reply.is_error and not matched
        self.coverage.record_call(tool, ok)
        outcome = "" if ok else f"  -> error: {reply.text[:120]}"
        self.trace.append(format_call(tool, args) + outcome)
        if ok:
            self._learn(reply.value)
        else:
            text = " ".join(reply.text.split())[:200] or "(no text)"
            self.errors.setdefault(tool, Counter())[text] += 1
        if matched and promise is None and policy is not None and policy.error_when is not None:
            promise = (
                f"its error_when `{policy.error_when.source}` matched the result, so the proxy "
                "journaled the call as failed, and undo never compensates a failed call"
            )
        self._state = None
        if promise is not None and before is not None:
            self._require_unchanged(before, f"{tool} changed the state, but {promise}", tool)
        return ok

    def _promised_unchanged(self, tool: str, args: Mapping[str, Any]) -> str | None:
        """Why the registry says this call changes nothing (None when it may change state)."""
        policy = self.registry.policy(tool)
        if tool in self.plan.reads:
            if policy is None:
                return (
                    "it is not in the registry and is annotated readOnlyHint, which "
                    "`trust_read_only_hint: true` trusts: the proxy forwards it without "
                    "journaling, so undo can never take back what it did"
                )
            return (
                "it is classified `read`: the proxy forwards it without journaling, so undo "
                "can never take back what it did"
            )
        gate = policy.mutating_when if policy is not None else None
        if gate is not None:
            try:
                mutating = gate.truthy({"args": dict(args)})
            except CompensatorError:
                mutating = True  # as the proxy: journal when it cannot tell
            if not mutating:
                return (
                    f"its mutating_when `{gate.source}` is false for these arguments: the "
                    "proxy treated the call as a read, without journaling, so undo can never "
                    "take back what it did"
                )
        return None

    def _require_unchanged(self, before: Any, headline: str, tool: str) -> None:
        after = self.observe()
        if after == before:
            return
        raise PromiseBroken(
            format_failure(
                headline=headline,
                trace=self.trace,
                expected=before,
                observed=after,
                report={},
                journal=[],
                compared="expected = before the call, observed = after it",
            ),
            tools=[tool],
        )

    def call_drawn(self, data: st.DataObject, tool: str) -> None:
        """Call `tool` with drawn arguments, drawing again (up to CALL_TRIES times) while the
        call fails or is one `mutating_when` makes a read: such a call under test changes
        nothing and leaves undo nothing to prove."""
        for _ in range(CALL_TRIES):
            args = self.draw_args(data, tool)
            journaled = self._promised_unchanged(tool, args) is None
            if self.call(tool, args) and journaled:
                return

    def call_read(self, data: st.DataObject) -> None:
        """Call one of the reads, which must leave the state as it was."""
        read = data.draw(st.sampled_from(self.plan.reads), label="read")
        self.call(read, self.draw_args(data, read))

    def checkpoint(self) -> int:
        checkpoint = self.driver.checkpoint()
        self.trace.append(f"checkpoint() -> {checkpoint}")
        return checkpoint

    def undo_and_verify(self, checkpoint: int, expected: Any) -> None:
        report = self.driver.undo_to(checkpoint)
        self.trace.append(f"undo_to({checkpoint})")
        self._state = None
        observed = self.observe()
        restored = observed == expected and not report["skipped"]
        self.coverage.record_undo(report, verified=restored)
        if restored:
            return
        involved = sorted({c["tool"] for c in report["undone"] + report["skipped"]})
        headline = (
            f"undo_to({checkpoint}) did not restore the state at the checkpoint; "
            f"tools undone: {', '.join(involved) or 'none'}"
        )
        raise UndoFailure(
            format_failure(
                headline=headline,
                trace=self.trace,
                expected=expected,
                observed=observed,
                report=report,
                journal=self.driver.journal_since(checkpoint),
            ),
            tools=involved,
        )

    def repeat_idempotent(self, checkpoint: int, expected: Any) -> None:
        """Run each compensating call of a tool marked `idempotent: true` once more, as undo
        does when a crash left it in doubt: the state must stay as the first run left it."""
        for undone, tool, args in self.driver.compensations_since(checkpoint):
            policy = self.registry.policy(tool)
            if policy is None or not policy.idempotent or REDACTED in json.dumps(args):
                continue
            self.trace.append(f"{format_call(tool, args)}  (again, as undo does when in doubt)")
            self.driver.call(tool, args)
            self._state = None
            self._require_unchanged(
                expected,
                f"{tool} is marked `idempotent: true`, but running it a second time (the "
                f"compensation of {undone}) changed the state: an in-doubt compensation "
                "repeated after a crash would not restore it",
                tool,
            )


def _error_when(registry: Registry, tool: str, args: Mapping[str, Any], value: Any) -> bool:
    """Whether the tool's `error_when` says this result is a failure (as the proxy decides)."""
    policy = registry.policy(tool)
    if policy is None or policy.error_when is None:
        return False
    try:
        return policy.error_when.truthy({"result": value, "args": dict(args)})
    except CompensatorError:
        return False  # the proxy, too, counts the call as done when it cannot tell


def _ids(value: Any) -> Iterator[int]:
    """Integers a result holds under keys that name ids (`id`, `parent_id`, `taskId`...)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            is_id = str(key).lower().endswith("id") and isinstance(inner, int)
            if is_id and not isinstance(inner, bool):
                yield inner
            else:
                yield from _ids(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _ids(inner)


def _texts(value: Any) -> Iterator[str]:
    """Short strings a result or state holds, as values (not keys)."""
    if isinstance(value, str):
        if 0 < len(value) <= SEEN_TEXT_LENGTH:
            yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _texts(inner)


def _size(state: Any) -> float:
    return float(len(json.dumps(state, default=str)))


def build_pre_state(data: st.DataObject, recorder: Recorder) -> None:
    """A few successful calls (failed ones are retried), so that pre-states have depth:
    things that exist, things with children, things created twice. Calls come from every
    undoable tool, the state builders and a swarm-style pick of one to three others at
    triple weight; each tool that succeeds weighs more from then on and each one that fails
    less (what worked is what makes the next calls' preconditions hold). Reads are mixed in,
    and must change nothing."""
    plan = recorder.plan
    if not plan.tools:
        return
    swarm = data.draw(
        st.lists(st.sampled_from(plan.tools), min_size=1, max_size=3, unique=True), label="also"
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

    def run() -> None:
        nonlocal verified_before, calls_before
        errors.clear()
        verified_before = coverage.stats(tool).verified
        calls_before = coverage.stats(tool).calls

        @hypothesis.seed(settings.seed)
        @hypothesis_settings(settings)
        @given(data=st.data())
        def roundtrip(data: st.DataObject) -> None:
            coverage.examples += 1
            with harness.example() as driver:
                recorder = Recorder(driver, coverage, harness.registry, plan, errors)
                build_pre_state(data, recorder)
                before = recorder.observe()
                target(_size(before), label="size of the state before the call")
                checkpoint = recorder.checkpoint()
                read_now = data.draw(st.booleans(), label="a read after the checkpoint")
                if read_now and plan.reads:
                    recorder.call_read(data)
                recorder.call_drawn(data, tool)
                recorder.undo_and_verify(checkpoint, before)
                recorder.repeat_idempotent(checkpoint, before)

        roundtrip()

    _replayable(harness, run)
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

    _replayable(harness, run)
    stats = coverage.stats(tool)
    worked = stats.calls - stats.errors
    if worked < need:
        raise NeverVerified(
            f"{tool}: {worked} of its {stats.calls} calls worked, at least {need} required "
            "before calls that change nothing count as evidence that it only reads"
        )


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
    lines = [
        f"{tool} never verified: {verified} of its undos restored the state, at least "
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


def build_machine(harness: Harness, coverage: Coverage) -> type[RuleBasedStateMachine]:
    """A state machine whose rules call each undoable tool and each read, checkpoint, and
    undo."""
    plan = Plan.of(harness)
    coverage.reads.update(plan.reads)

    class RegistryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            coverage.examples += 1
            self._example = harness.example()
            driver = self._example.__enter__()
            self.recorder = Recorder(driver, coverage, harness.registry, plan)
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

    for tool in plan.tools:
        setattr(RegistryMachine, f"call_{tool}", _call_rule(tool))
        setattr(RegistryMachine, f"checkpoint_call_undo_{tool}", _guarded_rule(tool))
    if plan.reads:
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
    machine = hypothesis.seed(settings.seed)(build_machine(harness, coverage))
    _replayable(
        harness, lambda: run_state_machine_as_test(machine, settings=hypothesis_settings(settings))
    )
