"""Redo: replay what an undo took back, oldest first, as new journaled calls (so a redo can be
undone in turn), where replaying gives the same effect; refuse with a reason where it cannot.

`redo_to(checkpoint)` replays the changes after the checkpoint that the latest undo of them
took back (one undo_to, undo_change or `compensator undo`: the changes record which); an
earlier undo's changes stay undone. `redo_change(id)` replays one change. A change is replayed
with the arguments it was journaled with, as a change of the agent (and scope) whose it was.

Refused, and every later one with it (a later call may depend on it): a change whose arguments
were journaled redacted; one whose server has a later change still in effect (redo would
replay over it); a compensable one whose snapshot read no longer sees what it saw before the
first run (drift since the undo); one whose arguments hold a value an earlier change's first
run was handed and its replay was not, or that an earlier change still undone was handed (an
id the server handed out); one whose tool is gone or that the guardrails refuse now. A replay
that fails is reported with the refused ones and stops the redo; a replay whose outcome is
unknown counts as done (it may have happened) and stops it too, and so does one whose
`verify` read differs from its first run's in more than the values handed out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..classification import Classification
from ..errors import CompensatorError, JournalError, MetaArgumentError
from ..journal import Change, JournalStore, Status
from ..registry import Registry, ToolPolicy
from ..registry.redaction import REDACTED

__all__ = ["RedoReport", "Redoer", "Refused"]


class Refused(CompensatorError):
    """A replay the proxy would not send (no such tool, a server that is down, the
    guardrails); its message says why."""


Replay = Callable[[Change], Awaitable[int]]
"""Send a change's call again, journaled as a redo of it for its agent: the new change's id;
Refused when it was not sent."""

Probe = Callable[[Change], str | None]
"""Why a change's replay would not be sent now (no route, the guardrails deny it), without
sending anything; None when it would be."""

Read = Callable[[ToolPolicy, dict[str, Any]], Awaitable[tuple[Any, str | None]]]
"""A policy's snapshot read: (value, None), or (None, why it failed)."""


@dataclass
class RedoReport:
    """What a redo did, oldest first: replayed (with the new change's id), and refused or
    failed (with the reason)."""

    redone: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    left_undone: list[dict[str, Any]] = field(default_factory=list)
    """After the checkpoint, undone by an earlier undo than the latest: not in this redo."""

    def to_json(self) -> dict[str, Any]:
        shown = {"redone": self.redone, "skipped": self.skipped}
        return {**shown, "left_undone": self.left_undone} if self.left_undone else shown

    @property
    def complete(self) -> bool:
        """Everything planned was replayed, each as its first run went."""
        return not self.skipped and not any("differs" in entry for entry in self.redone)


class _Stop(CompensatorError):
    """This change is not replayed, nor any after it."""


