"""The order of work: reads first, then the tools that create (their round trips need no
pre-state, and they build it for the rest), then the others in passes while new entries give
their round trips something to work on, then reads found by experiment, and last the check of
all proven entries together. Nothing unproven is ever returned as an entry."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from compensator.names import META_TOOLS, SEPARATOR
from compensator.registry import Registry, load_registry
from compensator.wire import sdk

from ..harness import Harness, example_environment
from ..report import Coverage
from ..settings import DEFAULT_EXAMPLES, DEFAULT_STEPS, Settings
from .candidates import (
    Candidate,
    Samples,
    ToolInfo,
    compensable_candidates,
    looks_changing,
    looks_creating,
    looks_read,
    read_candidate,
    reporting_failures,
    reversible_candidates,
    snapshot_tools,
)
from .outcomes import Outcome, Report
from .probes import AutoProbe, rank_probe_tools, try_probe
from .progress import Ticker
from .proof import Prover, failing_sequence
from .quarantine import quarantine_candidates
from .texts import text_candidates
from .writing import InferError

__all__ = ["Inference", "Outcome", "Report"]

Progress = Callable[[str], None]

SHOWN_CALLS = 12  # calls of a failing sequence shown on the terminal (all are in --json)


class Inference:
    """Runs infer for one registry file."""

    def __init__(
        self,
        config: Path,
        settings: Settings,
        *,
        budget: float,
        only: set[str] | None = None,
        progress: Progress = lambda line: None,
        auto_probes: bool = True,
        ticker: Ticker | None = None,
    ) -> None:
        self.config = config
        self.ticker = ticker
        self.auto_probes = auto_probes
        self.settings = settings
        self.budget = budget
        self.only = only
        self.say = progress
        self.report = Report(config=config, seed=settings.seed)
        self.tools: dict[str, ToolInfo] = {}
        self._server: dict[str, str | None] = {}  # tool -> its server
        # The probes' tools, as reads, while each of them is proven: otherwise the proxy
        # journals the others' calls, and every undo to an example's start would skip them.
        self.provisional: dict[str, dict[str, Any]] = {}
        self.reads: dict[str, ToolInfo] = {}  # the reads a snapshot may use
        self.whole: set[str] = set()  # the probes' tools: reads of a server's whole state
        # Every sample read of each snapshot tool so far, for the words it answers nothing
        # with (texts.py): on a later pass the pre-states hold things, and a tool's own
        # samples may no longer show that answer for two keys.
        self.read_answers: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        # The candidates after the one proven, per tool: tried when the proven one fails next
        # to the others (an inverse that also takes away what a later-proven tool made).
        self.untried: dict[str, list[Candidate]] = {}
        # The last check is pytest's at its defaults (fewer, when the proofs ran fewer).
        self.final_settings = replace(
            settings,
            examples=min(settings.examples, DEFAULT_EXAMPLES),
            steps=min(settings.steps, DEFAULT_STEPS),
        )

    def run(self) -> Report:
        began = time.perf_counter()
        folder = Path(tempfile.mkdtemp(prefix="compensator-infer-"))
        try:
            registry = load_registry(self.config, example_environment(folder))
            self.prover = Prover(self.config, folder, self.settings, ticker=self.ticker)
            if not registry.state and not self.auto_probes:
                self._propose_state()
            else:
                self._infer(registry)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.report.seconds = time.perf_counter() - began
        return self.report

    # -- tools ----------------------------------------------------------------------------

    def _offered(self, registry: Registry, harness: Harness) -> None:
        for name, tool in harness.tools.items():
            if name in META_TOOLS:
                continue
            wire = sdk.tool_to_wire(tool)
            notes = wire.get("annotations") or {}
            server = registry.server_for(name)
            prefix = registry.servers[server].exposed_prefix if server else ""
            self._server[name] = server
            self.tools[name] = ToolInfo(
                name=name,
                prefix=f"{prefix}{SEPARATOR}" if prefix else "",
                schema=wire.get("inputSchema") or {"type": "object"},
                read_only=notes.get("readOnlyHint") is True,
                destructive=notes.get("destructiveHint") is True,
            )

    def _probe_candidates(self, server: str | None = None) -> list[str]:
        """Read tools without arguments (of one server): what probes could call."""
        return [
            tool.name
            for tool in self.tools.values()
            if not tool.required
            and not tool.destructive
            and (tool.read_only or looks_read(tool))
            and (server is None or self._server.get(tool.name) == server)
        ]

    def _probes_for(self, server: str | None) -> str:
        found = self._probe_candidates(server)
        return f"its reads without arguments: {', '.join(found)}" if found else "none found"

    def _choose_probes(self, registry: Registry, watched: set[str | None]) -> list[AutoProbe]:
        """For each server that no `state:` probe reads and that has tools to infer, the
        first of its reads without arguments whose result shows its writes (probes.py).
        The chosen ones join the `state:` of every check, and of the file infer writes."""
        chosen: list[AutoProbe] = []
        for server in dict.fromkeys(self._server.values()):
            if server in watched:
                continue
            own = [t for t in self.tools.values() if self._server.get(t.name) == server]
            writes = [
                t.name
                for t in own
                if registry.policy(t.name) is None and not t.read_only and not looks_read(t)
            ]
            reads = [self.tools[n] for n in self._probe_candidates(server)]
            if not writes or not reads:
                continue
            for read in rank_probe_tools(reads):
                self.say(f"{server}: no state: probe reads it; trying {read.name} as one")
                path = self.prover.registry_file({read.name: {"classification": "read"}})
                try:
                    with Harness(path, journal_beside=True) as harness:
                        harness.stop_rewinding()  # no `state:` to rewind by yet
                        harness.offered_tools()
                        found = try_probe(harness, read.name, writes, self.settings.seed)
                except Exception as exc:  # a server that died, a schema no strategy fits...
                    found = AutoProbe(tool=read.name, reason=f"not used: {exc}")
                self.say(f"  {read.name}: {found.reason}")
                self.report.probes.append(found)
                if found.chosen:
                    self.report.auto_state += found.entries
                    self.prover.extra["state"] = list(self.report.auto_state)
                    chosen.append(found)
                    break
        return chosen

    def _propose_state(self) -> None:
        """No `state:`: nothing can be proven. Propose probes for the person to review."""
        with Harness(self.prover.registry_file({}), journal_beside=True) as harness:
            harness.start()
            registry = harness.registry
            self._offered(registry, harness)
        self.report.proposed_state = [{"tool": name} for name in self._probe_candidates()]
        if not self.report.proposed_state:
            raise InferError(
                f"{self.config} has no `state:` section, and no server offers a read tool "
                "without arguments to propose. Fix: add read calls that show what the tools "
                "change (docs/registry.md), then run infer again."
            )
        shown = ", ".join(p["tool"] for p in self.report.proposed_state)
        self.say(f"no state: section, so nothing can be proven; proposed probes: {shown}")

    # -- inference ------------------------------------------------------------------------

    def _infer(self, registry: Registry) -> None:
        with Harness(self.prover.registry_file({}), journal_beside=True) as harness:
            if not registry.state:
                harness.stop_rewinding()  # no probes yet to rewind by: start servers once
            harness.offered_tools()
            self._offered(registry, harness)
        reset = {call.tool for call in registry.reset}
        # The probes' tools are called in every check: unless they are reads, the proxy
        # journals them, and no undo can succeed. They are inferred whatever --tool says.
        probes = {probe.tool for probe in registry.state}
        watched = {registry.server_for(tool) for tool in probes}
        if self.auto_probes:
            for probe in self._choose_probes(registry, watched):
                probes.add(probe.tool)
                watched.add(registry.server_for(probe.tool))
        if not probes:
            self._propose_state()
            return
        self.whole = probes  # reads of everything: snapshots for what no other read takes
        targets: list[str] = []
        for name, tool in sorted(self.tools.items(), key=lambda item: item[0] not in probes):
            policy = registry.policy(name)
            if policy is not None:
                self.report.outcomes[name] = Outcome(name, status="kept", reason="has an entry")
                if not policy.classification.behaviour.journaled:
                    self.reads[name] = tool
            elif self.only is not None and name not in self.only | probes and not tool.read_only:
                continue  # annotated reads are checked anyway: snapshots need proven reads
            elif registry.server_for(name) not in watched:
                self.report.outcomes[name] = Outcome(
                    name,
                    reason="no state: probe reads its server, so nothing its calls do can be "
                    f"seen; add one ({self._probes_for(registry.server_for(name))})",
                )
            elif name in reset:
                self.report.outcomes[name] = Outcome(
                    name,
                    status="reset",
                    reason="the registry's reset: calls it, so it changes state",
                )
            else:
                targets.append(name)
                self.report.outcomes[name] = Outcome(name)
        self.say(
            f"{len(targets)} tools without an entry; seed {self.settings.seed}, "
            f"{self.settings.examples} examples per check, {self.budget:g} s per tool"
        )
        self._first_reads(targets, probes)
        self._writers([t for t in targets if self.report.outcomes[t].status != "proven"])
        self._experiment_reads(targets)
        self._final_check()

    def _entries(self) -> dict[str, dict[str, Any]]:
        return {**self.provisional, **self.report.entries}

    def _try(self, tool: str, candidates: list[Candidate]) -> bool:
        """Prove the candidates in order, within the tool's budget; True once one passes.
        When none did, the counterexample of the best failed candidate is shrunk, for the
        person: the comment of a proven entry names what it rejected by the headline only,
        so shrinking there would cost seconds nobody reads."""
        entries = {t: e for t, e in self._entries().items() if t != tool}
        proven = self._candidates(tool, candidates)
        outcome = self.report.outcomes[tool]
        best = outcome.best_failure
        within = outcome.seconds < self.budget
        wanted = not proven and best is not None and best.outcome == "failed"
        if wanted and best is not None and not best.shrunk and within:
            self.say(f"  {tool}: shrinking the counterexample of {best.candidate.summary}")
            again = self.prover.prove(entries, tool, best.candidate, shrink=True)
            outcome.seconds += again.seconds
            if again.outcome == "failed":
                outcome.attempts[outcome.attempts.index(best)] = replace(
                    best, failure=again.failure, seconds=best.seconds + again.seconds, shrunk=True
                )
                for line in failing_sequence(again.failure)[1:][-SHOWN_CALLS:]:
                    self.say(f"      {line}")
        return proven

    def _candidates(self, tool: str, candidates: list[Candidate]) -> bool:
        outcome = self.report.outcomes[tool]
        for index, candidate in enumerate(candidates, 1):
            if outcome.seconds >= self.budget:
                outcome.reason = f"its time budget of {self.budget:g} s ran out"
                return False
            self.say(f"  {tool}: candidate {index}/{len(candidates)}: {candidate.summary}")
            attempt = self.prover.prove(self._entries(), tool, candidate)
            outcome.attempts.append(attempt)
            outcome.seconds += attempt.seconds
            self.say(
                f"    {attempt.outcome}: {attempt.examples} examples, {attempt.verified} "
                f"{'calls worked' if candidate.kind == 'read' else 'undos verified'}, "
                f"{attempt.seconds:.1f} s"
                + (f": {attempt.failure.splitlines()[0][:160]}" if attempt.failure else "")
            )
            if attempt.proven:
                outcome.status, outcome.entry, outcome.reason = "proven", candidate.entry, ""
                if candidate.text_read:
                    self._read_as_text(candidate.text_read)
                if candidate.kind == "read":
                    self.reads[tool] = self.tools[tool]
                self.untried[tool] = candidates[index:]
                return True
        return False

    def _first_reads(self, targets: list[str], probes: set[str]) -> None:
        """Reads by annotation or name, the state probes' tools first (every later check
        calls them)."""
        self.provisional = {t: {"classification": "read"} for t in targets if t in probes}
        for name in targets:
            tool = self.tools[name]
            probe = name in probes
            if (probe or tool.read_only or looks_read(tool)) and not tool.destructive:
                self._try(name, [read_candidate(tool, probe=probe)])
        self.provisional = {}
        unproven = sorted(
            p
            for p in probes
            if self.report.outcomes.get(p, Outcome(p)).status not in ("proven", "kept")
        )
        if unproven:
            raise InferError(
                f"the state probes' tools {', '.join(unproven)} are not reads (they changed "
                "the state, or failed): every check calls them, so nothing can be proven. "
                "Fix: probe with read tools only."
            )

    def _writers(self, pending: list[str]) -> None:
        """Creators first; tools whose calls could not be exercised (no pre-state to work on
        yet) are tried again after a pass that proved something."""
        pending.sort(key=lambda name: (not looks_creating(self.tools[name]), name))
        while pending:
            proven_before = len(self._entries())
            again = []
            for name in pending:
                if not self._writer(name):
                    again.append(name)
            if len(self._entries()) == proven_before:
                return
            pending = again

    def _writer(self, name: str) -> bool:
        """Sample the tool, then try its candidates; False when it may do better in a later
        pass (nothing it tried had calls that worked)."""
        tool, outcome = self.tools[name], self.report.outcomes[name]
        if outcome.seconds >= self.budget:
            return True
        began = time.perf_counter()
        self.say(f"{name}: sampling calls")
        snapshots = snapshot_tools(tool, self.reads.values(), self.whole)
        try:
            samples = self.prover.sample(self._entries(), name, snapshots)
        except Exception as exc:  # a schema no strategy fits, a probe or reset that failed...
            outcome.reason = f"its sample calls could not run ({type(exc).__name__}: {exc})"
            return True
        finally:
            outcome.seconds += time.perf_counter() - began
        for read, pairs in samples.read_pairs.items():
            self.read_answers.setdefault(read, []).extend(pairs)
            samples.read_pairs[read] = list(self.read_answers[read])
        candidates = reversible_candidates(tool, self.tools, samples)
        candidates += compensable_candidates(
            tool, self.tools, self.reads.values(), samples, self.whole
        )
        # Only reads infer proved: a read of the person's file is parsed as it says, and one
        # without plain_text would turn a snapshot "1.50" into 1.5.
        ours = [
            (read, filling)
            for read, filling in snapshots
            if self.report.outcomes.get(read.name, Outcome(read.name)).status == "proven"
        ]
        candidates += text_candidates(tool, self.tools, ours, samples)
        candidates += quarantine_candidates(tool, self.tools, self.reads.values(), samples)
        candidates = reporting_failures(candidates, samples)
        # A candidate that was never verified (its calls failed) may do better now.
        tried = {a.candidate.summary for a in outcome.attempts if a.outcome != "never verified"}
        candidates = [c for c in candidates if c.summary not in tried]
        if not samples.results:
            common = samples.errors.most_common(1)
            outcome.reason = (
                f"all {samples.calls} sample calls failed"
                + (f" (most often: {common[0][0]})" if common else "")
                + ", on every pre-state the proven tools could build"
            )
            return False
        if not candidates and not outcome.attempts:
            # Maybe its calls only did nothing yet (an empty batch works on an empty state):
            # a later pass, on pre-states that newly proven tools build, may show more.
            outcome.reason = "nothing to try: " + _nothing_to_try(tool, snapshots, samples)
            return False
        if self._try(name, candidates):
            return True
        if not outcome.reason:
            outcome.reason = "no candidate survived its round trips"
        return any(a.outcome == "failed" for a in outcome.attempts)

    def _read_as_text(self, read: str) -> None:
        """`plain_text: true` for a read infer proved, once a candidate that puts back its
        text was proven with it so: the snapshot must be what the server sent ("1.50")."""
        outcome = self.report.outcomes[read]
        if outcome.entry is not None and not outcome.entry.get("plain_text"):
            outcome.entry = {**outcome.entry, "plain_text": True}
            self.say(f"  {read}: answers in text, so plain_text: true")

    def _experiment_reads(self, targets: list[str]) -> None:
        """Tools still unclassified that neither say nor look like they only read: maybe
        they do, if their calls never change the state from varied pre-states."""
        for name in targets:
            tool, outcome = self.tools[name], self.report.outcomes[name]
            if outcome.status == "proven" or tool.destructive:
                continue
            if tool.read_only or looks_read(tool) or looks_changing(tool):
                continue  # tried first already, or named for what it changes
            reason = outcome.reason
            if not self._try(name, [read_candidate(tool, experiment=True)]):
                outcome.reason = reason or "no candidate survived"

    def _final_check(self) -> None:
        """What pytest --compensator-config runs, on all proven entries together. An entry
        whose own check fails is taken out; when only the state machine fails, one entry
        its failing undo involved is taken out; then the check runs again."""
        while self._entries():
            self.say("checking every proven entry together, as pytest --compensator-config does")
            try:
                found = self.prover.check_all(
                    self._entries(), lambda tool: self.say(f"  {tool}"), self.final_settings
                )
            except Exception as exc:  # the servers did not start, a probe failed...
                message = f"the check of all entries together could not run: {exc}"
                raise InferError(message) from exc
            if found.machine and not found.blamed:
                whose = (
                    "on entries the file already had"
                    if found.named
                    else "without naming a tool (a crash, or a result that differed on replay)"
                )
                self.report.warning = (
                    f"the state machine failed {whose}, so the entries infer proved are "
                    f"written as each one passed alone, not checked together:\n{found.machine}"
                )
                self.say(self.report.warning)
                return
            if not found.failed and not found.machine:
                self._record_final(found.coverage)
                return
            taken = found.failed or {found.blamed[0]: f"the state machine failed:\n{found.machine}"}
            for tool, message in taken.items():
                self.say(f"  {tool} failed with the other entries: taken out")
                self._take_out(
                    tool, message, "its entry passed alone but failed next to the others"
                )
                rest = self.untried.pop(tool, [])
                if rest:
                    self.say(f"  {tool}: trying its other candidates, next to the others")
                    self._try(tool, rest)
                for other, entry in list(self.report.entries.items()):
                    if entry.get("snapshot_tool") == tool:  # it must be a proven read
                        self.say(f"  {other} takes its snapshot with {tool}: taken out")
                        self._take_out(other, message, f"its snapshot tool {tool} was taken out")

    def _record_final(self, coverage: Coverage) -> None:
        for outcome in self.report.outcomes.values():
            if outcome.status == "proven" and outcome.entry is not None:
                stats = coverage.stats(outcome.tool)
                outcome.final = (
                    f"{stats.calls} calls, {stats.calls - stats.errors} worked"
                    if outcome.entry["classification"] == "read"
                    else f"{stats.undone} undos, {stats.verified} verified"
                )

    def _take_out(self, tool: str, message: str, reason: str) -> None:
        outcome = self.report.outcomes[tool]
        proven = next(a for a in outcome.attempts if a.proven)
        outcome.attempts[outcome.attempts.index(proven)] = replace(
            proven, outcome="failed", failure=message
        )
        outcome.status, outcome.entry = "unclassified", None
        outcome.reason = reason


def check_output_folder(config: Path, out: Path) -> None:
    if config.parent.resolve() != out.parent.resolve():
        raise InferError(
            f"--out {out}: write it in the folder of {config} ({config.parent}): relative "
            "paths in a registry (a server's command, args, cwd) are taken from its folder"
        )


def _nothing_to_try(
    tool: ToolInfo, snapshots: list[tuple[ToolInfo, dict[str, str]]], samples: Samples
) -> str:
    """Why no candidate could be built for a tool whose sample calls worked."""
    reasons = ["no tool of its server is named as its opposite with arguments to fill"]
    if not snapshots:
        reasons.append("no read tool takes its arguments for a snapshot")
    elif not any(samples.snapshots.get(read.name) for read, _ in snapshots):
        names = ", ".join(read.name for read, _ in snapshots)
        reasons.append(
            f"the reads that could snapshot it ({names}) failed before every sample call "
            "(what it works on did not exist yet), and none of its server's tools removes "
            "what it makes"
        )
    else:
        reasons.append("no write of its server takes back what a snapshot showed")
    return "; ".join(reasons)
