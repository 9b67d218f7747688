"""Start-up: a compensator in front of 5 servers, from spawn to the first tools/list answer,
against the slowest of the same 5 servers started alone (target x1.3); and in front of one
server against that server alone (moonshot x1.2). Rounds alternate them. The CPU each run
used up to that answer (the processes' and their children's) shows the floor the machine's
cores set.

    python benchmarks/startup.py [--rounds 10]
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
from mcp import StdioServerParameters

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.overhead import SERVER, connect  # noqa: E402

SERVERS = 5


def registry(servers: int) -> str:
    return "servers:\n" + "".join(
        f'  bench{n}:\n    command: "{SERVER[0]}"\n    args: ["{SERVER[1]}"]\n'
        for n in range(1, servers + 1)
    )


def descendants_cpu() -> float:
    """CPU seconds (user + system) the running descendants of this process have used so far
    (Linux: from /proc), i.e. a client's server and, for the proxy, its own servers."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    mine = {os.getpid()}
    for _ in range(8):  # generations: client -> proxy -> server -> its children
        mine |= {pid for pid, parent in parents.items() if parent in mine}
    return sum(used[pid] for pid in mine if pid != os.getpid())


async def first_list(params: StdioServerParameters) -> tuple[float, int, float]:
    """(wall seconds to the first tools/list answer, tools listed, CPU seconds the process
    and its descendants used up to then)."""
    started = time.perf_counter()
    async with connect(params) as session:
        tools = await session.list_tools()
        seconds = time.perf_counter() - started
        return seconds, len(tools.tools), descendants_cpu()


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        single = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(HERE))
        through: dict[int, list[float]] = {1: [], SERVERS: []}
        cpu: dict[int, list[float]] = {1: [], SERVERS: []}
        slowest: list[float] = []
        alone: list[float] = []
        alone_cpu: list[float] = []
        for index in range(rounds):
            for servers in through:
                config = tmp / f"servers{servers}.yaml"
                config.write_text(registry(servers))
                args = ["-m", "compensator.proxy", "--config", str(config)]
                args += ["--db", str(tmp / f"j{index}-{servers}.db"), "--log-level", "WARNING"]
                proxy = StdioServerParameters(
                    command=sys.executable, args=args, env=dict(os.environ)
                )
                seconds, count, used = await first_list(proxy)
                assert count >= servers * 3, count
                through[servers].append(seconds)
                cpu[servers].append(used)
            runs = [await first_list(single) for _ in range(SERVERS)]
            slowest.append(max(run[0] for run in runs))
            alone += [run[0] for run in runs]
            alone_cpu += [run[2] for run in runs]
    a, b = statistics.median(slowest), statistics.median(through[SERVERS])
    one, server = statistics.median(through[1]), statistics.median(alone)
    cores = os.cpu_count() or 1
    floor = statistics.median(cpu[SERVERS]) / cores
    print(f"python {sys.version.split()[0]}, {cores} cores, {time.strftime('%Y-%m-%d')}")
    print(
        f"one server alone, spawn to first tools/list: {server * 1000:.0f} ms (median of "
        f"{len(alone)}), {statistics.median(alone_cpu) * 1000:.0f} ms of CPU"
    )
    print(f"slowest of {SERVERS} servers started alone: {a * 1000:.0f} ms (median of {rounds})")
    print(
        f"compensator in front of 1 server:    {one * 1000:.0f} ms, "
        f"{statistics.median(cpu[1]) * 1000:.0f} ms of CPU with the server's"
    )
    print(
        f"compensator in front of all {SERVERS}:        {b * 1000:.0f} ms, "
        f"{statistics.median(cpu[SERVERS]) * 1000:.0f} ms of CPU with the servers'"
    )
    verdict = "met" if b <= 1.3 * a else "MISSED"
    print(f"ratio {b / a:.2f}   target <= 1.30: {verdict}")
    print(
        f"  CPU-bound floor: that CPU spread over {cores} cores takes {floor * 1000:.0f} ms, "
        f"x{floor / a:.2f} of the slowest alone"
    )
    moonshot = "met" if one <= 1.2 * server else "MISSED"
    print(
        f"in front of 1 server / that server alone: {one / server:.2f}   moonshot <= 1.20: "
        f"{moonshot}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args().rounds)
