"""The journal's records: checkpoints, changes and the compensations run against them, with
the statuses they go through. Plain frozen data: every store hands out the same records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TURN",
    "Answer",
    "Change",
    "Checkpoint",
    "Compensation",
    "Decision",
    "Intent",
    "Session",
    "Status",
    "StepOutcome",
    "StepStatus",
    "latest_steps",
    "turn_label",
]


class Status:
    """Outcomes of a journaled call. Plain strings, so rows read back without mapping."""

    PENDING = "pending"  # intent written, call forwarded, outcome not yet recorded
    OK = "ok"
    ERROR = "error"  # isError, or error_when matched: never compensated
    UNKNOWN = "unknown"  # the outcome was never recorded (crash, timeout, cancellation)


class StepStatus:
    """Outcomes of a compensating call."""

    STARTED = "started"  # recorded before the call is sent; left behind by a crash
    OK = "ok"
    ERROR = "error"  # failed for sure, or never sent: nothing happened
    UNKNOWN = "unknown"  # sent, but no answer (timeout, server died, cancelled)


class Answer:
    """What became of a call that needed a person's approval, or that the registry denies."""

    APPROVED = "approved"  # the person accepted: the call was forwarded
    DECLINED = "declined"  # the person said no: nothing was sent
    CANCELLED = "cancelled"  # the person dismissed the question, or the call was cancelled
    DENIED = "denied"  # the registry denies the call: never forwarded
    NO_APPROVAL = "no-approval-possible"  # approval was needed and nobody could be asked

    REFUSED = (DECLINED, CANCELLED, DENIED, NO_APPROVAL)
    """The answers after which nothing was sent to the server."""


@dataclass(frozen=True, kw_only=True)
class Intent:
    """A mutating call about to be forwarded, as the journal keeps it (redacted already)."""

    tool: str
    classification: str
    args: Mapping[str, Any]
    snapshot: Any = None
    snapshot_error: str | None = None
    redo_of: int | None = None
    """The change this call replays (a redo), if it does."""
    owner: tuple[str | None, str | None] | None = None
    """The (agent, scope) the change is journaled for, when not the store's own session's: a
    redo replays a change as a change of the agent whose it was."""


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    """How a compensating call ended: a StepStatus other than STARTED, with what came back."""

    status: str
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A moment to undo back to: every change after `last_change_id` comes after it. Ids and
    `created_at` (ISO 8601, UTC) are handed out by the store; `agent` is the agent that took
    it (None: a person); `scope` the shared journal scope it was taken in, if any."""

    id: int
    label: str | None
    created_at: str
    last_change_id: int
    session: str | None = None
    agent: str | None = None
    scope: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "created_at": self.created_at}

    @property
    def turn(self) -> str | None:
        """The first line of the prompt whose turn it starts (see `turn_label`), else None."""
        if self.label is None or not self.label.startswith(TURN):
            return None
        # Whoever wrote the label (an agent may, by hand), a terminal shows it.
        return _printable(self.label[len(TURN) :])


TURN = "turn: "
"""How the label of a turn's checkpoint starts: one taken with a user's prompt (the Claude
Code hook `compensator wire --hooks` writes calls `checkpoint` with it), which `compensator
undo --turns N` counts back through."""

_PROMPT_SHOWN = 120
"""Characters of a prompt's first line kept in its turn's label."""


def turn_label(prompt: str) -> str:
    """The label of the checkpoint before a turn: `turn: ` and the prompt's first line that
    has text, cut to a line's length."""
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
    first = _printable(first)
    if len(first) > _PROMPT_SHOWN:
        first = first[: _PROMPT_SHOWN - 1].rstrip() + "…"
    return TURN + (first or "(an empty prompt)")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One journaled call: its intent (tool, args, snapshot), its outcome, and whether it
    was undone. `post_state` is what the drift check read right after the call."""

    id: int
    checkpoint_id: int | None
    tool: str
    classification: str
    status: str
    args: Any
    snapshot: Any
    snapshot_error: str | None
    result: Any
    error: str | None
    created_at: str
    completed_at: str | None
    undone_at: str | None
    undo_note: str | None
    session: str | None = None
    agent: str | None = None
    scope: str | None = None
    post_state: Any = None
    post_state_error: str | None = None
    post_state_recorded: bool = False
    redo_of: int | None = None
    """The change this one replayed (`redo`), if it did."""
    undo_run: str | None = None
    """Which undo settled it (one id per undo_to, undo_change or `compensator undo`)."""

    def to_json(self) -> dict[str, Any]:
        """The shape `list_changes` and `undo_to` report."""
        shown = {
            "id": self.id,
            "checkpoint": self.checkpoint_id,
            "tool": self.tool,
            "classification": self.classification,
            "status": self.status,
            "args": self.args,
            "created_at": self.created_at,
            "agent": self.agent,
        }
        return shown if self.redo_of is None else {**shown, "redo_of": self.redo_of}

    def context(self) -> dict[str, Any]:
        """What an inverse's expressions read: the call (args, result, and the snapshot or
        why it failed) and, under `change`, the change itself with its error."""
        reads = ("args", "result", "snapshot", "snapshot_error")
        return {
            **{name: getattr(self, name) for name in reads},
            "change": {**self.to_json(), "error": self.error},
        }


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A call the proxy asked a person about, or refused by the registry's word: who answered
    what, and where it falls among changes and checkpoints. Never a change: undo ignores it.
    `last_change_id` and `last_checkpoint_id` are the newest change and checkpoint (of any
    agent) when it was recorded, 0 when there was none."""

    id: int
    tool: str
    classification: str
    args: Any
    answer: str
    reason: str | None
    created_at: str
    last_change_id: int
    last_checkpoint_id: int
    session: str | None = None
    agent: str | None = None
    scope: str | None = None

    @property
    def refused(self) -> bool:
        """Nothing was sent to the server."""
        return self.answer in Answer.REFUSED

    def to_json(self) -> dict[str, Any]:
        """The shape `list_changes` reports under `refused`."""
        return {
            "id": self.id,
            "tool": self.tool,
            "classification": self.classification,
            "answer": self.answer,
            "reason": self.reason,
            "args": self.args,
            "created_at": self.created_at,
            "agent": self.agent,
        }


@dataclass(frozen=True, kw_only=True)
class Session:
    """One proxy (or `compensator undo`) that opened the journal for writing: the agent it
    worked for, the host and process it ran in, its shared scope, and whether it still runs."""

    id: str
    agent: str | None
    host: str
    pid: int
    started_at: str
    ended_at: str | None
    scope: str | None = None
    alive: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "host": self.host,
            "pid": self.pid,
            "scope": self.scope,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "alive": self.alive,
        }


@dataclass(frozen=True, kw_only=True)
class Compensation:
    """One record of a compensating call (one step of a change's inverse); a step that was
    retried has several, the newest last. `session` started it (in process `pid`)."""

    id: int
    change_id: int
    step: int
    tool: str
    args: Any
    status: str
    error: str | None
    created_at: str
    pid: int | None = None
    session: str | None = None


def latest_steps(records: list[Compensation]) -> dict[int, Compensation]:
    """The newest record of each compensating step, by step index (`records` oldest first)."""
    latest: dict[int, Compensation] = {}
    for record in records:
        latest[record.step] = record
    return latest


def _printable(text: str) -> str:
    """`text` for a terminal (`log`, `undo`): control characters, escape sequences' included,
    become spaces."""
    return "".join(char if char.isprintable() else " " for char in text)
