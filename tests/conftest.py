"""Fixtures shared by the end-to-end tests: registries written to tmp_path, proxies launched."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_compensator.client import ProxyClient, launch_proxy

from .faults import tally
from .journals import address, open_journal  # noqa: F401  (shared fixtures)
from .postgres import (  # noqa: F401  (shared fixtures)
    fresh_database,
    postgres_url,
    postgresql,
    postgresql_proc,
)

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SERVERS = Path(__file__).resolve().parent / "servers"
REGISTRIES = EXAMPLES / "registries"
# Read at import: pytester points HOME at a temporary folder while its tests run.
_DEFAULT_SERVERS = Path.home() / ".cache" / "mcp-compensator" / "servers"


def third_party_servers(*needed: str, node: bool = False) -> Path:
    """Where `bash scripts/install-servers` put the third-party servers. Skips when the test
    needs node and this machine has none; fails, saying what to run, when a server is missing."""
    if node and shutil.which("node") is None:
        pytest.skip("node is not installed; the npm-based MCP servers cannot run here")
    root = Path(os.environ.get("COMPENSATOR_SERVERS") or _DEFAULT_SERVERS)
    missing = [part for part in needed if not (root / part).exists()]
    if missing:
        pytest.fail(f"{root / missing[0]} is missing: run `bash scripts/install-servers`")
    return root


def pytest_configure(config: pytest.Config) -> None:
    # Shown in the warnings summary, not raised as the other warnings are (pyproject's
    # filterwarnings, which the plugin runs of the tests read too, cannot name this module).
    config.addinivalue_line("filterwarnings", "always::tests.postgres.PostgresRestarted")


@dataclass(frozen=True)
class Running:
    """A process as /proc shows it (Linux)."""

    pid: int
    state: str  # the letter of /proc/PID/stat: R, S, Z (ended, not reaped)...
    group: int  # its process group
    command: str  # its arguments, joined by spaces


def processes() -> list[Running]:
    """Every process this user can see now; one that ends while read is left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        command = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        found.append(Running(int(entry.name), fields[0], int(fields[2]), command))
    return found


def use_third_party_servers(monkeypatch: pytest.MonkeyPatch, *needed: str) -> Path:
    """`third_party_servers(*needed)`, exported as COMPENSATOR_SERVERS for the registries."""
    root = third_party_servers(*needed)
    monkeypatch.setenv("COMPENSATOR_SERVERS", str(root))
    return root


@pytest.fixture(autouse=True)
def _thorough_subprocesses_unmeasured(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `thorough` tests' subprocesses (pytest runs of the plugin, proxies, servers) run
    without coverage, which made them 1.64 times slower; without them the suite's coverage
    stays at 91-92%. Coverage's subprocess patch follows this variable."""
    if request.node.get_closest_marker("thorough"):
        monkeypatch.delenv("COVERAGE_PROCESS_CONFIG", raising=False)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def write_registry(tmp_path: Path) -> Callable[[str], Path]:
    """Write a registry; @PYTHON@, @TASKS_SERVER@, @FIDELITY_SERVER@ and @TMP@ are filled in."""
    counter = iter(range(1000))

    def write(text: str) -> Path:
        path = tmp_path / f"registry{next(counter)}.yaml"
        filled = textwrap.dedent(text)
        for marker, value in {
            "@PYTHON@": sys.executable,
            "@TASKS_SERVER@": EXAMPLES / "tasks_server.py",
            "@FIDELITY_SERVER@": SERVERS / "fidelity_server.py",
            "@TMP@": tmp_path,
        }.items():
            filled = filled.replace(marker, str(value))
        path.write_text(filled)
        return path

    return write


Launcher = Callable[..., AbstractAsyncContextManager[ProxyClient]]


@pytest.fixture
def proxy(tmp_path: Path) -> Launcher:
    """`async with proxy(config, db=..., env=...) as client:` starts a real proxy subprocess;
    `session_options` go to the client's ClientSession (e.g. a `message_handler`)."""

    @asynccontextmanager
    async def launch(
        config: Path,
        *,
        db: Path | str | None = None,
        env: dict[str, str] | None = None,
        session_options: dict[str, Any] | None = None,
    ) -> AsyncIterator[ProxyClient]:
        log_path = tmp_path / "proxy-stderr.log"
        with log_path.open("a") as log:
            async with launch_proxy(
                config,
                db or tmp_path / "journal.db",
                env=env,
                stderr=log,
                session_options=session_options,
            ) as client:
                yield client

    return launch


@pytest.fixture
def proxy_log(tmp_path: Path) -> Callable[[], str]:
    return lambda: (tmp_path / "proxy-stderr.log").read_text()


@pytest.fixture
def tasks_env(tmp_path: Path) -> dict[str, str]:
    return {"COMPENSATOR_WORKDIR": str(tmp_path)}


@pytest.fixture
def tasks_config() -> Path:
    return EXAMPLES / "compensators.yaml"


def by_id(items: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {item["id"]: item for item in items}


@dataclass
class Faults:
    """What one test injected, tallied for scripts/fault-report even when the test fails."""

    kind: str = ""
    injected: int = 0
    survived: int = 0
    twice: int = 0


@pytest.fixture
def faults() -> Iterator[Faults]:
    """A test sets `kind` and counts what it injected and survived; scripts/fault-report
    sums them (tests/faults.py)."""
    seen = Faults()
    yield seen
    if seen.kind:
        tally(seen.kind, injected=seen.injected, survived=seen.survived, twice=seen.twice)
