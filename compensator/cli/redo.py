"""`compensator redo`: replay what an undo took back, from a terminal, as the `redo` meta tool
does (compensator/proxy/redo.py says when a change is replayed and when it is refused)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CompensatorError
from ..limits import STARTUP_TIMEOUT
from .common import add_agent_argument, add_registry_arguments, journal_id, journal_path
from .terminal import Styler, add_startup_timeout, confirm, log_to_stderr

if TYPE_CHECKING:
    from ..proxy import RedoReport
    from ..registry import Registry

__all__ = ["REDO_EPILOG", "add_redo_arguments", "run_redo"]

REDO_EPILOG = """\
examples:
  compensator redo --config compensators.yaml --to 3 --dry-run   # the plan only
  compensator redo --config compensators.yaml --to 3             # plan, then asks y/N
  compensator redo --config compensators.yaml --change 7 --yes

Replays, oldest first, the changes the latest undo after checkpoint N took back (or change N
alone) with the arguments they were journaled with, through the registry's servers (started
here); every agent's, as `undo` covers them, or --agent NAME's. Each replay is a new change in
the journal, of the agent whose change it replays, so undo takes it back again. A change is
refused, with the reason, when replaying it cannot give the same effect: its arguments were
journaled redacted; a later change to its server is still in effect; its snapshot read sees
something else than before its first run (drift since the undo); its arguments hold an id the
server handed its first run and not its replay. Every change after a refused one is refused
too, since it may depend on it. Exit 0 when everything
planned was replayed as its first run went, 1 when anything was refused, failed or differed,
2 when confirmation was needed but stdin is not a terminal.
"""


def add_redo_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(parser, db_help="the journal file (default: as `serve` finds it)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--to",
        type=journal_id("checkpoint", ""),
        metavar="N",
        help="redo what an undo took back after checkpoint N",
    )
    which.add_argument(
        "--change",
        type=journal_id("change", " (with --all)"),
        metavar="N",
        help="redo change N alone, an undone one",
    )
    parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="redo without asking")
    add_agent_argument(parser, "redo only this agent's changes (default: every agent's)")
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start")


def run_redo(args: argparse.Namespace) -> int:
    log_to_stderr()
    try:
        from ..registry import load_registry, registry_environment  # YAML: when run

        registry = load_registry(args.config, environ=registry_environment(starts_servers=True))
        path = journal_path(args.db, args.config)
        import anyio

        return anyio.run(_redo, registry, path, args)
    except CompensatorError as exc:
        print(f"compensator redo: {exc}", file=sys.stderr)
        return 1


async def _redo(registry: Registry, path: str | Path, args: Any) -> int:
    import anyio

    from ..journal import open_journal
    from ..proxy import Proxy
    from ..wire import DownstreamPool

    style = Styler.for_stream(sys.stdout)
    target = {"checkpoint_id": args.to, "change_id": args.change}
    # A person's session: each replay is journaled for the agent whose change it replays.
    journal = open_journal(path, person=True)
    try:
        servers = registry.servers.values()
        async with DownstreamPool(servers, startup_timeout=args.startup_timeout) as pool:
            for name, reason in pool.failures.items():
                print(f"compensator redo: server {name!r} did not start: {reason}", file=sys.stderr)
            proxy = Proxy(registry, journal, pool, redo_agent=args.agent)
            plan = await proxy.redo(**target, dry_run=True)
            print(render(plan, style, planned=True))
            if not plan.redone or args.dry_run:
                return 0 if plan.complete else 1
            if not args.yes:
                if not sys.stdin.isatty():
                    print(
                        "compensator redo: stdin is not a terminal, so nobody can confirm. "
                        "Pass --yes to redo without asking (or --dry-run to see the plan).",
                        file=sys.stderr,
                    )
                    return 2
                question = f"\nReplay these {len(plan.redone)} change(s)?"
                if not await anyio.to_thread.run_sync(confirm, question):
                    print("Nothing was replayed.")
                    return 1
            report = await proxy.redo(**target, dry_run=False)
            print(render(report, style, planned=False))
            return 0 if report.complete else 1
    finally:
        journal.close()


def render(report: RedoReport, style: Styler, *, planned: bool) -> str:
    """The plan (`planned`) or what was done, one line a change, oldest first."""
    lines = []
    for entry in report.redone:
        change = f"change {entry['change_id']} {entry['tool']}"
        if planned:
            note = f" ({entry['note']})" if "note" in entry else ""
            lines.append(f"{style('replay', 'green')} {change}{note}")
            continue
        line = f"{style('replayed', 'green')} {change} as change {entry['new_change_id']}"
        if "differs" in entry:
            line += f" ({style('but', 'yellow')} {entry['differs']})"
        lines.append(line)
    for entry in report.left_undone:
        lines.append(f"{style('left', 'dim')} change {entry['change_id']} {entry['tool']}: "
                     f"{entry['reason']}")  # fmt: skip
    for entry in report.skipped:
        lines.append(f"{style('refused', 'yellow')} change {entry['change_id']} "
                     f"{entry['tool']}: {entry['reason']}")  # fmt: skip
    if not report.redone and not report.skipped:
        lines.append("Nothing to redo: no change an undo took back is left to replay.")
    return "\n".join(lines)
