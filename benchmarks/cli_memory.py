"""The command line's start-up, and the proxy's memory over a long session, in one run.

CLI (`--part cli`): wall time of `compensator --version`, `--help`, `log --help`,
`explain --help` and `log --db` over a journal of 1,000 changes (written first, through
SQLiteJournal), each a subprocess of this Python, against a bare `python -c pass` measured in
the same rounds: every round runs every command once, in a shuffled order, and the figure is
the median over the rounds. Both `python -m compensator.cli` and the installed console script
(`compensator` next to this Python) are timed. Each command is also run once with
`-X importtime`, to show whether it imported the MCP SDK (`mcp`) or Hypothesis, and how many
modules it imported. `undo --dry-run` is timed too: it plans from the journal alone, so it
should not import the SDK either. Target: each of --version, --help, log and explain --help
within 3x the bare interpreter.

Memory (`--part memory`): the real proxy (`python -m compensator.proxy`) over stdio in front
of five bench servers (benchmarks/servers/bench_server.py under five names), then N calls
(default 100,000), half `benchN__ping` (read) and half `benchN__bump` (journaled), going round
the five servers, a few in flight at once. The proxy's resident memory (VmRSS in
/proc/PID/status; the proxy is started through `sh -c 'echo $$ > pidfile; exec ...'` so the pid
is its own) is read right after start-up and every N/10 calls. Baselines from the same run: one
bench server started alone, and the proxy itself right after start-up. Bound: the proxy's RSS
after all the calls is at most its start-up RSS + 16 MB, and grows by at most 2 MB over the
second half of the calls (at 100,000 calls, a leak of more than about 40 bytes a call breaks
that). Also the journal's size per 1,000 changes: the SQLite file (and its -wal) once the proxy
has stopped, less an empty journal's, written in the same run.

    python benchmarks/cli_memory.py                        # both parts: 15 rounds, 100,000 calls
    python benchmarks/cli_memory.py --part cli --rounds 30
    python benchmarks/cli_memory.py --part memory --calls 20000
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.overhead import SERVER  # noqa: E402
from benchmarks.startup import registry  # noqa: E402
from benchmarks.undo import fill_journal  # noqa: E402
from compensator.journal import SQLiteJournal  # noqa: E402

SERVERS = 5
CLI_TARGET = 3.0
GROWTH_BOUND_MB = 16.0
LATE_GROWTH_BOUND_MB = 2.0


def header() -> None:
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')},"
          f" load average {load}")  # fmt: skip


# -- CLI ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    name: str
    argv: list[str]
    target: bool = False
    """Whether it is held to CLI_TARGET."""


def cli_commands(journal: Path) -> list[Command]:
    python = sys.executable
    module = [python, "-m", "compensator.cli"]
    undo = ["undo", "--config", str(HERE / "bench.yaml"), "--db", str(journal)]
    cases: list[tuple[str, list[str], bool]] = [
        ("--version", ["--version"], True),
        ("--help", ["--help"], True),
        ("log --help", ["log", "--help"], True),
        ("explain --help", ["explain", "--help"], True),
        ("log --db (1,000 changes)", ["log", "--db", str(journal)], True),
        ("undo --dry-run (1,000 changes)", [*undo, "--to", "1", "--dry-run"], False),
    ]
    commands = [Command("python -c pass", [python, "-c", "pass"])]
    commands += [Command(f"-m compensator.cli {n}", [*module, *a], t) for n, a, t in cases]
    script = Path(python).parent / "compensator"
    if script.exists():
        commands += [Command(f"compensator {n}", [str(script), *a], t) for n, a, t in cases]
    return commands


def run_quietly(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return seconds


_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|( *)(\S+)$")


def imports(argv: list[str], cwd: Path) -> tuple[set[str], int]:
    """The top-level packages `argv` imported (mcp, hypothesis, ...), and how many modules."""
    if argv[0] == sys.executable:
        traced = [sys.executable, "-X", "importtime", *argv[1:]]
    else:  # the console script, a Python file: run by this Python
        traced = [sys.executable, "-X", "importtime", *argv]
    done = subprocess.run(traced, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    names = [
        m.group(2) for line in done.stderr.decode().splitlines() if (m := _IMPORT_LINE.match(line))
    ]
    return {name.split(".")[0] for name in names}, len(names)


def cli_part(rounds: int, warmup: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        journal = tmp / "journal.db"
        fill_journal(journal, 1000)
        commands = cli_commands(journal)
        for command in commands:
            for _ in range(warmup):
                run_quietly(command.argv, tmp)
        samples: dict[str, list[float]] = {command.name: [] for command in commands}
        order = list(commands)
        for _ in range(rounds):
            random.shuffle(order)
            for command in order:
                samples[command.name].append(run_quietly(command.argv, tmp))
        traced = {command.name: imports(command.argv, tmp) for command in commands}
    median = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    base = median["python -c pass"]
    header()
    print(f"CLI start-up: {rounds} rounds, every command once a round in a shuffled order; medians")
    print(f"  {'command':<50} {'ms':>7} {'ratio':>6}  mcp  hypothesis  modules")
    for command in commands:
        packages, count = traced[command.name]
        mcp = "yes" if "mcp" in packages else "no"
        hypothesis = "yes" if "hypothesis" in packages else "no"
        ratio = median[command.name] / base
        print(f"  {command.name:<50} {median[command.name]:7.1f} {ratio:6.2f}"
              f"  {mcp:<4} {hypothesis:<10}  {count:>5}")  # fmt: skip
    for command in commands:
        if command.target:
            ratio = median[command.name] / base
            verdict = "met" if ratio <= CLI_TARGET else "MISSED"
            print(f"{command.name:<50} x{ratio:.2f}   target <= {CLI_TARGET:.2f}: {verdict}")
    imported = [c.name for c in commands if c.target and {"mcp", "hypothesis"} & traced[c.name][0]]
    verdict = "MISSED: " + ", ".join(imported) if imported else "met"
    print(f"no command held to the target imports mcp or hypothesis: {verdict}")
    planning = [c.name for c in commands if "undo --dry-run" in c.name]
    imported = [name for name in planning if "mcp" in traced[name][0]]
    verdict = "MISSED: " + ", ".join(imported) if imported else "met"
    print(f"undo --dry-run, which starts no server, does not import mcp: {verdict}")


# -- memory -------------------------------------------------------------------------------


def memory_registry(servers: int) -> str:
    """startup.py's registry of `servers` bench servers, with each one's tools classified."""
    tools = "".join(
        f"  bench{n}__ping: {{classification: read}}\n"
        f"  bench{n}__bump:\n    classification: reversible\n"
        f'    inverse_tool: bench{n}__unbump\n    inverse_args: {{by: "{{args.by}}"}}\n'
        f"  bench{n}__unbump:\n    classification: reversible\n"
        f'    inverse_tool: bench{n}__bump\n    inverse_args: {{by: "{{args.by}}"}}\n'
        for n in range(1, servers + 1)
    )
    return registry(servers) + "tools:\n" + tools


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(f"no {field} for pid {pid}")


def rss_mb(pid: int) -> float:
    return status_kb(pid, "VmRSS") / 1024


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@asynccontextmanager
async def started(
    argv: list[str], tmp: Path, label: str
) -> AsyncIterator[tuple[ClientSession, int]]:
    """A stdio session to `argv`, and the pid of the process `argv` runs as."""
    pidfile = tmp / f"{label}.pid"
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *argv],
        env={**os.environ, "COMPENSATOR_WORKDIR": str(tmp)},
        cwd=str(tmp),
    )
    with (tmp / f"{label}-stderr.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            yield session, int(pidfile.read_text())


def journal_bytes(db: Path) -> tuple[int, int]:
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size, wal.stat().st_size if wal.exists() else 0


async def memory_part(calls: int, every: int, inflight: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        async with started(SERVER, tmp, "alone") as (session, pid):
            for _ in range(100):
                await session.call_tool("ping", {})
                await session.call_tool("bump", {"by": 1})
            alone = rss_mb(pid)
        config = tmp / "servers5.yaml"
        config.write_text(memory_registry(SERVERS))
        db = tmp / "journal.db"
        proxy = [sys.executable, "-m", "compensator.proxy", "--config", str(config)]
        proxy += ["--db", str(db), "--log-level", "WARNING"]
        async with started(proxy, tmp, "proxy") as (session, pid):
            downstream = children(pid)
            assert len(downstream) == SERVERS, f"the proxy runs {downstream}, not {SERVERS} servers"
            start_rss = rss_mb(pid)
            start_servers = [rss_mb(child) for child in downstream]
            samples: list[tuple[int, float, float]] = [(0, start_rss, 0.0)]
            counter = {"next": 0, "done": 0, "errors": 0}
            began = time.perf_counter()

            async def worker() -> None:
                while counter["next"] < calls:
                    index = counter["next"]
                    counter["next"] += 1
                    server = f"bench{(index // 2) % SERVERS + 1}"
                    if index % 2:
                        result = await session.call_tool(f"{server}__bump", {"by": 1})
                    else:
                        result = await session.call_tool(f"{server}__ping", {})
                    counter["errors"] += bool(
                        getattr(result, "is_error", getattr(result, "isError", False))
                    )
                    counter["done"] += 1
                    if counter["done"] % every == 0 or counter["done"] == calls:
                        samples.append((counter["done"], rss_mb(pid), time.perf_counter() - began))

            async with anyio.create_task_group() as group:
                for _ in range(inflight):
                    group.start_soon(worker)
            seconds = time.perf_counter() - began
            end_db = journal_bytes(db)
            end_servers = [rss_mb(child) for child in downstream]
            peak = status_kb(pid, "VmHWM") / 1024
        closed_db = journal_bytes(db)
        empty = tmp / "empty.db"
        SQLiteJournal(empty).close()
        empty_db = journal_bytes(empty)
    changes = calls // 2
    end_rss = samples[-1][1]
    half = min(samples, key=lambda sample: abs(sample[0] - calls / 2))
    header()
    print(f"proxy memory: {calls:,} calls ({changes:,} journaled bump, the rest ping) through one"
          f" proxy in front of {SERVERS} bench servers, {inflight} in flight")  # fmt: skip
    latency = seconds / calls * 1000 * inflight
    print(f"  {calls / seconds:,.0f} calls/s, {latency:.2f} ms a call in flight ({seconds:.0f} s);"
          f" calls answered with isError: {counter['errors']}")  # fmt: skip
    print(f"baseline: one bench server alone        RSS {alone:6.1f} MB")
    print(f"baseline: the proxy right after start-up RSS {start_rss:6.1f} MB"
          f"   (x{start_rss / alone:.2f} one server)")  # fmt: skip
    print("  calls      RSS MB   vs start-up   elapsed")
    for done, rss, elapsed in samples:
        print(f"  {done:>7,}  {rss:8.1f}  {rss - start_rss:+9.1f} MB  {elapsed:7.1f} s")
    print(f"  peak (VmHWM) {peak:.1f} MB")
    servers = ", ".join(
        f"{a:.1f}->{b:.1f}" for a, b in zip(start_servers, end_servers, strict=True)
    )
    print(f"the {SERVERS} servers behind it, RSS MB at start-up -> after: {servers}")
    growth = end_rss - start_rss
    verdict = "met" if growth <= GROWTH_BOUND_MB else "MISSED"
    print(f"RSS after {calls:,} calls - after start-up = {growth:+.1f} MB"
          f"   bound <= +{GROWTH_BOUND_MB:.0f} MB: {verdict}")  # fmt: skip
    late = end_rss - half[1]
    verdict = "met" if late <= LATE_GROWTH_BOUND_MB else "MISSED"
    print(f"RSS after {calls:,} calls - after {half[0]:,} = {late:+.1f} MB"
          f"   bound <= +{LATE_GROWTH_BOUND_MB:.0f} MB: {verdict}")  # fmt: skip
    print(f"baseline: an empty journal, opened and closed: {sum(empty_db) / 1024:.0f} KB")
    print(f"journal after {changes:,} changes, the proxy still running: {end_db[0] / 1024:.0f} KB"
          f" file + {end_db[1] / 1024:.0f} KB -wal; once it stopped: {closed_db[0] / 1024:.0f} KB"
          f" file + {closed_db[1] / 1024:.0f} KB -wal")  # fmt: skip
    per_1000 = (sum(closed_db) - sum(empty_db)) / changes * 1000
    print(f"journal per 1,000 changes: {per_1000 / 1024:.0f} KB"
          f" ({per_1000 / 1000:.0f} bytes a change)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("cli", "memory", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=15, help="CLI: runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="CLI: untimed runs of each first")
    parser.add_argument("--calls", type=int, default=100_000, help="memory: calls in all")
    parser.add_argument("--every", type=int, default=None, help="memory: calls between samples")
    parser.add_argument("--inflight", type=int, default=4, help="memory: calls in flight")
    options = parser.parse_args()
    if options.part in ("cli", "both"):
        cli_part(options.rounds, options.warmup)
    if options.part == "both":
        print()
    if options.part in ("memory", "both"):
        every = options.every or max(options.calls // 10, 1)
        anyio.run(memory_part, options.calls, every, options.inflight)
    return 0


if __name__ == "__main__":
    sys.exit(main())
