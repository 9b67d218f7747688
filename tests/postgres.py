"""The PostgreSQL server the test suite shares (pytest-postgresql), imported by conftest.

`postgresql_proc`: one server per session, and under xdist one per worker, on a free port,
started with the machine's pg_ctl (on PATH or under /usr/lib/postgresql/*/bin) in a temporary
folder; as root through tests/pg_ctl_unprivileged, since PostgreSQL refuses to run as root.
`postgresql`: a psycopg connection to a fresh database for each test.
`postgres_url`: that database's libpq URL, for a server or proxy started by the test.
Without pg_ctl these fixtures skip the test and say why (`.ci/run` installs PostgreSQL).
A server found dead before or after a test is started again, with a PostgresRestarted warning
in the summary that names the test and holds the end of the server's log."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

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
fresh_database = factories.postgresql("postgresql_proc")


class PostgresRestarted(UserWarning):
    """The worker's PostgreSQL server had died, and was started again."""


@pytest.fixture
def postgresql(request: pytest.FixtureRequest, postgresql_proc: Any) -> Iterator[Any]:
    """A psycopg connection to a fresh database of the worker's server. A server found dead
    (before the test, or after it) is started again, with a PostgresRestarted warning that
    names the test and holds the end of its log: CI saw the server die once, SIGKILLed with
    nothing saying in which test, and every later test of the worker fail with it."""
    revive_if_gone(postgresql_proc, f"before {request.node.nodeid}")
    yield request.getfixturevalue("fresh_database")
    revive_if_gone(postgresql_proc, f"in {request.node.nodeid}")


@pytest.fixture
def postgres_url(postgresql: Any) -> str:
    """libpq URL of the test's fresh database."""
    return url_of(postgresql)


def revive_if_gone(server: Any, when: str) -> None:
    problem = server_gone(server)
    if problem is None:
        return
    warnings.warn(PostgresRestarted(f"{when}: {problem}"), stacklevel=1)
    # Its postmaster is gone, or a zombie nobody reaps, which PostgreSQL's own check of the
    # file (a signal 0) would take for a server still running.
    (Path(server.datadir) / "postmaster.pid").unlink(missing_ok=True)
    if not (Path(server.datadir) / "PG_VERSION").exists():  # its folder went too
        server._directory_initialised = False
        server.init_directory()
    # A SIGKILLed postmaster's backends hold its shared memory until they notice: PostgreSQL
    # refuses to start until then.
    deadline = time.monotonic() + 60
    while True:
        started = subprocess.run(
            server.command, shell=True, capture_output=True, text=True, timeout=120
        )
        if started.returncode == 0:
            break
        assert time.monotonic() < deadline, f"it does not start again: {started.stderr}"
        time.sleep(0.5)
    server.wait_for_postgres()
    janitor = DatabaseJanitor(
        user=server.user,
        host=server.host,
        port=server.port,
        dbname=server.template_dbname,
        maintenance_dbname=server.maintenance_dbname,
        as_template=True,
        password=server.password,
    )
    with contextlib.suppress(psycopg.errors.DuplicateDatabase):
        janitor.init()  # the database each test's copies, gone with a new folder
    # The dying test's own database, which its teardown could not drop.
    address = f"postgresql://{server.user}@{server.host}:{server.port}/postgres"
    with psycopg.connect(address, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(server.dbname))
        )


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
        return f"the worker's PostgreSQL server (pid {pid}) had died" + _log_tail(server)
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
