"""Redo: replay what an undo took back, oldest first, as new journaled calls (so a redo can be
undone in turn), where replaying gives the same effect; refuse with a reason where it cannot.

A change is replayed with the arguments it was journaled with. Refused, and every later one
with it (a later call may depend on it): a change whose arguments were journaled redacted; one
whose server has a later change still in effect (redo would replay over it); a compensable one
whose snapshot read no longer sees what it saw before the first run (drift since the undo); one
whose arguments hold a value an earlier change's first run was handed and its replay was not
(an id the server handed out); one whose tool is gone or that the guardrails refuse now. A
replay that fails stops the redo, and so does one whose `verify` read differs from its first
run's in more than the values handed out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..classification import Classification
from ..errors import CompensatorError, MetaArgumentError
from ..journal import Change, JournalStore, Status
from ..registry import Registry, ToolPolicy
from ..registry.redaction import REDACTED

__all__ = ["RedoReport", "Redoer", "Refused"]


class Refused(CompensatorError):
    """A replay the proxy would not send (no such tool, a server that is down, the
    guardrails); its message says why."""


Replay = Callable[[str, dict[str, Any], int], Awaitable[int]]
"""Send a change's call again, journaled as a redo of it: the new change's id; Refused when
it was not sent."""

Read = Callable[[ToolPolicy, dict[str, Any]], Awaitable[tuple[Any, str | None]]]
"""A policy's snapshot read: (value, None), or (None, why it failed)."""

_REDONE = (Classification.REVERSIBLE.value, Classification.COMPENSABLE.value)


@dataclass
class RedoReport:
    """What a redo did, oldest first: replayed (with the new change's id), and refused."""

    redone: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"redone": self.redone, "skipped": self.skipped}


class _Stop(CompensatorError):
    """This change is not replayed, nor any after it."""


