"""The SQLite journal's file: created private, its sessions' lock files, and what SQLite's
errors about it mean to a person."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from pathlib import Path

__all__ = ["SessionLocks", "create_private", "person_sentence"]


def create_private(path: Path) -> None:
    """Create the file readable by the owner only; SQLite gives its -wal and -shm the same mode."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


class SessionLocks:
    """Which sessions are alive: each live session holds an exclusive `flock` on a file of its
    own in `<journal>-sessions/`. The operating system drops the lock the moment its process
    ends, however it ends, so unlike a process id it cannot be mistaken for a new process that
    got the same id (containers, where the proxy is often pid 1, or a busy host)."""

    def __init__(self, journal: Path) -> None:
        self.folder = journal.with_name(journal.name + "-sessions")

    def _file(self, session: str) -> Path:
        return self.folder / f"{session}.lock"

    def hold(self, session: str) -> int:
        """Take the lock of a new session; the descriptor to keep open while it lives."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self._file(session), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd

    def release(self, session: str, fd: int) -> None:
        with contextlib.suppress(OSError):
            self._file(session).unlink()
        os.close(fd)

    def alive(self, session: str) -> bool:
        """Whether the session's lock is held. When that cannot be told (a lock file that
        cannot be opened), alive: the safe side, which never re-runs or settles its work."""
        try:
            fd = os.open(self._file(session), os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # held (BlockingIOError), or not to be told
            return True
        finally:
            os.close(fd)
        return False

    def forget(self, session: str) -> None:
        """Remove the lock file of a session found dead."""
        with contextlib.suppress(OSError):
            self._file(session).unlink()


_PERSON_FIXES = (
    # (SQLite's error code, its standard message, what a person can do about it)
    ("SQLITE_FULL", "database or disk is full", "the journal's disk is full; free some space"),
    (
        "SQLITE_READONLY",
        "readonly database",
        "the journal file is read-only; make it writable or pass --db with a writable path",
    ),
    (
        "SQLITE_BUSY",
        "database is locked",
        "the journal stayed locked by another process for too long; find the process holding "
        "it (fuser FILE)",
    ),
    (
        "SQLITE_IOERR",
        "disk I/O error",
        "the journal cannot be written to its disk (full, or failing); free some space",
    ),
    (
        "SQLITE_CORRUPT",
        "disk image is malformed",
        "the journal file is damaged; keep a copy and check it with "
        "`sqlite3 FILE 'PRAGMA integrity_check'`",
    ),
    (
        "SQLITE_CANTOPEN",
        "unable to open database file",
        "the journal file cannot be opened; check the path and its folder",
    ),
)


def person_sentence(exc: sqlite3.Error) -> str:
    """What a person can do about a SQLite error: from its error code where Python gives it
    (3.11 on), else from SQLite's standard message for that code."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    for code, message, fix in _PERSON_FIXES:
        if name.startswith(code) or message in str(exc):
            return fix
    return "SQLite's own words follow"
