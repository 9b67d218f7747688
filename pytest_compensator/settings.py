"""The plugin's settings: each one a command-line option and an ini key with one help text,
resolved once into a frozen object."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "DEFAULT_EXAMPLES",
    "DEFAULT_MIN_VERIFIED",
    "DEFAULT_STEPS",
    "Settings",
    "add_options",
    "resolve",
]

DEFAULT_EXAMPLES = 25
DEFAULT_STEPS = 20
DEFAULT_MIN_VERIFIED = 5

_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("config", "PATH", "registry YAML whose undo guarantees to test (generates tests from it)"),
    ("examples", "N", f"Hypothesis examples per generated test (default {DEFAULT_EXAMPLES})"),
    ("steps", "N", f"steps per state-machine example (default {DEFAULT_STEPS})"),
    (
        "seed",
        "N",
        "seed for the generated tests (default: --hypothesis-seed when that is a whole number, "
        "else random; shown in the header)",
    ),
    (
        "min-verified",
        "N",
        "undos of a tool that its round trip must see restore the state, or it fails as "
        f"never verified (default {DEFAULT_MIN_VERIFIED})",
    ),
    ("report", "PATH", "also write the undo coverage summary as JSON to PATH"),
)


@dataclass(frozen=True, kw_only=True)
class Settings:
    config: Path | None
    examples: int
    steps: int
    seed: int
    seed_source: str  # where the seed came from, for the header
    min_verified: int
    report: Path | None
    reread_snapshots: bool = False
    """Also read a tool's snapshot (one with arguments) again after each undo of a round
    trip: it must read as before the call. `compensator infer` sets it for candidates that
    put back text, whose state probes may not show it (server-redis' list shows keys only)."""
    changes_only: bool = False
    """Count an undo of a round trip as verified only when the call changed what the state
    probes (or the snapshot read again) show. `compensator infer` sets it: on pre-states that
    hold nothing yet, a delete of nothing changes nothing, and any undo of it would pass
    (redis-mcp-server's hdel was 'proven' undone by a call that did nothing)."""


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("compensator", "undo guarantees of a compensator registry")
    for name, metavar, help_text in _OPTIONS:
        key = name.replace("-", "_")
        group.addoption(
            f"--compensator-{name}", dest=f"compensator_{key}", metavar=metavar, help=help_text
        )
        parser.addini(f"compensator_{key}", help_text, default=None)


def _raw(config: pytest.Config, name: str) -> tuple[Any, Path]:
    """The option's value (relative to the invocation folder), else the ini value (relative
    to the ini file's folder)."""
    key = name.replace("-", "_")
    value = config.getoption(f"compensator_{key}")
    if value is not None:
        return value, config.invocation_params.dir
    base = config.inipath.parent if config.inipath else config.rootpath
    return config.getini(f"compensator_{key}"), base


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


def _seed(config: pytest.Config) -> tuple[int, str]:
    """--compensator-seed (or its ini key); else Hypothesis' own --hypothesis-seed, so that
    either option reproduces a run; else the controller's seed under xdist; else random."""
    seed = _int(config, "seed", -1, 0)
    if seed >= 0:
        return seed, "--compensator-seed"
    hypothesis_seed = _hypothesis_seed(config)
    if hypothesis_seed is not None:
        return hypothesis_seed, "--hypothesis-seed"
    inherited = getattr(config, "workerinput", {}).get("compensator_seed")
    if inherited is not None:
        return int(inherited), "the xdist controller"
    return random.randrange(2**32), "random"


def _hypothesis_seed(config: pytest.Config) -> int | None:
    value = config.getoption("--hypothesis-seed", default=None)  # None without Hypothesis'
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"--hypothesis-seed {value!r}: the compensator plugin seeds its generated tests "
            "with a whole number; pass one, or use --compensator-seed"
        ) from None


def resolve(config: pytest.Config) -> Settings:
    seed, source = _seed(config)
    return Settings(
        config=_path(config, "config"),
        examples=_int(config, "examples", DEFAULT_EXAMPLES, 1),
        steps=_int(config, "steps", DEFAULT_STEPS, 1),
        seed=seed,
        seed_source=source,
        min_verified=_int(config, "min-verified", DEFAULT_MIN_VERIFIED, 0),
        report=_path(config, "report"),
    )
