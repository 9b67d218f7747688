"""Undo coverage per tool, and failure messages written for a person."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .state import diff_states

__all__ = [
    "Blaming",
    "Coverage",
    "NeverVerified",
    "PromiseBroken",
    "ToolStats",
    "UndoFailure",
    "format_call",
    "format_failure",
]


@dataclass
class ToolStats:
    calls: int = 0  # calls made through the proxy
    errors: int = 0  # calls that failed: isError, or the registry's error_when matched
    failed_calls_seen: int = 0  # changes undo found failed (isError or error_when): no-ops
    undone: int = 0  # changes undo_to reported as undone
    verified: int = 0  # undone, and the observed state afterwards was the expected one
    failures: int = 0  # undo left the state wrong, or skipped the change
    examples: int = 0  # examples of the tool's own round trip
    met: int = 0  # of those, examples where a call of it worked: its precondition held


@dataclass
class Coverage:
    """What the generated tests exercised, per tool, plus the tools they left out."""

    tools: dict[str, ToolStats] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)  # called only to check they change nothing
    reset_seconds: float | None = None
    fresh_state: str | None = None  # how examples got fresh state, for the summary
    examples: int = 0

    def stats(self, tool: str) -> ToolStats:
        return self.tools.setdefault(tool, ToolStats())

    def record_call(self, tool: str, ok: bool) -> None:
        stats = self.stats(tool)
        stats.calls += 1
        stats.errors += int(not ok)

    def record_undo(
        self,
        report: Mapping[str, Any],
        *,
        verified: bool,
        vouches: bool = True,
        once: bool = False,
    ) -> None:
        """`vouches` False: restored, but after calls that changed nothing (not counted);
        `once`: a tool's changes in this undo count as one verified undo at most."""
        counted: set[str] = set()
        for change in report.get("undone", []):
            stats = self.stats(change["tool"])
            stats.undone += 1
            if verified and vouches and not (once and change["tool"] in counted):
                stats.verified += 1
                counted.add(change["tool"])
        for change in report.get("skipped", []):
            self.stats(change["tool"]).failures += 1
        for change in report.get("nothing_to_undo", []):
            self.stats(change["tool"]).failed_calls_seen += 1
        if not verified:
            for change in report.get("undone", []):
                self.stats(change["tool"]).failures += 1

    def merge(self, other: Coverage) -> None:
        for tool, theirs in other.tools.items():
            mine = self.stats(tool)
            for key, value in asdict(theirs).items():
                setattr(mine, key, getattr(mine, key) + value)
        self.left_out.update(other.left_out)
        self.reads |= other.reads
        self.examples += other.examples
        if other.reset_seconds is not None:
            self.reset_seconds = other.reset_seconds
            self.fresh_state = other.fresh_state

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": {tool: asdict(stats) for tool, stats in sorted(self.tools.items())},
            "reads": sorted(self.reads),
            "left_out": dict(sorted(self.left_out.items())),
            "examples": self.examples,
            "reset_seconds_per_example": self.reset_seconds,
            "fresh_state": self.fresh_state,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Coverage:
        made = cls(left_out=dict(data.get("left_out", {})), examples=data.get("examples", 0))
        made.reads = set(data.get("reads", []))
        made.reset_seconds = data.get("reset_seconds_per_example")
        made.fresh_state = data.get("fresh_state")
        for tool, stats in data.get("tools", {}).items():
            made.tools[tool] = ToolStats(**stats)
        return made

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def lines(self) -> list[str]:
        """The terminal summary: one row per tool, then what was left out and why."""
        width = max([len(t) for t in self.tools] + [len("tool")])
        rows = [f"{'tool':<{width}}  calls   failed  undone  verified  failures    met"]
        for tool, s in sorted(self.tools.items()):
            if tool in self.reads:
                # A read has nothing to undo: its calls were checked to change nothing.
                undone = verified = "read"
            else:
                undone, verified = str(s.undone), str(s.verified)
            # Round-trip examples where a call of the tool worked, of all its round trip's.
            met = f"{s.met}/{s.examples}" if s.examples else "-"
            rows.append(
                f"{tool:<{width}}  {s.calls:>5}  {s.errors:>7}  {undone:>6}  "
                f"{verified:>8}  {s.failures:>8}  {met:>5}"
            )
        for tool, why in sorted(self.left_out.items()):
            rows.append(f"left out: {tool} ({why})")
        if self.reset_seconds is not None:
            how = f" ({self.fresh_state})" if self.fresh_state else ""
            rows.append(
                f"fresh state per example: {self.reset_seconds * 1000:.1f} ms (median){how}"
            )
        return rows


class Blaming(AssertionError):
    """A failure that names the tools involved, for `compensator infer` to set aside, with
    the steps that led to it (the Recorder's), for `minimize` to replay."""

    def __init__(
        self, message: str, *, tools: Sequence[str] = (), steps: Sequence[Any] = ()
    ) -> None:
        super().__init__(message)
        self.tools = tuple(tools)
        self.steps = tuple(steps)


class UndoFailure(Blaming):
    """undo_to did not restore the state recorded at its checkpoint."""


class PromiseBroken(Blaming):
    """A call the registry promises changes nothing (a read, a call `mutating_when` calls a
    read, a call `error_when` calls failed, a repeated `idempotent` compensation) changed
    the observed state."""


class NeverVerified(AssertionError):
    """A round trip saw too few undos of its tool restore the state to vouch for it."""


def format_call(tool: str, args: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{key}={json.dumps(value)}" for key, value in args.items())
    return f"{tool}({shown})"


def format_failure(
    *,
    headline: str,
    trace: Sequence[str],
    expected: Any,
    observed: Any,
    report: Mapping[str, Any],
    journal: Iterable[str],
    compared: str = "expected = at the checkpoint, observed = after undo_to",
) -> str:
    """The message a registry author reads: the calls, what undo did, the state diff."""
    parts = [headline, "", "Calls (after shrinking, the shortest failing sequence found):"]
    parts += [f"  {line}" for line in trace]
    for change in report.get("skipped", []):
        parts.append(f"undo skipped change {change['id']} {change['tool']}: {change['reason']}")
    diff = diff_states(expected, observed)
    if diff:
        parts += ["", f"State diff ({compared}):", diff]
    journal_lines = list(journal)
    if journal_lines:
        parts += ["", "Journal entries since the checkpoint:"]
        parts += [f"  {line}" for line in journal_lines]
    return "\n".join(parts)
