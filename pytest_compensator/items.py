"""The test items a registry generates: load, one round trip per undoable tool, a machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compensator.errors import CompensatorError
from compensator.registry import Registry, load_registry

from .checks import run_roundtrip, run_state_machine
from .client import ToolCallFailed
from .harness import Harness, example_environment
from .plan import exercised_tools, left_out
from .report import Coverage, NeverVerified, PromiseBroken, UndoFailure
from .settings import Settings

__all__ = ["RegistryFile"]

_PERSON_FACING = (UndoFailure, PromiseBroken, NeverVerified, CompensatorError, ToolCallFailed)


class RegistryFile(pytest.File):
    """A registry YAML, collected into generated tests; one harness serves them all."""

    def __init__(self, *args: Any, settings: Settings, coverage: Coverage, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.coverage = coverage
        self._harness: Harness | None = None
        self.roundtrip_failures: set[str] = set()

    def collect(self) -> Iterator[pytest.Item]:
        registry = self._load()
        yield LoadItem.from_parent(self, name="load")
        for tool in exercised_tools(registry):
            yield RoundtripItem.from_parent(self, name=f"roundtrip[{tool}]", tool=tool)
        yield MachineItem.from_parent(self, name="state_machine")

    def _load(self) -> Registry:
        return load_registry(self.path, example_environment(Path(self.config.rootpath)))

    def harness(self) -> Harness:
        if self._harness is None:
            self._harness = Harness(self.path)
        return self._harness

    def teardown(self) -> None:
        if self._harness is not None:
            if self._harness.tools:
                self.coverage.left_out.update(left_out(self._harness))
            reset = self._harness.timings.per_example()
            if reset is not None:
                self.coverage.reset_seconds = reset
                self.coverage.fresh_state = self._harness.timings.how()
            self._harness.close()
            self._harness = None


class _RegistryItem(pytest.Item):
    parent: RegistryFile

    def runtest(self) -> None:
        harness = self.parent.harness()
        try:
            self.check(harness)
        except BaseException:
            driver = harness.last_driver
            if driver is not None:
                self.add_report_section("call", "proxy and server stderr", driver.log_tail())
            raise

    def check(self, harness: Harness) -> None:
        raise NotImplementedError

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        errors = _leaves(excinfo.value)
        if all(isinstance(error, _PERSON_FACING) for error in errors):
            return "\n\n".join(
                "\n".join([str(error), *getattr(error, "__notes__", [])]) for error in errors
            )
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name}::{self.name}"


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds (Hypothesis raises one for several distinct
    failures), else the exception itself."""
    inner = getattr(error, "exceptions", None)
    if not isinstance(inner, tuple):
        return [error]
    return [leaf for exc in inner for leaf in _leaves(exc)]


class LoadItem(_RegistryItem):
    """The registry loads, every server starts, and every tool it names exists."""

    def check(self, harness: Harness) -> None:
        harness.start()
        failures = {
            name: why for name, why in left_out(harness).items() if why == "no server offers it"
        }
        named = {p.tool for p in harness.registry.state} | {
            step.tool for policy in harness.registry.tools.values() for step in policy.inverse
        }
        named |= {p.snapshot_tool for p in harness.registry.tools.values() if p.snapshot_tool}
        named |= {call.tool for call in harness.registry.reset}
        failures.update({name: "no server offers it" for name in named - set(harness.tools)})
        if failures:
            listed = "\n".join(f"  {name}: {why}" for name, why in sorted(failures.items()))
            offered = ", ".join(sorted(harness.tools)) or "none (did the servers start?)"
            raise ToolCallFailed(
                f"{self.path}: tools named in the registry are missing:\n{listed}\n"
                f"The servers offer: {offered}"
            )


class RoundtripItem(_RegistryItem):
    """Random pre-state, checkpoint, one call of the tool, undo: the state must be as before."""

    def __init__(self, *args: Any, tool: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool = tool

    def check(self, harness: Harness) -> None:
        if self.tool not in harness.offered_tools():
            raise ToolCallFailed(f"no server offers {self.tool}; see the load test")
        try:
            run_roundtrip(harness, self.tool, self.parent.coverage, self.parent.settings)
        except BaseException:
            self.parent.roundtrip_failures.add(self.tool)
            raise


class MachineItem(_RegistryItem):
    """Random sequences of calls, checkpoints and undos over every undoable tool."""

    def runtest(self) -> None:
        if self.parent.roundtrip_failures:
            # Shrinking a long random sequence costs minutes and would only repeat what the
            # round trip already showed in a few calls.
            failed = ", ".join(sorted(self.parent.roundtrip_failures))
            pytest.skip(f"round trips failed for {failed}: fix those first")
        super().runtest()

    def check(self, harness: Harness) -> None:
        harness.offered_tools()
        run_state_machine(harness, self.parent.coverage, self.parent.settings)
