"""Start-up: a compensator in front of 5 servers, from spawn to the first tools/list answer,
against the slowest of the same 5 servers started alone. Rounds alternate the two.

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


async def first_list(params: StdioServerParameters) -> tuple[float, int]:
    started = time.perf_counter()
    async with connect(params) as session:
        tools = await session.list_tools()
        return time.perf_counter() - started, len(tools.tools)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        single = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(HERE))
        through: dict[int, list[float]] = {1: [], SERVERS: []}
        slowest: list[float] = []
        for index in range(rounds):
            for servers in through:
                config = tmp / f"servers{servers}.yaml"
                config.write_text(registry(servers))
                args = ["-m", "compensator.proxy", "--config", str(config)]
                args += ["--db", str(tmp / f"j{index}-{servers}.db"), "--log-level", "WARNING"]
                proxy = StdioServerParameters(
                    command=sys.executable, args=args, env=dict(os.environ)
                )
                seconds, count = await first_list(proxy)
                assert count >= servers * 3, count
                through[servers].append(seconds)
            alone = [(await first_list(single))[0] for _ in range(SERVERS)]
            slowest.append(max(alone))
    a, b = statistics.median(slowest), statistics.median(through[SERVERS])
    one = statistics.median(through[1])
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"slowest of {SERVERS} servers started alone: {a * 1000:.0f} ms (median of {rounds})")
    print(f"compensator in front of 1 server:    {one * 1000:.0f} ms")
    print(f"compensator in front of all {SERVERS}:        {b * 1000:.0f} ms")
    verdict = "met" if b <= 1.3 * a else "MISSED"
    print(f"ratio {b / a:.2f}   target <= 1.30: {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args().rounds)