class Redoer:
    """Replays the changes an undo took back, of one agent and its scope (agent None: of
    every agent, as a person at a terminal sees them)."""

    def __init__(
        self,
        journal: JournalStore,
        registry: Registry,
        *,
        replay: Replay,
        probe: Probe,
        read: Read,
        agent: str | None,
        scope: str | None,
    ) -> None:
        self._journal = journal
        self._registry = registry
        self._replay = replay
        self._probe = probe
        self._read = read
        self._agent = agent
        self._scope = scope

    async def redo_to(self, checkpoint_id: int, *, dry_run: bool = False) -> RedoReport:
        """Replay the changes after the checkpoint that the latest undo of them took back and
        no redo has replayed yet, oldest first."""
        checkpoint = self._journal.checkpoint(checkpoint_id)
        if checkpoint is None or not self._visible(checkpoint.agent, checkpoint.scope):
            raise MetaArgumentError(f"no checkpoint {checkpoint_id}; see list_checkpoints")
        undone = self._undone()
        after = [c for c in undone if c.id > checkpoint.last_change_id]
        if not after:
            return RedoReport()
        latest = max(after, key=lambda c: (c.undone_at or "", c.id)).undo_run
        report = await self._redo([c for c in after if c.undo_run == latest], undone, dry_run)
        report.left_undone = [
            {
                "change_id": c.id,
                "tool": c.tool,
                "reason": "an earlier undo took it back, not the latest: redo it by change_id",
            }
            for c in after
            if c.undo_run != latest
        ]
        return report

    async def redo_change(self, change_id: int, *, dry_run: bool = False) -> RedoReport:
        """Replay one change that an undo took back."""
        undone = self._undone()
        chosen = [c for c in undone if c.id == change_id]
        if not chosen:
            shown = ", ".join(str(c.id) for c in undone[-20:]) or "none"
            raise MetaArgumentError(
                f"change {change_id} is not one an undo took back and no redo replayed yet; "
                f"those are: {shown}"
            )
        return await self._redo(chosen, undone, dry_run)

    def _visible(self, agent: str | None, scope: str | None) -> bool:
        if self._agent is None or agent == self._agent:
            return True
        return self._scope is not None and scope == self._scope

    def _undone(self) -> list[Change]:
        """The changes an undo compensated and no redo replayed, oldest first. A replay that
        failed (`error`: nothing happened) does not count; one whose outcome is unknown does
        (it may have happened)."""
        everything = self._journal.all_changes()
        replayed = {
            c.redo_of for c in everything if c.redo_of is not None and c.status != Status.ERROR
        }
        return sorted(
            (
                c
                for c in everything
                if self._visible(c.agent, c.scope)
                and c.undone_at is not None
                and c.status == Status.OK
                and not (c.undo_note or "").startswith("nothing to undo")
                and c.id not in replayed
            ),
            key=lambda c: c.id,
        )

    async def _redo(self, plan: list[Change], undone: list[Change], dry_run: bool) -> RedoReport:
        report = RedoReport()
        run = _Run(self, plan, undone, dry_run=dry_run)
        for change in plan:
            entry: dict[str, Any] = {"change_id": change.id, "tool": change.tool}
            if run.stopped is not None:
                report.skipped.append({**entry, "reason": run.stopped})
                continue
            try:
                await run.check(change, entry)
                if dry_run:
                    report.redone.append(entry)
                    continue
                entry["new_change_id"] = await self._replay(change)
                run.settle(change, entry)
                report.redone.append(entry)
            except (_Stop, Refused, JournalError) as exc:
                report.skipped.append({**entry, "reason": str(exc)})
                run.stopped = f"not replayed, because change {change.id} before it was not"
            if "differs" in entry:
                run.stopped = f"not replayed, because change {change.id}'s replay differed"
        return report

    def _server_of(self, tool: str) -> str:
        return self._registry.server_for(tool) or tool


