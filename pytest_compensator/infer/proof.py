"""Trying candidates on the real servers with the plugin's own machinery: sample calls, round
trips, read checks, and the final check of everything proven, together, as pytest would."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hypothesis
import yaml
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st

from ..checks import (
    build_pre_state,
    required_verified,
    run_read_check,
    run_roundtrip,
    run_state_machine,
)
from ..harness import Harness
from ..plan import Plan
from ..recorder import Recorder
from ..report import Coverage, NeverVerified
from ..settings import Settings
from .candidates import Candidate, Samples, ToolInfo, failed_in_band
from .progress import Ticker

__all__ = ["Attempt", "FinalCheck", "Prover", "failing_sequence"]

SAMPLE_EXAMPLES = 20
"""Fresh pre-states on which sample calls of a tool show what its results look like."""

SAMPLES_ENOUGH = 5
"""Calls that worked (no error, and no `ok: false` inside the result either) in the first
quarter of the sample examples after which the rest is skipped; with fewer, all of them run
(the first quarter again), to show how calls fail and give `test.examples` of the few that
worked. The tool has no
entry yet, so undo cannot give the next example fresh state and every example restarts the
servers (about a second each): 20 examples cost more than a 100-example round trip."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """What one candidate did on the real servers."""

    candidate: Candidate
    outcome: str  # proven, failed (a counterexample), never verified, unreliable, error
    examples: int
    verified: int  # undos that restored the state; for a read, its calls that worked
    calls: int
    seconds: float
    failure: str = ""  # the plugin's message, for a person
    shrunk: bool = False  # the failure was shrunk to the shortest sequence found

    @property
    def proven(self) -> bool:
        return self.outcome == "proven"

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.summary,
            "kind": self.candidate.kind,
            "outcome": self.outcome,
            "examples": self.examples,
            "verified": self.verified,
            "calls": self.calls,
            "seconds": round(self.seconds, 2),
            "failing_sequence": failing_sequence(self.failure),
            "shrunk": self.shrunk,
            "failure": self.failure,
        }


def failing_sequence(message: str) -> list[str]:
    """The headline and the calls of a plugin failure message (the shrunk sequence)."""
    lines = message.splitlines()
    if not lines:
        return []
    calls: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("Calls ("):
            inside = True
        elif inside and line.startswith("  "):
            calls.append(line.strip())
        elif inside:
            break
    return [lines[0], *calls] if calls else [lines[0]]


class Prover:
    """Writes candidate registries (the person's file, included, plus the entries under
    test) and runs the plugin's checks on them with one seed and one set of settings."""

    def __init__(
        self, config: Path, folder: Path, settings: Settings, *, ticker: Ticker | None = None
    ) -> None:
        self.config = config
        self.ticker = ticker
        self.folder = folder
        self.settings = settings
        self._count = itertools.count(1)
        self.extra = _kept_sections(config)

    def registry_file(self, entries: Mapping[str, Mapping[str, Any]]) -> Path:
        """A registry that includes the person's and adds `entries`."""
        path = self.folder / f"candidate-{next(self._count)}.yaml"
        document = {"include": str(self.config), **self.extra, "tools": dict(entries)}
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def _settings(self, path: Path) -> Settings:
        return replace(self.settings, config=path)

    def _recount(self, label: str, total: int) -> None:
        if self.ticker is not None:
            self.ticker.begin(label, total)

    @contextlib.contextmanager
    def _counted(self, path: Path, label: str, total: int) -> Iterator[Harness]:
        """A harness whose examples the ticker counts, as `label`, out of `total`."""
        ticker = self.ticker
        self._recount(label, total)
        try:
            tick = ticker.tick if ticker is not None else None
            with Harness(path, journal_beside=True, on_example=tick) as harness:
                yield harness
        finally:
            if ticker is not None:
                ticker.end()

    def sample(
        self,
        entries: Mapping[str, Mapping[str, Any]],
        tool: str,
        snapshots: list[tuple[ToolInfo, dict[str, str]]],
    ) -> Samples:
        """Call `tool` (unregistered, so journaled as unknown) on fresh pre-states built
        from `entries`, reading each possible snapshot just before: what its calls take and
        give back, for filling the arguments of candidates."""
        samples = Samples()
        path = self.registry_file(entries)
        with self._counted(path, f"{tool}: sample calls", SAMPLE_EXAMPLES) as harness:
            harness.offered_tools()
            plan = Plan.of(harness, also=[tool])

            def sample(data: st.DataObject) -> None:
                with harness.example() as driver:
                    recorder = Recorder(driver, Coverage(), harness.registry, plan)
                    try:
                        build_pre_state(data, recorder)
                    except AssertionError:
                        return  # a registered read broke its promise: the checks will say so
                    args = recorder.draw_args(data, tool)
                    before = {}
                    for read, filling in snapshots:
                        read_args = {r: args.get(o) for r, o in filling.items()}
                        reply = driver.call(read.name, read_args)
                        if not reply.is_error:
                            before[read.name] = reply.value
                            pairs = samples.read_pairs.setdefault(read.name, [])
                            pairs.append((read_args, reply.value))
                    reply = driver.call(tool, args)
                    samples.calls += 1
                    if reply.is_error:
                        samples.failed += 1
                        samples.errors[" ".join(reply.text.split())[:160]] += 1
                        return
                    samples.args.append(args)
                    samples.results.append(reply.value)
                    for name, value in before.items():
                        samples.snapshots.setdefault(name, []).append(value)
                    for read, filling in snapshots:
                        read_args = {r: args.get(o) for r, o in filling.items()}
                        after = driver.call(read.name, read_args)
                        if not after.is_error:
                            samples.after.setdefault(read.name, []).append(after.value)
                            pairs = samples.read_pairs.setdefault(read.name, [])
                            pairs.append((read_args, after.value))

            # A short run first; when too few of its calls worked, the whole run again from
            # the start (a Hypothesis run cannot stop early by itself), so that the samples,
            # and what is made of them (`error_when`, `test.examples`), are those of the
            # seed's 20 examples.
            _sampling(sample, self.settings.seed, SAMPLE_EXAMPLES // 4)()
            if sum(not failed_in_band(r) for r in samples.results) < SAMPLES_ENOUGH:
                samples = Samples()
                self._recount(f"{tool}: sample calls, all of them", SAMPLE_EXAMPLES)
                _sampling(sample, self.settings.seed, SAMPLE_EXAMPLES)()
        return samples

    def prove(
        self,
        entries: Mapping[str, Mapping[str, Any]],
        tool: str,
        candidate: Candidate,
        *,
        shrink: bool = False,
    ) -> Attempt:
        """Run the candidate's round trip (a read's check) with the entries proven so far.
        Without `shrink`, the first counterexample ends it: shrinking one replays it hundreds
        of times, worth it only for the failure a person will read."""
        entries = {**entries, tool: candidate.entry}
        if candidate.text_read in entries:  # the read it puts back, as sent
            entries[candidate.text_read] = {**entries[candidate.text_read], "plain_text": True}
        path = self.registry_file(entries)
        coverage = Coverage()
        began = time.perf_counter()
        outcome, failure = "proven", ""
        try:
            label = f"{tool}: {candidate.kind}" + (", shrinking its failure" if shrink else "")
            counted = self._counted(path, label, self.settings.examples)
            with _shrinking(shrink), counted as harness:
                harness.offered_tools()
                settings = replace(self._settings(path), reread_snapshots=candidate.reread)
                if candidate.kind == "read":
                    need = candidate.needs_calls
                    need = required_verified(settings) if need < 0 else need
                    run_read_check(harness, tool, coverage, settings, need=need)
                else:
                    run_roundtrip(harness, tool, coverage, settings)
        except NeverVerified as exc:
            outcome, failure = "never verified", str(exc)
        except hypothesis.errors.Flaky as exc:
            # Evidence, not a crash: the same calls from the same state gave different results.
            outcome, failure = "unreliable", _unreliable(exc)
        except AssertionError as exc:
            outcome, failure = "failed", str(exc)
        except Exception as exc:  # a server that died, a template the proxy refused...
            outcome, failure = "error", f"{type(exc).__name__}: {exc}"
        stats = coverage.stats(tool)
        kept = stats.calls - stats.errors if candidate.kind == "read" else stats.verified
        return Attempt(
            candidate=candidate,
            outcome=outcome,
            examples=coverage.examples,
            verified=kept,
            calls=stats.calls,
            seconds=time.perf_counter() - began,
            failure=failure,
        )

    def check_all(
        self,
        entries: Mapping[str, Mapping[str, Any]],
        on_tool: Callable[[str], None],
        settings: Settings,
    ) -> FinalCheck:
        """Everything pytest --compensator-config would run on the registry with `entries`
        (with `settings`): each undoable tool's round trip, each read's check, then the state
        machine (once those passed). Every undo counts there, as in the plugin's own run
        (`changes_only` is for the candidates' proofs, at four times as many examples)."""
        path = self.registry_file(entries)
        settings = replace(settings, config=path, changes_only=False)
        result = FinalCheck(coverage=Coverage())
        with self._counted(path, "all entries together", settings.examples) as harness:
            harness.offered_tools()
            for tool, entry in entries.items():
                on_tool(tool)
                self._recount(f"{tool}, with every entry", settings.examples)
                try:
                    if entry["classification"] == "read":
                        run_read_check(harness, tool, result.coverage, settings, need=0)
                    else:
                        run_roundtrip(harness, tool, result.coverage, settings)
                except Exception as exc:
                    result.failed[tool] = str(exc)
            if result.failed or all(e["classification"] == "read" for e in entries.values()):
                return result
            on_tool("the state machine")
            self._recount("the state machine", settings.examples)
            try:
                run_state_machine(harness, result.coverage, settings)
            except Exception as exc:
                result.machine = str(exc)
                result.named = bool(getattr(exc, "tools", ()))
                result.blamed = [t for t in getattr(exc, "tools", ()) if t in entries]
        return result


@dataclass
class FinalCheck:
    """What the check of all entries together found."""

    coverage: Coverage
    failed: dict[str, str] = field(default_factory=dict)  # round trips and reads that failed
    machine: str = ""  # the state machine's failure
    blamed: list[str] = field(default_factory=list)  # the entries its failing undo involved
    named: bool = False  # the machine's failure named tools (maybe none of the entries)


def _unreliable(exc: Exception) -> str:
    """A person's reading of Hypothesis' Flaky: why the candidate is rejected."""
    inner = getattr(exc, "exceptions", ())
    cause = f" The first failure: {str(inner[0]).splitlines()[0][:200]}" if inner else ""
    return (
        "rejected as unreliable: the same calls from the same starting state gave a "
        "different outcome when replayed (a failure that came and went), so neither a pass "
        "nor a failure of this "
        "candidate can be trusted. The server may answer differently to the same calls "
        "(timestamps, random ids), or keep state outside what the probes read." + cause
    )


def _sampling(body: Callable[[st.DataObject], None], seed: int, examples: int) -> Any:
    """`body` as a Hypothesis test of `examples` generated examples, no shrinking."""
    return hypothesis.seed(seed)(
        hypothesis.settings(
            max_examples=examples,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(given(data=st.data())(body))
    )


@contextlib.contextmanager
def _shrinking(shrink: bool) -> Iterator[None]:
    """Hypothesis' current profile, without its shrink phase unless `shrink`."""
    current = hypothesis.settings.default
    assert current is not None
    if shrink or Phase.shrink not in current.phases:
        yield
        return
    hypothesis.settings.register_profile(
        _NO_SHRINK, parent=current, phases=[p for p in current.phases if p != Phase.shrink]
    )
    hypothesis.settings.load_profile(_NO_SHRINK)
    try:
        yield
    finally:
        hypothesis.settings.register_profile(_BEFORE, parent=current)
        hypothesis.settings.load_profile(_BEFORE)


_NO_SHRINK = "compensator-infer-no-shrink"
_BEFORE = "compensator-infer-before"


def _kept_sections(config: Path) -> dict[str, Any]:
    """The person's `defaults:`, which an `include:` does not carry over."""
    raw = yaml.safe_load(config.read_text()) or {}
    return {"defaults": raw["defaults"]} if isinstance(raw, dict) and raw.get("defaults") else {}
