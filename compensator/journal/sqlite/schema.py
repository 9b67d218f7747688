"""The SQLite journal's schema: one migration script per version, and what a version
that does not fit means to a person."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHAIN_VERSION", "MIGRATIONS", "SCHEMA_VERSION", "version_problem"]

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1
    """
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        label TEXT,
        created_at TEXT NOT NULL,
        last_change_id INTEGER NOT NULL
    );
    CREATE TABLE changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        checkpoint_id INTEGER REFERENCES checkpoints(id),
        tool TEXT NOT NULL,
        classification TEXT NOT NULL,
        status TEXT NOT NULL,
        args TEXT NOT NULL,
        snapshot TEXT,
        snapshot_error TEXT,
        result TEXT,
        error TEXT,
        pid INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        completed_at TEXT,
        undone_at TEXT,
        undo_note TEXT
    );
    CREATE INDEX changes_open ON changes (undone_at, id);
    CREATE TABLE compensations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        change_id INTEGER NOT NULL REFERENCES changes(id),
        step INTEGER NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT,
        error TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX compensations_change ON compensations (change_id, step);
    """,
    # 1 -> 2: sessions (several proxies on one journal), in-doubt compensations, drift checks
    """
    ALTER TABLE checkpoints ADD COLUMN session TEXT;
    ALTER TABLE changes ADD COLUMN session TEXT;
    ALTER TABLE changes ADD COLUMN post_state TEXT;
    ALTER TABLE changes ADD COLUMN post_state_error TEXT;
    ALTER TABLE compensations ADD COLUMN pid INTEGER;
    CREATE INDEX changes_session ON changes (session, id);
    """,
    # 2 -> 3: agents (a proxy restarted continues its agent), liveness by lock, not by pid
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent TEXT,
        named INTEGER NOT NULL DEFAULT 0,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        ended_at TEXT
    );
    INSERT INTO sessions (id, agent, host, pid, started_at, ended_at)
        SELECT session, session, '', 0, MIN(created_at), MIN(created_at) FROM (
            SELECT session, created_at FROM changes
            UNION ALL SELECT session, created_at FROM checkpoints
        ) WHERE session IS NOT NULL GROUP BY session;
    ALTER TABLE checkpoints ADD COLUMN agent TEXT;
    ALTER TABLE changes ADD COLUMN agent TEXT;
    ALTER TABLE compensations ADD COLUMN session TEXT;
    UPDATE checkpoints SET agent = session;
    UPDATE changes SET agent = session;
    CREATE INDEX changes_agent ON changes (agent, id);
    """,
    # 3 -> 4: decisions (calls a person approved or refused, calls the registry denies)
    """
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tool TEXT NOT NULL,
        classification TEXT NOT NULL,
        args TEXT NOT NULL,
        answer TEXT NOT NULL,
        reason TEXT,
        last_change_id INTEGER NOT NULL,
        last_checkpoint_id INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        session TEXT,
        agent TEXT
    );
    CREATE INDEX decisions_agent ON decisions (agent, id);
    """,
    # 4 -> 5: shared scopes (a team's proxies undo each other's changes when they opt in)
    """
    ALTER TABLE sessions ADD COLUMN scope TEXT;
    ALTER TABLE checkpoints ADD COLUMN scope TEXT;
    ALTER TABLE changes ADD COLUMN scope TEXT;
    ALTER TABLE decisions ADD COLUMN scope TEXT;
    CREATE INDEX changes_scope ON changes (scope, id);
    """,
    # 5 -> 6: the hash chain (a tamper-evident journal); the store then links the records
    # already there (chain.existing_links). Redo: the change a call replays, and the undo
    # (one undo_to, undo_change or `compensator undo`) that settled a change.
    """
    ALTER TABLE changes ADD COLUMN redo_of INTEGER;
    ALTER TABLE changes ADD COLUMN undo_run TEXT;
    CREATE TABLE chain (
        seq INTEGER PRIMARY KEY,
        tbl TEXT NOT NULL,
        row_id INTEGER NOT NULL,
        state BLOB NOT NULL,
        keyed INTEGER NOT NULL,
        hash BLOB NOT NULL,
        note TEXT
    );
    """,
)
"""The schema, one script per version: entry N takes a journal from version N to N + 1."""

SCHEMA_VERSION = len(MIGRATIONS)

CHAIN_VERSION = 6
"""The version that brought the hash chain: a journal migrated to it gets links for the
records it holds."""


def version_problem(path: Path, version: int) -> str:
    """What a person can do about a journal file at a schema version this one cannot use."""
    if version > SCHEMA_VERSION:
        return (
            f"journal {path} has schema version {version}, newer than this "
            f"compensator understands ({SCHEMA_VERSION}). Upgrade mcp-compensator."
        )
    if version == 0:
        return f"{path} is not a journal written by compensator (no schema version)."
    return (
        f"journal {path} has schema version {version}, older than this compensator "
        f"reads ({SCHEMA_VERSION}). Start `compensator serve` on it once to migrate it."
    )
