"""`compensator gc`: drop what a journal holds from before a moment, keeping what undo still
needs and the hash chain verifiable (journal/retention.py says what may go)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..durations import DURATION_EXAMPLES, LONGEST, parse_duration
from ..errors import CompensatorError
from .common import before_moment, db_argument, describe_collected, journal_path, plural

if TYPE_CHECKING:
    from ..journal.chain import Verdict
    from ..journal.retention import Collected

__all__ = ["GC_EPILOG", "add_gc_arguments", "run_gc"]

GC_EPILOG = f"""\
examples:
  compensator gc --config compensators.yaml --older-than 30d --dry-run   # what would go
  compensator gc --config compensators.yaml --older-than 30d
  compensator gc --db ./journal.db --older-than 2w --keep-checkpoints 3,7

Drops the checkpoints, changes, compensating steps and decisions made before the moment
--older-than ({DURATION_EXAMPLES}) reaches back to. Never dropped: a change that is not
settled (its outcome never recorded, or an undo step of it in doubt: those are for a person,
see `compensator log`), a checkpoint named in --keep-checkpoints and every change after it
(what undoing to it takes back), and a checkpoint a kept change belongs to. A change dropped
that was never undone can no longer be undone: --dry-run counts them first.

The hash chain stays verifiable: the links of what was dropped are replaced by one summary
link (keyed like the others when $COMPENSATOR_JOURNAL_KEY is set) that names the last link
dropped, and `compensator log --verify` holds afterwards. A journal whose chain does not hold
is refused (exit 1): dropping records would hide what changed them. It is one transaction,
safe while proxies run on the journal (the chain is checked before it; they wait while gc
reads each record's id, time and status and deletes). SQLite reuses the space freed;
--compact also shrinks the file (VACUUM), which holds the journal for as long as it rewrites
it: run that when no proxy is busy. `serve` does the same at start-up when the registry has a
`retention:` section (without --compact).
"""


def add_gc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", type=db_argument, default=None, help="the journal: a file, or a postgresql:// URL"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the registry `serve` runs with: use its journal; --db wins when both are given",
    )
    parser.add_argument(
        "--older-than",
        type=_duration,
        required=True,
        metavar="DURATION",
        help=f"drop what was made longer ago than this ({DURATION_EXAMPLES})",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=_ids,
        default=(),
        metavar="N,M",
        help="checkpoints to keep, with every change after them (comma-separated ids)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be dropped, drop nothing"
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="then shrink a SQLite journal's file (VACUUM: proxies writing it wait meanwhile)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _duration(text: str) -> int:
    seconds = parse_duration(text)  # 0s: everything made so far that may go
    if seconds is None or seconds > LONGEST:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration of at most 100 years ({DURATION_EXAMPLES})"
        )
    return seconds


def _ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        ids = ()
    if not ids or min(ids) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of checkpoint ids such as 3,7; `compensator log` lists them"
        )
    return ids


def run_gc(args: argparse.Namespace) -> int:
    """Exit 0 when done (or nothing to drop), 1 when the journal cannot be collected."""
    from ..journal import open_journal  # here: `gc --help` starts without the stores
    from ..journal.chain import journal_key

    try:
        where = journal_path(args.db, args.config)
        open_journal(where, read_only=True).close()  # a missing journal is an error, not made
        size = _size(where)
        journal = open_journal(where, person=True)
        try:
            found = journal.collect(
                before_moment(args.older_than),
                keep=args.keep_checkpoints,
                dry_run=args.dry_run,
                compact=args.compact,
            )
            verdict = journal.verify_chain(journal_key())
            location = journal.location
        finally:
            journal.close()
    except (CompensatorError, OverflowError) as exc:
        print(f"compensator gc: {exc}", file=sys.stderr)
        return 1
    sizes = (size, _size(where))
    if args.json:
        print(json.dumps(_as_json(found, verdict, location, sizes), indent=2))
    else:
        print(describe_collected(found))
        if found.not_compacted is not None:
            print(f"The file was not shrunk: {found.not_compacted}")
        print(_chain_line(verdict))
        print(f"journal: {location}{_sizes(sizes)}")
    return 0 if verdict.holds and found.not_compacted is None else 1


def _chain_line(verdict: Verdict) -> str:
    if not verdict.holds:
        return f"the journal's chain is broken: {verdict.problem}"
    last = (
        "" if verdict.head is None else f"; the last is link {verdict.head[0]}, {verdict.head[1]}"
    )
    return f"the journal's chain holds: {plural(verdict.links, 'link')}{last}"


def _size(where: str | Path) -> int | None:
    """A SQLite journal's bytes on disk (with its WAL); None for PostgreSQL."""
    if isinstance(where, str):
        return None
    return sum(
        os.path.getsize(path) for path in (where, Path(f"{where}-wal")) if os.path.exists(path)
    )


def _sizes(sizes: tuple[int | None, int | None]) -> str:
    before, after = sizes
    if before is None or after is None:
        return ""
    return f" ({before / 1e6:.1f} MB before, {after / 1e6:.1f} MB now)"


def _as_json(
    found: Collected, verdict: Verdict, location: str, sizes: tuple[int | None, int | None]
) -> dict[str, object]:
    return {
        "journal": location,
        "before": found.before,
        "dry_run": found.dry_run,
        "dropped": {
            "changes": found.changes,
            "never_undone": found.never_undone,
            "compensations": found.compensations,
            "checkpoints": found.checkpoints,
            "decisions": found.decisions,
            "links": found.links,
        },
        "kept": {"unsettled": found.unsettled, "pinned": found.pinned},
        "not_compacted": found.not_compacted,
        "chain_holds": verdict.holds,
        "chain_problem": verdict.problem,
        "bytes": {"before": sizes[0], "after": sizes[1]},
    }
