"""The PostgreSQL journal: one database that proxies on many machines share.

psycopg is an optional dependency (`mcp-compensator[postgres]`), imported when a store is
opened, so the SQLite journal and the CLI never load it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import JournalError
from .records import (
    Checkpoint,
    Compensation,
    Intent,
    Session,
    Status,
    StepOutcome,
    StepStatus,
)
from .rows import CHECKPOINT_COLUMNS, Reads, dump, host_identity, now
from .sqlite import SCHEMA_VERSION

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEFAULT_LEASE", "FIRST_VERSION", "MIGRATIONS", "PostgresJournal"]

log = logging.getLogger("compensator.journal")

T = TypeVar("T")

SCHEMA_NAME = "compensator"
"""The PostgreSQL schema the journal's tables live in, so they never meet an application's."""

FIRST_VERSION = 5
"""The schema version a new PostgreSQL journal starts at (the SQLite journal's numbering: a
PostgreSQL journal never had versions 1 to 4)."""

CREATE = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA_NAME};
CREATE TABLE {SCHEMA_NAME}.schema_version (version integer NOT NULL);
CREATE TABLE {SCHEMA_NAME}.sessions (
    seq bigserial UNIQUE,
    id text PRIMARY KEY,
    agent text,
    named boolean NOT NULL DEFAULT false,
    host text NOT NULL,
    pid integer NOT NULL,
    scope text,
    started_at text NOT NULL,
    ended_at text,
    lease_until timestamptz NOT NULL,
    lock_key bigint NOT NULL
);
CREATE TABLE {SCHEMA_NAME}.checkpoints (
    id bigserial PRIMARY KEY,
    label text,
    created_at text NOT NULL,
    last_change_id bigint NOT NULL,
    session text,
    agent text,
    scope text,
    request bigint,
    UNIQUE (session, request)
);
CREATE TABLE {SCHEMA_NAME}.changes (
    id bigserial PRIMARY KEY,
    checkpoint_id bigint REFERENCES {SCHEMA_NAME}.checkpoints(id),
    tool text NOT NULL,
    classification text NOT NULL,
    status text NOT NULL,
    args text NOT NULL,
    snapshot text,
    snapshot_error text,
    result text,
    error text,
    pid integer NOT NULL,
    created_at text NOT NULL,
    completed_at text,
    undone_at text,
    undo_note text,
    session text,
    agent text,
    scope text,
    post_state text,
    post_state_error text,
    request bigint,
    UNIQUE (session, request)
);
CREATE INDEX changes_open ON {SCHEMA_NAME}.changes (undone_at, id);
CREATE INDEX changes_agent ON {SCHEMA_NAME}.changes (agent, id);
CREATE INDEX changes_scope ON {SCHEMA_NAME}.changes (scope, id);
CREATE INDEX changes_pending ON {SCHEMA_NAME}.changes (status) WHERE status = 'pending';
CREATE TABLE {SCHEMA_NAME}.compensations (
    id bigserial PRIMARY KEY,
    change_id bigint NOT NULL REFERENCES {SCHEMA_NAME}.changes(id),
    step integer NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    status text NOT NULL,
    result text,
    error text,
    created_at text NOT NULL,
    pid integer,
    session text
);
CREATE INDEX compensations_change ON {SCHEMA_NAME}.compensations (change_id, step);
CREATE TABLE {SCHEMA_NAME}.decisions (
    id bigserial PRIMARY KEY,
    tool text NOT NULL,
    classification text NOT NULL,
    args text NOT NULL,
    answer text NOT NULL,
    reason text,
    last_change_id bigint NOT NULL,
    last_checkpoint_id bigint NOT NULL,
    created_at text NOT NULL,
    session text,
    agent text,
    scope text
);
CREATE INDEX decisions_agent ON {SCHEMA_NAME}.decisions (agent, id)
"""
"""The schema at FIRST_VERSION, created in one transaction."""

MIGRATIONS: dict[int, str] = {}
"""Entry N takes a PostgreSQL journal from version N to N + 1 (N >= FIRST_VERSION); each new
SQLite migration gets its PostgreSQL twin here."""

