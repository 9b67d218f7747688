"""What infer concluded, per tool and in all, and the text it adds to the registry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .proof import Attempt, failing_sequence
from .writing import InferError, add_to_state, add_to_tools, comment_lines, entry_lines

__all__ = ["Outcome", "Report"]


@dataclass
class Outcome:
    """What infer concluded for one tool."""

    tool: str
    status: str = "unclassified"  # proven, unclassified, kept (has an entry), reset
    entry: dict[str, Any] | None = None
    attempts: list[Attempt] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0
    final: str = ""  # what the final check saw, for the evidence

    @property
    def best_failure(self) -> Attempt | None:
        """The failed attempt a person learns most from: one with a counterexample, else
        the one that verified most."""
        failed = [a for a in self.attempts if not a.proven]
        if not failed:
            return None
        return max(failed, key=lambda a: (a.outcome == "failed", a.verified, a.examples))

    def evidence(self, seed: int) -> list[str]:
        proven = next((a for a in self.attempts if a.proven), None)
        if proven is None:
            return []
        done = "calls worked" if proven.candidate.kind == "read" else "undos verified"
        lines = [
            f"proven by compensator infer: {proven.examples} examples, {proven.verified} "
            f"{done}, seed {seed} ({proven.candidate.summary})"
        ]
        if self.final:
            lines.append(f"and again with every entry infer wrote: {self.final}")
        for attempt in self.attempts:
            if not attempt.proven:
                headline = failing_sequence(attempt.failure)[:1] or [attempt.outcome]
                lines.append(f"rejected: {attempt.candidate.summary}: {headline[0][:120]}")
        return lines

    def explanation(self) -> list[str]:
        """Comment lines for a tool left unclassified."""
        lines = [f"{self.tool}: unclassified ({self.reason}). Undo refuses its calls."]
        for attempt in self.attempts:
            lines.append(
                f"  tried {attempt.candidate.summary}: {attempt.outcome} after "
                f"{attempt.examples} examples"
            )
        best = self.best_failure
        if best is not None and best.failure:
            lines.append(f"  best candidate's failure ({best.candidate.summary}):")
            lines += [f"    {line}" for line in failing_sequence(best.failure)]
        return lines

    def to_json(self) -> dict[str, Any]:
        best = self.best_failure
        return {
            "status": self.status,
            "entry": self.entry,
            "reason": self.reason,
            "seconds": round(self.seconds, 2),
            "final_check": self.final,
            "attempts": [a.to_json() for a in self.attempts],
            "failing_sequence": failing_sequence(best.failure) if best else [],
        }


@dataclass
class Report:
    config: Path
    seed: int
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    proposed_state: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    warning: str = ""  # what kept the final check from vouching for the entries together
    probes: list[Any] = field(default_factory=list)  # the AutoProbes tried, chosen or not
    auto_state: list[dict[str, Any]] = field(default_factory=list)  # the chosen ones' entries

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        return {t: o.entry for t, o in self.outcomes.items() if o.entry and o.status == "proven"}

    def text(self, original: str, *, today: str) -> str:
        """The person's registry text with what infer found added."""
        if self.proposed_state:
            return _with_state(original, self.proposed_state, path=str(self.config))
        block: list[str] = []
        for tool, outcome in sorted(self.outcomes.items()):
            if outcome.status == "proven" and outcome.entry is not None:
                block += entry_lines(tool, outcome.entry, outcome.evidence(self.seed))
        if block:
            block = [*self._header(today), *block]
        left: list[str] = []
        for tool, outcome in sorted(self.outcomes.items()):
            if outcome.status == "unclassified":
                left += comment_lines(outcome.explanation())
            elif outcome.status == "reset":
                left += comment_lines([f"{tool}: unclassified ({outcome.reason})."])
        if left:
            note = f"-- left unknown by compensator infer on {today} (seed {self.seed}) --"
            block += [*comment_lines([note]), *left]
        if self.auto_state:
            original = add_to_state(original, self.auto_state, path=str(self.config))
        if not block:
            return original
        return add_to_tools(original, block, path=str(self.config))

    def _header(self, today: str) -> list[str]:
        """Over the proven entries only: the unproven ones follow as comments."""
        return comment_lines(
            [
                f"-- added by compensator infer on {today} (seed {self.seed}); every entry "
                "below passed the plugin's checks on the real servers --"
            ]
        )

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        return {
            "config": str(self.config),
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "counts": counts,
            "proposed_state": self.proposed_state,
            "warning": self.warning,
            "probes": [
                {"tool": p.tool, "chosen": p.chosen, "reason": p.reason, "state": p.entries}
                for p in self.probes
            ],
            "tools": {t: o.to_json() for t, o in sorted(self.outcomes.items())},
        }


def _with_state(original: str, probes: list[dict[str, Any]], *, path: str) -> str:
    if re.search(r"^state:", original, re.MULTILINE):
        raise InferError(
            f"{path}: `state:` is empty. Fix: list the read calls that show what the tools "
            "change (docs/registry.md), then run infer again."
        )
    lines = [
        "",
        "# Proposed by compensator infer: read tools that take no arguments. Check that",
        "# together they show everything the other tools change (add `args:`, `select:` or",
        "# `unordered: true` where needed), then run infer again: it proves nothing without.",
        "state:",
        *(f"  - tool: {probe['tool']}" for probe in probes),
    ]
    return original.rstrip("\n") + "\n" + "\n".join(lines) + "\n"
