"""`compensator infer`: propose an undo policy for every tool a registry has no entry for,
prove each on the real servers with the pytest plugin's round trips, and write only those
that passed. The work is done by `pytest_compensator.infer` (the `pytest` extra)."""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_compensator.infer import Report

from ..clients import replace_atomically
from ..errors import CompensatorError
from .common import plural
from .terminal import log_to_stderr

__all__ = ["INFER_EPILOG", "add_infer_arguments", "infer_registry", "run_infer"]

DEFAULT_BUDGET = 300.0
DEFAULT_EXAMPLES = 100
"""Examples per proof: four times the plugin's default, because a candidate that slips
through is written as proven (the final check of all entries together runs at pytest's)."""
# The plugin's defaults, repeated so that `--help` works without the pytest extra installed
# (tests/test_infer.py compares them with pytest_compensator.settings).
DEFAULT_STEPS = 20
DEFAULT_MIN_VERIFIED = 5

INFER_EPILOG = """\
examples:
  compensator infer --config compensators.yaml          # adds what it proves to the file
  compensator infer --config compensators.yaml --out proven.yaml --json
  compensator infer --config compensators.yaml --tool tasks__complete_task --budget 60

Infer starts the registry's servers many times on fresh state (as the pytest plugin does),
so point it only at servers whose state may be created and thrown away: the plugin's
COMPENSATOR_WORKDIR, a test database. Entries the file has are kept as they are; the
proven ones are added under `tools:` with their evidence, and the tools left unclassified
as comments saying what was tried. docs/infer.md has the details.
"""


