"""`compensator undo`: undo to a checkpoint from a terminal, with a plan, a question and progress.

The plan is `undo_to`'s dry run, read from the journal alone (read-only, no server started).
The undo itself starts the registry's servers, as `check` does, and runs the same `Undoer`
the `undo_to` meta tool runs, reporting each change as it settles.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..errors import CompensatorError
from ..journal import Checkpoint, JournalStore, open_journal
from ..proxy import CallOutcome, Progress, Undoer, UndoReport, undo_caller
from ..registry import Registry, load_registry, registry_environment
from ..wire import STARTUP_TIMEOUT, DownstreamPool
from .common import (
    add_agent_argument,
    add_registry_arguments,
    agent_name,
    checkpoint_title,
    compact,
    journal_path,
    no_such_checkpoint,
)
from .terminal import (
    Cell,
    Column,
    Styler,
    add_startup_timeout,
    confirm,
    log_to_stderr,
    render_table,
    terminal_width,
)

__all__ = ["UNDO_EPILOG", "Plan", "add_undo_arguments", "run_undo"]

_KINDS = ("undone", "skipped", "nothing_to_undo")
_PLAN_COLUMNS = (
    Column(header="CHANGE"),
    Column(header="TOOL", overflow="truncate", min_width=16),
    Column(header="PLAN", overflow="wrap", min_width=30),
)
_AGENT_COLUMN = Column(header="AGENT", overflow="truncate", min_width=8)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What an undo to `checkpoint` would do, as `undo_to` with `dry_run` reports it."""

    journal: Path
    checkpoint: Checkpoint
    report: UndoReport

    @property
    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        """Every change in the plan with its kind, newest first."""
        listed = self.report.to_json()
        pairs = [(kind, entry) for kind in _KINDS for entry in listed[kind]]
        return sorted(pairs, key=lambda pair: int(pair[1]["id"]), reverse=True)


# -- the plan and the undo ----------------------------------------------------------------


async def _no_calls(name: str, arguments: dict[str, Any]) -> CallOutcome:
    return CallOutcome(ok=False, error="the plan reads no state; drift is checked when undoing")


def _checkpoint(journal: JournalStore, checkpoint_id: int) -> Checkpoint:
    checkpoint = journal.checkpoint(checkpoint_id)
    if checkpoint is None:
        raise CompensatorError(no_such_checkpoint(journal, checkpoint_id))
    return checkpoint


async def make_plan(
    registry: Registry,
    path: Path,
    checkpoint_id: int,
    force: bool = False,
    agent: str | None = None,
) -> Plan:
    """`agent`: only that agent's changes; None: every agent's."""
    journal = open_journal(path, read_only=True)
    try:
        checkpoint = _checkpoint(journal, checkpoint_id)
        undoer = Undoer(journal, registry, _no_calls, agent=agent)
        report = await undoer.undo_to(checkpoint.id, dry_run=True, force=force)
    finally:
        journal.close()
    return Plan(journal=path, checkpoint=checkpoint, report=report)


async def undo(
    registry: Registry,
    path: Path,
    checkpoint_id: int,
    startup_timeout: float,
    progress: Progress,
    force: bool = False,
    agent: str | None = None,
) -> UndoReport:
    """Start the servers and undo every open change after the checkpoint, newest first (only
    `agent`'s when given, else every agent's)."""
    journal = open_journal(path, person=True)
    try:
        checkpoint = _checkpoint(journal, checkpoint_id)
        async with DownstreamPool(
            registry.servers.values(), startup_timeout=startup_timeout
        ) as pool:
            for name, reason in pool.failures.items():
                print(f"compensator undo: server {name!r} did not start: {reason}", file=sys.stderr)
            undoer = Undoer(journal, registry, undo_caller(registry, pool), agent=agent)
            return await undoer.undo_to(checkpoint.id, progress=progress, force=force)
    finally:
        journal.close()


# -- output -------------------------------------------------------------------------------


def render_plan(plan: Plan, *, width: int, style: Styler) -> str:
    lines = [f"compensator undo: {plan.journal}", f"to {checkpoint_title(plan.checkpoint)}", ""]
    entries = plan.entries
    if not entries:
        lines.append(f"Nothing to undo after checkpoint {plan.checkpoint.id}.")
        return "\n".join(lines)
    rows = [[str(entry["id"]), entry["tool"], _plan_cell(kind, entry)] for kind, entry in entries]
    columns: tuple[Column, ...] = _PLAN_COLUMNS
    if len({entry["agent"] for _, entry in entries}) > 1:
        # Several agents' changes: say whose each one is.
        columns = (_PLAN_COLUMNS[0], _AGENT_COLUMN, *_PLAN_COLUMNS[1:])
        rows = [
            [row[0], agent_name(entry["agent"]), *row[1:]]
            for row, (_, entry) in zip(rows, entries, strict=True)
        ]
    lines.extend(render_table(columns, rows, width=width, style=style))
    report = plan.report
    lines.extend(["", "Plan: " + _counts(report, future=True)])
    return "\n".join(lines)


