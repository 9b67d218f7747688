"""How often the pytest plugin catches each deliberately broken registry.

Each broken variant of examples/compensators.yaml (tests/broken.py) is run through
`pytest --compensator-config` at the plugin's default settings, once per seed. A run counts as
caught when pytest exits 1 and the failure names the tool whose policy is broken. The intact
registry runs with the same seeds as the baseline: it must pass every time, or "caught" would
mean nothing.

Shrinking is switched off (a Hypothesis profile without the shrink phase) and pytest stops at
the first failure: neither changes whether a seed finds a failure, only how short the reported
sequence is, and shrinking a deep failure can take minutes.

    python benchmarks/teeth.py                 # 20 seeds per variant (5 for the intact
                                               # registry), 2 runs at a time
    python benchmarks/teeth.py --seeds 5 --jobs 1 --variant dropped_step
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.broken import VARIANTS, write_example  # noqa: E402

NO_SHRINK = """\
from hypothesis import Phase, settings
settings.register_profile("no-shrink", phases=[Phase.explicit, Phase.generate, Phase.target])
"""
FIRST_SEED = 1000
RUN_TIMEOUT = 900


@dataclass(frozen=True)
class Run:
    registry: str
    seed: int
    caught: bool
    named: bool  # the failure report names the broken tool
    failed_items: tuple[str, ...]
    seconds: float


def run_one(folder: Path, registry: Path, tool: str | None, seed: int) -> Run:
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", "-rf",
        "--hypothesis-profile", "no-shrink",
        "--compensator-config", str(registry), "--compensator-seed", str(seed),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"pytest exited {done.returncode} for {registry.name} seed {seed}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    failed = tuple(
        line.split(" ", 1)[1].split(" - ")[0]
        for line in done.stdout.splitlines()
        if line.startswith("FAILED ")
    )
    named = tool is not None and tool in done.stdout
    return Run(registry.stem, seed, done.returncode == 1, named, failed, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per registry (default 20)")
    parser.add_argument(
        "--baseline-seeds", type=int, default=5,
        help="seeds for the intact registry, which must always pass (default 5)",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="pytest runs at a time (default 2)")
    parser.add_argument(
        "--variant", action="append", choices=[v.name for v in VARIANTS],
        help="only this variant (repeatable; default: all)",
    )  # fmt: skip
    options = parser.parse_args()
    variants = [v for v in VARIANTS if not options.variant or v.name in options.variant]
    seeds = range(FIRST_SEED, FIRST_SEED + options.seeds)

    with tempfile.TemporaryDirectory(prefix="compensator-teeth-") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text(NO_SHRINK)
        jobs: list[tuple[Path, str | None, int]] = []
        intact = write_example(folder, "intact")
        jobs += [(intact, None, seed) for seed in seeds[: options.baseline_seeds]]
        for variant in variants:
            jobs += [(variant.write(folder), variant.tool, seed) for seed in seeds]

        os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        started = time.perf_counter()
        with ThreadPoolExecutor(options.jobs) as pool:
            runs = list(pool.map(lambda job: run_one(folder, *job), jobs))
        elapsed = time.perf_counter() - started

    print(f"{len(runs)} pytest runs, seeds {seeds.start}..{seeds.stop - 1}, "
          f"{options.jobs} at a time, {elapsed:.0f} s")  # fmt: skip
    print(f"{'registry':<26} {'caught':>8} {'named':>7} {'median s':>9}  caught by")
    verdict = 0
    for name, tool in [("intact", None)] + [(v.name, v.tool) for v in variants]:
        mine = [r for r in runs if r.registry == name]
        caught = sum(r.caught for r in mine)
        named = sum(r.named for r in mine)
        seconds = sorted(r.seconds for r in mine)[len(mine) // 2]
        by: dict[str, int] = {}
        for r in mine:
            for item in r.failed_items:
                short = item.split("::", 1)[-1]
                by[short] = by.get(short, 0) + 1
        where = ", ".join(f"{item} {n}" for item, n in sorted(by.items())) or "-"
        print(f"{name:<26} {caught:>4}/{len(mine):<3} {named:>3}/{len(mine):<3} "
              f"{seconds:>9.1f}  {where}")  # fmt: skip
        if tool is None:
            misses = [r.seed for r in mine if r.caught]
            if misses:
                print(f"  intact registry FAILED with seeds {misses}: a false alarm")
                verdict = 1
        else:
            missed = [r.seed for r in mine if not (r.caught and r.named)]
            if missed:
                print(f"  missed with seeds {missed}")
            if caught < 0.95 * len(mine) or named < caught:
                verdict = 1
    print("target: every variant caught (and named) in at least 95% of seeds, intact never fails")
    print("result:", "met" if verdict == 0 else "MISSED")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
