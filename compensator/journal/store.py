"""The seam every journal backend fills: `JournalStore`, and `open_journal`, which picks the
backend for a journal's address."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

from ..errors import JournalError
from .chain import Verdict
from .records import Change, Checkpoint, Compensation, Decision, Intent, Session, StepOutcome
from .retention import Collected
from .sqlite import SQLiteJournal

__all__ = [
    "JournalStore",
    "default_journal_path",
    "is_postgres_url",
    "journal_address",
    "open_journal",
]


class JournalStore(Protocol):
    """Where checkpoints, changes and compensations are kept.

    Every method is one transaction of its own: a write is committed before the method
    returns, or the method raises JournalError and nothing of it was written. A store hands out
    the ids (increasing integers) and timestamps (ISO 8601 in UTC) of what it records, and its
    errors are JournalError, never a driver's own, and say in words what a person can do.
    Several stores (processes, machines) may share one journal: each is one *session*, working
    for one *agent* (a session started after the previous one ended continues its agent), and
    the writes that must not interleave between them are single methods
    (`record_step_started` claims a step; `record_step_outcome` settles a change together with
    its last step). A session is alive while its process runs, however that is told: never by
    a process id alone, which another process may get.
    """

    session: str
    """This store's session: its checkpoints, changes and compensations record it."""

    agent: str | None
    """The agent this session works for (None: a person, or a read-only store)."""

    scope: str | None
    """The shared scope this session joined (None: none). Changes and checkpoints record it;
    an agent in a scope sees, checkpoints and undoes its own changes and the scope's."""

    undo_run: str | None
    """The undo this session runs now, if any: the changes it settles record it, so that
    redo knows which changes one undo took back."""

    @property
    def location(self) -> str:
        """Where the journal is, for a person: a file path, or a URL without its password."""
        ...

    def close(self) -> None: ...

    # -- checkpoints ---------------------------------------------------------------------

    def create_checkpoint(self, label: str | None) -> Checkpoint: ...

    def checkpoint(self, checkpoint_id: int) -> Checkpoint | None: ...

    def checkpoints(
        self, agent: str | None = None, *, scope: str | None = None
    ) -> list[Checkpoint]:
        """Newest first; only the agent's (and, with `scope`, the scope's) when one is given."""
        ...

    # -- changes -------------------------------------------------------------------------

    def record_intent(self, intent: Intent) -> int:
        """Write the intent of a call (status pending) before it is forwarded; its change id.
        The change belongs to this agent's newest checkpoint."""
        ...

    def record_outcome(
        self, change_id: int, *, status: str, result: Any = None, error: str | None = None
    ) -> None: ...

    def record_post_state(self, change_id: int, state: Any, error: str | None = None) -> None:
        """The state read right after a verified call, which undo compares against (drift)."""
        ...

    def recover_abandoned(self) -> int:
        """Mark the pending calls of sessions that are gone as `unknown`; how many."""
        ...

    def change(self, change_id: int) -> Change | None: ...

    def open_changes(
        self,
        after_checkpoint: Checkpoint | None = None,
        *,
        agent: str | None = None,
        scope: str | None = None,
    ) -> list[Change]:
        """Changes not yet undone, newest first; only those after the checkpoint when one is
        given, and only the agent's (and, with `scope`, the scope's) when one is given."""
        ...

    def unknown_changes(self) -> list[Change]:
        """Open changes whose outcome was never recorded, oldest first."""
        ...

    def all_changes(self) -> list[Change]:
        """Every change, undone ones too, newest first."""
        ...

    def sessions(self) -> list[Session]:
        """Every session that opened the journal for writing, oldest first."""
        ...

    # -- decisions ----------------------------------------------------------------------

    def record_decision(
        self, *, tool: str, classification: str, args: Any, answer: str, reason: str | None = None
    ) -> int:
        """A call a person was asked about (`answer` approved, declined, cancelled), or that
        was refused without asking (denied, no-approval-possible); `args` redacted already.
        Its id. Never a change: undo does not see it."""
        ...

    def decisions(
        self,
        after_checkpoint: Checkpoint | None = None,
        *,
        agent: str | None = None,
        scope: str | None = None,
        refused: bool = False,
    ) -> list[Decision]:
        """Newest first; only those recorded after the checkpoint, of the agent (and, with
        `scope`, the scope), and refused (nothing sent) when given."""
        ...

    # -- compensations -------------------------------------------------------------------

    def compensations(self, change_id: int) -> list[Compensation]:
        """Every record of the change's compensating calls, oldest first."""
        ...

    def record_step_started(
        self, change_id: int, step: int, tool: str, args: Any, *, after: int | None = None
    ) -> int | None:
        """Claim a compensating step before its call is sent; the new record's id. `after` is
        the id of the step's newest record the caller saw (None: none). When another session
        recorded the step since, nothing is written and None is returned."""
        ...

    def record_step_outcome(
        self, compensation_id: int, outcome: StepOutcome, *, undone: tuple[int, str] | None = None
    ) -> None:
        """A compensating call's outcome; `undone=(change_id, note)` marks the change undone
        in the same transaction."""
        ...

    def mark_undone(self, change_id: int, note: str) -> None:
        """Settle a change that needs no compensating call now."""
        ...

    def started_elsewhere(self, record: Compensation) -> bool:
        """Whether `record` is a step that another live session started and has not finished:
        then nobody else may run it."""
        ...

    # -- the hash chain and retention ----------------------------------------------------

    def collect(
        self,
        before: str,
        *,
        keep: Collection[int] = (),
        dry_run: bool = False,
        compact: bool = False,
    ) -> Collected:
        """Drop what was made before `before` (ISO 8601, UTC) and may go (retention.py), in
        one transaction; JournalError when the chain does not hold or a `keep` checkpoint
        does not exist. `compact` then gives the space back to the file system where the
        backend needs that done (SQLite's VACUUM, which holds the journal meanwhile)."""
        ...

    def verify_chain(self, key: bytes | None) -> Verdict:
        """Check the journal's hash chain (chain.py) and its records against it, in one
        consistent read; `key` is the HMAC key the journal was written with (None: none)."""
        ...


