"""The generated checks: one round trip per undoable tool, and a stateful machine over all."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from compensator.errors import CompensatorError
from compensator.names import META_TOOLS
from compensator.registry import Registry

from .harness import Driver, Harness
from .report import Coverage, UndoFailure, format_call, format_failure
from .settings import Settings
from .strategies import arguments

__all__ = [
    "Recorder",
    "build_machine",
    "exercised_tools",
    "left_out",
    "run_roundtrip",
    "run_state_machine",
]

MAX_SETUP_CALLS = 14
SETUP_ATTEMPTS = 3  # calls that fail while building a pre-state are retried up to this factor
MAX_UNDO_DEPTH = 3
CALL_TRIES = 3  # draws of arguments for a call under test that keeps failing


def hypothesis_settings(settings: Settings) -> hypothesis.settings:
    default = hypothesis.settings.default
    assert default is not None  # a profile is always loaded
    return hypothesis.settings(
        max_examples=settings.examples,
        stateful_step_count=settings.steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        # Every run has a seed (shown in the header) and is reproduced from it, never from
        # failures saved in the example database.
        database=None,
        print_blob=False,
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


def left_out(harness: Harness) -> dict[str, str]:
    """Tools the generated checks do not call, with the reason."""
    out: dict[str, str] = {}
    for name, policy in harness.registry.tools.items():
        if not policy.classification.behaviour.exercised:
            out[name] = policy.classification.value
        elif name not in harness.tools:
            out[name] = "no server offers it"
    for name in harness.tools:
        if harness.registry.policy(name) is None and name not in META_TOOLS:
            out[name] = "unknown: not in the registry"
    return out


def strategies_for(harness: Harness, tools: list[str]) -> dict[str, st.SearchStrategy]:
    return {
        tool: arguments(tool, harness.input_schema(tool), harness.registry.policy(tool))
        for tool in tools
    }


class Recorder:
    """Calls through a driver, keeping a readable trace, the ids seen, and coverage counts."""

    def __init__(self, driver: Driver, coverage: Coverage, registry: Registry) -> None:
        self.driver = driver
        self.coverage = coverage
        self.registry = registry
        self.trace: list[str] = []
        self.seen_ids: set[int] = set()

    def draw_args(
        self, data: st.DataObject, tool: str, strategy: st.SearchStrategy
    ) -> dict[str, Any]:
        """Draw arguments; integer ones may be swapped for ids earlier results returned,
        so that calls hit things that exist."""
        args: dict[str, Any] = dict(data.draw(strategy, label=tool))
        for key, value in sorted(args.items()):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if is_int and self.seen_ids and data.draw(st.booleans(), label=f"reuse id: {key}"):
                args[key] = data.draw(st.sampled_from(sorted(self.seen_ids)), label=key)
        return args

    def call(self, tool: str, args: Mapping[str, Any]) -> bool:
        """Make the call; True when it worked (not isError, and no `error_when` matched)."""
        reply = self.driver.call(tool, args)
        ok = not reply.is_error and not _error_when(self.registry, tool, args, reply.value)
        if ok:
            self.seen_ids.update(_ids(reply.value))
        self.coverage.record_call(tool, ok)
        outcome = "" if ok else f"  -> error: {reply.text[:120]}"
        self.trace.append(format_call(tool, args) + outcome)
        return ok

    def call_drawn(self, data: st.DataObject, tool: str, strategy: st.SearchStrategy) -> None:
        """Call `tool` with drawn arguments, drawing again (up to CALL_TRIES times) while the
        call fails: a call under test that fails changes nothing and proves little."""
        for _ in range(CALL_TRIES):
            if self.call(tool, self.draw_args(data, tool, strategy)):
                return

    def checkpoint(self) -> int:
        checkpoint = self.driver.checkpoint()
        self.trace.append(f"checkpoint() -> {checkpoint}")
        return checkpoint

    def undo_and_verify(self, checkpoint: int, expected: Any) -> None:
        report = self.driver.undo_to(checkpoint)
        self.trace.append(f"undo_to({checkpoint})")
        observed = self.driver.observe()
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
            )
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


def _size(state: Any) -> float:
    return float(len(json.dumps(state, default=str)))


def build_pre_state(
    data: st.DataObject,
    recorder: Recorder,
    tools: list[str],
    strategies: Mapping[str, st.SearchStrategy],
    creators: list[str],
) -> None:
    """A few successful calls (failed ones are retried), so that pre-states have depth:
    things that exist, things with children, things created twice. Calls come mostly from
    the reversible tools (which usually create) plus a swarm-style pick of up to two others."""
    extra = data.draw(st.lists(st.sampled_from(tools), max_size=2, unique=True), label="also")
    pool = [*creators, *creators, *extra] or tools  # creators twice: they weigh double
    wanted = data.draw(st.integers(0, MAX_SETUP_CALLS), label="successful setup calls")
    made = attempts = 0
    while made < wanted and attempts < SETUP_ATTEMPTS * wanted:
        if made == 0 and attempts == SETUP_ATTEMPTS:
            # The creators fail on empty state (a move needs a file to move): widen to all.
            pool = tools
        name = data.draw(st.sampled_from(pool))
        made += recorder.call(name, recorder.draw_args(data, name, strategies[name]))
        attempts += 1


def run_roundtrip(harness: Harness, tool: str, coverage: Coverage, settings: Settings) -> None:
    """Build a random pre-state, checkpoint, call `tool`, undo: the state must be as before."""
    tools = exercised_tools(harness.registry, harness.tools)
    creators = state_builders(harness.registry, tools)
    strategies = strategies_for(harness, sorted({*tools, tool}))

    @hypothesis.seed(settings.seed)
    @hypothesis_settings(settings)
    @given(data=st.data())
    def roundtrip(data: st.DataObject) -> None:
        coverage.examples += 1
        with harness.example() as driver:
            recorder = Recorder(driver, coverage, harness.registry)
            build_pre_state(data, recorder, tools, strategies, creators)
            before = driver.observe()
            target(_size(before), label="size of the state before the call")
            checkpoint = recorder.checkpoint()
            recorder.call_drawn(data, tool, strategies[tool])
            recorder.undo_and_verify(checkpoint, before)

    roundtrip()


def build_machine(harness: Harness, coverage: Coverage) -> type[RuleBasedStateMachine]:
    """A state machine whose rules call each undoable tool, checkpoint, and undo."""
    tools = exercised_tools(harness.registry, harness.tools)
    creators = state_builders(harness.registry, tools)
    strategies = strategies_for(harness, tools)

    class RegistryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            coverage.examples += 1
            self._example = harness.example()
            self.recorder = Recorder(self._example.__enter__(), coverage, harness.registry)
            self.live: list[tuple[int, Any]] = []

        def teardown(self) -> None:
            self._example.__exit__(None, None, None)

        def _checkpoint(self) -> int:
            state = self.recorder.driver.observe()
            checkpoint = self.recorder.checkpoint()
            self.live.append((checkpoint, state))
            return checkpoint

        @initialize(data=st.data())
        def start(self, data: st.DataObject) -> None:
            build_pre_state(data, self.recorder, tools, strategies, creators)
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

    for tool in tools:
        setattr(RegistryMachine, f"call_{tool}", _call_rule(tool, strategies[tool]))
        guarded = _guarded_rule(tool, strategies[tool])
        setattr(RegistryMachine, f"checkpoint_call_undo_{tool}", guarded)
    return RegistryMachine


def _call_rule(tool: str, strategy: st.SearchStrategy) -> Any:
    def call(self: Any, data: st.DataObject) -> None:
        self.recorder.call(tool, self.recorder.draw_args(data, tool, strategy))

    call.__name__ = f"call_{tool}"
    return rule(data=st.data())(call)


def _guarded_rule(tool: str, strategy: st.SearchStrategy) -> Any:
    # A checkpoint right before the call, then undo to it: where most registry bugs show.
    def guarded(self: Any, data: st.DataObject) -> None:
        checkpoint = self._checkpoint()
        self.recorder.call_drawn(data, tool, strategy)
        expected = self.live[-1][1]
        del self.live[-1:]
        self.recorder.undo_and_verify(checkpoint, expected)
        self.live.append((checkpoint, expected))

    guarded.__name__ = f"checkpoint_call_undo_{tool}"
    return rule(data=st.data())(guarded)


def run_state_machine(harness: Harness, coverage: Coverage, settings: Settings) -> None:
    # A fixed seed needs the @given-wrapped test itself; Hypothesis exposes it for HypoFuzz.
    from hypothesis.stateful import get_state_machine_test

    machine = build_machine(harness, coverage)
    test = get_state_machine_test(machine, settings=hypothesis_settings(settings))
    hypothesis.seed(settings.seed)(test)()