class Redoer:
    """Replays the changes an undo took back, for one agent (and its scope)."""

    def __init__(
        self,
        journal: JournalStore,
        registry: Registry,
        *,
        replay: Replay,
        read: Read,
        agent: str | None,
        scope: str | None,
    ) -> None:
        self._journal = journal
        self._registry = registry
        self._replay = replay
        self._read = read
        self._agent = agent
        self._scope = scope

    async def redo_to(self, checkpoint_id: int, *, dry_run: bool = False) -> RedoReport:
        """Replay every change after the checkpoint that an undo took back and no redo has
        replayed yet, oldest first."""
        checkpoint = self._journal.checkpoint(checkpoint_id)
        if checkpoint is None or not self._visible(checkpoint.agent, checkpoint.scope):
            raise MetaArgumentError(f"no checkpoint {checkpoint_id}; see list_checkpoints")
        changes = [c for c in self._undone() if c.id > checkpoint.last_change_id]
        return await self._redo(changes, dry_run=dry_run)

    async def redo_change(self, change_id: int, *, dry_run: bool = False) -> RedoReport:
        """Replay one change that an undo took back."""
        candidates = {c.id: c for c in self._undone()}
        if change_id not in candidates:
            shown = ", ".join(str(c) for c in sorted(candidates)[-20:]) or "none"
            raise MetaArgumentError(
                f"change {change_id} is not one an undo took back and no redo replayed yet; "
                f"those are: {shown}"
            )
        return await self._redo([candidates[change_id]], dry_run=dry_run)

    def _visible(self, agent: str | None, scope: str | None) -> bool:
        if self._agent is None or agent == self._agent:
            return True
        return self._scope is not None and scope == self._scope

    def _undone(self) -> list[Change]:
        """This agent's changes an undo compensated and no redo replayed, oldest first."""
        everything = self._journal.all_changes()
        replayed = {c.redo_of for c in everything if c.redo_of is not None}
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

    async def _redo(self, changes: list[Change], *, dry_run: bool) -> RedoReport:
        report = RedoReport()
        handed: dict[Any, int] = {}  # values first runs were handed and replays were not
        stopped: str | None = None
        servers: set[str] = set()  # those a change before this one in the plan went to
        for change in changes:
            entry: dict[str, Any] = {"change_id": change.id, "tool": change.tool}
            if stopped is not None:
                report.skipped.append({**entry, "reason": stopped})
                continue
            # A dry run replays nothing: a change after another to its server is checked
            # against a state that the replay before it would first have changed.
            unseen = not dry_run or self._server_of(change.tool) not in servers
            servers.add(self._server_of(change.tool))
            try:
                await self._check(change, handed, drift=unseen)
                if dry_run:
                    report.redone.append(entry)
                    continue
                entry["new_change_id"] = await self._replay(
                    change.tool, dict(change.args), change.id
                )
            except (_Stop, Refused) as exc:
                report.skipped.append({**entry, "reason": str(exc)})
                stopped = f"not replayed, because change {change.id} before it was not"
                continue
            report.redone.append(entry)
            try:
                self._compare(change, entry["new_change_id"], handed)
            except _Stop as exc:
                entry["differs"] = str(exc)
                stopped = f"not replayed, because change {change.id}'s replay differed"
        return report

    async def _check(self, change: Change, handed: dict[Any, int], *, drift: bool) -> None:
        """Raise _Stop with the reason when `change` must not be replayed now."""
        if REDACTED in _leaves(change.args):
            raise _Stop("its arguments were journaled redacted, so they cannot be sent again")
        later = self._later_in_effect(change)
        if later:
            raise _Stop(
                f"change {later[0].id} ({later[0].tool}) came after it and is still in effect: "
                "replaying would go over it (undo it first)"
            )
        for value in _leaves(change.args):
            if value in handed:
                raise _Stop(
                    f"its arguments hold {value!r}, which change {handed[value]}'s first run "
                    "was handed and its replay was not"
                )
        policy = self._registry.policy(change.tool)
        compensable = change.classification == Classification.COMPENSABLE.value
        if drift and policy is not None and compensable:
            await self._check_drift(change, policy)
        if change.classification not in _REDONE and policy is None:
            raise _Stop(f"{change.tool} has no policy now")

    def _later_in_effect(self, change: Change) -> list[Change]:
        """Open changes to the same server made after `change`, other than replays of
        changes that came before it."""
        server = self._server_of(change.tool)
        return sorted(
            (
                c
                for c in self._journal.open_changes(None)
                if c.id > change.id
                and c.status != Status.ERROR
                and self._server_of(c.tool) == server
                and (c.redo_of is None or c.redo_of > change.id)
            ),
            key=lambda c: c.id,
        )

    def _server_of(self, tool: str) -> str:
        return self._registry.server_for(tool) or tool

    async def _check_drift(self, change: Change, policy: ToolPolicy) -> None:
        value, error = await self._read(policy, dict(change.args))
        then = (change.snapshot, change.snapshot_error is not None)
        if (value, error is not None) != then:
            raise _Stop(
                f"its snapshot read ({policy.snapshot_tool}) no longer sees what it saw before "
                "the first run: something changed it since the undo"
            )

    def _compare(self, change: Change, new_id: int, handed: dict[Any, int]) -> None:
        """After a replay: stop when it failed, or its verify read differs from the first
        run's in more than values handed out; remember what the first run was handed."""
        replayed = self._journal.change(new_id)
        if replayed is None or replayed.status != Status.OK:
            why = "no outcome" if replayed is None else replayed.error or replayed.status
            raise _Stop(f"its replay (change {new_id}) did not succeed: {why}")
        first, again = _leaves(change.result), _leaves(replayed.result)
        for value in first - again:
            handed[value] = change.id
        if change.post_state is not None and replayed.post_state is not None:
            differs = _leaves(change.post_state) ^ _leaves(replayed.post_state)
            unexplained = differs - first - again
            if unexplained:
                raise _Stop(
                    f"its replay (change {new_id}) left a verify read that differs from the "
                    f"first run's (e.g. {sorted(map(repr, unexplained))[0]})"
                )


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
