"""The PostgreSQL journal's store: sessions, and every write in one short transaction."""

from __future__ import annotations

import contextlib
import os
import secrets
import uuid
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import JournalError
from ..chain import CHAINED, Verdict, journal_key, key_problem, mixed_keys, next_link, verify
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
    CHECKPOINT_COLUMNS,
    Reads,
    decision_values,
    dump,
    host_identity,
    intent_values,
    now,
    step_values,
)
from .connection import DEFAULT_LEASE, Connection
from .schema import (
    INSERT_LINK,
    LOCK_CLASS,
    ORDER_LOCK,
    SESSIONS_LOCK,
    check_version_read_only,
    create_or_migrate,
    one,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresJournal"]

_ALIVE = """(s.ended_at IS NULL AND s.lease_until > now() AND EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_catalog.pg_database
                        WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = s.lock_key))"""
"""When session row `s` is alive: not ended, its lease current, and the advisory lock its
connection took still held (PostgreSQL drops it the moment that connection ends, so a killed
proxy is dead at once, while a hung or cut-off one is dead once its lease runs out)."""


class PostgresJournal(Connection, Reads):
    """A `JournalStore` in a PostgreSQL database: the tables live in its `compensator` schema,
    created on first use; one connection per store, in autocommit mode, every write one
    statement or one short transaction.

    Liveness: each writing session holds a session-level advisory lock on its connection and
    a lease in its `sessions` row that a background thread renews every third of `lease`
    seconds. It counts as alive while both hold, so a proxy killed on any machine is dead as
    soon as PostgreSQL sees its connection close, and one that hangs or is cut off is dead
    once its lease runs out; process ids play no part. Lease times are the database server's
    clock, so machines whose clocks disagree still agree on who is alive.

    Ordering: every write of a chained record takes one transaction-level advisory lock as
    its first statement, so ids and links follow commit order across every connection,
    "after checkpoint N" means the same to every machine, and no two writes can wait on each
    other's row locks the other way round (claiming a compensating step also locks the
    change's row, after that lock).

    A lost connection (the server restarted, or its backend was killed) is opened again on
    the next write, which is then retried once when it cannot have been applied twice:
    intents and checkpoints carry a per-session request number the database keeps unique.
    Until the database answers, every write raises JournalError, so the proxy refuses
    mutating calls and reads go on.

    `fsync=True` sets `synchronous_commit = on` for the session (the server's default), in
    case the server was configured to skip it.
    """

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        fsync: bool = False,
        agent: str | None = None,
        person: bool = False,
        scope: str | None = None,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        self.session = uuid.uuid4().hex
        self.agent: str | None = None
        self.scope = None if person else scope
        self._lock_key = secrets.randbits(62)
        self._requests = 0
        self._key = journal_key()
        self._chained = True  # benchmarks/journal.py turns it off to measure what it costs
        self.undo_run: str | None = None
        super().__init__(url, read_only=read_only, fsync=fsync, lease=lease)
        try:
            if read_only:
                self._run(lambda conn: check_version_read_only(conn, self._location))
                return
            self._run(lambda conn: create_or_migrate(conn, self._location), write=True)
            self._run(self._check_key)
            self._run(lambda conn: self._begin_session(conn, agent, person=person), write=True)
            self._started = True
            self.recover_abandoned()
        except BaseException:
            self._close_connection()
            raise
        self._start_renewing()

    def close(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=15)  # longer than a connection attempt may take
        if self._started:
            with contextlib.suppress(JournalError):
                self._run(
                    lambda conn: conn.execute(
                        "UPDATE sessions SET ended_at = %s WHERE id = %s", (now(), self.session)
                    ),
                )
            self._started = False
        self._close_connection()  # which drops the session's advisory lock

    def _begin_session(
        self, conn: psycopg.Connection[Any], name: str | None, *, person: bool
    ) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, SESSIONS_LOCK))
        self._end_dead_sessions(conn)
        if person:
            agent = None
        elif name is not None:
            agent = name
        else:
            # The newest unnamed agent of this host none of whose sessions is alive, else a
            # new one: a proxy never carries on the work of an agent on another machine.
            row = conn.execute(
                "SELECT agent FROM sessions WHERE NOT named AND agent IS NOT NULL "
                "AND host = %s AND agent NOT IN (SELECT agent FROM sessions "
                "WHERE ended_at IS NULL AND agent IS NOT NULL) ORDER BY seq DESC LIMIT 1",
                (host_identity(),),
            ).fetchone()
            agent = row["agent"] if row is not None else self.session[:8]
        conn.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
        conn.execute(
            "INSERT INTO sessions (id, agent, named, host, pid, scope, started_at, lease_until, "
            "lock_key) VALUES (%s, %s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s), %s)",
            (
                self.session,
                agent,
                name is not None,
                host_identity(),
                os.getpid(),
                self.scope,
                now(),
                self._lease,
                self._lock_key,
            ),
        )
        self.agent = agent

    def _end_dead_sessions(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            f"UPDATE sessions s SET ended_at = %s WHERE s.ended_at IS NULL AND s.id <> %s "
            f"AND NOT {_ALIVE}",
            (now(), self.session),
        )

    def _request(self) -> int:
        self._requests += 1
        return self._requests

    # -- checkpoints ---------------------------------------------------------------------

    def create_checkpoint(self, label: str | None) -> Checkpoint:
        created = now()
        request = self._request()

        def body(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            # The lock in a statement of its own: the INSERT's snapshot is then taken once the
            # lock is held, so it sees every change committed before the checkpoint (a
            # statement's snapshot is taken when it starts, before it waits for a lock).
            _ordered(conn)
            row = conn.execute(
                "INSERT INTO checkpoints (label, created_at, last_change_id, session, agent, "
                "scope, request) SELECT %s, %s, (SELECT COALESCE(MAX(id), 0) FROM changes), "
                "%s, %s, %s, %s ON CONFLICT (session, request) DO NOTHING "
                f"RETURNING {CHECKPOINT_COLUMNS}",
                (
                    label,
                    created,
                    self.session,
                    self.agent,
                    self.scope,
                    request,
                ),
            ).fetchone()
            if row is not None:
                self._link(conn, "checkpoints", row)
            else:  # a retry after the first attempt was kept
                row = conn.execute(
                    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
                    "WHERE session = %s AND request = %s",
                    (self.session, request),
                ).fetchone()
            return one(row)

        return Checkpoint(**self._write(body))

    # -- changes -------------------------------------------------------------------------

    def record_intent(self, intent: Intent) -> int:
        request = self._request()
        agent, scope = (self.agent, self.scope) if intent.owner is None else intent.owner
        values = intent_values(intent, session=self.session, agent=agent, scope=scope)

        def body(conn: psycopg.Connection[Any]) -> int:
            # The lock in a statement of its own: the INSERT's snapshot then sees every
            # checkpoint committed (or dropped by gc) before it.
            _ordered(conn)
            row = conn.execute(
                "INSERT INTO changes (checkpoint_id, tool, classification, status, args, "
                "snapshot, snapshot_error, pid, created_at, session, agent, scope, redo_of, "
                "request) "
                "SELECT (SELECT MAX(id) FROM checkpoints WHERE agent IS NOT DISTINCT FROM %s), "
                "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s "
                "ON CONFLICT (session, request) DO NOTHING RETURNING id, checkpoint_id",
                (values["agent"], *values.values(), request),
            ).fetchone()
            if row is not None:
                self._link(conn, "changes", {**values, **row})
            else:  # a retry after the first attempt was kept
                row = conn.execute(
                    "SELECT id FROM changes WHERE session = %s AND request = %s",
                    (self.session, request),
                ).fetchone()
            return int(one(row)["id"])

        return self._write(body)

    def record_outcome(
        self, change_id: int, *, status: str, result: Any = None, error: str | None = None
    ) -> None:
        values = {"status": status, "result": dump(result), "error": error, "completed_at": now()}
        self._write(lambda conn: self._update(_ordered(conn), "changes", change_id, values))

    def record_post_state(self, change_id: int, state: Any, error: str | None = None) -> None:
        values = {"post_state": None if error else dump(state), "post_state_error": error}
        self._write(lambda conn: self._update(_ordered(conn), "changes", change_id, values))

    def recover_abandoned(self) -> int:
        def body(conn: psycopg.Connection[Any]) -> int:
            _ordered(conn)
            self._end_dead_sessions(conn)
            values = {
                "status": Status.UNKNOWN,
                "error": "the proxy stopped before the outcome of this call was recorded",
            }
            rows = conn.execute(
                "UPDATE changes c SET status = %s, error = %s WHERE c.status = %s "
                "AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = c.session "
                f"AND s.ended_at IS NULL) RETURNING c.id, {_chained('changes', 'c.')}",
                (*values.values(), Status.PENDING),
            ).fetchall()
            for row in sorted(rows, key=lambda row: int(row["id"])):
                self._link(conn, "changes", row)
            return len(rows)

        return self._write(body)

    def sessions(self) -> list[Session]:
        rows = self._query(
            f"SELECT s.id, s.agent, s.host, s.pid, s.scope, s.started_at, s.ended_at, "
            f"{_ALIVE} AS alive FROM sessions s ORDER BY s.seq",
            (),
        )
        return [Session(**row) for row in rows]

    # -- decisions -----------------------------------------------------------------------

    def record_decision(
        self, *, tool: str, classification: str, args: Any, answer: str, reason: str | None = None
    ) -> int:
        values = decision_values(
            tool=tool,
            classification=classification,
            args=args,
            answer=answer,
            reason=reason,
            session=self.session,
            agent=self.agent,
            scope=self.scope,
        )

        def body(conn: psycopg.Connection[Any]) -> int:
            _ordered(conn)
            row = one(
                conn.execute(
                    "INSERT INTO decisions (tool, classification, args, answer, reason, "
                    "created_at, session, agent, scope, last_change_id, last_checkpoint_id) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                    "(SELECT COALESCE(MAX(id), 0) FROM changes), "
                    "(SELECT COALESCE(MAX(id), 0) FROM checkpoints)) "
                    "RETURNING id, last_change_id, last_checkpoint_id",
                    tuple(values.values()),
                )
            )
            self._link(conn, "decisions", {**values, **row})
            return int(row["id"])

        return self._write(body)

    # -- compensations -------------------------------------------------------------------

    def record_step_started(
        self, change_id: int, step: int, tool: str, args: Any, *, after: int | None = None
    ) -> int | None:
        """The change's row is locked while the step is checked and claimed, so two sessions
        on any machines never both run it."""

        def body(conn: psycopg.Connection[Any]) -> int | None:
            _ordered(conn)
            conn.execute("SELECT id FROM changes WHERE id = %s FOR UPDATE", (change_id,))
            newest = one(
                conn.execute(
                    "SELECT MAX(id) AS newest FROM compensations "
                    "WHERE change_id = %s AND step = %s",
                    (change_id, step),
                )
            )["newest"]
            if newest != after:
                return None
            values = step_values(change_id, step, tool, args, session=self.session)
            row = one(
                conn.execute(
                    "INSERT INTO compensations "
                    "(change_id, step, tool, args, status, created_at, pid, session) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                    tuple(values.values()),
                )
            )
            self._link(conn, "compensations", {**values, **row})
            return int(row["id"])

        return self._write(body)

    def record_step_outcome(
        self, compensation_id: int, outcome: StepOutcome, *, undone: tuple[int, str] | None = None
    ) -> None:
        """A change is never marked undone without the record that proves it."""

        def body(conn: psycopg.Connection[Any]) -> None:
            values = {
                "status": outcome.status,
                "result": dump(outcome.result),
                "error": outcome.error,
            }
            self._update(_ordered(conn), "compensations", compensation_id, values)
            if undone is not None:
                self._mark_undone(conn, *undone)

        self._write(body)

    def mark_undone(self, change_id: int, note: str) -> None:
        self._write(lambda conn: self._mark_undone(_ordered(conn), change_id, note))

    def started_elsewhere(self, record: Compensation) -> bool:
        if (
            record.status != StepStatus.STARTED
            or record.session is None
            or record.session == self.session
        ):
            return False
        rows = self._query(
            f"SELECT {_ALIVE} AS alive FROM sessions s WHERE s.id = %s", (record.session,)
        )
        return bool(rows and rows[0]["alive"])

    # -- the hash chain -----------------------------------------------------------------

    def _update(
        self, conn: psycopg.Connection[Any], table: str, row_id: int, values: dict[str, Any]
    ) -> None:
        """Set `values` on a record (the columns are the store's own names), linked."""
        assignments = ", ".join(f"{column} = %s" for column in values)
        row = conn.execute(
            f"UPDATE {table} SET {assignments} WHERE id = %s "  # type: ignore[call-overload]
            f"RETURNING id, {_chained(table)}",
            (*values.values(), row_id),
        ).fetchone()
        if row is not None:
            self._link(conn, table, row)

    def _mark_undone(self, conn: psycopg.Connection[Any], change_id: int, note: str) -> None:
        row = conn.execute(
            "UPDATE changes SET undone_at = %s, undo_note = %s, undo_run = %s "  # type: ignore[call-overload]
            f"WHERE id = %s AND undone_at IS NULL RETURNING id, {_chained('changes')}",
            (now(), note, self.undo_run, change_id),
        ).fetchone()
        if row is not None:
            self._link(conn, "changes", row)

    def _link(self, conn: psycopg.Connection[Any], table: str, record: dict[str, Any]) -> None:
        """Append the link of a write that left `record` (id and chained columns) in `table`,
        in this transaction, which holds the order lock (`_ordered`): links follow commit order
        on every machine."""
        if not self._chained:
            return
        last = conn.execute(
            "SELECT seq, hash, keyed FROM chain ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if last is not None and (mixed := mixed_keys(last["keyed"], self._key)) is not None:
            raise JournalError(f"cannot write journal {self._location}: {mixed}")
        previous = None if last is None else (int(last["seq"]), bytes(last["hash"]))
        conn.execute(INSERT_LINK, next_link(previous, table, record, self._key).row())

    def collect(
        self,
        before: str,
        *,
        keep: Collection[int] = (),
        dry_run: bool = False,
        compact: bool = False,
    ) -> Collected:
        """`compact` does nothing here: PostgreSQL's autovacuum gives the space back."""
        # The whole chain is checked outside the order lock (seconds on a big journal, and
        # proxies write meanwhile); inside it only what was linked since.
        verified = checked(self.verify_chain(self._key))

        def body(conn: psycopg.Connection[Any]) -> Collected:
            _ordered(conn)  # no change, checkpoint or link is written meanwhile
            # Deleting many rows, with Python's planning between statements, may take longer
            # than the journal's 10 s limits allow one statement or an idle transaction.
            conn.execute("SET LOCAL statement_timeout = '120s'")
            conn.execute("SET LOCAL idle_in_transaction_session_timeout = '120s'")
            return collect(
                _Tx(conn), before=before, keep=keep, key=self._key, dry_run=dry_run,
                verified=verified,
            )  # fmt: skip

        return self._write(body)

    def _check_key(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse to write links with another key than the chain's (chain.key_problem)."""
        newest = conn.execute(
            "SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq DESC LIMIT 2"
        ).fetchall()
        problem = key_problem(newest, self._key)
        if problem is not None:
            raise JournalError(f"cannot write journal {self._location}: {problem}")

    def verify_chain(self, key: bytes | None) -> Verdict:
        def read(conn: psycopg.Connection[Any]) -> Verdict:
            with conn.transaction():  # one snapshot: a proxy may be writing meanwhile
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                links = conn.execute(
                    "SELECT seq, tbl, row_id, state, keyed, hash, note FROM chain ORDER BY seq"
                ).fetchall()
                rows = {
                    table: conn.execute(
                        f"SELECT id, {', '.join(columns)} FROM {table} ORDER BY id"  # type: ignore[call-overload]
                    ).fetchall()
                    for table, columns in CHAINED.items()
                }
            return verify(links, rows, key)

        return self._run(read)


def _chained(table: str, prefix: str = "") -> str:
    """The chained columns of `table`, for a RETURNING or SELECT list."""
    return ", ".join(prefix + column for column in CHAINED[table])


class _Tx:
    """A write transaction as retention.collect takes it (`?` placeholders)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return self._conn.execute(sql.replace("?", "%s"), params).fetchall()  # type: ignore[call-overload, no-any-return]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> object:
        return self._conn.execute(sql.replace("?", "%s"), params)  # type: ignore[call-overload]


def _ordered(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Take the journal's order lock, the first statement of every write of a chained record:
    one lock order for all of them, and commit order for ids and links."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, ORDER_LOCK))
    return conn
