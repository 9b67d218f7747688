"""What the journal's backend costs: SQLite (a file) against PostgreSQL over loopback TCP, in
one run.

The benchmark starts its own throwaway PostgreSQL cluster (initdb and pg_ctl, found on PATH or
under /usr/lib/postgresql/*/bin; as root they run as the user `postgres` through runuser) in a
temporary folder, listening on a free 127.0.0.1 port with the server's default durability
(fsync on, synchronous_commit on), and stops it when done; `--url` uses a server of your own
instead (it must be one the benchmark may fill with journal rows). The cluster of
scripts/with-postgres is not used: it listens on a Unix socket only, and runs with fsync off.

Every session below stays open for the whole run, and each round runs every contestant once,
in a shuffled order, so a machine that gets busier hurts them all alike.

1. One client, one call at a time, over stdio with the MCP SDK (as benchmarks/overhead.py):

  A / A+  the downstream (benchmarks/servers/bench_server.py) directly: a read call (ping),
          a mutating call (bump); A+ - A is the downstream's own cost of bump
  S / S+  through a proxy journaling to a SQLite file: bench__ping, bench__bump (journaled)
  P / P+  the same, journaling to PostgreSQL over loopback TCP
  Q / Q+  the same, with synchronous_commit=off on the journal's connection: what P+ costs
          without waiting for the server's WAL flush, to tell the disk from the round trips

  What journaling adds to a mutating call is (X+ - X) - (A+ - A) for each backend X; the
  target is at most +1 ms on PostgreSQL.

2. The journal alone, no MCP: `open_journal(target).record_intent` + `record_outcome` per call
   (what the proxy writes for a journaled call), on the SQLite file (JS), on PostgreSQL (JP),
   and on PostgreSQL with synchronous_commit=off (JQ); and the same from 8 stores at once, a
   thread each (JP x8, JS x8), against 1 (JP x1), --calls (or --per-proxy) each per round:
   whether the journal itself serializes writers, with little of the CPU that MCP costs.
   JS- and JP- are JS and JP by a store that appends no links to the hash chain (a switch
   for this benchmark): JS - JS- is what the chain adds to a mutating call's writes, against
   a target of at most +0.05 ms on SQLite.

3. Several proxies at once, each its own process with its own MCP client session, its own
   downstream process and workdir (so the downstream is never shared) and its own
   COMPENSATOR_HOST (host-1 .. host-8: machines): each calls bench__bump back to back for
   --seconds (or --per-proxy calls) per round. 8 proxies on one PostgreSQL journal, against
   1 proxy on it and 8 proxies on one SQLite file: calls per second in all, p50 and p99 per
   call. On a machine with fewer cores than processes this is CPU-bound and says little of
   how a fleet of machines fares; the journal's own limit is in the several-stores figures.

Prints a table of medians and the lines docs/performance.md quotes, then checks that the
PostgreSQL journal holds every change the run made, all settled ok, from every host.

    bash scripts/bench journal                  # 8 rounds, about a minute on 2 cores
    python benchmarks/journal.py --rounds 3 --calls 50 --per-proxy 100
    python benchmarks/journal.py --url postgresql://USER@127.0.0.1:5432/DB
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.overhead import SERVER  # noqa: E402
from compensator.journal import Intent, JournalStore, Status, open_journal  # noqa: E402

CONFIG = HERE / "bench.yaml"
TARGET_MS = 1.0
CHAIN_TARGET_MS = 0.05
"""What the hash chain may add to a mutating call's journal writes on SQLite (issue 34)."""
"""The issue's target: journaling on PostgreSQL adds at most this much to a mutating call."""

NO_WAIT = "options=-c%20synchronous_commit%3Doff"
"""libpq URL parameter: the journal's connection commits without waiting for the WAL flush."""


# -- a throwaway PostgreSQL cluster on 127.0.0.1 ----------------------------------------------


