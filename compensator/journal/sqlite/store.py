"""The SQLite journal: one file, WAL mode, a schema version with forward migrations."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import JournalError
from ..chain import (
    Verdict,
    journal_key,
    key_problem,
    verify,
)
from ..records import (
    Checkpoint,
    Compensation,
    Intent,
    Session,
    Status,
    StepOutcome,
    StepStatus,
)
from ..retention import Collected, checked, collect
from ..rows import (
    Reads,
    decision_values,
    dump,
    host_identity,
    intent_values,
    now,
    step_values,
)
from .files import SessionLocks, create_private, person_sentence
from .schema import CHAIN_VERSION, MIGRATIONS, SCHEMA_VERSION, version_problem
from .transaction import Tx, chained_rows

__all__ = ["SQLiteJournal"]

log = logging.getLogger("compensator.journal")


class SQLiteJournal(Reads):
    """A `JournalStore` in one SQLite file; one connection per store, every write a short
    `BEGIN IMMEDIATE` transaction.

    Snapshots and arguments may hold secrets, so the database file is created 0600.
    Every commit (the intent of a call is committed before the call is forwarded) reaches the
    operating system before the method returns: with WAL and `synchronous=NORMAL`, a killed
    proxy process loses nothing it committed. `fsync=True` (`synchronous=FULL`) also syncs
    each commit to disk, so a power cut or OS crash cannot lose one either, at about a
    millisecond per commit.

    `read_only=True` opens an existing journal for reading, e.g. while a proxy writes it: the
    file is never created, migrated or recovered, and every write raises JournalError.

    Several processes may share one journal file. Each writing store is one *session* (new on
    every open), and each session works for one *agent*: the name given (`agent=`), else the
    agent of the most recent session that has ended and that no live session continues, else a
    new one. So a proxy that is restarted (after a crash, or for every new conversation)
    continues its agent, while proxies that run at the same time are separate agents.
    `person=True` is a person at a terminal: its session works for no agent. A session is
    alive while its process holds its lock (`SessionLocks` (files.py)).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        fsync: bool = False,
        agent: str | None = None,
        person: bool = False,
        scope: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.session = uuid.uuid4().hex
        self.agent: str | None = None
        self.scope = None if person else scope
        self._synchronous = "FULL" if fsync else "NORMAL"
        self._key = journal_key()
        self._chained = True  # benchmarks/journal.py turns it off to measure what it costs
        self.undo_run: str | None = None
        self._lock = threading.Lock()
        self._locks = SessionLocks(self.path)
        self._held: int | None = None
        if read_only:
            self._open_read_only()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                create_private(self.path)
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=10.0
            )
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(
                f"cannot open journal {self.path}: {exc}. Pass --db with a writable path."
            ) from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._configure()
            self._migrate()
            self._check_key()
            self._held = self._locks.hold(self.session)
            self._begin_session(agent, person=person)
            self.recover_abandoned()
        except BaseException as exc:
            self._db.close()
            if self._held is not None:
                self._locks.release(self.session, self._held)
            cause = exc if isinstance(exc, (sqlite3.Error, OSError)) else exc.__cause__
            if isinstance(cause, (sqlite3.Error, OSError)):
                raise JournalError(
                    f"cannot use journal {self.path}: {cause}. Pass --db with a journal file "
                    "written by compensator, or a new path."
                ) from exc
            raise

    def _begin_session(self, name: str | None, *, person: bool) -> None:
        with self._transaction() as tx:
            self._end_dead_sessions(tx)
            if person:
                agent = None
            elif name is not None:
                agent = name
            else:
                # The newest unnamed agent of this host none of whose sessions is alive, else
                # a new one (a file shared over a network stays per machine too).
                agent = tx.scalar(
                    "SELECT (SELECT agent FROM sessions WHERE named = 0 AND agent IS NOT NULL "
                    "AND host IN (?, '') AND agent NOT IN (SELECT agent FROM sessions "
                    "WHERE ended_at IS NULL AND agent IS NOT NULL) ORDER BY rowid DESC LIMIT 1)",
                    (host_identity(),),
                )
                if agent is None:
                    agent = self.session[:8]
            tx.execute(
                "INSERT INTO sessions (id, agent, named, host, pid, started_at, scope) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    self.session,
                    agent,
                    name is not None,
                    host_identity(),
                    os.getpid(),
                    now(),
                    self.scope,
                ),
            )
        self.agent = agent

    def _end_dead_sessions(self, tx: Tx) -> None:
        rows = tx.execute("SELECT id FROM sessions WHERE ended_at IS NULL").fetchall()
        for row in rows:
            if row["id"] != self.session and not self._locks.alive(row["id"]):
                tx.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now(), row["id"]))
                self._locks.forget(row["id"])

    @property
    def location(self) -> str:
        return str(self.path)

    def pragma(self, name: str) -> Any:
        """The value of SQLite's PRAGMA `name` on this store's connection (for diagnostics)."""
        return self._query(f"PRAGMA {name}", ())[0][0]

    # -- set-up -----------------------------------------------------------------------

    def _open_read_only(self) -> None:
        if not self.path.is_file():
            raise JournalError(
                f"no journal at {self.path}. Pass --db with the file the proxy writes "
                "(it logs the path at start-up), or the --config it serves."
            )
        try:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=10.0)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open journal {self.path}: {exc}.") from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA busy_timeout=10000")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(
                f"cannot read journal {self.path}: {exc}. Is it a journal written by compensator?"
            ) from exc
        if version != SCHEMA_VERSION:
            self._db.close()
            raise JournalError(version_problem(self.path, version))

    def _configure(self) -> None:
        # Switching a new file to WAL takes an exclusive lock, and SQLite answers "locked" at
        # once, without its busy timeout, to a process that asks while another switches it:
        # processes opening one new journal together try again for up to 10 s.
        deadline = time.monotonic() + 10
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self._db.execute(f"PRAGMA synchronous={self._synchronous}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=10000")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError(version_problem(self.path, version))
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction() as tx:
                # Read again inside the write lock: another process opening the same new
                # journal at the same moment may have migrated it meanwhile.
                if tx.scalar("PRAGMA user_version") >= target:
                    continue
                tx.run_script(MIGRATIONS[target - 1])
                if target == CHAIN_VERSION:
                    tx.link_existing()
                tx.execute(f"PRAGMA user_version={target}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Tx]:
        """One write transaction; a SQLite error in it is a JournalError, nothing written."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failed("write", exc) from exc
            try:
                yield Tx(self._db, self._key if self._chained else False)
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):  # the first error is the one to tell
                        self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._failed("write", exc) from exc
                raise

    def _failed(self, action: str, exc: sqlite3.Error) -> JournalError:
        return JournalError(f"cannot {action} journal {self.path}: {person_sentence(exc)} ({exc})")

    def close(self) -> None:
        if self._held is not None:
            with contextlib.suppress(JournalError), self._transaction() as tx:
                tx.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now(), self.session))
        with self._lock:
            self._db.close()
            if self._held is not None:
                self._locks.release(self.session, self._held)
                self._held = None

    # -- checkpoints ------------------------------------------------------------------

    def create_checkpoint(self, label: str | None) -> Checkpoint:
        with self._transaction() as tx:
            last = tx.scalar("SELECT COALESCE(MAX(id), 0) FROM changes")
            created = now()
            checkpoint_id = tx.add(
                "checkpoints",
                {
                    "label": label,
                    "created_at": created,
                    "last_change_id": last,
                    "session": self.session,
                    "agent": self.agent,
                    "scope": self.scope,
                },
            )
        return Checkpoint(
            id=checkpoint_id,
            label=label,
            created_at=created,
            last_change_id=last,
            session=self.session,
            agent=self.agent,
            scope=self.scope,
        )

    # -- changes ----------------------------------------------------------------------

    def record_intent(self, intent: Intent) -> int:
        with self._transaction() as tx:
            agent, scope = (self.agent, self.scope) if intent.owner is None else intent.owner
            checkpoint = tx.scalar("SELECT MAX(id) FROM checkpoints WHERE agent IS ?", (agent,))
            values = intent_values(intent, session=self.session, agent=agent, scope=scope)
            return tx.add("changes", {"checkpoint_id": checkpoint, **values})

    def record_outcome(
        self, change_id: int, *, status: str, result: Any = None, error: str | None = None
    ) -> None:
        with self._transaction() as tx:
            tx.update(
                "changes",
                change_id,
                {"status": status, "result": dump(result), "error": error, "completed_at": now()},
            )

    def record_post_state(self, change_id: int, state: Any, error: str | None = None) -> None:
        with self._transaction() as tx:
            tx.update(
                "changes",
                change_id,
                {"post_state": None if error else dump(state), "post_state_error": error},
            )

    def recover_abandoned(self) -> int:
        with self._transaction() as tx:
            self._end_dead_sessions(tx)
            rows = tx.execute(
                "SELECT changes.id FROM changes "
                "LEFT JOIN sessions ON sessions.id = changes.session "
                "WHERE status = ? AND (sessions.id IS NULL OR sessions.ended_at IS NOT NULL)",
                (Status.PENDING,),
            ).fetchall()
            for row in rows:
                tx.update(
                    "changes",
                    row["id"],
                    {
                        "status": Status.UNKNOWN,
                        "error": "the proxy stopped before the outcome of this call was recorded",
                    },
                )
        return len(rows)

    def sessions(self) -> list[Session]:
        rows = self._query(
            "SELECT id, agent, host, pid, scope, started_at, ended_at FROM sessions ORDER BY rowid",
            (),
        )
        return [
            Session(
                **dict(row),
                alive=row["ended_at"] is None
                and (row["id"] == self.session or self._locks.alive(row["id"])),
            )
            for row in rows
        ]

    # -- decisions --------------------------------------------------------------------

    def record_decision(
        self, *, tool: str, classification: str, args: Any, answer: str, reason: str | None = None
    ) -> int:
        with self._transaction() as tx:
            return tx.add(
                "decisions",
                {
                    **decision_values(
                        tool=tool,
                        classification=classification,
                        args=args,
                        answer=answer,
                        reason=reason,
                        session=self.session,
                        agent=self.agent,
                        scope=self.scope,
                    ),
                    "last_change_id": tx.scalar("SELECT COALESCE(MAX(id), 0) FROM changes"),
                    "last_checkpoint_id": tx.scalar("SELECT COALESCE(MAX(id), 0) FROM checkpoints"),
                },
            )

    # -- compensations ----------------------------------------------------------------

    def record_step_started(
        self, change_id: int, step: int, tool: str, args: Any, *, after: int | None = None
    ) -> int | None:
        """The claim and the check are one transaction, so two processes never both run it."""
        with self._transaction() as tx:
            newest = tx.scalar(
                "SELECT MAX(id) FROM compensations WHERE change_id = ? AND step = ?",
                (change_id, step),
            )
            if newest != after:
                return None
            return tx.add(
                "compensations", step_values(change_id, step, tool, args, session=self.session)
            )

    def record_step_outcome(
        self, compensation_id: int, outcome: StepOutcome, *, undone: tuple[int, str] | None = None
    ) -> None:
        """A change is never marked undone without the record that proves it."""
        with self._transaction() as tx:
            tx.update(
                "compensations",
                compensation_id,
                {
                    "status": outcome.status,
                    "result": dump(outcome.result),
                    "error": outcome.error,
                },
            )
            if undone is not None:
                tx.mark_undone(*undone, run=self.undo_run)

    def mark_undone(self, change_id: int, note: str) -> None:
        with self._transaction() as tx:
            tx.mark_undone(change_id, note, run=self.undo_run)

    def started_elsewhere(self, record: Compensation) -> bool:
        return (
            record.status == StepStatus.STARTED
            and record.session is not None
            and record.session != self.session
            and self._locks.alive(record.session)
        )

    # -- reading ----------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._failed("read", exc) from exc

    def _select(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return [dict(row) for row in self._query(sql, params)]

    def verify_chain(self, key: bytes | None) -> Verdict:
        with self._lock:
            try:
                self._db.execute("BEGIN")  # one snapshot: a proxy may be writing meanwhile
                try:
                    links = self._db.execute(
                        "SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq"
                    ).fetchall()
                    rows = chained_rows(self._db)
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._failed("read", exc) from exc
        return verify(links, rows, key)

    def collect(
        self,
        before: str,
        *,
        keep: Collection[int] = (),
        dry_run: bool = False,
        compact: bool = False,
    ) -> Collected:
        # The whole chain is checked outside the write lock (it takes seconds on a big
        # journal, and proxies write meanwhile); inside it only what was linked since.
        verified = checked(self.verify_chain(self._key))
        with self._transaction() as tx:
            found = collect(
                tx, before=before, keep=keep, key=self._key, dry_run=dry_run, verified=verified
            )
        if compact and found.records and not dry_run:
            try:
                self._compact()
            except JournalError as exc:  # what was dropped is gone all the same
                return replace(found, not_compacted=str(exc))
        return found

    def _compact(self) -> None:
        """Give the space of what gc dropped back to the file system: VACUUM rewrites the file
        (through the WAL, which is then emptied), holding the journal for as long."""
        with self._lock:
            try:
                self._db.execute("VACUUM")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise self._failed("compact", exc) from exc

    def _check_key(self) -> None:
        """Refuse to write links with another key than the chain's (chain.key_problem)."""
        newest = self._db.execute(
            "SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq DESC LIMIT 2"
        ).fetchall()
        problem = key_problem([dict(row) for row in newest], self._key)
        if problem is not None:
            raise JournalError(f"cannot write journal {self.path}: {problem}")

    def _query_one(self, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
        rows = self._query(sql, params)
        return rows[0] if rows else None