# Advisory locks: (class, object) pairs for the journal's own transactions, in a class of
# their own so they never meet an application's; a session's liveness lock is one bigint.
_LOCK_CLASS = 0x434D5043  # "CMPC"
_SCHEMA_LOCK = 1  # creating or migrating the schema
_ORDER_LOCK = 2  # handing out change and checkpoint ids in commit order
_SESSIONS_LOCK = 3  # choosing the agent a new session continues

_CLIENT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 10,
    "application_name": "mcp-compensator",
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    # Sent data unacknowledged for 10 s (a cut network) fails the call, instead of waiting
    # the kernel's retransmission limit of about 15 minutes.
    "tcp_user_timeout": 10000,
}
"""libpq connection options the journal sets unless its URL sets them itself."""

DEFAULT_LEASE = 30.0
"""Seconds a session stays alive without renewing its lease (it renews every third of it)."""

_ALIVE = """(s.ended_at IS NULL AND s.lease_until > now() AND EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_catalog.pg_database
                        WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = s.lock_key))"""
"""When session row `s` is alive: not ended, its lease current, and the advisory lock its
connection took still held (PostgreSQL drops it the moment that connection ends, so a killed
proxy is dead at once, while a hung or cut-off one is dead once its lease runs out)."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise JournalError(
            "a PostgreSQL journal needs psycopg: pip install 'mcp-compensator[postgres]'"
        ) from exc
    return psycopg


class PostgresJournal(Reads):
    """A `JournalStore` in a PostgreSQL database: the tables live in its `compensator` schema,
    created on first use; one connection per store, in autocommit mode, every write one
    statement or one short transaction.

    Liveness: each writing session holds a session-level advisory lock on its connection and
    a lease in its `sessions` row that a background thread renews every third of `lease`
    seconds. It counts as alive while both hold, so a proxy killed on any machine is dead as
    soon as PostgreSQL sees its connection close, and one that hangs or is cut off is dead
    once its lease runs out; process ids play no part. Lease times are the database server's
    clock, so machines whose clocks disagree still agree on who is alive.

    Ordering: change and checkpoint ids are handed out under one transaction-level advisory
    lock, so they follow commit order across every connection and "after checkpoint N"
    means the same to every machine. Claiming a compensating step locks the change's row.

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
        self._psycopg = _psycopg()
        self._url = url
        self._read_only = read_only
        self._fsync = fsync
        self._lease = lease
        self.session = uuid.uuid4().hex
        self.agent: str | None = None
        self.scope = None if person else scope
        self._lock_key = secrets.randbits(62)
        self._requests = 0
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._outage: JournalError | None = None
        self._started = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        try:
            self._location = self._describe(url)
            given = self._psycopg.conninfo.conninfo_to_dict(url)
        except self._psycopg.ProgrammingError:
            # libpq's own words may quote the URL, password and all: not repeated here.
            raise JournalError(
                "the journal URL is not a valid PostgreSQL connection string (libpq cannot "
                "parse it). Write it as postgresql://USER:PASSWORD@HOST:PORT/DATABASE, with "
                "characters such as @ : / % in the password percent-encoded."
            ) from None
        # Defaults the URL may override (e.g. ?connect_timeout=30).
        self._client_options = {
            name: value for name, value in _CLIENT_OPTIONS.items() if name not in given
        }
        try:
            if read_only:
                self._run(self._check_version_read_only)
                return
            self._run(self._create_or_migrate, write=True)
            self._run(lambda conn: self._begin_session(conn, agent, person=person), write=True)
            self._started = True
            self.recover_abandoned()
        except BaseException:
            self._close_connection()
            raise
        self._renewer = threading.Thread(
            target=self._renew_forever, name="compensator-journal-lease", daemon=True
        )
        self._renewer.start()

    @property
    def location(self) -> str:
        return self._location

    def _describe(self, url: str) -> str:
        """The URL without its password, for logs and errors."""
        parts = self._psycopg.conninfo.conninfo_to_dict(url)
        user = f"{parts['user']}@" if parts.get("user") else ""
        host = str(parts.get("host") or "localhost")
        if "/" in host:  # a Unix socket folder
            host = f"[{host}]"
        port = f":{parts['port']}" if parts.get("port") else ""
        return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"

    # -- the connection ------------------------------------------------------------------

    def _connect(self, *, resume: bool = True) -> psycopg.Connection[Any]:
        """A new connection, set up; after the session began, also holding its lock again
        (`resume=False`: the caller does that once it knows the connection is the one kept).
        Errors are JournalError."""
        from psycopg.rows import dict_row

        try:
            conn = self._psycopg.connect(
                self._url, autocommit=True, row_factory=dict_row, **self._client_options
            )
        except self._psycopg.Error as exc:
            then = (
                "mutating calls are refused until the journal answers"
                if self._started
                else "the proxy needs its journal to start"
            )
            raise JournalError(
                f"cannot reach the journal database {self._location}: {_first_line(exc)}. "
                "Check that PostgreSQL runs there and that the URL's host, port, user and "
                f"password are right; {then}."
            ) from exc
        try:
            # No statement waits for a lock or a slow server for more than 10 s (a third of the
            # lease, so a stuck write cannot hold up the lease's renewal for long); a
            # connection cut off inside a transaction gives its locks back after 10 s, and the
            # server notices a vanished client within about 25 s, not the system's 2 hours.
            conn.execute("SET statement_timeout = '10s'")
            conn.execute("SET idle_in_transaction_session_timeout = '10s'")
            conn.execute("SET tcp_keepalives_idle = 10")
            conn.execute("SET tcp_keepalives_interval = 5")
            conn.execute("SET tcp_keepalives_count = 3")
            conn.execute(f"SET search_path = {SCHEMA_NAME}, pg_catalog")
            if self._read_only:
                conn.execute("SET default_transaction_read_only = on")
            if self._fsync:
                conn.execute("SET synchronous_commit = on")
            if self._started and resume:
                self._resume_session(conn)
        except self._psycopg.Error as exc:
            conn.close()
            raise self._failed(exc, write=False, committing=False) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _resume_session(self, conn: psycopg.Connection[Any]) -> None:
        """On a new connection after the old one was lost: hold the session's lock again and
        renew its lease (another session may have taken it for dead meanwhile; it lives on)."""
        held = _one(conn.execute("SELECT pg_try_advisory_lock(%s) AS held", (self._lock_key,)))[
            "held"
        ]
        if not held:
            # Only this session's old connection can hold its key: its backend has not noticed
            # yet that the connection is gone (a cut network). End that backend, then wait for
            # the lock (within statement_timeout), so that the session never runs without it.
            log.warning("the journal still holds this session's old connection; ending it")
            conn.execute(
                "SELECT pg_terminate_backend(l.pid) FROM pg_catalog.pg_locks l "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.pid <> pg_backend_pid() "
                "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
                (self._lock_key,),
            )
            conn.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
        ended = self._renew(conn)
        log.warning("the journal connection was lost and is open again (%s)", self._location)
        if ended is not None:
            log.warning(
                "another session took this one for dead while the journal was out of reach; "
                "its pending calls may be marked unknown"
            )

    def _unusable(self) -> bool:
        conn = self._conn
        return conn is None or conn.closed or conn.broken

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection, opened again when it was lost; while the lease thread finds
        the database out of reach, its last error at once rather than another wait of up to
        `connect_timeout` on the proxy's event loop."""
        if self._unusable():
            if self._outage is not None and self._started:
                raise self._outage
            self._drop_connection()
            self._conn = self._connect()
        assert self._conn is not None
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _reopen(self) -> None:
        """For the lease thread: open a new connection without holding the store's lock (a
        connection attempt can wait `connect_timeout`), and put it in place if still needed."""
        try:
            fresh: psycopg.Connection[Any] | None = self._connect(resume=False)
        except JournalError as exc:
            self._outage = exc
            raise
        with self._lock:
            if self._unusable() and not self._stop.is_set():
                assert fresh is not None
                try:  # under the lock: only the connection kept takes the session's lock
                    self._resume_session(fresh)
                except self._psycopg.Error as exc:
                    fresh.close()
                    self._outage = self._failed(exc, write=False, committing=False)
                    raise self._outage from exc
                self._drop_connection()
                self._conn, fresh = fresh, None
            self._outage = None
        if fresh is not None:
            fresh.close()

    def _close_connection(self) -> None:
        with self._lock:
            self._drop_connection()

    def _run(
        self,
        body: Callable[[psycopg.Connection[Any]], T],
        *,
        write: bool = False,
        retry: bool = True,
    ) -> T:
        """Run `body` on the connection, in one transaction when `write`. A lost connection is
        opened again and `body` run once more when it cannot have been applied: a read, a
        transaction that failed before its commit, or a body that is safe to repeat (every
        single-statement write here is). Errors are JournalError."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                committing = False
                try:
                    if not write:
                        return body(conn)
                    with conn.transaction():
                        result = body(conn)
                        committing = True
                    return result
                except self._psycopg.Error as exc:
                    lost = conn.closed or conn.broken
                    if lost and retry and attempt == 1 and not committing:
                        log.info("the journal connection was lost (%s); opening it again", exc)
                        continue
                    raise self._failed(exc, write=write, committing=committing) from exc
            raise AssertionError("unreachable")  # pragma: no cover

    def _failed(self, exc: Exception, *, write: bool, committing: bool) -> JournalError:
        errors = self._psycopg.errors
        words = _first_line(exc)
        if isinstance(exc, errors.ReadOnlySqlTransaction):
            fix = "the journal is open read-only here"
        elif isinstance(exc, errors.InsufficientPrivilege):
            fix = (
                f"the database user may not use the journal's tables; grant it USAGE and CREATE "
                f"on schema {SCHEMA_NAME} and all privileges on its tables and sequences"
            )
        elif isinstance(exc, errors.DiskFull):
            fix = "the database server's disk is full; free some space"
        elif isinstance(exc, errors.QueryCanceled):
            fix = "the database did not answer within 10 s (a lock held too long, or overload)"
        elif isinstance(exc, self._psycopg.OperationalError):
            fix = (
                "the connection to the database was lost"
                + (
                    ", while committing: the write may or may not have been kept"
                    if committing
                    else ""
                )
                + "; it is opened again on the next write"
            )
        else:
            fix = "PostgreSQL's own words follow"
        action = "write" if write else "read"
        return JournalError(f"cannot {action} journal {self._location}: {fix} ({words})")

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

    # -- set-up ------------------------------------------------------------------------

    def _version(self, conn: psycopg.Connection[Any]) -> int | None:
        row = _one(
            conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL AS present",
                (f"{SCHEMA_NAME}.schema_version",),
            )
        )
        if not row["present"]:
            return None
        found = conn.execute("SELECT version FROM schema_version").fetchone()
        return None if found is None else int(found["version"])

    def _check_version_read_only(self, conn: psycopg.Connection[Any]) -> None:
        version = self._version(conn)
        if version is None:
            raise JournalError(
                f"no journal in {self._location} (no {SCHEMA_NAME} schema). Pass --db with "
                "the URL the proxy writes (it logs it at start-up)."
            )
        if version != SCHEMA_VERSION:
            raise JournalError(self._version_problem(version))

    def _version_problem(self, version: int) -> str:
        if version > SCHEMA_VERSION:
            return (
                f"journal {self._location} has schema version {version}, newer than this "
                f"compensator understands ({SCHEMA_VERSION}). Upgrade mcp-compensator."
            )
        return (
            f"journal {self._location} has schema version {version}, older than this "
            f"compensator reads ({SCHEMA_VERSION}). Start `compensator serve` on it once to "
            "migrate it."
        )

    def _create_or_migrate(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _SCHEMA_LOCK))
        version = self._version(conn)
        if version is None:
            for statement in CREATE.split(";"):
                conn.execute(statement)  # type: ignore[call-overload]  # our own constant SQL
            conn.execute("INSERT INTO schema_version VALUES (%s)", (FIRST_VERSION,))
            version = FIRST_VERSION
        if version > SCHEMA_VERSION:
            raise JournalError(self._version_problem(version))
        for current in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[current].split(";"):
                if statement.strip():
                    conn.execute(statement)  # type: ignore[call-overload]
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))

    def _begin_session(
        self, conn: psycopg.Connection[Any], name: str | None, *, person: bool
    ) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _SESSIONS_LOCK))
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

    def _renew_forever(self) -> None:
        """Renew the lease every third of it; while the database is out of reach, try to
        reconnect every second instead, so writes work again soon after it is back."""
        interval = max(self._lease / 3, 0.05)
        wait = interval
        while not self._stop.wait(wait):
            try:
                if self._unusable():
                    self._reopen()
                ended = self._run(self._renew, retry=False)  # reopened above, outside the lock
                if ended is not None:
                    log.warning(
                        "this session's lease ran out at %s (the process was paused, or the "
                        "journal was slow) and other sessions took it for dead: its pending "
                        "calls may be marked unknown; it carries on",
                        ended,
                    )
                wait = interval
            except JournalError as exc:
                log.warning("cannot renew this session's lease in the journal: %s", exc)
                wait = min(interval, 1.0)
            except Exception:  # the thread must live on: liveness depends on it
                log.exception("renewing this session's lease failed")

    def _renew(self, conn: psycopg.Connection[Any]) -> str | None:
        """Renew the lease, reviving the session if others took it for dead meanwhile; when
        they had, the time they ended it."""
        row = conn.execute(
            "UPDATE sessions s SET lease_until = now() + make_interval(secs => %s), "
            "ended_at = NULL FROM (SELECT ended_at FROM sessions WHERE id = %s) old "
            "WHERE s.id = %s RETURNING old.ended_at",
            (self._lease, self.session, self.session),
        ).fetchone()
        return None if row is None else row["ended_at"]

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
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, _ORDER_LOCK))
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
            if row is None:  # a retry after the first attempt was kept
                row = conn.execute(
                    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints "
                    "WHERE session = %s AND request = %s",
                    (self.session, request),
                ).fetchone()
            return _one(row)

        return Checkpoint(**self._write(body))

    # -- changes -------------------------------------------------------------------------

    def record_intent(self, intent: Intent) -> int:
        request = self._request()
        values = (
            _LOCK_CLASS,
            _ORDER_LOCK,
            self.agent,
            intent.tool,
            intent.classification,
            Status.PENDING,
            dump(dict(intent.args)),
            dump(intent.snapshot),
            intent.snapshot_error,
            os.getpid(),
            now(),
            self.session,
            self.agent,
            self.scope,
            request,
        )

        def body(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(
                "WITH ordered AS (SELECT pg_advisory_xact_lock(%s, %s)) "
                "INSERT INTO changes (checkpoint_id, tool, classification, status, args, "
                "snapshot, snapshot_error, pid, created_at, session, agent, scope, request) "
                "SELECT (SELECT MAX(id) FROM checkpoints WHERE agent IS NOT DISTINCT FROM %s), "
                "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM ordered "
                "ON CONFLICT (session, request) DO NOTHING RETURNING id",
                values,
            ).fetchone()
            if row is None:  # a retry after the first attempt was kept
                row = conn.execute(
                    "SELECT id FROM changes WHERE session = %s AND request = %s",
                    (self.session, request),
                ).fetchone()
            return int(_one(row)["id"])

        return self._run(body)

    def record_outcome(
        self, change_id: int, *, status: str, result: Any = None, error: str | None = None
    ) -> None:
        self._statement(
            "UPDATE changes SET status = %s, result = %s, error = %s, completed_at = %s "
            "WHERE id = %s",
            (status, dump(result), error, now(), change_id),
        )

    def record_post_state(self, change_id: int, state: Any, error: str | None = None) -> None:
        self._statement(
            "UPDATE changes SET post_state = %s, post_state_error = %s WHERE id = %s",
            (None if error else dump(state), error, change_id),
        )

    def recover_abandoned(self) -> int:
        def body(conn: psycopg.Connection[Any]) -> int:
            self._end_dead_sessions(conn)
            cursor = conn.execute(
                "UPDATE changes c SET status = %s, error = %s WHERE c.status = %s "
                "AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = c.session "
                "AND s.ended_at IS NULL)",
                (
                    Status.UNKNOWN,
                    "the proxy stopped before the outcome of this call was recorded",
                    Status.PENDING,
                ),
            )
            return cursor.rowcount

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
        def body(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(
                "INSERT INTO decisions (tool, classification, args, answer, reason, "
                "last_change_id, last_checkpoint_id, created_at, session, agent, scope) VALUES "
                "(%s, %s, %s, %s, %s, (SELECT COALESCE(MAX(id), 0) FROM changes), "
                "(SELECT COALESCE(MAX(id), 0) FROM checkpoints), %s, %s, %s, %s) RETURNING id",
                (
                    tool,
                    classification,
                    dump(args),
                    answer,
                    reason,
                    now(),
                    self.session,
                    self.agent,
                    self.scope,
                ),
            ).fetchone()
            return int(_one(row)["id"])

        return self._write(body)

    # -- compensations -------------------------------------------------------------------

    def record_step_started(
        self, change_id: int, step: int, tool: str, args: Any, *, after: int | None = None
    ) -> int | None:
        """The change's row is locked while the step is checked and claimed, so two sessions
        on any machines never both run it."""

        def body(conn: psycopg.Connection[Any]) -> int | None:
            conn.execute("SELECT id FROM changes WHERE id = %s FOR UPDATE", (change_id,))
            newest = _one(
                conn.execute(
                    "SELECT MAX(id) AS newest FROM compensations "
                    "WHERE change_id = %s AND step = %s",
                    (change_id, step),
                )
            )["newest"]
            if newest != after:
                return None
            row = conn.execute(
                "INSERT INTO compensations "
                "(change_id, step, tool, args, status, created_at, pid, session) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    change_id,
                    step,
                    tool,
                    dump(args),
                    StepStatus.STARTED,
                    now(),
                    os.getpid(),
                    self.session,
                ),
            ).fetchone()
            return int(_one(row)["id"])

        return self._write(body)

    def record_step_outcome(
        self, compensation_id: int, outcome: StepOutcome, *, undone: tuple[int, str] | None = None
    ) -> None:
        """A change is never marked undone without the record that proves it."""

        def body(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "UPDATE compensations SET status = %s, result = %s, error = %s WHERE id = %s",
                (outcome.status, dump(outcome.result), outcome.error, compensation_id),
            )
            if undone is not None:
                _mark_undone(conn, *undone)

        self._write(body)

    def mark_undone(self, change_id: int, note: str) -> None:
        self._run(lambda conn: _mark_undone(conn, change_id, note))

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

    # -- running statements -------------------------------------------------------------

    def _write(self, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        return self._run(body, write=True)

    def _statement(self, sql: str, params: Sequence[Any]) -> None:
        """One write statement that is safe to repeat, in its own transaction."""
        self._run(lambda conn: conn.execute(sql, params))  # type: ignore[call-overload]

    def _select(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        # The shared reads write `?`; psycopg's placeholder is %s (no `?` operator is used).
        return self._query(sql.replace("?", "%s"), params)

    def _query(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return self._run(lambda conn: conn.execute(sql, params).fetchall())  # type: ignore[call-overload]

    @contextlib.contextmanager
    def _raw(self) -> Iterator[psycopg.Connection[Any]]:
        """The store's connection, for tests and diagnostics."""
        with self._lock:
            yield self._connection()


def _mark_undone(conn: psycopg.Connection[Any], change_id: int, note: str) -> None:
    conn.execute(
        "UPDATE changes SET undone_at = %s, undo_note = %s WHERE id = %s AND undone_at IS NULL",
        (now(), note, change_id),
    )


def _one(found: Any) -> dict[str, Any]:
    """A row the statement always returns (a cursor, or a row fetched already)."""
    row = found.fetchone() if hasattr(found, "fetchone") else found
    if row is None:  # pragma: no cover - a statement that always returns a row
        raise JournalError("the journal database returned no row where one was certain")
    return dict(row)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
