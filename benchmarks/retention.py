"""What the hash chain and retention cost on a big journal: `compensator log --verify` and
`compensator gc` over a SQLite journal of 100,000 changes, as a person runs them.

The journal is written through the Journal API (SQLite's fsync off while generating only): a
checkpoint every 100 changes, each change an intent and an `ok` outcome, and every tenth one
undone with one compensating step, as a proxy writes them; the first 90% as if a day ago, so
that `gc --older-than 12h` has them to drop.

Prints the journal's size, `log --verify`'s time and verdict, `gc`'s time and output (the size
before and after compaction), and `log --verify` again after it.

    python benchmarks/retention.py [--changes 100000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from compensator.journal import Intent, Status, StepOutcome, StepStatus  # noqa: E402
from compensator.journal import SQLiteJournal as Journal  # noqa: E402


def build(path: Path, changes: int) -> None:
    """The journal, its first 90% of changes written as if a day ago (the store's clock is
    set back while they are written), so every link is as a proxy writes it."""
    from compensator.journal.sqlite import store

    journal = Journal(path)
    journal._db.execute("PRAGMA synchronous=OFF")  # generating only; the commands measured: NORMAL
    clock = store.now
    try:
        for n in range(changes):
            if n == int(changes * 0.9):
                store.now = clock  # type: ignore[attr-defined]
            elif n == 0:
                store.now = lambda: _day_back(clock())  # type: ignore[attr-defined]
            if n % 100 == 0:
                journal.create_checkpoint(f"cp{n // 100}")
            change = journal.record_intent(
                Intent(tool="bench__bump", classification="reversible", args={"by": 1})
            )
            journal.record_outcome(change, status=Status.OK, result={"value": n})
            if n % 10 == 9:
                step = journal.record_step_started(change, 0, "bench__unbump", {"by": 1})
                assert step is not None
                journal.record_step_outcome(
                    step, StepOutcome(status=StepStatus.OK), undone=(change, "undone")
                )
    finally:
        store.now = clock  # type: ignore[attr-defined]
        journal.close()


def _day_back(iso: str) -> str:
    return (datetime.fromisoformat(iso) - timedelta(days=1)).isoformat(timespec="milliseconds")


def timed(*command: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "compensator", *command], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    return elapsed, done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compensator-retention-") as name:
        path = Path(name) / "journal.db"
        started = time.perf_counter()
        build(path, options.changes)
        took = time.perf_counter() - started
        print(f"{options.changes:,} changes written in {took:.1f} s; {datetime.now():%Y-%m-%d}")
        print(f"journal: {path.stat().st_size / 1e6:.1f} MB, "
              f"{path.stat().st_size / options.changes:.0f} bytes per change")  # fmt: skip
        seconds, said = timed("log", "--db", str(path), "--verify")
        print(f"log --verify: {seconds:.2f} s: {said.splitlines()[0]}")
        seconds, said = timed("gc", "--db", str(path), "--older-than", "12h", "--compact")
        print(f"gc --older-than 12h --compact: {seconds:.2f} s:")
        print("  " + said.replace("\n", "\n  "))
        seconds, said = timed("log", "--db", str(path), "--verify")
        print(f"log --verify after gc: {seconds:.2f} s: {said.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
