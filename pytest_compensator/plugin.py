"""The pytest plugin: options, hooks and fixtures. Heavy imports wait until they are needed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .settings import Settings, add_options, resolve

if TYPE_CHECKING:
    from .harness import Driver
    from .report import Coverage

_SETTINGS = pytest.StashKey[Settings]()
_COVERAGE = pytest.StashKey["Coverage"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[_SETTINGS] = resolve(config)
    if settings.config is not None:
        _check_registry(settings.config)


def _check_registry(path: Path) -> None:
    """Stop before collection, with the registry's own located message, when it is wrong."""
    if not path.is_file():
        raise pytest.UsageError(f"--compensator-config: no such file: {path}")
    from compensator.errors import CompensatorError
    from compensator.registry import load_registry

    from .harness import example_environment

    try:
        load_registry(path, example_environment(path.parent))
    except CompensatorError as exc:
        raise pytest.UsageError(str(exc)) from None


def _settings(config: pytest.Config) -> Settings:
    return config.stash[_SETTINGS]


def _coverage(config: pytest.Config) -> Coverage:
    if _COVERAGE not in config.stash:
        from .report import Coverage

        config.stash[_COVERAGE] = Coverage()
    return config.stash[_COVERAGE]


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = _settings(config)
    if s.config is None:
        return []
    return [
        f"compensator: registry {s.config}, seed {s.seed} (from {s.seed_source}), "
        f"examples {s.examples}, steps {s.steps}, min verified {s.min_verified} "
        f"(reproduce with --compensator-seed {s.seed})"
    ]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """The registry, when the paths pytest collects reach it (or name it, as in
    `pytest registry.yaml::load`)."""
    s = _settings(parent.config)
    if s.config is None or file_path.resolve() != s.config:
        return None
    return _registry_file(parent, file_path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """The registry lies outside the paths pytest collected (the usual case: the tests of a
    registry kept anywhere): collect it under the session, its tests first. tryfirst: before
    -k and -m deselect from the list."""
    s = _settings(session.config)
    if s.config is None:
        return
    from .items import RegistryFile

    if any(isinstance(item.parent, RegistryFile) for item in items):
        return
    items[:0] = session.genitems(_registry_file(session, s.config))


def _registry_file(parent: pytest.Collector | pytest.Session, path: Path) -> pytest.Collector:
    from .items import RegistryFile

    settings, coverage = _settings(parent.config), _coverage(parent.config)
    node: pytest.Collector = RegistryFile.from_parent(
        parent, path=path, settings=settings, coverage=coverage
    )
    return node


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker uses the controller's seed."""
    node.workerinput["compensator_seed"] = _settings(node.config).seed


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if _COVERAGE in config.stash and hasattr(config, "workeroutput"):
        config.workeroutput["compensator_coverage"] = json.dumps(_coverage(config).to_json())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist: fold each worker's undo coverage into the controller's."""
    data = getattr(node, "workeroutput", {}).get("compensator_coverage")
    if data:
        from .report import Coverage

        _coverage(node.config).merge(Coverage.from_json(json.loads(data)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _COVERAGE not in config.stash or hasattr(config, "workerinput"):
        return
    coverage = _coverage(config)
    terminalreporter.section("compensator undo coverage")
    for line in coverage.lines():
        terminalreporter.write_line(line)
    report = _settings(config).report
    if report is not None:
        coverage.write(report)
        terminalreporter.write_line(f"written to {report}")


# -- fixtures for hand-written tests -----------------------------------------------------


@pytest.fixture
def compensator_proxy(tmp_path: Path) -> Callable[..., Any]:
    """Factory for async tests: `async with compensator_proxy(config, db=None, env=None) as
    client:` starts a real proxy; `client` has call, checkpoint, undo_to, list_changes and
    observe_state. Each call gets a new empty COMPENSATOR_WORKDIR under tmp_path."""
    from .fixtures import proxy_factory

    return proxy_factory(tmp_path)


@pytest.fixture
def compensator_client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Driver]:
    """A started proxy for the registry given by --compensator-config (or the ini key),
    with a synchronous client: call, checkpoint, undo_to, list_changes, observe_state."""
    config = _settings(request.config).config
    if config is None:
        pytest.fail("compensator_client needs --compensator-config or compensator_config in ini")
    from .harness import Harness

    with Harness(config, base_dir=tmp_path / "compensator") as harness:
        yield harness.start()
