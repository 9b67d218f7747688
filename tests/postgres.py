"""The PostgreSQL server the test suite shares (pytest-postgresql), imported by conftest.

`postgresql_proc`: one server per session, and under xdist one per worker, on a free port,
started with the machine's pg_ctl (on PATH or under /usr/lib/postgresql/*/bin) in a temporary
folder; as root through tests/pg_ctl_unprivileged, since PostgreSQL refuses to run as root.
`postgresql`: a psycopg connection to a fresh database for each test.
`postgres_url`: that database's libpq URL, for a server or proxy started by the test.
Without pg_ctl these fixtures skip the test and say why (`.ci/run` installs PostgreSQL)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_postgresql import factories

WRAPPER = Path(__file__).resolve().parent / "pg_ctl_unprivileged"


def find_pg_ctl() -> str | None:
    """The machine's pg_ctl: on PATH, else the newest under /usr/lib/postgresql/*/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return found
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: [int(part) for part in p.parts[-3].split(".") if part.isdigit()],
    )
    return str(versions[-1]) if versions else None


PG_CTL = find_pg_ctl()


def server_fixture() -> Any:
    """A session fixture that starts a PostgreSQL server of its own (one per xdist worker),
    or skips the test, saying why, on a machine without pg_ctl."""
    if PG_CTL is None:

        @pytest.fixture(scope="session")
        def missing() -> Any:
            pytest.skip("PostgreSQL is not installed (no pg_ctl on PATH or in /usr/lib/postgresql)")

        return missing
    # port=None: a free port per server; pytest-postgresql keeps xdist workers' ports apart.
    return factories.postgresql_proc(
        executable=str(WRAPPER) if os.geteuid() == 0 else PG_CTL, port=None
    )


def url_of(connection: Any) -> str:
    """libpq URL of a psycopg connection's database (user without password, trust auth)."""
    info = connection.info
    return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"


postgresql_proc = server_fixture()
postgresql = factories.postgresql("postgresql_proc")


@pytest.fixture
def postgres_url(postgresql: Any, postgresql_proc: Any) -> Iterator[str]:
    """libpq URL of the test's fresh database. After the test, the worker's server must still
    run: one that died would otherwise show only at the session's end, on whatever test ran
    last, with nothing saying which test it died in or why."""
    yield url_of(postgresql)
    problem = server_gone(postgresql_proc)
    if problem:
        pytest.fail(problem, pytrace=False)


def server_gone(server: Any) -> str | None:
    """Why the pytest-postgresql `server` no longer runs (with its log's last lines), or None
    while its postmaster lives."""
    pid_file = Path(server.datadir) / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, IndexError, ValueError) as error:
        gone = f"the worker's PostgreSQL server left no postmaster.pid ({error})"
        return gone + _log_tail(server)
    if not running(pid):
        return f"the worker's PostgreSQL server (pid {pid}) died in this test" + _log_tail(server)
    return None


def running(pid: int) -> bool:
    """Whether `pid` runs. A zombie counts as dead: the postmaster's parent (pg_ctl) is gone,
    and a container's init may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: a signal 0 says whether it exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it runs as another user (tests/pg_ctl_unprivileged)
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _log_tail(server: Any, lines: int = 20) -> str:
    try:
        text = Path(server.logfile).read_text(errors="replace")
    except OSError as error:
        return f"; its log cannot be read: {error}"
    return "; the end of its log:\n" + "\n".join(text.splitlines()[-lines:])
