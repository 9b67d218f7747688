"""What undo costs: the proxy's own time per compensation, and planning over a big journal.

1. 1,000 journaled `bump` calls through the compensator, then `undo_to` the checkpoint before
   them. The downstream's share is measured in the same run: 1,000 `unbump` calls (the
   inverse) made directly to the same kind of server. The proxy's own time per compensation is
   (undo total - 1,000 x the direct median) / 1,000.
2. A journal with 100,000 changes (written through the Journal API, with SQLite's fsync off
   while generating only), then a proxy on it: `list_changes` and `undo_to(dry_run)` since a
   checkpoint 100 changes back, as an agent would call them.

    python benchmarks/undo.py [--changes 1000] [--rows 100000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from mcp import StdioServerParameters  # noqa: E402

from benchmarks.overhead import SERVER, connect  # noqa: E402
from compensator.journal import Intent, Status, open_journal  # noqa: E402
from pytest_compensator.client import launch_proxy  # noqa: E402

CONFIG = HERE / "bench.yaml"


def proxy(db: Path):  # type: ignore[no-untyped-def]
    env = {"COMPENSATOR_WORKDIR": str(db.parent)}
    return launch_proxy(CONFIG, db, env=env, cwd=HERE, stderr=open(os.devnull, "w"))


async def undo_cost(changes: int, tmp: Path) -> None:
    direct = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(HERE))
    async with connect(direct) as session:
        samples = []
        for _ in range(changes):
            started = time.perf_counter()
            await session.call_tool("unbump", {"by": 1})
            samples.append(time.perf_counter() - started)
    downstream = statistics.median(samples)
    async with proxy(tmp / "undo.db") as client:
        checkpoint = await client.checkpoint("before")
        for _ in range(changes):
            await client.call_ok("bench__bump", {"by": 1})
        started = time.perf_counter()
        report = await client.undo_to(checkpoint)
        total = time.perf_counter() - started
    assert len(report["undone"]) == changes and not report["skipped"], report["skipped"][:1]
    own = (total - changes * downstream) / changes
    print(f"undo_to over {changes} changes: {total * 1000:.0f} ms in all, "
          f"{total / changes * 1000:.3f} ms per change")  # fmt: skip
    print(f"  downstream inverse call, direct median: {downstream * 1000:.3f} ms")
    verdict = "met" if own <= 0.001 else "MISSED"
    print(f"  proxy's own time per compensation: {own * 1000:.3f} ms   target <= 1 ms: {verdict}")


def fill_journal(path: Path, rows: int) -> None:
    journal = open_journal(path)
    for index in range(rows):
        if index % 100 == 0:
            journal.create_checkpoint(f"cp {index}")
        change = journal.record_intent(
            Intent(tool="bench__bump", classification="reversible", args={"by": 1})
        )
        journal.record_outcome(change, status=Status.OK, result={"value": index})
    journal.close()


async def planning_cost(rows: int, tmp: Path, repeats: int = 20) -> None:
    db = tmp / "big.db"
    started = time.perf_counter()
    fill_journal(db, rows)
    print(f"journal with {rows} changes written in {time.perf_counter() - started:.1f} s")
    async with proxy(db) as client:
        latest = (await client.list_checkpoints())[0]["id"]
        timings: dict[str, list[float]] = {"list_changes": [], "undo_to dry_run": []}
        for _ in range(repeats):
            started = time.perf_counter()
            listed = await client.list_changes(latest)
            timings["list_changes"].append(time.perf_counter() - started)
            started = time.perf_counter()
            plan = await client.undo_to(latest, dry_run=True)
            timings["undo_to dry_run"].append(time.perf_counter() - started)
        assert len(listed) == len(plan["undone"]) == 100
    for name, values in timings.items():
        median = statistics.median(values) * 1000
        verdict = "met" if median <= 50 else "MISSED"
        print(f"  {name} since the newest checkpoint (100 changes), {rows} rows in the journal: "
              f"{median:.1f} ms median of {repeats}   target <= 50 ms: {verdict}")  # fmt: skip


async def main(changes: int, rows: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        await undo_cost(changes, tmp)
        await planning_cost(rows, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    options = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    anyio.run(main, options.changes, options.rows)