def _plan_cell(kind: str, entry: dict[str, Any]) -> Cell:
    if kind == "skipped":
        return Cell(text=f"skip: {entry['reason']}", style="yellow")
    if kind == "nothing_to_undo":
        return Cell(text=f"nothing to undo: {entry['reason']}", style="dim")
    calls = entry["calls"]
    if not calls:
        return Cell(text="settle: no compensating call is needed", style="dim")
    text = "\n".join(f"call {call['tool']} {compact(call['args'])}" for call in calls)
    return Cell(text=text, overflow="truncate")


def _counts(report: UndoReport, *, future: bool) -> str:
    undone = "to undo" if future else "undone"
    skipped = "to skip" if future else "skipped"
    return (
        f"{len(report.undone)} {undone}, {len(report.skipped)} {skipped}, "
        f"{len(report.nothing_to_undo)} with nothing to undo."
    )


def progress_line(kind: str, entry: dict[str, Any], style: Styler) -> str:
    change = f"change {entry['id']} {entry['tool']}"
    if kind == "undone":
        return f"{style('undone', 'green')} {change}"
    if kind == "skipped":
        return f"{style('skipped', 'yellow')} {change}: {entry['reason']}"
    return f"{style('nothing to undo', 'dim')} for {change}: {entry['reason']}"


def render_summary(report: UndoReport, style: Styler) -> str:
    lines = ["", "Done: " + _counts(report, future=False)]
    if report.skipped:
        lines.append(style("Skipped, still open (see `compensator log`):", "yellow"))
        lines.extend(
            f"  change {entry['id']} {entry['tool']}: {entry['reason']}" for entry in report.skipped
        )
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------

UNDO_EPILOG = """\
examples:
  compensator undo --config compensators.yaml --to 3 --dry-run   # the plan only
  compensator undo --config compensators.yaml --to 3             # plan, then asks y/N
  compensator undo --config compensators.yaml --to 3 --yes       # no question (scripts)

The same undo as the `undo_to` meta tool: every change after checkpoint 3 that is not undone
yet is compensated, newest first, by the registry's servers (started here, as `check` starts
them). It covers every agent's changes, as `log` lists them (a column says whose each is
when there are several); --agent NAME keeps to one agent's, which is what that agent's own
`undo_to(3)` takes back. Run it while the agent is idle: a proxy on the same journal keeps
serving, but calls it makes during the undo are not held back. Exit 0 when everything planned
was undone, 1 when anything was skipped or the checkpoint does not exist, 2 when confirmation
was needed but stdin is not a terminal.
"""


def add_undo_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(parser, db_help="the journal file (default: as `serve` finds it)")
    parser.add_argument(
        "--to", required=True, type=int, metavar="N", help="undo every change after checkpoint N"
    )
    parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="undo without asking")
    parser.add_argument(
        "--force",
        action="store_true",
        help="also compensate changes skipped for drift, and re-run compensating calls left in "
        "doubt by an interrupted undo: only after you checked them by hand",
    )
    add_agent_argument(parser, "undo only this agent's changes (default: every agent's)")
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start")


def run_undo(args: argparse.Namespace) -> int:
    log_to_stderr()
    style = Styler.for_stream(sys.stdout)
    try:
        registry = load_registry(args.config, environ=registry_environment())
        path = journal_path(args.db, args.config)
        plan = anyio.run(make_plan, registry, path, args.to, args.force, args.agent)
    except CompensatorError as exc:
        print(f"compensator undo: {exc}", file=sys.stderr)
        return 1
    print(render_plan(plan, width=terminal_width(), style=style))
    if not plan.entries or args.dry_run:
        if plan.entries:
            print("Dry run: nothing was changed.")
        return 0
    if not args.yes:
        answer = _ask(len(plan.entries))
        if answer is not None:
            return answer
    return _run(args, registry, path, style)


def _ask(count: int) -> int | None:
    """None to go ahead, else the exit code."""
    if not sys.stdin.isatty():
        print(
            "compensator undo: stdin is not a terminal, so nobody can confirm. "
            "Pass --yes to undo without asking (or --dry-run to only see the plan).",
            file=sys.stderr,
        )
        return 2
    noun = "change" if count == 1 else "changes"
    if confirm(f"\nUndo these {count} {noun}?"):
        return None
    print("Nothing was undone.")
    return 1


def _run(args: argparse.Namespace, registry: Registry, path: Path, style: Styler) -> int:
    print()

    def show(kind: str, entry: dict[str, Any]) -> None:
        print(progress_line(kind, entry, style), flush=True)

    try:
        report = anyio.run(
            undo, registry, path, args.to, args.startup_timeout, show, args.force, args.agent
        )
    except CompensatorError as exc:
        print(f"compensator undo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compensator undo: interrupted; run it again to finish.", file=sys.stderr)
        return 130
    print(render_summary(report, style))
    return 1 if report.skipped else 0
