"""The PostgreSQL journal's schema: the tables a new journal starts with, the migrations from
one version to the next, and the advisory locks the journal's transactions take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import JournalError
from ..chain import CHAINED, existing_links, journal_key
from ..sqlite import SCHEMA_VERSION
from ..sqlite.schema import CHAIN_VERSION

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CREATE",
    "FIRST_VERSION",
    "INSERT_LINK",
    "LOCK_CLASS",
    "MIGRATIONS",
    "ORDER_LOCK",
    "SCHEMA_LOCK",
    "SCHEMA_NAME",
    "SESSIONS_LOCK",
    "check_version_read_only",
    "create_or_migrate",
    "one",
    "version_problem",
]

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

MIGRATIONS: dict[int, str] = {
    # the hash chain (a tamper-evident journal); then the records already there are linked.
    # Redo: the change a call replays.
    5: f"""
    ALTER TABLE {SCHEMA_NAME}.changes ADD COLUMN redo_of bigint;
    ALTER TABLE {SCHEMA_NAME}.changes ADD COLUMN undo_run text;
    CREATE TABLE {SCHEMA_NAME}.chain (
        seq bigint PRIMARY KEY,
        tbl text NOT NULL,
        row_id bigint NOT NULL,
        state bytea NOT NULL,
        keyed boolean NOT NULL,
        hash bytea NOT NULL,
        note text
    )
    """,
}
"""Entry N takes a PostgreSQL journal from version N to N + 1 (N >= FIRST_VERSION); each new
SQLite migration gets its PostgreSQL twin here."""

INSERT_LINK = (
    "INSERT INTO chain (seq, tbl, row_id, state, keyed, hash, note) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s)"
)

# Advisory locks: (class, object) pairs for the journal's own transactions, in a class of
# their own so they never meet an application's; a session's liveness lock is one bigint.
LOCK_CLASS = 0x434D5043  # "CMPC"
SCHEMA_LOCK = 1  # creating or migrating the schema
ORDER_LOCK = 2  # handing out change and checkpoint ids in commit order
SESSIONS_LOCK = 3  # choosing the agent a new session continues


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    row = one(
        conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL AS present",
            (f"{SCHEMA_NAME}.schema_version",),
        )
    )
    if not row["present"]:
        return None
    found = conn.execute("SELECT version FROM schema_version").fetchone()
    return None if found is None else int(found["version"])


def check_version_read_only(conn: psycopg.Connection[Any], location: str) -> None:
    version = schema_version(conn)
    if version is None:
        raise JournalError(
            f"no journal in {location} (no {SCHEMA_NAME} schema). Pass --db with "
            "the URL the proxy writes (it logs it at start-up)."
        )
    if version != SCHEMA_VERSION:
        raise JournalError(version_problem(location, version))


def version_problem(location: str, version: int) -> str:
    if version > SCHEMA_VERSION:
        return (
            f"journal {location} has schema version {version}, newer than this "
            f"compensator understands ({SCHEMA_VERSION}). Upgrade mcp-compensator."
        )
    return (
        f"journal {location} has schema version {version}, older than this "
        f"compensator reads ({SCHEMA_VERSION}). Start `compensator serve` on it once to "
        "migrate it."
    )


def create_or_migrate(conn: psycopg.Connection[Any], location: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, SCHEMA_LOCK))
    version = schema_version(conn)
    if version is None:
        for statement in CREATE.split(";"):
            conn.execute(statement)  # type: ignore[call-overload]  # our own constant SQL
        conn.execute("INSERT INTO schema_version VALUES (%s)", (FIRST_VERSION,))
        version = FIRST_VERSION
    if version > SCHEMA_VERSION:
        raise JournalError(version_problem(location, version))
    for current in range(version, SCHEMA_VERSION):
        for statement in MIGRATIONS[current].split(";"):
            if statement.strip():
                conn.execute(statement)  # type: ignore[call-overload]
        if current + 1 == CHAIN_VERSION:
            _link_existing(conn)
    conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))


def one(found: Any) -> dict[str, Any]:
    """A row the statement always returns (a cursor, or a row fetched already)."""
    row = found.fetchone() if hasattr(found, "fetchone") else found
    if row is None:  # pragma: no cover - a statement that always returns a row
        raise JournalError("the journal database returned no row where one was certain")
    return dict(row)


def _link_existing(conn: psycopg.Connection[Any]) -> None:
    """Link the records a journal held before it had a chain."""
    rows = {
        table: conn.execute(
            f"SELECT id, {', '.join(columns)} FROM {table} ORDER BY id"  # type: ignore[call-overload]
        ).fetchall()
        for table, columns in CHAINED.items()
    }
    for link in existing_links(rows, journal_key()):
        conn.execute(INSERT_LINK, link.row())
