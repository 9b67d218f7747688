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
def postgres_url(postgresql: Any) -> str:
    """libpq URL of the test's fresh database."""
    return url_of(postgresql)
