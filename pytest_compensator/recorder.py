"""The Recorder: calls through a driver with a readable trace and a replayable list of
steps, the values seen, coverage counts and error texts, and the checks of every promise that
a call changes nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from compensator.errors import CompensatorError
from compensator.registry import REDACTED, Registry

from .client import error_when_matched
from .harness import Driver
from .plan import Plan
from .report import Coverage, PromiseBroken, UndoFailure, format_call, format_failure

__all__ = ["CALL_TRIES", "Recorder", "Step"]

CALL_TRIES = 3  # draws of arguments for a call under test that keeps failing
_UNWATCHED = object()  # call_drawn's default: any call that worked will do
SEEN_TEXT_LENGTH = 64  # longer strings in results are content, not names worth reusing


@dataclass(frozen=True, kw_only=True)
class Step:
    """One thing a check did, enough to do it again on fresh state: a call, a checkpoint
    (taken after reading the state), an undo to one, or a repeat of its idempotent
    compensations. Checkpoints are named by the id they had when recorded."""

    kind: str  # call, checkpoint, undo, again
    tool: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: int = 0


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
        self.steps: list[Step] = []  # what `minimize` replays
        self.seen_ids: set[int] = set()
        self.seen_text: set[str] = set()
        self._state: Any = None  # the observed state, while no call can have changed it
        self.reread_snapshots = False  # Settings.reread_snapshots
        self._snapshot: tuple[str, dict[str, Any], Any] | None = None  # read before the call

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
        self.steps.append(Step(kind="call", tool=tool, args=dict(args)))
        policy = self.registry.policy(tool)
        promise = self._promised_unchanged(tool, args)
        watch = promise is not None or (policy is not None and policy.error_when is not None)
        before = self.observe() if watch else None
        reply = self.driver.call(tool, args)
        matched = not reply.is_error and error_when_matched(self.registry, tool, args, reply.value)
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
            steps=self.steps,
        )

    def call_drawn(
        self, data: st.DataObject, tool: str, *, until_changed: Any = _UNWATCHED
    ) -> bool:
        """Call `tool` with drawn arguments, drawing again (up to CALL_TRIES times) while the
        call fails or is one `mutating_when` makes a read: such a call under test changes
        nothing and leaves undo nothing to prove. With `until_changed` (the state before,
        Settings.changes_only), also while the calls that worked changed nothing (an empty
        list to create, a name that exists). True once a journaled call worked (with
        `until_changed`: and changed something)."""
        for _ in range(CALL_TRIES):
            args = self.draw_args(data, tool)
            if self.reread_snapshots:
                self._snapshot = self._read_snapshot(tool, args)
            journaled = self._promised_unchanged(tool, args) is None
            worked = self.call(tool, args) and journaled
            if worked and (until_changed is _UNWATCHED or self.changed_since(until_changed)):
                return True
        return False

    def _read_snapshot(self, tool: str, args: Mapping[str, Any]) -> tuple[str, dict, Any] | None:
        """The tool's snapshot read with arguments, as the proxy makes it for `args`: (tool,
        arguments, what it answered, an error included). None for a snapshot without
        arguments (a read of everything, which the state probes cover) or none at all."""
        policy = self.registry.policy(tool)
        if policy is None or policy.snapshot_tool is None or not policy.snapshot_args:
            return None
        try:
            read_args = dict(policy.snapshot_args.render({"args": dict(args)}))
        except (ValueError, TypeError):
            return None
        return policy.snapshot_tool, read_args, self._answer(policy.snapshot_tool, read_args)

    def _answer(self, tool: str, args: Mapping[str, Any]) -> Any:
        reply = self.driver.call(tool, args)
        return {"error": reply.text} if reply.is_error else reply.value

    def _snapshot_difference(self) -> str | None:
        """How the snapshot read before the call differs from the same read now."""
        if self._snapshot is None:
            return None
        tool, args, before = self._snapshot
        self._snapshot = None
        now = self._answer(tool, args)
        if now == before:
            return None
        call = format_call(tool, args)
        return f"{call} read {before!r} before the call and {now!r} after the undo"

    def call_read(self, data: st.DataObject) -> None:
        """Call one of the reads, which must leave the state as it was."""
        read = data.draw(st.sampled_from(self.plan.reads), label="read")
        self.call(read, self.draw_args(data, read))

    def checkpoint(self) -> int:
        checkpoint = self.driver.checkpoint()
        self.trace.append(f"checkpoint() -> {checkpoint}")
        self.steps.append(Step(kind="checkpoint", checkpoint=checkpoint))
        return checkpoint

    def changed_since(self, before: Any) -> bool:
        """Whether the state probes, or the snapshot read again (`reread_snapshots`), show
        something other than `before` and the snapshot's first answer."""
        if self.observe() != before:
            return True
        if self._snapshot is None:
            return False
        tool, args, answered = self._snapshot
        return bool(self._answer(tool, args) != answered)

    def undo_and_verify(
        self, checkpoint: int, expected: Any, *, vouches: bool | None = None
    ) -> None:
        """Undo to `checkpoint`; the state must be `expected` again. Every change undone
        counts as verified then; with `vouches` (Settings.changes_only) one undo counts once
        per tool, and only when `vouches` is True (the call changed something): calls drawn
        again after no-op ones are undone too, and must not count thrice."""
        self.steps.append(Step(kind="undo", checkpoint=checkpoint))
        report = self.driver.undo_to(checkpoint)
        self.trace.append(f"undo_to({checkpoint})")
        self._state = None
        observed = self.observe()
        differs = self._snapshot_difference()
        restored = observed == expected and not report["skipped"] and differs is None
        if vouches is None:
            self.coverage.record_undo(report, verified=restored)
        else:
            self.coverage.record_undo(report, verified=restored, vouches=vouches, once=True)
        if restored:
            return
        involved = sorted({c["tool"] for c in report["undone"] + report["skipped"]})
        headline = (
            f"undo_to({checkpoint}) did not restore the state at the checkpoint; "
            f"tools undone: {', '.join(involved) or 'none'}"
        )
        if differs is not None and observed == expected:
            headline += f" (the state probes agree, but {differs})"
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
            steps=self.steps,
        )

    def repeat_idempotent(self, checkpoint: int, expected: Any) -> None:
        """Run each compensating call of a tool marked `idempotent: true` once more, as undo
        does when a crash left it in doubt: the state must stay as the first run left it."""
        self.steps.append(Step(kind="again", checkpoint=checkpoint))
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
