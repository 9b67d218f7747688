"""`compensator undo`: undo to a checkpoint, since a moment, or one change, from a terminal,
with a plan, a question and progress.

The plan is the undo's dry run, read from the journal alone (read-only, no server started).
The undo itself starts the registry's servers, as `check` does, and runs the same `Undoer`
the `undo_to` and `undo_change` meta tools run, reporting each change as it settles.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..durations import parse_duration
from ..errors import CompensatorError
from ..journal import Checkpoint, JournalStore, open_journal
from ..limits import STARTUP_TIMEOUT
from .common import (
    add_agent_argument,
    add_registry_arguments,
    agent_name,
    checkpoint_title,
    compact,
    journal_id,
    journal_path,
    local_time,
    no_such_checkpoint,
    plural,
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

if TYPE_CHECKING:
    from ..proxy import CallOutcome, Progress, Undoer, UndoReport
    from ..registry import Registry

# The proxy, the wire and anyio load the MCP SDK: imported in the functions that undo, so that
# `undo --help` does not.

__all__ = ["UNDO_EPILOG", "Plan", "Target", "add_undo_arguments", "parse_since", "run_undo"]

_KINDS = ("undone", "skipped", "nothing_to_undo")
_PLAN_COLUMNS = (
    Column(header="CHANGE"),
    Column(header="TOOL", overflow="truncate", min_width=16),
    Column(header="PLAN", overflow="wrap", min_width=30),
)
_AGENT_COLUMN = Column(header="AGENT", overflow="truncate", min_width=8)


@dataclass(frozen=True, kw_only=True)
class Target:
    """What to undo: every open change after checkpoint `to`, every one made `since` a moment
    (aware), the one change `change`, or those of the last `turns` turns. Exactly one is set."""

    to: int | None = None
    since: datetime | None = None
    change: int | None = None
    turns: int | None = None
    """The last N turns: every open change after the Nth newest turn checkpoint."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the undo of a target would do, as the meta tools' `dry_run` reports it. `title`
    says what is undone to a person, `empty` what to say when nothing is."""

    journal: str | Path
    title: str
    empty: str
    report: UndoReport
    target: Target
    """What it undoes, `--turns N` resolved to its checkpoint: the undo after the question
    is of the plan shown, whatever turns began meanwhile."""

    @property
    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        """Every change in the plan with its kind, newest first."""
        listed = self.report.to_json()
        pairs = [(kind, entry) for kind in _KINDS for entry in listed[kind]]
        return sorted(pairs, key=lambda pair: int(pair[1]["id"]), reverse=True)


# -- the plan and the undo ----------------------------------------------------------------


async def _no_calls(name: str, arguments: dict[str, Any]) -> CallOutcome:
    from ..proxy.outcome import CallOutcome

    return CallOutcome(ok=False, error="the plan reads no state; drift is checked when undoing")


def _checkpoint(journal: JournalStore, checkpoint_id: int) -> Checkpoint:
    checkpoint = journal.checkpoint(checkpoint_id)
    if checkpoint is None:
        raise CompensatorError(no_such_checkpoint(journal, checkpoint_id))
    return checkpoint


def _resolved(journal: JournalStore, target: Target, agent: str | None) -> Target:
    """`--turns N` as the checkpoint it undoes to: the Nth newest that starts a turn (of
    `agent` when given). CompensatorError when the journal holds fewer."""
    if target.turns is None:
        return target
    turns = [cp for cp in journal.checkpoints(agent) if cp.turn is not None]
    if len(turns) < target.turns:
        held = f"only {plural(len(turns), 'turn')}" if turns else "no turn"
        raise CompensatorError(
            f"--turns {target.turns}: the journal holds {held} (checkpoints taken with a "
            "prompt; `compensator wire --hooks` makes Claude Code take one per prompt). "
            "`compensator log` lists the checkpoints; --to N undoes to one of them"
        )
    return Target(to=turns[target.turns - 1].id)


def _describe(journal: JournalStore, undoer: Undoer, target: Target) -> tuple[str, str]:
    """(title, what to say when there is nothing to undo); CompensatorError for a checkpoint
    or change that is not there to undo."""
    if target.change is not None:
        change = undoer.one_change(target.change)
        return (
            f"change {change.id} {change.tool} ({local_time(change.created_at)}) alone",
            f"Nothing to undo for change {change.id}.",
        )
    if target.since is not None:
        moment = target.since.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        return f"every change since {moment}", f"Nothing to undo since {moment}."
    assert target.to is not None
    checkpoint = _checkpoint(journal, target.to)
    return f"to {checkpoint_title(checkpoint)}", f"Nothing to undo after checkpoint {target.to}."


async def _undo_target(
    undoer: Undoer,
    target: Target,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> UndoReport:
    if target.change is not None:
        return await undoer.undo_change(
            target.change, dry_run=dry_run, force=force, progress=progress
        )
    if target.since is not None:
        return await undoer.undo_since(
            target.since, dry_run=dry_run, force=force, progress=progress
        )
    assert target.to is not None
    return await undoer.undo_to(target.to, dry_run=dry_run, force=force, progress=progress)


async def make_plan(
    registry: Registry,
    path: str | Path,
    target: Target,
    force: bool = False,
    agent: str | None = None,
) -> Plan:
    """`agent`: only that agent's changes; None: every agent's."""
    from ..proxy.undo import Undoer

    journal = open_journal(path, read_only=True)
    try:
        target = _resolved(journal, target, agent)
        undoer = Undoer(journal, registry, _no_calls, agent=agent)
        title, empty = _describe(journal, undoer, target)
        report = await _undo_target(undoer, target, dry_run=True, force=force)
    finally:
        journal.close()
    return Plan(journal=path, title=title, empty=empty, report=report, target=target)


async def undo(
    registry: Registry,
    path: str | Path,
    target: Target,
    startup_timeout: float,
    progress: Progress,
    force: bool = False,
    agent: str | None = None,
) -> UndoReport:
    """Start the servers and undo the target's open changes, newest first (only `agent`'s
    when given, else every agent's)."""
    from ..proxy import Undoer, undo_caller
    from ..wire import DownstreamPool

    journal = open_journal(path, person=True)
    try:
        target = _resolved(journal, target, agent)
        undoer = Undoer(journal, registry, _no_calls, agent=agent)
        _describe(journal, undoer, target)  # still there to undo?
        async with DownstreamPool(
            registry.servers.values(), startup_timeout=startup_timeout
        ) as pool:
            for name, reason in pool.failures.items():
                print(f"compensator undo: server {name!r} did not start: {reason}", file=sys.stderr)
            undoer = Undoer(journal, registry, undo_caller(registry, pool), agent=agent)
            return await _undo_target(undoer, target, progress=progress, force=force)
    finally:
        journal.close()