def open_journal(
    target: str | os.PathLike[str],
    *,
    read_only: bool = False,
    fsync: bool = False,
    agent: str | None = None,
    person: bool = False,
    scope: str | None = None,
) -> JournalStore:
    """The journal at `target`: a `postgresql://` URL (PostgreSQL), else a file path (SQLite).
    `read_only` opens an existing journal without ever writing it; `fsync` makes every commit
    durable against a power cut. A writing store works for the agent named `agent`, else
    continues the agent of the last session that ended, else starts a new one; `person=True`
    works for no agent (the `undo` command). `scope` joins a shared scope."""
    options: dict[str, Any] = {
        "read_only": read_only,
        "fsync": fsync,
        "agent": agent,
        "person": person,
        "scope": scope,
    }
    if is_postgres_url(target):
        from .postgres import PostgresJournal  # with psycopg: only for a PostgreSQL journal

        return PostgresJournal(str(target), **options)
    return SQLiteJournal(target, **options)


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether a journal address is a PostgreSQL connection URL, not a file path."""
    return isinstance(target, str) and target.lower().startswith(("postgresql://", "postgres://"))


def journal_address(db: str) -> str | Path:
    """A --db value as a journal address: a PostgreSQL URL as it is, else a file path.
    JournalError for a URL of another kind, which would otherwise become a local file."""
    if is_postgres_url(db):
        return db
    scheme, separator, _ = db.partition("://")
    if separator and scheme.replace("+", "").isalnum():
        raise JournalError(
            f"the journal {scheme}://... is neither a file nor a postgresql:// URL; a journal "
            "is a SQLite file path or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    return Path(db).expanduser()


def default_journal_path(config: str | os.PathLike[str]) -> str | Path:
    """Where the journal of a registry lives when no --db is given.

    `$COMPENSATOR_DB` when set (a file path or a `postgresql://` URL); else one file per
    registry (named after the file and a hash of its absolute path) under
    `$XDG_STATE_HOME/mcp-compensator`, which defaults to `~/.local/state/mcp-compensator`.
    """
    explicit = os.environ.get("COMPENSATOR_DB")
    if explicit:
        return journal_address(explicit)
    config_path = Path(config).expanduser().resolve()
    digest = hashlib.sha256(str(config_path).encode()).hexdigest()[:10]
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "mcp-compensator" / f"{config_path.stem}-{digest}.db"
