"""Undo: plan and run the compensations of changes, newest first: every open change after a
checkpoint or since a moment, or one change alone when nothing later can depend on it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from ..classification import Classification
from ..errors import CompensatorError, MetaArgumentError
from ..journal import (
    Change,
    Checkpoint,
    Compensation,
    JournalStore,
    Status,
    StepOutcome,
    StepStatus,
    latest_steps,
)
from ..registry import InverseStep, Registry, ToolPolicy
from .late import BEFORE_POLICY, LatePolicy, late_policy
from .outcome import Caller, CallOutcome, observed_state

__all__ = ["Progress", "UndoReport", "Undoer"]

log = logging.getLogger(__name__)


Progress = Callable[[str, dict[str, Any]], None]
"""Told each change as it settles: its kind (undone, skipped, nothing_to_undo) and entry."""


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

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.details = details


_FORCE_HINT = "check it by hand, then undo again with force=true to compensate anyway"


class Undoer:
    """Runs compensations; one that fails is reported and the rest still run.

    A compensating step whose outcome was never recorded (the process died, or the call got no
    answer) is *in doubt*: it may have applied. It runs again only when that is known to be
    harmless or known not to have happened: its tool is `idempotent: true`, or the changed
    tool's `verify` state shows nothing moved since the call, or the caller passes `force`.
    """

    def __init__(
        self,
        journal: JournalStore,
        registry: Registry,
        call: Caller,
        *,
        agent: str | None,
        scope: str | None = None,
    ) -> None:
        """`agent` is whose changes are undone: the asking agent's own (the meta tools), or
        None for every agent's (a person at the terminal); with a shared `scope`, the scope's
        changes too, whichever agent in it made them."""
        self._journal = journal
        self._registry = registry
        self._call = call
        self._agent = agent
        self._scope = scope

    def _mine(self, change: Change) -> bool:
        """Whether `change` is this undoer's to see and undo."""
        if self._agent is None or change.agent == self._agent:
            return True
        return self._scope is not None and change.scope == self._scope

    async def undo_to(
        self,
        checkpoint_id: int,
        *,
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
    ) -> UndoReport:
        """Compensate every open change after the checkpoint, newest first. `progress` is told
        each change as it settles: its kind (undone, skipped, nothing_to_undo) and entry.
        `force` compensates despite drift and re-runs in-doubt steps."""
        checkpoint = self._journal.checkpoint(checkpoint_id)
        if checkpoint is None:
            raise MetaArgumentError(self.unknown_checkpoint(checkpoint_id))
        return await self._undo(
            lambda: self._open_changes(checkpoint), dry_run=dry_run, force=force, progress=progress
        )

    async def undo_since(
        self,
        since: datetime,
        *,
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
    ) -> UndoReport:
        """Compensate every open change made at `since` (an aware datetime) or later, newest
        first, as `undo_to` does."""

        def made_since() -> list[Change]:
            return [c for c in self._open_changes(None) if _made_at(c) >= since]

        return await self._undo(made_since, dry_run=dry_run, force=force, progress=progress)

    async def undo_change(
        self,
        change_id: int,
        *,
        dry_run: bool = False,
        force: bool = False,
        progress: Progress | None = None,
    ) -> UndoReport:
        """Compensate one change alone, when no later open change can depend on it: it is the
        newest open change of its server, or its tool's `verify` read shows the state it left
        unchanged. Otherwise it is skipped with a reason naming the later changes; `force`
        undoes it anyway. MetaArgumentError for an id that is unknown, another agent's, or
        undone already."""
        self.one_change(change_id)

        def the_change() -> list[Change]:
            change = self._journal.change(change_id)  # read again: recovery may have moved it
            return [] if change is None else [change]

        return await self._undo(
            the_change, dry_run=dry_run, force=force, progress=progress, alone=True
        )

    def one_change(self, change_id: int) -> Change:
        """The open change `change_id` of this undoer's agent; MetaArgumentError otherwise."""
        change = self._journal.change(change_id)
        if change is None or not self._mine(change):
            # Another agent's change is not this agent's to see, so it reads as unknown.
            open_ids = [str(c.id) for c in self._open_changes(None)[:20]]
            valid = ", ".join(open_ids) if open_ids else "none (nothing is left to undo)"
            raise MetaArgumentError(
                f"no change {change_id!r} to undo; open change ids (newest first): {valid}"
            )
        if change.undone_at is not None:
            raise MetaArgumentError(
                f"change {change_id} was undone already ({change.undo_note or 'undone'}, "
                f"at {change.undone_at}); nothing to do"
            )
        return change

    def _open_changes(self, checkpoint: Checkpoint | None) -> list[Change]:
        return self._journal.open_changes(checkpoint, agent=self._agent, scope=self._scope)

    async def _undo(
        self,
        select: Callable[[], list[Change]],
        *,
        dry_run: bool,
        force: bool,
        progress: Progress | None,
        alone: bool = False,
    ) -> UndoReport:
        """Undo the changes `select` lists (newest first), each settling on its own."""
        if not dry_run:
            # Calls another process left pending when it died are `unknown` from now on.
            self._journal.recover_abandoned()
            # The changes this undo settles say so: redo replays one undo's changes.
            self._journal.undo_run = uuid.uuid4().hex[:12]
        report = UndoReport()
        try:
            for change in select():
                kind, entry = await self._isolated(
                    change, dry_run=dry_run, force=force, alone=alone
                )
                getattr(report, kind).append(entry)
                if progress is not None:
                    progress(kind, entry)
        finally:
            self._journal.undo_run = None
        return report

    def unknown_checkpoint(self, checkpoint_id: object) -> str:
        """The error text for a checkpoint id that does not exist, listing the valid ones."""
        known = [cp.id for cp in self._journal.checkpoints(self._agent, scope=self._scope)]
        if not known:
            return f"no checkpoint {checkpoint_id!r}: none exists yet; call `checkpoint` first"
        shown = ", ".join(str(i) for i in known[:20])
        return f"no checkpoint {checkpoint_id!r}; valid checkpoint ids: {shown}"

    async def _isolated(
        self, change: Change, *, dry_run: bool, force: bool, alone: bool
    ) -> tuple[str, dict[str, Any]]:
        """One change's undo; whatever goes wrong in it is that change's skip reason, and the
        undo goes on with the next change. `alone`: undone without the changes after it."""
        try:
            return await self._undo_one(change, dry_run=dry_run, force=force, alone=alone)
        except Exception as exc:  # one change's surprise must not end the undo
            log.exception("undoing change %d failed unexpectedly", change.id)
            reason = f"undoing it failed unexpectedly ({type(exc).__name__}: {exc}); undo again"
            if not isinstance(exc, CompensatorError):
                reason += ", and report this as a bug if it repeats"
            return "skipped", {**change.to_json(), "reason": reason}

    async def _undo_one(
        self, change: Change, *, dry_run: bool, force: bool, alone: bool
    ) -> tuple[str, dict[str, Any]]:
        entry = change.to_json()
        if change.status == Status.ERROR:
            if not dry_run:
                self._journal.mark_undone(change.id, "nothing to undo: the call failed")
            return "nothing_to_undo", {**entry, "reason": "the call failed"}
        late = late_policy(change, self._registry)
        if late is not None and late.nothing:
            if not dry_run:
                self._journal.mark_undone(change.id, "nothing to undo: " + late.note)
            return "nothing_to_undo", {**entry, "reason": late.note}
        try:
            policy = self._policy_for(change, late)
            latest = latest_steps(self._journal.compensations(change.id))
            if alone and not force:
                await self._check_alone(change, policy)
            await self._may_run(change, policy, latest, force=force)
            note = "compensated" if late is None else late.undo_note
            calls = await self._compensate(change, policy, latest, dry_run=dry_run, note=note)
        except _Skip as skip:
            return "skipped", {**entry, "reason": str(skip), **skip.details}
        return "undone", {**entry, "calls": calls, **({"policy": late.note} if late else {})}

    def _policy_for(self, change: Change, late: LatePolicy | None) -> ToolPolicy:
        if change.status == Status.PENDING:
            raise _Skip("the call is still in flight; undo again once it has finished")
        if change.status == Status.UNKNOWN:
            raise _Skip(
                "the outcome of this call was never recorded (crash, timeout or cancellation); "
                "check its effect by hand"
            )
        if late is not None:
            if not late.usable:
                raise _Skip(late.note)
            return late.policy
        kind = Classification.named(change.classification)
        if kind.value != change.classification:
            raise _Skip(
                f"the journal records classification {change.classification!r}, which this "
                "version of mcp-compensator does not know; undo it with the version that wrote it"
            )
        if not kind.behaviour.undoable:
            raise _Skip(kind.refusal(change.tool))
        policy = self._registry.policy(change.tool)
        if policy is None:
            raise _Skip(Classification.UNKNOWN.refusal(change.tool))
        if not policy.inverse:
            raise _Skip(f"the registry's policy for {change.tool} has no inverse")
        return policy

    # -- may the compensation run? ----------------------------------------------------------

    async def _may_run(
        self, change: Change, policy: ToolPolicy, latest: dict[int, Compensation], *, force: bool
    ) -> None:
        """Raise _Skip unless compensating now is safe: no step is being run elsewhere, no step
        is in doubt (or repeating it is harmless), and the state has not drifted."""
        busy = [r for r in latest.values() if self._journal.started_elsewhere(r)]
        if busy:
            session = (busy[0].session or "")[:8]
            raise _Skip(
                f"being compensated by another live process (session {session}, pid "
                f"{busy[0].pid}; `compensator log --sessions` says on which host); undo again "
                "once it has finished"
            )
        doubtful = [r for r in latest.values() if self._in_doubt(r)]
        started = any(r.status == StepStatus.OK for r in latest.values())
        if doubtful:
            await self._resolve_doubt(change, policy, doubtful[0], started=started, force=force)
        elif policy.verify and not started and not force:
            await self._check_drift(change, policy)

    async def _check_alone(self, change: Change, policy: ToolPolicy) -> None:
        """Raise _Skip unless undoing `change` without the later changes to its server is safe:
        there are none, or its `verify` read shows the state it left still in place."""
        later = self._later_on_server(change)
        if not later:
            return
        # Another agent's changes count, but are not this agent's to see: only how many.
        mine = [c for c in later if self._mine(c)]
        theirs = len(later) - len(mine)
        named = [f"{c.id} ({c.tool})" for c in mine[:10]]
        if len(mine) > 10:
            named.append(f"{len(mine) - 10} more")
        if theirs:
            named.append(f"{theirs} by other agents" if theirs > 1 else "1 by another agent")
        what = f"later open changes to the same server may depend on it: {', '.join(named)}"
        first = "undo those first, or " if mine else ""
        hint = f"{first}pass force=true if you checked it is safe to undo alone"
        if not policy.verify:
            raise _Skip(
                f"not undone alone: {what}; its tool has no `verify` read to show they "
                f"left its state alone; {hint}"
            )
        try:
            await self._check_drift(change, policy)
        except _Skip as skip:
            raise _Skip(f"not undone alone: {what}, and {skip}", **skip.details) from None

    def _later_on_server(self, change: Change) -> list[Change]:
        """Open changes to the same server made after `change`, by any agent, oldest first;
        failed calls changed nothing, so nothing can depend on them."""
        server = self._server_of(change.tool)
        later = [
            c
            for c in self._journal.open_changes()
            if c.id > change.id and c.status != Status.ERROR and self._server_of(c.tool) == server
        ]
        return sorted(later, key=lambda c: c.id)

    def _server_of(self, tool: str) -> str:
        """The server a change's tool went to; a tool the registry no longer routes keeps its
        own name, so it is compared only with changes of the same tool."""
        return self._registry.server_for(tool) or tool

    async def _resolve_doubt(
        self,
        change: Change,
        policy: ToolPolicy,
        record: Compensation,
        *,
        started: bool,
        force: bool,
    ) -> None:
        if force or self._idempotent(record.tool):
            return
        if policy.verify and not started and change.post_state_recorded:
            now = await self._read_state(change, policy)
            if now == change.post_state and change.post_state_error is None:
                return  # nothing moved since the call: the compensation did not apply
        why = record.error or "the process running it stopped before its outcome was recorded"
        raise _Skip(
            f"in doubt: compensating call {record.tool} (step {record.step + 1}) may or may not "
            f"have applied ({why}); {_FORCE_HINT} (or mark {record.tool} `idempotent: true` in "
            "the registry if repeating it is harmless)"
        )

    def _in_doubt(self, record: Compensation) -> bool:
        """The step may or may not have applied: no answer came, or whoever ran it is gone."""
        if record.status == StepStatus.UNKNOWN:
            return True
        return record.status == StepStatus.STARTED and not self._journal.started_elsewhere(record)

    def _idempotent(self, tool: str) -> bool:
        policy = self._registry.policy(tool)
        return policy is not None and policy.idempotent

    async def _check_drift(self, change: Change, policy: ToolPolicy) -> None:
        if not change.post_state_recorded and change.classification == Classification.UNKNOWN:
            raise _Skip(
                f"cannot check for drift: {BEFORE_POLICY}, so the state after it was not "
                f"recorded for its `verify` read; {_FORCE_HINT}"
            )
        if not change.post_state_recorded:
            raise _Skip(
                "cannot check for drift: the state after the call was not recorded; " + _FORCE_HINT
            )
        if change.post_state_error is not None:
            raise _Skip(
                "cannot check for drift: reading the state after the call failed "
                f"({change.post_state_error}); {_FORCE_HINT}"
            )
        now = await self._read_state(change, policy)
        if now != change.post_state:
            raise _Skip(
                f"drift: the state read with {policy.verify_tool} changed since the call, and "
                f"undo would overwrite that change; {_FORCE_HINT}",
                drift={"after_call": change.post_state, "now": now},
            )

    async def _read_state(self, change: Change, policy: ToolPolicy) -> Any:
        """The state the drift check compares, read now as it was right after the call."""
        assert policy.verify_tool is not None
        context = {"args": change.args, "result": change.result}
        try:
            args = policy.verify_args.render(context) if policy.verify_args else {}
        except CompensatorError as exc:
            raise _Skip(f"cannot check for drift: {exc}; {_FORCE_HINT}") from exc
        outcome = await self._call(policy.verify_tool, args)
        state = observed_state(outcome)
        if state is None:
            raise _Skip(f"cannot check for drift: {outcome.error}; {_FORCE_HINT}")
        return state

    # -- running it ---------------------------------------------------------------------------

    async def _compensate(
        self,
        change: Change,
        policy: ToolPolicy,
        latest: dict[int, Compensation],
        *,
        dry_run: bool,
        note: str = "compensated",
    ) -> list[dict[str, Any]]:
        """Run the compensating calls still to run; `note` is what the journal records as the
        change's undo once the last one has."""
        context = change.context()
        calls: list[dict[str, Any]] = []
        last = len(policy.inverse) - 1
        settled = False
        for index, step in enumerate(policy.inverse):
            record = latest.get(index)
            if record is not None and record.status == StepStatus.OK:
                continue
            args = _render_step(step, context, index)
            if args is None:
                continue
            calls.append({"tool": step.tool, "args": args})
            if not dry_run:
                after = None if record is None else record.id
                settles = note if index == last else None
                await self._run_step(change, index, step.tool, args, after, settles=settles)
                settled = index == last
        if not dry_run and not settled:
            # The last step did not run now (skipped by `when`, or done before a crash):
            # every step is accounted for, so settle the change.
            self._journal.mark_undone(change.id, note)
        return calls

    async def _run_step(
        self,
        change: Change,
        index: int,
        tool: str,
        args: dict[str, Any],
        after: int | None,
        *,
        settles: str | None,
    ) -> None:
        """One compensating call, journaled; `settles`: the undo note that marks the change
        undone when it works (the last step), None for the steps before."""
        record = self._journal.record_step_started(change.id, index, tool, args, after=after)
        if record is None:
            raise _Skip("being compensated by another process; undo again to see its outcome")
        try:
            outcome = await self._call(tool, args)
        except BaseException:
            with anyio.CancelScope(shield=True):
                cancelled = "cancelled before the answer came"
                self._journal.record_step_outcome(
                    record, StepOutcome(status=StepStatus.UNKNOWN, error=cancelled)
                )
            raise
        undone = (change.id, settles) if settles is not None and outcome.ok else None
        status = _step_status(outcome)
        recorded = StepOutcome(status=status, result=outcome.value, error=outcome.error)
        self._journal.record_step_outcome(record, recorded, undone=undone)
        if outcome.ok:
            return
        log.warning("compensation of change %d failed: %s", change.id, outcome.error)
        if outcome.in_doubt:
            raise _Skip(
                f"in doubt: compensating call {tool} (step {index + 1}) got no answer "
                f"({outcome.error}); it may or may not have applied; {_FORCE_HINT}"
            )
        # An answer the server gave as a success but the registry's error_when calls a
        # failure: say so, or the person looks for a server fault that is not there.
        judged = f" (its error_when `{outcome.error_when}` matched)" if outcome.error_when else ""
        raise _Skip(f"compensating call {tool} (step {index + 1}) failed: {outcome.error}{judged}")


def _made_at(change: Change) -> datetime:
    return datetime.fromisoformat(change.created_at)


def _step_status(outcome: CallOutcome) -> str:
    """A failed call that may still have applied is in doubt (unknown), not an error."""
    if outcome.ok:
        return StepStatus.OK
    return StepStatus.UNKNOWN if outcome.in_doubt else StepStatus.ERROR


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