# -- output -------------------------------------------------------------------------------


def render_plan(plan: Plan, *, width: int, style: Styler, full: bool = False) -> str:
    """The plan as a table; `full`: compensating calls wrapped, never cut."""
    lines = [f"compensator undo: {plan.journal}", plan.title, ""]
    entries = plan.entries
    if not entries:
        lines.append(plan.empty)
        return "\n".join(lines)
    rows = [
        [str(entry["id"]), entry["tool"], _plan_cell(kind, entry, full=full)]
        for kind, entry in entries
    ]
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


def _plan_cell(kind: str, entry: dict[str, Any], *, full: bool = False) -> Cell:
    if kind == "skipped":
        return Cell(text=f"skip: {entry['reason']}", style="yellow")
    if kind == "nothing_to_undo":
        return Cell(text=f"nothing to undo: {entry['reason']}", style="dim")
    calls = entry["calls"]
    if not calls:
        return Cell(text="settle: no compensating call is needed", style="dim")
    text = "\n".join(f"call {call['tool']} {compact(call['args'])}" for call in calls)
    return Cell(text=text, overflow="wrap" if full else "truncate")


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
  compensator undo --config compensators.yaml --since 2h         # the last two hours
  compensator undo --config compensators.yaml --since 2026-12-03T10:00
  compensator undo --config compensators.yaml --change 7         # change 7 alone

The same undo as the `undo_to` meta tool: every change after checkpoint 3 that is not undone
yet is compensated, newest first, by the registry's servers (started here, as `check` starts
them). --since undoes every open change made at or after a moment the same way: a duration
back from now (30s, 15m, 2h, 1d, 1h30m), or a date and time (2026-12-03T10:00, or
"2026-12-03 10:00:00"), read as the local time of this terminal unless it ends in a zone
(Z, +02:00); the journal keeps UTC. --change N undoes one change alone, as the `undo_change`
meta tool does: only when no later open change to the same server could depend on it
(otherwise it is skipped and the reason names them; --force undoes it anyway).