class _Run:
    """One redo under way: what it has learnt so far, and the checks of each change."""

    def __init__(
        self, redoer: Redoer, plan: list[Change], undone: list[Change], *, dry_run: bool
    ) -> None:
        self.redoer = redoer
        self.dry_run = dry_run
        self.stopped: str | None = None
        self.handed: dict[Any, str] = {}  # value -> why a call holding it is refused
        self.planned: dict[Any, int] = {}  # dry run: value -> the change whose first run got it
        self.servers: set[str] = set()  # those a change before this one in the plan went to
        self.open = redoer._journal.open_changes(None)
        planned = {c.id for c in plan}
        # Still undone, not replayed, and not in this redo: what they were handed is gone.
        self.left = [c for c in undone if c.id not in planned]

    async def check(self, change: Change, entry: dict[str, Any]) -> None:
        """Raise _Stop with the reason when `change` must not be replayed now."""
        redoer = self.redoer
        if REDACTED in _leaves(change.args):
            raise _Stop("its arguments were journaled redacted, so they cannot be sent again")
        later = self._later_in_effect(change)
        if later:
            raise _Stop(
                f"change {later[0].id} ({later[0].tool}) came after it and is still in effect: "
                "replaying would go over it (undo it first)"
            )
        for earlier in self.left:
            held = sorted(_handed(earlier) & _leaves(change.args), key=repr)
            if earlier.id < change.id and held:
                raise _Stop(
                    f"its arguments hold {held[0]!r}, which change {earlier.id}'s first run "
                    f"was handed, and change {earlier.id} is undone: redo it first"
                )
        for value in sorted(_leaves(change.args), key=repr):
            if value in self.handed:
                raise _Stop(f"its arguments hold {value!r}, {self.handed[value]}")
            if value in self.planned:
                entry["note"] = (
                    f"its arguments hold {value!r}, which change {self.planned[value]}'s first "
                    "run was handed: replayed only if that replay is handed it again"
                )
        problem = redoer._probe(change)
        if problem is not None:
            raise _Stop(problem)
        server = redoer._server_of(change.tool)
        # A dry run replays nothing: a change after another to its server would be checked
        # against a state that the replay before it would first have changed.
        seen = self.dry_run and server in self.servers
        self.servers.add(server)
        policy = redoer._registry.policy(change.tool)
        compensable = change.classification == Classification.COMPENSABLE.value
        if policy is not None and compensable and not seen:
            await self._check_drift(change, policy)
        if self.dry_run:
            for value in _handed(change):
                self.planned.setdefault(value, change.id)

    def _later_in_effect(self, change: Change) -> list[Change]:
        """Open changes to the same server made after `change`, other than replays of
        changes that came before it."""
        server = self.redoer._server_of(change.tool)
        return sorted(
            (
                c
                for c in self.open
                if c.id > change.id
                and c.status != Status.ERROR
                and self.redoer._server_of(c.tool) == server
                and (c.redo_of is None or c.redo_of > change.id)
            ),
            key=lambda c: c.id,
        )

    async def _check_drift(self, change: Change, policy: ToolPolicy) -> None:
        value, error = await self.redoer._read(policy, dict(change.args))
        then = (change.snapshot, change.snapshot_error is not None)
        if (value, error is not None) != then:
            raise _Stop(
                f"its snapshot read ({policy.snapshot_tool}) no longer sees what it saw before "
                "the first run: something changed it since the undo"
            )

    def settle(self, change: Change, entry: dict[str, Any]) -> None:
        """After a replay: _Stop when it failed or its outcome is unknown; `differs` in the
        entry when its verify read differs from the first run's in more than values handed
        out. Remember what the first run was handed and the replay was not."""
        new_id = entry["new_change_id"]
        replayed = self.redoer._journal.change(new_id)
        if replayed is None or replayed.status != Status.OK:
            status = "no outcome" if replayed is None else replayed.status
            why = "" if replayed is None else f": {replayed.error or 'no reason given'}"
            happened = "it may have happened, check by hand" if status == Status.UNKNOWN else ""
            raise _Stop(
                f"its replay (change {new_id}) ended {status}{why}"
                + (f"; {happened}" if happened else "")
            )
        first, again = _leaves(change.result), _leaves(replayed.result)
        for value in _handed(change) - again:
            self.handed.setdefault(
                value, f"which change {change.id}'s first run was handed and its replay was not"
            )
        if change.post_state is not None and replayed.post_state is not None:
            unexplained = (_leaves(change.post_state) ^ _leaves(replayed.post_state)) - (
                first | again
            )
            if unexplained:
                example = sorted(map(repr, unexplained))[0]
                entry["differs"] = (
                    f"its verify read after the replay differs from the first run's (e.g. "
                    f"{example})"
                )


def _handed(change: Change) -> set[Any]:
    """What a change's first run was handed: the values of its result that its arguments did
    not hold (an answer that echoes the call hands out nothing)."""
    return _leaves(change.result) - _leaves(change.args)


def _leaves(value: Any) -> set[Any]:
    """The strings and numbers in a JSON value (not booleans or null)."""
    return set(_walk(value))


def _walk(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield value
