"""Speed of verification: the plugin's state machine on examples/compensators.yaml, in
examples per second, and the per-example cost of a fresh state (registry `reset:` calls on one
proxy, against a new proxy and servers per example when the registry has no `reset:`).

    python benchmarks/verification.py [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "examples" / "compensators.yaml"


def run(folder: Path, registry: Path, seed: int, examples: int) -> tuple[float, dict]:
    report = folder / f"{registry.stem}.json"
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", "state_machine",
        "--compensator-config", str(registry), "--compensator-seed", str(seed),
        "--compensator-examples", str(examples), "--compensator-report", str(report),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pytest failed:\n{done.stdout[-3000:]}")
    return seconds, json.loads(report.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        folder = Path(name)
        text = REGISTRY.read_text().replace(
            '"tasks_server.py"', f'"{REGISTRY.parent}/tasks_server.py"'
        )
        no_reset = folder / "no_reset.yaml"
        no_reset.write_text(text.replace("reset:\n  - tool: tasks__reset\n", ""))
        seconds, data = run(folder, REGISTRY, options.seed, 25)
        slow_seconds, slow = run(folder, no_reset, options.seed, 5)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    rate = data["examples"] / seconds
    print(f"state machine, default settings: {data['examples']} examples in {seconds:.1f} s "
          f"(pytest start included) = {rate:.1f} examples/s")  # fmt: skip
    print(f"fresh state per example with reset: {data['reset_seconds_per_example'] * 1000:.1f} ms")
    slow_rate = slow["examples"] / slow_seconds
    print(f"without reset (new proxy and servers per example): "
          f"{slow['reset_seconds_per_example'] * 1000:.0f} ms per example, "
          f"{slow['examples']} examples at {slow_rate:.1f} examples/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
