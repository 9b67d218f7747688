"""The repository's own pytest set-up, beside tox.ini and pyproject.toml.

From the root, `pytest --compensator-config examples/compensators.yaml` (or one of
examples/registries/*.yaml) checks that registry alone, as its author runs it: without this
file pytest would also collect the 1,000 tests of `testpaths`. And the shipped registries find
the third-party servers where `bash scripts/install-servers` put them, without an export of
COMPENSATOR_SERVERS, when that folder exists (the test suite looks there too).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
SERVERS = Path.home() / ".cache" / "mcp-compensator" / "servers"

if "COMPENSATOR_SERVERS" not in os.environ and SERVERS.is_dir():
    os.environ["COMPENSATOR_SERVERS"] = str(SERVERS)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the suite out when a registry was asked for and no test path was."""
    registry_only = (
        config.getoption("compensator_config", None) is not None
        and config.args_source is pytest.Config.ArgsSource.TESTPATHS
    )
    if registry_only and collection_path.is_relative_to(ROOT / "tests"):
        return True
    return None
