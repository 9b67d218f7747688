"""Per-call overhead of the compensator, side by side with the alternatives, in one run.

Four stdio sessions to the same kind of downstream (benchmarks/servers/bench_server.py) stay
open for the whole run, and rounds interleave them in a shuffled order, so a machine that gets
busier hurts all four alike:

  A  the client talks to the server directly
  B  through the compensator (a read call; and, B+, a journaled mutating call)
  A+ the mutating call made directly: its own cost beyond the read call is the downstream's,
     so what journaling adds is (B+ - B) - (A+ - A)
  C  through FastMCP's proxy (fastmcp 4.x `create_proxy`; `pip install -e ".[bench]"`)
  D  through a raw newline relay that copies bytes between pipes: the floor of one hop

Prints medians per call and the ratios docs/performance.md quotes.

    python benchmarks/overhead.py                  # 30 rounds of 50 calls per session
    python benchmarks/overhead.py --rounds 5 --calls 20
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
SERVER = [sys.executable, str(HERE / "servers" / "bench_server.py")]


def sessions(workdir: Path) -> dict[str, StdioServerParameters]:
    env = {**os.environ, "COMPENSATOR_WORKDIR": str(workdir)}
    compensator = [
        "-m", "compensator.proxy", "--config", str(HERE / "bench.yaml"),
        "--db", str(workdir / "journal.db"), "--log-level", "WARNING",
    ]  # fmt: skip
    wanted = {
        "A direct": SERVER,
        "B compensator": [sys.executable, *compensator],
        "C fastmcp proxy": [sys.executable, str(HERE / "servers" / "fastmcp_proxy.py"), *SERVER],
        "D raw relay": [sys.executable, str(HERE / "servers" / "relay.py"), *SERVER],
    }
    return {
        name: StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=str(HERE))
        for name, cmd in wanted.items()
    }


@asynccontextmanager
async def connect(params: StdioServerParameters) -> AsyncIterator[ClientSession]:
    with open(os.devnull, "w") as quiet:
        async with (
            stdio_client(params, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def tool_name(session_name: str, tool: str) -> str:
    return f"bench__{tool}" if session_name.startswith("B") else tool


async def time_calls(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def run(rounds: int, calls: int, warmup: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as tmp:
        async with AsyncExitStack() as stack:
            open_sessions = {
                name: await stack.enter_async_context(connect(params))
                for name, params in sessions(Path(tmp)).items()
            }
            jobs: dict[str, Callable[[], Awaitable[object]]] = {}
            for name, session in open_sessions.items():
                ping = tool_name(name, "ping")
                jobs[name] = lambda s=session, t=ping: s.call_tool(t, {})
            a, b = open_sessions["A direct"], open_sessions["B compensator"]
            jobs["A+ direct, mutating call"] = lambda: a.call_tool("bump", {"by": 1})
            jobs["B+ compensator, journaled mutating call"] = lambda: b.call_tool(
                "bench__bump", {"by": 1}
            )
            for job in jobs.values():
                await time_calls(job, warmup)
            order = list(jobs)
            for _ in range(rounds):
                random.shuffle(order)
                for name in order:
                    samples.setdefault(name, []).extend(await time_calls(jobs[name], calls))
    return samples


def report(samples: dict[str, list[float]], rounds: int, calls: int) -> None:
    median = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    a = median["A direct"]
    b = median["B compensator"]
    c = median["C fastmcp proxy"]
    d = median["D raw relay"]
    mutating = median["B+ compensator, journaled mutating call"]
    direct_mutating = median["A+ direct, mutating call"]
    print(f"{rounds} rounds x {calls} calls per session, interleaved; medians per call")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    for name in sorted(median):
        print(f"  {name:<42} {median[name]:7.3f} ms")
    print(f"B-A compensator overhead      {b - a:+7.3f} ms")
    print(f"C-A fastmcp proxy overhead    {c - a:+7.3f} ms")
    print(f"D-A raw relay (one hop)       {d - a:+7.3f} ms")
    ratio = (b - a) / (c - a) if c > a else float("nan")
    print(f"(B-A)/(C-A) = {ratio:.2f}   target <= 0.25: {_verdict(ratio <= 0.25)}"
          f" (first target <= 0.50: {_verdict(ratio <= 0.5)})")  # fmt: skip
    extra = mutating - b
    downstream = direct_mutating - a
    journaling = extra - downstream
    print(f"mutating - read call, through the compensator (B+ - B) {extra:+7.3f} ms")
    print(f"mutating - read call, direct: the server's own (A+ - A) {downstream:+7.3f} ms")
    print(f"what journaling adds (B+ - B) - (A+ - A) = {journaling:+.3f} ms"
          f" = {journaling / a:.2f} x A   target <= 0.15 x A: {_verdict(journaling <= 0.15 * a)}"
          f" (first target <= +0.300 ms: {_verdict(journaling <= 0.3)})")  # fmt: skip


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=50, help="calls per session per round")
    parser.add_argument("--warmup", type=int, default=50)
    options = parser.parse_args()
    samples = anyio.run(run, options.rounds, options.calls, options.warmup)
    report(samples, options.rounds, options.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