def postgres_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:  # resolved: /usr/local/bin/pg_ctl may be a link into the real bin folder
        return Path(found).resolve().parent
    folders = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: [
            int(part) for part in Path(path).parent.name.split(".") if part.isdigit()
        ],
    )
    if not folders:
        sys.exit("journal.py: pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
    return Path(folders[-1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def throwaway_postgres(fsync: bool) -> Iterator[str]:
    """A new cluster on a free 127.0.0.1 port; its URL (user postgres, trust, no password)."""
    bindir = postgres_bindir()
    folder = Path(tempfile.mkdtemp(prefix="compensator-bench-pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = pwd.getpwnam("nobody")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", owner.pw_name, "--"]
    log = folder / "setup.log"

    def owned(*command: str) -> None:
        # From the cluster's folder: the caller's may be closed to the cluster's owner.
        with open(log, "a") as out:
            done = subprocess.run(
                [*as_owner, *command], cwd=folder, stdout=out, stderr=subprocess.STDOUT
            )
        if done.returncode != 0:
            text = log.read_text() + (folder / "server.log").read_text(errors="replace")
            raise RuntimeError(f"{Path(command[0]).name} failed:\n{text[-2000:]}")

    data = str(folder / "data")
    started = False
    try:
        owned(str(bindir / "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
              "--locale=C.UTF-8")  # fmt: skip
        for attempt in range(3):  # another process may take the free port before the server
            port = free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder}"
            if not fsync:
                options += " -F"
            try:
                owned(str(bindir / "pg_ctl"), "start", "-D", data, "-w", "-t", "60",
                      "-l", str(folder / "server.log"), "-o", options)  # fmt: skip
            except RuntimeError:
                if attempt == 2:
                    raise
                continue
            started = True
            break
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            with contextlib.suppress(RuntimeError):
                owned(str(bindir / "pg_ctl"), "stop", "-D", data, "-m", "fast", "-t", "30")
        shutil.rmtree(folder, ignore_errors=True)


def with_param(url: str, param: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{param}"


def server_facts(url: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
        commit = conn.execute("SHOW synchronous_commit").fetchone()
        method = conn.execute("SHOW wal_sync_method").fetchone()
    assert version and fsync and commit and method
    return (
        f"PostgreSQL {version[0]}, fsync={fsync[0]}, synchronous_commit={commit[0]}, "
        f"wal_sync_method={method[0]}"
    )


def journal_rows(url: str) -> dict[str, int]:
    """How many changes the PostgreSQL journal holds, by status (none before its first use)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        present = conn.execute("SELECT to_regclass('compensator.changes')").fetchone()
        if present is None or present[0] is None:
            return {}
        return dict(
            conn.execute("SELECT status, count(*) FROM compensator.changes GROUP BY status")
        )


def check_postgres_journal(
    url: str, before: dict[str, int], expected: int, hosts: Sequence[str]
) -> str:
    """Every change the run made through PostgreSQL is there, settled ok, from every host."""
    import psycopg

    after = journal_rows(url)
    added = {status: after[status] - before.get(status, 0) for status in after}
    added = {status: count for status, count in added.items() if count}
    with psycopg.connect(url, autocommit=True) as conn:
        found = {row[0] for row in conn.execute("SELECT DISTINCT host FROM compensator.sessions")}
    total = sum(added.values())
    missing = sorted(set(hosts) - found)
    good = total == expected and set(added) == {Status.OK} and not missing
    return (
        f"PostgreSQL journal check: {total} changes written (expected {expected}), by status "
        f"{added}, hosts missing: {', '.join(missing) or 'none'}: {'ok' if good else 'BAD'}"
    )


# -- the contestants --------------------------------------------------------------------------


def proxy_params(db: str, workdir: Path, host: str) -> StdioServerParameters:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COMPENSATOR_WORKDIR": str(workdir), "COMPENSATOR_HOST": host}
    args = ["-m", "compensator.proxy", "--config", str(CONFIG), "--db", db]
    args += ["--log-level", "WARNING"]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(HERE))


def failed(result: Any) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


@dataclass
class Tally:
    samples: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0  # wall time of the bursts (several sessions at once)


async def time_calls(call: Callable[[], Awaitable[Any]], count: int, tally: Tally) -> None:
    for _ in range(count):
        started = time.perf_counter()
        result = await call()
        tally.samples.append(time.perf_counter() - started)
        tally.errors += failed(result)


async def burst(
    sessions: Sequence[ClientSession], seconds: float, per_proxy: int, tally: Tally
) -> None:
    """Every session calls bench__bump back to back, all at once, until the deadline (or
    `per_proxy` calls each)."""
    started = time.perf_counter()
    deadline = started + seconds

    async def worker(session: ClientSession) -> None:
        made = 0
        while (made < per_proxy) if per_proxy else (time.perf_counter() < deadline):
            began = time.perf_counter()
            result = await session.call_tool("bench__bump", {"by": 1})
            tally.samples.append(time.perf_counter() - began)
            tally.errors += failed(result)
            made += 1

    async with anyio.create_task_group() as group:
        for session in sessions:
            group.start_soon(worker, session)
    tally.seconds += time.perf_counter() - started


def unchained(journal: JournalStore) -> JournalStore:
    """A store that appends no links to the hash chain: the baseline of what the chain costs
    (its own journal file; on PostgreSQL its changes are outside the chain, which nothing here
    verifies)."""
    journal._chained = False  # type: ignore[attr-defined]  # a switch for this benchmark only
    return journal


def journal_call(journal: JournalStore) -> Callable[[], Awaitable[None]]:
    """What the proxy writes for one journaled call, straight to the store."""
    intent = Intent(tool="bench__bump", classification="reversible", args={"by": 1})

    async def call() -> None:
        change = journal.record_intent(intent)
        journal.record_outcome(change, status=Status.OK, result={"value": change})

    return call


async def journal_burst(
    journals: Sequence[JournalStore], seconds: float, per_proxy: int, tally: Tally
) -> None:
    """Every store writes intent + outcome back to back, each in a thread of its own (the
    drivers let go of the GIL while they wait), until the deadline (or `per_proxy` each)."""
    intent = Intent(tool="bench__bump", classification="reversible", args={"by": 1})

    def worker(journal: JournalStore, deadline: float) -> None:
        made = 0
        while (made < per_proxy) if per_proxy else (time.perf_counter() < deadline):
            began = time.perf_counter()
            change = journal.record_intent(intent)
            journal.record_outcome(change, status=Status.OK, result={"value": change})
            tally.samples.append(time.perf_counter() - began)
            made += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for journal in journals:
            group.start_soon(anyio.to_thread.run_sync, worker, journal, started + seconds)
    tally.seconds += time.perf_counter() - started


@contextlib.asynccontextmanager
async def open_all(wanted: dict[str, StdioServerParameters]) -> Any:
    """Every session at once (a proxy spends most of its start-up importing: on several cores
    they overlap), each held open by a task of its own until the block ends."""
    opened: dict[str, ClientSession] = {}
    done = anyio.Event()

    async def hold(name: str, params: StdioServerParameters) -> None:
        workdir = (params.env or {}).get("COMPENSATOR_WORKDIR")
        errlog = Path(workdir) / "stderr.log" if workdir else None  # a proxy's, and its server's
        try:
            with open(errlog or os.devnull, "w") as err:
                async with (
                    stdio_client(params, errlog=err) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    opened[name] = session
                    await done.wait()
        except Exception:
            if errlog is not None and errlog.exists():
                print(f"{name} failed; its stderr:\n{errlog.read_text()[-3000:]}", file=sys.stderr)
            raise

    async with anyio.create_task_group() as group:
        for name, params in wanted.items():
            group.start_soon(hold, name, params)
        while len(opened) < len(wanted):
            await anyio.sleep(0.05)
        try:
            yield opened
        finally:
            done.set()


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Options:
    rounds: int
    calls: int
    warmup: int
    seconds: float
    per_proxy: int
    proxies: int


async def run(url: str, options: Options) -> None:
    tallies: dict[str, Tally] = {}
    before = journal_rows(url)
    with tempfile.TemporaryDirectory(prefix="compensator-bench-") as name:
        tmp = Path(name)
        sqlite_db = str(tmp / "journal.db")
        # Created before the proxies start: SQLite journals opened for the first time by
        # several processes at once race to create the tables, and all but one fail.
        open_journal(sqlite_db).close()
        hosts = [f"host-{n}" for n in range(1, options.proxies + 1)]
        wanted = {"direct": StdioServerParameters(command=SERVER[0], args=SERVER[1:],
                                                  cwd=str(HERE))}  # fmt: skip
        for host in hosts:
            wanted[f"pg {host}"] = proxy_params(url, tmp / "pg" / host, host)
            wanted[f"sqlite {host}"] = proxy_params(sqlite_db, tmp / "sqlite" / host, host)
        wanted["pg no-wait"] = proxy_params(
            with_param(url, NO_WAIT), tmp / "pg" / "no-wait", "host-no-wait"
        )
        started = time.perf_counter()
        async with open_all(wanted) as sessions:
            print(f"{len(wanted)} sessions open in {time.perf_counter() - started:.1f} s")
            # One store per writer, as one per proxy: JS and JP are the first of them.
            writers = {
                "JS": [open_journal(tmp / "alone.db") for _ in hosts],
                "JP": [open_journal(url) for _ in hosts],
                "JQ": [open_journal(with_param(url, NO_WAIT))],
                "JS-": [unchained(open_journal(tmp / "unchained.db"))],
                "JP-": [unchained(open_journal(url))],
            }
            try:
                await rounds(sessions, writers, hosts, options, tallies)
            finally:
                for journal in (journal for group in writers.values() for journal in group):
                    journal.close()
    # Through PostgreSQL: P+, Q+, the bursts on it, and JP / JQ: one change per call.
    written = sum(
        len(tally.samples)
        for key, tally in tallies.items()
        if key in ("P+", "Q+", "JP", "JQ", "JP-")
    )
    written += sum(len(tallies[key].samples) for key in tallies if key.startswith(("PG", "JP ")))
    written += options.warmup * 5  # P+, Q+, JP, JQ, JP- warmed up with mutating calls
    written += options.warmup * (len(hosts) - 1)  # the other PostgreSQL proxies' warm-up
    report(tallies, options)
    print(check_postgres_journal(url, before, written, [*hosts, "host-no-wait"]))


async def rounds(
    sessions: dict[str, ClientSession],
    writers: dict[str, list[JournalStore]],
    hosts: list[str],
    options: Options,
    tallies: dict[str, Tally],
) -> None:
    direct, pg, sqlite = sessions["direct"], sessions["pg host-1"], sessions["sqlite host-1"]
    no_wait = sessions["pg no-wait"]

    def read(session: ClientSession, tool: str) -> Callable[[], Awaitable[Any]]:
        return lambda: session.call_tool(tool, {})

    def bump(session: ClientSession, tool: str) -> Callable[[], Awaitable[Any]]:
        return lambda: session.call_tool(tool, {"by": 1})

    one_at_a_time: dict[str, Callable[[], Awaitable[Any]]] = {
        "A": read(direct, "ping"),
        "A+": bump(direct, "bump"),
        "S": read(sqlite, "bench__ping"),
        "S+": bump(sqlite, "bench__bump"),
        "P": read(pg, "bench__ping"),
        "P+": bump(pg, "bench__bump"),
        "Q": read(no_wait, "bench__ping"),
        "Q+": bump(no_wait, "bench__bump"),
        **{key: journal_call(group[0]) for key, group in writers.items()},
    }
    many = len(hosts)
    together = {
        "PG x1": [pg],
        f"PG x{many}": [sessions[f"pg {host}"] for host in hosts],
        f"SQLite x{many}": [sessions[f"sqlite {host}"] for host in hosts],
    }
    # The journal alone with several writers: whether it serializes them, apart from MCP's CPU.
    alone = {"JP x1": writers["JP"][:1], f"JP x{many}": writers["JP"], f"JS x{many}": writers["JS"]}
    # Warm up: every session (the first calls of a process are slow) and every journal.
    for call in one_at_a_time.values():
        await time_calls(call, options.warmup, Tally())
    for host in hosts[1:]:
        for kind in ("pg", "sqlite"):
            await time_calls(bump(sessions[f"{kind} {host}"], "bench__bump"), options.warmup,
                             Tally())  # fmt: skip
    order = [*one_at_a_time, *together, *alone]
    for index in range(options.rounds):
        random.shuffle(order)
        for key in order:
            tally = tallies.setdefault(key, Tally())
            if key in together:
                await burst(together[key], options.seconds, options.per_proxy, tally)
            elif key in alone:
                # A count, not seconds: SQLite writes ~8,000 changes a second here, and the
                # OS writing them back to disk would slow PostgreSQL's WAL flushes after it.
                each = options.per_proxy or options.calls
                await journal_burst(alone[key], options.seconds, each, tally)
            else:
                await time_calls(one_at_a_time[key], options.calls, tally)
        print(f"  round {index + 1}/{options.rounds} done", file=sys.stderr)


# -- the report -------------------------------------------------------------------------------

LABELS = {
    "A": "direct, read (ping)",
    "A+": "direct, mutating (bump)",
    "S": "proxy, SQLite journal, read",
    "S+": "proxy, SQLite journal, journaled mutating",
    "P": "proxy, PostgreSQL journal, read",
    "P+": "proxy, PostgreSQL journal, journaled mutating",
    "Q": "proxy, PostgreSQL, synchronous_commit=off, read",
    "Q+": "proxy, PostgreSQL, synchronous_commit=off, mutating",
    "JS": "journal alone, SQLite: intent + outcome",
    "JP": "journal alone, PostgreSQL: intent + outcome",
    "JQ": "journal alone, PostgreSQL, sync_commit=off",
    "JS-": "journal alone, SQLite, no hash chain",
    "JP-": "journal alone, PostgreSQL, no hash chain",
}


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(tallies: dict[str, Tally], options: Options) -> None:
    ms = {key: statistics.median(tally.samples) * 1000 for key, tally in tallies.items()}
    errors = {key: tally.errors for key, tally in tallies.items() if tally.errors}
    print(f"{options.rounds} rounds, interleaved; {options.calls} calls per contestant per "
          f"round; medians per call")  # fmt: skip
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, "
          f"load average {os.getloadavg()[1]:.1f} over the last 5 minutes")  # fmt: skip
    for key, label in LABELS.items():
        print(f"  {key:<3} {label:<52} {ms[key]:7.3f} ms")
    downstream = ms["A+"] - ms["A"]
    adds = {x: (ms[f"{x}+"] - ms[x]) - downstream for x in ("S", "P", "Q")}
    print(f"the downstream's own mutating - read (A+ - A)          {downstream:+7.3f} ms")
    print(f"what journaling adds, (X+ - X) - (A+ - A):  SQLite     {adds['S']:+7.3f} ms")
    print(f"                                            PostgreSQL {adds['P']:+7.3f} ms")
    print(f"          PostgreSQL, synchronous_commit=off (Q)       {adds['Q']:+7.3f} ms")
    print(
        f"PostgreSQL - SQLite, through the proxy                 {adds['P'] - adds['S']:+7.3f} ms"
    )
    print(f"PostgreSQL - SQLite, journal alone (JP - JS)           {ms['JP'] - ms['JS']:+7.3f} ms")
    print(f"WAL flush wait, journal alone (JP - JQ)                {ms['JP'] - ms['JQ']:+7.3f} ms")
    chain = {"S": ms["JS"] - ms["JS-"], "P": ms["JP"] - ms["JP-"]}
    print(f"what the hash chain adds, journal alone: SQLite (JS - JS-) {chain['S']:+7.3f} ms")
    print(f"                                    PostgreSQL (JP - JP-) {chain['P']:+7.3f} ms")
    verdict = "met" if chain["S"] <= CHAIN_TARGET_MS else "MISSED"
    print(f"TARGET the hash chain on SQLite <= +{CHAIN_TARGET_MS:.3f} ms per mutating call: "
          f"{verdict} ({chain['S']:+.3f} ms)")  # fmt: skip
    verdict = "met" if adds["P"] <= TARGET_MS else "MISSED"
    print(f"TARGET journaling on PostgreSQL <= +{TARGET_MS:.3f} ms per mutating call: {verdict} "
          f"({adds['P']:+.3f} ms)")  # fmt: skip
    if options.per_proxy:
        how = f"{options.per_proxy} calls each per round"
    else:
        how = f"{options.seconds:g} s per round"
    each = options.per_proxy or options.calls
    print(f"several at once: PG / SQLite xN = N proxies calling bench__bump, {how};")
    print(
        f"  JP / JS xN = N journal stores (a thread each), intent + outcome, {each} each per round"
    )
    print(f"  {'':<12} {'calls':>7} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    rates = {}
    many = options.proxies
    for key in ("PG x1", f"PG x{many}", f"SQLite x{many}", "JP x1", f"JP x{many}", f"JS x{many}"):
        tally = tallies[key]
        rates[key] = len(tally.samples) / tally.seconds
        print(f"  {key:<12} {len(tally.samples):>7} {rates[key]:>8.0f} "
              f"{percentile(tally.samples, 0.5) * 1000:>8.2f} "
              f"{percentile(tally.samples, 0.99) * 1000:>8.2f}")  # fmt: skip
    pg_many, sqlite_many = rates[f"PG x{many}"], rates[f"SQLite x{many}"]
    print(f"PG x{many} / PG x1 calls/s: x{pg_many / rates['PG x1']:.2f};   "
          f"PG x{many} / SQLite x{many}: x{pg_many / sqlite_many:.2f};   "
          f"JP x{many} / JP x1: x{rates[f'JP x{many}'] / rates['JP x1']:.2f}")  # fmt: skip
    if errors:
        print(f"CALLS THAT FAILED: {errors}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=80, help="calls per contestant per round")
    parser.add_argument("--warmup", type=int, default=30, help="calls per session first")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="seconds of each several-proxies burst per round")  # fmt: skip
    parser.add_argument("--per-proxy", type=int, default=0,
                        help="calls per proxy per burst instead of --seconds")  # fmt: skip
    parser.add_argument("--proxies", type=int, default=8, help="proxies calling at once")
    parser.add_argument("--url", help="a PostgreSQL server of your own, not a throwaway one")
    parser.add_argument(
        "--pg-fsync",
        choices=("on", "off"),
        default="on",
        help="the throwaway cluster's fsync (default on: the server's default)",
    )
    args = parser.parse_args()
    options = Options(args.rounds, args.calls, args.warmup, args.seconds, args.per_proxy,
                      args.proxies)  # fmt: skip
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(throwaway_postgres(args.pg_fsync == "on"))
        print(f"journal on {url}: {server_facts(url)}")
        anyio.run(run, url, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
