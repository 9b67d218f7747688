"""The plugin's settings: each one a command-line option and an ini key with one help text,
resolved once into a frozen object."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["DEFAULT_EXAMPLES", "DEFAULT_STEPS", "Settings", "add_options", "resolve"]

DEFAULT_EXAMPLES = 25
DEFAULT_STEPS = 20

_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("config", "PATH", "registry YAML whose undo guarantees to test (generates tests from it)"),
    ("examples", "N", f"Hypothesis examples per generated test (default {DEFAULT_EXAMPLES})"),
    ("steps", "N", f"steps per state-machine example (default {DEFAULT_STEPS})"),
    ("seed", "N", "seed for the generated tests (default: random, shown in the header)"),
    ("report", "PATH", "also write the undo coverage summary as JSON to PATH"),
)


@dataclass(frozen=True, kw_only=True)
class Settings:
    config: Path | None
    examples: int
    steps: int
    seed: int
    report: Path | None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("compensator", "undo guarantees of a compensator registry")
    for name, metavar, help_text in _OPTIONS:
        group.addoption(
            f"--compensator-{name}", dest=f"compensator_{name}", metavar=metavar, help=help_text
        )
        parser.addini(f"compensator_{name}", help_text, default=None)


def _raw(config: pytest.Config, name: str) -> tuple[Any, Path]:
    """The option's value (relative to the invocation folder), else the ini value (relative
    to the ini file's folder)."""
    value = config.getoption(f"compensator_{name}")
    if value is not None:
        return value, config.invocation_params.dir
    base = config.inipath.parent if config.inipath else config.rootpath
    return config.getini(f"compensator_{name}"), base


def _path(config: pytest.Config, name: str) -> Path | None:
    value, base = _raw(config, name)
    return None if value in (None, "") else (base / str(value)).resolve()


def _int(config: pytest.Config, name: str, default: int, minimum: int) -> int:
    value, _ = _raw(config, name)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        message = f"--compensator-{name} takes a whole number, got {value!r}"
        raise pytest.UsageError(message) from None
    if number < minimum:
        raise pytest.UsageError(f"--compensator-{name} must be at least {minimum}, got {number}")
    return number


def resolve(config: pytest.Config) -> Settings:
    seed = _int(config, "seed", -1, 0)
    inherited = getattr(config, "workerinput", {}).get("compensator_seed")
    if seed < 0:
        seed = int(inherited) if inherited is not None else random.randrange(2**32)
    return Settings(
        config=_path(config, "config"),
        examples=_int(config, "examples", DEFAULT_EXAMPLES, 1),
        steps=_int(config, "steps", DEFAULT_STEPS, 1),
        seed=seed,
        report=_path(config, "report"),
    )
