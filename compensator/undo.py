"""Undo: plan and run the compensations of every change since a checkpoint, newest first."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import CompensatorError, MetaArgumentError
from .journal import Change, Journal, Status
from .registry import Classification, InverseStep, Registry, ToolPolicy

__all__ = ["CallOutcome", "Caller", "Progress", "UndoReport", "Undoer", "template_context"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CallOutcome:
    """A downstream call reduced to what undo needs: did it work, and its parsed result."""

    ok: bool
    value: Any = None
    error: str | None = None


Caller = Callable[[str, dict[str, Any]], Awaitable[CallOutcome]]
Progress = Callable[[str, dict[str, Any]], None]
"""Told each change as it settles: its kind (undone, skipped, nothing_to_undo) and entry."""
"""Calls a downstream tool by its exposed name; never raises for a failed call."""


@dataclass(kw_only=True)
class UndoReport:
    undone: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    nothing_to_undo: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "undone": self.undone,
            "skipped": self.skipped,
            "nothing_to_undo": self.nothing_to_undo,
        }


class _Skip(CompensatorError):
    """A change that cannot be compensated now; the message is the reason reported."""


def template_context(change: Change) -> dict[str, Any]:
    return {
        "args": change.args,
        "result": change.result,
        "snapshot": change.snapshot,
        "snapshot_error": change.snapshot_error,
        "change": change.context(),
    }


class Undoer:
    """Runs compensations; one that fails is reported and the rest still run."""

    def __init__(self, journal: Journal, registry: Registry, call: Caller) -> None:
        self._journal = journal
        self._registry = registry
        self._call = call

    async def undo_to(
        self, checkpoint_id: int, *, dry_run: bool = False, progress: Progress | None = None
    ) -> UndoReport:
        """Compensate every open change after the checkpoint, newest first. `progress` is told
        each change as it settles: its kind (undone, skipped, nothing_to_undo) and entry."""
        checkpoint = self._journal.checkpoint(checkpoint_id)
        if checkpoint is None:
            raise MetaArgumentError(self.unknown_checkpoint(checkpoint_id))
        report = UndoReport()
        for change in self._journal.open_changes(checkpoint):
            kind, entry = await self._undo_one(change, dry_run=dry_run)
            getattr(report, kind).append(entry)
            if progress is not None:
                progress(kind, entry)
        return report

    def unknown_checkpoint(self, checkpoint_id: object) -> str:
        """The error text for a checkpoint id that does not exist, listing the valid ones."""
        known = [cp.id for cp in self._journal.checkpoints()]
        if not known:
            return f"no checkpoint {checkpoint_id!r}: none exists yet; call `checkpoint` first"
        shown = ", ".join(str(i) for i in known[:20])
        return f"no checkpoint {checkpoint_id!r}; valid checkpoint ids: {shown}"

    async def _undo_one(self, change: Change, *, dry_run: bool) -> tuple[str, dict[str, Any]]:
        entry = change.to_json()
        if change.status == Status.ERROR:
            if not dry_run:
                self._journal.mark_undone(change.id, "nothing to undo: the call failed")
            return "nothing_to_undo", {**entry, "reason": "the call failed"}
        try:
            policy = self._policy_for(change)
            calls = await self._compensate(change, policy, dry_run=dry_run)
        except _Skip as skip:
            return "skipped", {**entry, "reason": str(skip)}
        return "undone", {**entry, "calls": calls}

    def _policy_for(self, change: Change) -> ToolPolicy:
        if change.status == Status.PENDING:
            raise _Skip("the call is still in flight; undo again once it has finished")
        if change.status == Status.UNKNOWN:
            raise _Skip(
                "the outcome of this call was never recorded (crash, timeout or cancellation); "
                "check its effect by hand"
            )
        if change.classification == Classification.IRREVERSIBLE.value:
            raise _Skip("irreversible: the registry says this tool cannot be undone")
        policy = self._registry.policy(change.tool)
        if change.classification == Classification.UNKNOWN.value or policy is None:
            raise _Skip(
                f"unknown: the registry has no policy for {change.tool}; add one under `tools:` "
                "to make it undoable"
            )
        if not policy.inverse:
            raise _Skip(f"the registry's policy for {change.tool} has no inverse")
        return policy

    async def _compensate(
        self, change: Change, policy: ToolPolicy, *, dry_run: bool
    ) -> list[dict[str, Any]]:
        context = template_context(change)
        done = set() if dry_run else self._journal.completed_steps(change.id)
        calls: list[dict[str, Any]] = []
        last = len(policy.inverse) - 1
        settled = False
        for index, step in enumerate(policy.inverse):
            if index in done:
                continue
            args = _render_step(step, context, index)
            if args is None:
                continue
            calls.append({"tool": step.tool, "args": args})
            if not dry_run:
                await self._run_step(change, index, step.tool, args, settles=index == last)
                settled = index == last
        if not dry_run and not settled:
            # The last step did not run now (skipped by `when`, or done before a crash):
            # every step is accounted for, so settle the change.
            self._journal.mark_undone(change.id, "compensated")
        return calls

    async def _run_step(
        self, change: Change, index: int, tool: str, args: dict[str, Any], *, settles: bool
    ) -> None:
        record = self._journal.record_step_started(change.id, index, tool, args)
        outcome = await self._call(tool, args)
        undone = (change.id, "compensated") if settles and outcome.ok else None
        self._journal.record_step_outcome(
            record, ok=outcome.ok, result=outcome.value, error=outcome.error, undone=undone
        )
        if not outcome.ok:
            log.warning("compensation of change %d failed: %s", change.id, outcome.error)
            raise _Skip(f"compensating call {tool} (step {index + 1}) failed: {outcome.error}")


def _render_step(step: InverseStep, context: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The step's arguments, or None when its `when` is false."""
    try:
        if step.when is not None and not step.when.truthy(context):
            return None
        args = step.args.render(context)
    except CompensatorError as exc:
        raise _Skip(f"cannot build step {index + 1} ({step.tool}): {exc}") from exc
    except Exception as exc:
        raise _Skip(f"cannot build step {index + 1} ({step.tool}): {exc}") from exc
    if not isinstance(args, dict):
        raise _Skip(f"step {index + 1} ({step.tool}) args rendered to {args!r}, not an object")
    return args