It covers every agent's changes, as `log` lists them (a column says whose each is when there
are several); --agent NAME keeps to one agent's, which is what that agent's own `undo_to(3)`
takes back. Run it while the agent is idle: a proxy on the same journal keeps serving, but
calls it makes during the undo are not held back. Exit 0 when everything planned was undone,
1 when anything was skipped or the checkpoint or change does not exist, 2 when confirmation
was needed but stdin is not a terminal (or an argument is malformed).
"""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`--since`: a duration back from `now` (2h, 1h30m) or a date and time, naive ones in
    local time; an aware datetime. argparse.ArgumentTypeError (a usage error) otherwise."""
    now = now or datetime.now(timezone.utc)
    value = text.strip()
    seconds = parse_duration(value)
    if seconds is not None:
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:
            raise argparse.ArgumentTypeError(f"{text!r} reaches back too far") from None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (30s, 15m, 2h, 1d, 1h30m) nor a date and time "
            "(2026-12-03T10:00, local time unless it ends in Z or +HH:MM)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is this terminal's local time
    if moment > now:
        shown = moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        raise argparse.ArgumentTypeError(
            f"{text!r} ({shown} local time) is in the future; nothing was made since then"
        )
    return moment


_change_id = journal_id("change", " (the CHANGE column)")
_checkpoint_id = journal_id("checkpoint", "")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of turns (1, 2, ...)")
    return value


def add_undo_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(parser, db_help="the journal file (default: as `serve` finds it)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--to", type=_checkpoint_id, metavar="N", help="undo every change after checkpoint N"
    )
    which.add_argument(
        "--since",
        type=parse_since,
        metavar="WHEN",
        help="undo every change made since WHEN: 2h, 30m, 1d, or 2026-12-03T10:00 (local time "
        "unless it ends in Z or +HH:MM)",
    )
    which.add_argument(
        "--turns",
        type=_positive,
        metavar="N",
        help="undo the last N turns in Claude Code: every change after the Nth newest "
        "checkpoint taken with a prompt (`compensator wire --hooks` sets that up)",
    )
    which.add_argument(
        "--change",
        type=_change_id,
        metavar="N",
        help="undo change N alone, if no later change to its server could depend on it",
    )
    parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    parser.add_argument(
        "--full",
        action="store_true",
        help="show each compensating call's arguments whole (wrapped), not cut to the width",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="undo without asking")
    parser.add_argument(
        "--force",
        action="store_true",
        help="also compensate changes skipped for drift, re-run compensating calls left in "
        "doubt by an interrupted undo, and undo a --change that later changes may depend on: "
        "only after you checked them by hand",
    )
    add_agent_argument(parser, "undo only this agent's changes (default: every agent's)")
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start")


def _target(args: argparse.Namespace) -> Target:
    return Target(to=args.to, since=args.since, change=args.change, turns=args.turns)


def run_undo(args: argparse.Namespace) -> int:
    log_to_stderr()
    style = Styler.for_stream(sys.stdout)
    try:
        from ..registry import load_registry, registry_environment  # YAML: when run

        # A dry run only plans: it starts no server, so needs none of their variables.
        environ = registry_environment(starts_servers=not args.dry_run)
        registry = load_registry(args.config, environ=environ)
        path = journal_path(args.db, args.config)
        import anyio

        plan = anyio.run(make_plan, registry, path, _target(args), args.force, args.agent)
    except CompensatorError as exc:
        print(f"compensator undo: {exc}", file=sys.stderr)
        return 1
    print(render_plan(plan, width=terminal_width(), style=style, full=args.full))
    if not plan.entries or args.dry_run:
        if plan.entries:
            print("Dry run: nothing was changed.")
        return 0
    if not args.yes:
        answer = _ask(len(plan.entries))
        if answer is not None:
            return answer
    return _run(args, registry, path, style, plan.target)


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


def _run(
    args: argparse.Namespace, registry: Registry, path: str | Path, style: Styler, target: Target
) -> int:
    print()

    def show(kind: str, entry: dict[str, Any]) -> None:
        print(progress_line(kind, entry, style), flush=True)

    import anyio

    try:
        report = anyio.run(
            undo, registry, path, target, args.startup_timeout, show, args.force, args.agent
        )
    except CompensatorError as exc:
        print(f"compensator undo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compensator undo: interrupted; run it again to finish.", file=sys.stderr)
        return 130
    print(render_summary(report, style))
    return 1 if report.skipped else 0