def add_infer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="the registry YAML file")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="REGISTRY",
        help="write the result here (in the folder of --config) instead of into --config",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    parser.add_argument(
        "--tool",
        action="append",
        metavar="NAME",
        help="infer only this tool (repeat for more); the probes' tools and tools annotated "
        "readOnlyHint are checked too, as snapshots need proven reads",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help="time one tool may take over its sample calls and candidates (a check under way "
        f"finishes; default {DEFAULT_BUDGET:g})",
    )
    parser.add_argument(
        "--seed", type=int, help="seed for every check (default random, shown in the output)"
    )
    parser.add_argument(
        "--examples",
        type=int,
        default=DEFAULT_EXAMPLES,
        help=f"Hypothesis examples per candidate's check (default {DEFAULT_EXAMPLES}; the last "
        "check, of all entries together, runs at most pytest's default 25)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"steps per state-machine example, as --compensator-steps (default {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--no-auto-probes",
        action="store_true",
        help="do not pick state probes for servers that no `state:` probe reads (without "
        "them nothing of such a server is proven; with none at all, probes are proposed)",
    )
    parser.add_argument(
        "--min-verified",
        type=int,
        default=DEFAULT_MIN_VERIFIED,
        help="undos a round trip must see restore the state, as --compensator-min-verified "
        f"(at least 1; default {DEFAULT_MIN_VERIFIED})",
    )


def run_infer(args: argparse.Namespace) -> int:
    """Exit 0 once the result is written (tools left unclassified included), 1 when nothing
    could be inferred (a bad registry, no `state:`: then the proposed probes are written)."""
    log_to_stderr()
    try:
        report = infer_registry(
            args.config,
            out=args.out,
            only=set(args.tool) if args.tool else None,
            budget=args.budget,
            seed=args.seed,
            examples=args.examples,
            steps=args.steps,
            min_verified=args.min_verified,
            auto_probes=not args.no_auto_probes,
        )
    except CompensatorError as exc:
        print(f"compensator infer: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compensator infer: interrupted; nothing was written", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(summary_text(report))
    return 1 if report.proposed_state else 0


def infer_registry(
    config: Path,
    *,
    out: Path | None = None,
    only: set[str] | None = None,
    budget: float = DEFAULT_BUDGET,
    seed: int | None = None,
    examples: int | None = None,
    steps: int | None = None,
    min_verified: int | None = None,
    auto_probes: bool = True,
) -> Report:
    """Run infer on `config` and write the result to `out` (default: `config` itself)."""
    try:
        from pytest_compensator.infer import (
            Inference,
            Ticker,
            add_to_tools,
            check_output_folder,
            verify_result,
        )
        from pytest_compensator.settings import Settings
    except ImportError as exc:
        raise CompensatorError(
            f"infer runs the pytest plugin's checks, which need the `pytest` extra ({exc}). "
            "Fix: pip install 'mcp-compensator[pytest]'"
        ) from None
    config = config.absolute()
    if not config.is_file():
        raise CompensatorError(f"--config {config}: no such file")
    target = (out or config).absolute()
    check_output_folder(config, target)
    settings = Settings(
        config=config,
        examples=_at_least(examples if examples is not None else DEFAULT_EXAMPLES, 1, "examples"),
        steps=_at_least(steps if steps is not None else DEFAULT_STEPS, 1, "steps"),
        seed=seed if seed is not None else random.randrange(2**32),
        seed_source="compensator infer",
        # At least one: a candidate is written only once undo was seen to work.
        min_verified=_at_least(
            min_verified if min_verified is not None else DEFAULT_MIN_VERIFIED, 1, "min-verified"
        ),
        report=None,
        changes_only=True,
    )
    original = _read(config)
    # Can the result be written at all? Found out now, not after the run.
    probe = {"compensator-infer-check": {"classification": "read"}}
    trial = add_to_tools(
        original, ["  compensator-infer-check: {classification: read}"], path=str(config)
    )
    verify_result(original, trial, probe, path=str(config), bug=False)
    ticker = Ticker()

    def say(line: str) -> None:
        ticker.clear()  # a line of its own, not after the bar of the check under way
        _say(line)

    report = Inference(
        config,
        settings,
        budget=budget,
        only=only,
        progress=say,
        auto_probes=auto_probes,
        ticker=ticker,
    ).run()
    text = report.text(original, today=datetime.date.today().isoformat())
    verify_result(original, text, report.entries, path=str(config))
    if _read(config) != original:
        kept = target.with_name(f"{target.stem}.infer{target.suffix}")
        replace_atomically(kept, text.encode("utf-8"))
        raise CompensatorError(
            f"{config} changed while infer ran; the result is in {kept}, for you to merge"
        )
    replace_atomically(target, text.encode("utf-8"))
    _say(f"wrote {target}")
    return report


def _read(path: Path) -> str:
    """The file's text with its line endings as they are (`read_text` would turn CRLF into
    LF, and the file would be written back converted)."""
    return path.read_bytes().decode("utf-8")


def _at_least(value: int, minimum: int, name: str) -> int:
    if value < minimum:
        raise CompensatorError(f"--{name} must be at least {minimum}, got {value}")
    return value


def _say(line: str) -> None:
    print(f"infer: {line}", file=sys.stderr, flush=True)


def summary_text(report: Report) -> str:
    """What a person reads last: the probes chosen, the tools as the file now has them, and
    `N of M proven`, one line per tool with its reason."""
    lines = [f"compensator infer: {report.config} in {report.seconds:.0f} s, seed {report.seed}"]
    if report.proposed_state:
        lines.append(
            "no `state:` section: proposed probes were added to the file; review them and run "
            "infer again"
        )
        return "\n".join(lines)
    for probe in report.probes:
        if probe.chosen:
            lines.append(f"state probe chosen: {probe.tool}: {probe.reason}")
    kept = sorted(t for t, o in report.outcomes.items() if o.status == "kept")
    if kept:
        lines.append(f"{plural(len(kept), 'tool')} kept as the file had them: {', '.join(kept)}")
    if report.warning:
        lines.append(f"warning: {report.warning}")
    tried = {t: o for t, o in sorted(report.outcomes.items()) if o.status != "kept"}
    proven = [t for t, o in tried.items() if o.status == "proven"]
    lines.append(f"{len(proven)} of {len(tried)} proven")
    for tool, outcome in tried.items():
        if outcome.status == "proven" and outcome.entry is not None:
            attempt = next(a for a in outcome.attempts if a.proven)
            lines.append(f"  {tool}  proven: {attempt.candidate.summary}")
        else:
            lines.append(f"  {tool}  not proven: {outcome.reason or outcome.status}")
    return "\n".join(lines)
