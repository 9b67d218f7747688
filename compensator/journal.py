"""The SQLite journal: checkpoints, changes and the compensations run against them."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import JournalError

__all__ = [
    "SCHEMA_VERSION",
    "Change",
    "Checkpoint",
    "Compensation",
    "Journal",
    "Status",
    "StepStatus",
    "default_journal_path",
    "pid_alive",
]

SCHEMA_VERSION = 2


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


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    id: int
    label: str | None
    created_at: str
    last_change_id: int
    session: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "created_at": self.created_at}


@dataclass(frozen=True, kw_only=True)
class Change:
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
    post_state: Any = None
    post_state_error: str | None = None
    post_state_recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        """The shape `list_changes` and `undo_to` report."""
        return {
            "id": self.id,
            "checkpoint": self.checkpoint_id,
            "tool": self.tool,
            "classification": self.classification,
            "status": self.status,
            "args": self.args,
            "created_at": self.created_at,
        }

    def context(self) -> dict[str, Any]:
        """What a template may read under `change`."""
        return {**self.to_json(), "error": self.error}


@dataclass(frozen=True, kw_only=True)
class Compensation:
    id: int
    change_id: int
    step: int
    tool: str
    args: Any
    status: str
    error: str | None
    created_at: str
    pid: int | None = None


_MIGRATIONS: tuple[str, ...] = (
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
)

_CHANGE_COLUMNS = (
    "id, checkpoint_id, tool, classification, status, args, snapshot, snapshot_error, "
    "result, error, created_at, completed_at, undone_at, undo_note, session, post_state, "
    "post_state_error"
)


def default_journal_path(config: str | os.PathLike[str]) -> Path:
    """Where the journal of a registry lives when no --db is given.

    `$COMPENSATOR_DB` when set; else one file per registry (named after the file and a hash of
    its absolute path) under `$XDG_STATE_HOME/mcp-compensator`, which defaults to
    `~/.local/state/mcp-compensator`.
    """
    explicit = os.environ.get("COMPENSATOR_DB")
    if explicit:
        return Path(explicit).expanduser()
    config_path = Path(config).expanduser().resolve()
    digest = hashlib.sha256(str(config_path).encode()).hexdigest()[:10]
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "mcp-compensator" / f"{config_path.stem}-{digest}.db"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _create_private(path: Path) -> None:
    """Create the file readable by the owner only; SQLite gives its -wal and -shm the same mode."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Journal:
    """One SQLite connection per process; every write is a short transaction.

    Snapshots and arguments may hold secrets, so the database file is created 0600.
    Every commit (the intent of a call is committed before the call is forwarded) reaches the
    operating system before the method returns: with WAL and `synchronous=NORMAL`, a killed
    proxy process loses nothing it committed. `fsync=True` (`synchronous=FULL`) also syncs
    each commit to disk, so a power cut or OS crash cannot lose one either, at about a
    millisecond per commit.

    `read_only=True` opens an existing journal for reading, e.g. while a proxy writes it: the
    file is never created, migrated or recovered, and SQLite refuses every write.

    Several processes may share one journal file. Each `Journal` is one `session` (new on every
    open): checkpoints and changes record it, so that undoing to a checkpoint never reaches the
    changes another process made meanwhile (see `open_changes`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        fsync: bool = False,
        session: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.session = session or uuid.uuid4().hex
        self._synchronous = "FULL" if fsync else "NORMAL"
        self._lock = threading.Lock()
        if read_only:
            self._open_read_only()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                _create_private(self.path)
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
            self.recover_abandoned()
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(
                f"cannot use journal {self.path}: {exc}. Pass --db with a journal file "
                "written by compensator, or a new path."
            ) from exc
        except BaseException:
            self._db.close()
            raise

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
            raise JournalError(self._version_problem(version))

    def _version_problem(self, version: int) -> str:
        if version > SCHEMA_VERSION:
            return (
                f"journal {self.path} has schema version {version}, newer than this "
                f"compensator understands ({SCHEMA_VERSION}). Upgrade mcp-compensator."
            )
        if version == 0:
            return f"{self.path} is not a journal written by compensator (no schema version)."
        return (
            f"journal {self.path} has schema version {version}, older than this compensator "
            f"reads ({SCHEMA_VERSION}). Start `compensator serve` on it once to migrate it."
        )

    def _configure(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={self._synchronous}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=10000")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError(self._version_problem(version))
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction() as db:
                db.executescript_safe(_MIGRATIONS[target - 1])
                db.execute(f"PRAGMA user_version={target}")

    @contextmanager
    def _transaction(self) -> Iterator[_Tx]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _Tx(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- checkpoints ------------------------------------------------------------------

    def create_checkpoint(self, label: str | None) -> Checkpoint:
        with self._transaction() as db:
            last = db.scalar("SELECT COALESCE(MAX(id), 0) FROM changes")
            created = _now()
            cursor = db.execute(
                "INSERT INTO checkpoints (label, created_at, last_change_id, session) "
                "VALUES (?, ?, ?, ?)",
                (label, created, last, self.session),
            )
        assert cursor.lastrowid is not None
        return Checkpoint(
            id=cursor.lastrowid,
            label=label,
            created_at=created,
            last_change_id=last,
            session=self.session,
        )

    def checkpoint(self, checkpoint_id: int) -> Checkpoint | None:
        row = self._query_one("SELECT * FROM checkpoints WHERE id = ?", (checkpoint_id,))
        return None if row is None else _checkpoint(row)

    def checkpoints(self) -> list[Checkpoint]:
        rows = self._query("SELECT * FROM checkpoints ORDER BY id DESC", ())
        return [_checkpoint(row) for row in rows]

    # -- changes ----------------------------------------------------------------------

    def record_intent(
        self,
        *,
        tool: str,
        classification: str,
        args: Mapping[str, Any],
        snapshot: Any = None,
        snapshot_error: str | None = None,
    ) -> int:
        """Write the intent of a call before it is forwarded; returns the change id."""
        with self._transaction() as db:
            checkpoint = db.execute(
                "SELECT MAX(id) FROM checkpoints WHERE session = ?", (self.session,)
            ).fetchone()[0]
            cursor = db.execute(
                "INSERT INTO changes (checkpoint_id, tool, classification, status, args, "
                "snapshot, snapshot_error, pid, created_at, session) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    checkpoint,
                    tool,
                    classification,
                    Status.PENDING,
                    _dump(dict(args)),
                    _dump(snapshot),
                    snapshot_error,
                    os.getpid(),
                    _now(),
                    self.session,
                ),
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def record_outcome(
        self, change_id: int, *, status: str, result: Any = None, error: str | None = None
    ) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE changes SET status = ?, result = ?, error = ?, completed_at = ? "
                "WHERE id = ?",
                (status, _dump(result), error, _now(), change_id),
            )

    def record_post_state(self, change_id: int, state: Any, error: str | None = None) -> None:
        """The state read right after a verified call, which undo compares against (drift)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE changes SET post_state = ?, post_state_error = ? WHERE id = ?",
                (None if error else _dump(state), error, change_id),
            )

    def recover_abandoned(self) -> int:
        """Mark calls left pending by a process that no longer runs as `unknown`."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, pid FROM changes WHERE status = ?", (Status.PENDING,)
            ).fetchall()
            dead = [row["id"] for row in rows if not pid_alive(row["pid"])]
            for change_id in dead:
                db.execute(
                    "UPDATE changes SET status = ?, error = ? WHERE id = ?",
                    (
                        Status.UNKNOWN,
                        "the proxy stopped before the outcome of this call was recorded",
                        change_id,
                    ),
                )
        return len(dead)

    def change(self, change_id: int) -> Change | None:
        row = self._query_one(f"SELECT {_CHANGE_COLUMNS} FROM changes WHERE id = ?", (change_id,))
        return None if row is None else _change(row)

    def open_changes(self, after_checkpoint: Checkpoint | None = None) -> list[Change]:
        """Changes not yet undone, newest first.

        With a checkpoint: only those made after it, by the session that took it or by this
        one. A process sharing the journal never sees the other's changes there, and a proxy
        restarted after a crash still reaches the changes of the process before it.
        """
        if after_checkpoint is None:
            rows = self._query(
                f"SELECT {_CHANGE_COLUMNS} FROM changes WHERE undone_at IS NULL ORDER BY id DESC",
                (),
            )
        else:
            rows = self._query(
                f"SELECT {_CHANGE_COLUMNS} FROM changes WHERE undone_at IS NULL AND id > ? "
                "AND (session IS ? OR session IS ?) ORDER BY id DESC",
                (after_checkpoint.last_change_id, after_checkpoint.session, self.session),
            )
        return [_change(row) for row in rows]

    def unknown_changes(self) -> list[Change]:
        """Open changes whose outcome was never recorded, oldest first."""
        rows = self._query(
            f"SELECT {_CHANGE_COLUMNS} FROM changes WHERE undone_at IS NULL AND status = ? "
            "ORDER BY id",
            (Status.UNKNOWN,),
        )
        return [_change(row) for row in rows]

    def all_changes(self) -> list[Change]:
        rows = self._query(f"SELECT {_CHANGE_COLUMNS} FROM changes ORDER BY id DESC", ())
        return [_change(row) for row in rows]

    # -- compensations ----------------------------------------------------------------

    def completed_steps(self, change_id: int) -> set[int]:
        return {step for step, last in self.latest_steps(change_id).items() if last.status == "ok"}

    def latest_steps(self, change_id: int) -> dict[int, Compensation]:
        """The newest record of each compensating step of a change, by step index."""
        latest: dict[int, Compensation] = {}
        for record in self.compensations(change_id):
            latest[record.step] = record
        return latest

    def record_step_started(
        self, change_id: int, step: int, tool: str, args: Any, *, after: int | None = None
    ) -> int | None:
        """Record a compensating call before it is made, so a crash leaves a trace.

        `after` is the id of the step's newest record the caller saw (None: no record). The
        claim and the check are one transaction: when another process recorded the step since,
        nothing is written and None is returned, so two processes never both run it.
        """
        with self._transaction() as db:
            newest = db.execute(
                "SELECT MAX(id) FROM compensations WHERE change_id = ? AND step = ?",
                (change_id, step),
            ).fetchone()[0]
            if newest != after:
                return None
            cursor = db.execute(
                "INSERT INTO compensations (change_id, step, tool, args, status, created_at, pid) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (change_id, step, tool, _dump(args), StepStatus.STARTED, _now(), os.getpid()),
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def record_step_outcome(
        self,
        compensation_id: int,
        *,
        ok: bool,
        result: Any = None,
        error: str | None = None,
        undone: tuple[int, str] | None = None,
        in_doubt: bool = False,
    ) -> None:
        """Record a compensating call's outcome; `undone=(change_id, note)` settles the change
        in the same transaction, so a change is never marked undone without its proof.
        `in_doubt` marks a failure after which the call may still have applied."""
        status = StepStatus.OK if ok else StepStatus.UNKNOWN if in_doubt else StepStatus.ERROR
        with self._transaction() as db:
            db.execute(
                "UPDATE compensations SET status = ?, result = ?, error = ? WHERE id = ?",
                (status, _dump(result), error, compensation_id),
            )
            if undone is not None:
                db.mark_undone(*undone)

    def mark_undone(self, change_id: int, note: str) -> None:
        """Settle a change that needed no compensating call now (steps skipped, or call failed)."""
        with self._transaction() as db:
            db.mark_undone(change_id, note)

    def compensations(self, change_id: int) -> list[Compensation]:
        rows = self._query(
            "SELECT id, change_id, step, tool, args, status, error, created_at, pid "
            "FROM compensations WHERE change_id = ? ORDER BY id",
            (change_id,),
        )
        return [
            Compensation(
                id=row["id"],
                change_id=row["change_id"],
                step=row["step"],
                tool=row["tool"],
                args=_load(row["args"]),
                status=row["status"],
                error=row["error"],
                created_at=row["created_at"],
                pid=row["pid"],
            )
            for row in rows
        ]

    # -- helpers ----------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _query_one(self, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, params).fetchone()
            return row


class _Tx:
    """The connection inside one transaction, with the few helpers the writes share."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    def scalar(self, sql: str) -> Any:
        return self._db.execute(sql).fetchone()[0]

    def executescript_safe(self, script: str) -> None:
        # executescript() would COMMIT the open transaction; run statements one by one.
        for statement in script.split(";"):
            if statement.strip():
                self._db.execute(statement)

    def mark_undone(self, change_id: int, note: str) -> None:
        self._db.execute(
            "UPDATE changes SET undone_at = ?, undo_note = ? WHERE id = ? AND undone_at IS NULL",
            (_now(), note, change_id),
        )


def _checkpoint(row: sqlite3.Row) -> Checkpoint:
    return Checkpoint(
        id=row["id"],
        label=row["label"],
        created_at=row["created_at"],
        last_change_id=row["last_change_id"],
        session=row["session"],
    )


def _change(row: sqlite3.Row) -> Change:
    return Change(
        id=row["id"],
        checkpoint_id=row["checkpoint_id"],
        tool=row["tool"],
        classification=row["classification"],
        status=row["status"],
        args=_load(row["args"]),
        snapshot=_load(row["snapshot"]),
        snapshot_error=row["snapshot_error"],
        result=_load(row["result"]),
        error=row["error"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
        undone_at=row["undone_at"],
        undo_note=row["undo_note"],
        session=row["session"],
        post_state=_load(row["post_state"]),
        post_state_error=row["post_state_error"],
        post_state_recorded=row["post_state"] is not None or row["post_state_error"] is not None,
    )
