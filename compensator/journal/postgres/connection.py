"""The PostgreSQL journal's connection: opened with the journal's settings, opened again
when lost (a write retried once when it cannot have been applied), and the lease a background
thread renews so that other sessions know this one is alive."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import JournalError
from .schema import SCHEMA_NAME, one

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEFAULT_LEASE", "Connection", "first_line"]

log = logging.getLogger("compensator.journal")

T = TypeVar("T")

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


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise JournalError(
            "a PostgreSQL journal needs psycopg: pip install 'mcp-compensator[postgres]'"
        ) from exc
    return psycopg


class Connection:
    """The connection of a PostgreSQL store and the lease that keeps its session alive: opened
    again when lost, every statement run through `_run`, errors told as JournalError."""

    session: str
    _lock_key: int

    def __init__(self, url: str, *, read_only: bool, fsync: bool, lease: float) -> None:
        self._psycopg = _psycopg()
        self._url = url
        self._read_only = read_only
        self._fsync = fsync
        self._lease = lease
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

    def _start_renewing(self) -> None:
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
                f"cannot reach the journal database {self._location}: {first_line(exc)}. "
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
        held = one(conn.execute("SELECT pg_try_advisory_lock(%s) AS held", (self._lock_key,)))[
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
        words = first_line(exc)
        if isinstance(exc, errors.ReadOnlySqlTransaction):
            fix = "the journal is open read-only here"
        elif isinstance(exc, errors.InsufficientPrivilege):
            fix = (
                f"the database user may not use the journal's tables; grant it USAGE and CREATE "
                f"on schema {SCHEMA_NAME} and all privileges on its tables and sequences"
            )
        elif isinstance(exc, errors.DiskFull):
            fix = "the database server's disk is full; free some space"
        elif isinstance(exc, errors.DeadlockDetected):
            fix = "two writes waited for each other and PostgreSQL ended this one; try again"
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

    # -- running statements -------------------------------------------------------------

    def _write(self, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        return self._run(body, write=True)

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


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
