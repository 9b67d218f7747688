"""Crash fault injection: SIGKILL the proxy during forwarded calls and during undo_to, on
either journal backend (each test runs twice: `sqlite`, a journal file, and `postgres`, a
fresh database on the suite's PostgreSQL server, tests/postgres.py).

Downstream is tests/servers/ledger_server.py, a key-value store that writes one ledger line per
mutation it applied (and one per call it received), so after every kill the test knows exactly
what reached the server. Each iteration uses fresh keys and never-reused values ("v17"), so
every compensating call in the ledger names the change it compensates: put(k, v) undoes the
put on k whose previous value was v, delete(k) the put on k whose previous value was null.

After each kill a new proxy starts on the same journal and the test checks:
  lost = 0    every mutating call the server received is in the journal;
  unknown     calls whose outcome was never recorded are `unknown` and listed by list_changes;
  resumable   undo_to continues an interrupted undo; steps recorded done are not re-run;
  twice = 0   no change is compensated twice (the compensating tools are not idempotent);
  integrity   the journal is consistent: SQLite's PRAGMA integrity_check passes (on
              PostgreSQL the server keeps that promise), every compensation has its change,
              and no change is still `pending` for a session that has ended; the store
              matches the ledger and what undo should have left.
Two more tests hold a compensating call in flight (the server applied it and waits before
answering), kill the proxy, and show what happens to that in-doubt step: re-sent only when
its tool is `idempotent: true`, reported "in doubt:" otherwise, re-sent by force=true.

The random moments come from one seed, printed with every failure; set
COMPENSATOR_CRASH_SEED to replay a run. Counts go to tests/faults.py's tally.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import Awaitable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from psycopg.rows import dict_row

from compensator.journal import is_postgres_url
from pytest_compensator.client import ProxyClient
from tests.faults import tally

pytestmark = pytest.mark.anyio

LEDGER_SERVER = Path(__file__).resolve().parent / "servers" / "ledger_server.py"
SEED = int(os.environ.get("COMPENSATOR_CRASH_SEED") or random.SystemRandom().randrange(2**31))
CALL_KILLS = 12
UNDO_KILLS = 12
DURING_CALL = "SIGKILL during call"
DURING_UNDO = "SIGKILL during undo"
# Long enough that a call is certainly still in flight when the test kills the proxy; the
# test shortens it (the server re-reads its delay file) once the proxy is dead.
HOLD = 60.0

REGISTRY = """\
servers:
  ledger:
    command: "${{COMPENSATOR_PYTHON}}"
    args: [{server}]
    env: {{LEDGER_DIR: {ledger_dir}}}
tools:
  ledger__get: {{classification: read}}
  ledger__dump: {{classification: read}}
  ledger__put:
    classification: reversible
    inverse:
      - tool: ledger__delete
        args: {{key: "{{args.key}}"}}
        when: "result.previous == `null`"
      - tool: ledger__put
        args: {{key: "{{args.key}}", value: "{{result.previous}}"}}
        when: "result.previous != `null`"
  ledger__delete:
    classification: compensable
    idempotent: {idempotent}
    snapshot_tool: ledger__get
    snapshot_args: {{key: "{{args.key}}"}}
    inverse:
      - tool: ledger__put
        args: {{key: "{{args.key}}", value: "{{snapshot.value}}"}}
        when: "snapshot.value != `null`"
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres_journal)])
def journal_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the proxies journal: a SQLite file, or the URL of a fresh PostgreSQL database
    (its fixture requested only for that variant, so the SQLite one needs no server)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return tmp_path / "journal.db"


# -- the rig: a journal, a ledger folder, and proxies started and killed on them ---------------


@dataclass
class Running:
    """One proxy process and the MCP session to it."""

    client: ProxyClient
    pid: int
    server_pid: int
    stack: AsyncExitStack

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Leave the session; after a kill this reaps the dead proxy. (The SDK bounds every
        wait of its shutdown; a timeout scope here would have to nest inside the stack's.)"""
        await self.stack.aclose()


class Rig:
    """One journal, one ledger folder, the registry over them, and proxies started on them."""

    def __init__(
        self, tmp: Path, *, journal: Path | str | None = None, idempotent_delete: bool = False
    ) -> None:
        self.tmp = tmp
        self.dir = tmp / "ledger"
        self.dir.mkdir()
        self.db: Path | str = tmp / "journal.db" if journal is None else journal
        self.config = tmp / "registry.yaml"
        self.config.write_text(
            REGISTRY.format(
                server=json.dumps(str(LEDGER_SERVER)),
                ledger_dir=json.dumps(str(self.dir)),
                idempotent=json.dumps(idempotent_delete),
            )
        )
        self.starts = 0
        self.values = 0

    def value(self) -> str:
        self.values += 1
        return f"v{self.values}"

    def delay(self, before: float = 0.0, after: float = 0.0) -> None:
        """How long every mutating call waits before applying, and after, before answering."""
        tmp = self.dir / "delay.tmp"
        tmp.write_text(f"{before} {after}")
        os.replace(tmp, self.dir / "delay")

    def _lines(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def ledger(self) -> list[dict[str, Any]]:
        return self._lines("ledger.jsonl")

    def received(self) -> list[dict[str, Any]]:
        return self._lines("received.jsonl")

    def store(self) -> dict[str, Any]:
        path = self.dir / "store.json"
        return json.loads(path.read_text()) if path.exists() else {}

    async def start(self) -> Running:
        self.starts += 1
        pidfile = self.tmp / f"proxy-{self.starts}.pid"
        servers_before = len(self._lines("pids"))
        # sh writes its own pid and execs the proxy in place, so the pid is the proxy's.
        params = StdioServerParameters(
            command="/bin/sh",
            args=[
                "-c",
                'echo $$ > "$0"; exec "$@"',
                str(pidfile),
                sys.executable,
                "-m",
                "compensator.proxy",
                "--config",
                str(self.config),
                "--db",
                str(self.db),
            ],
            env=dict(os.environ),
        )
        stack = AsyncExitStack()
        try:
            log = stack.enter_context((self.tmp / "proxy-stderr.log").open("a"))
            read, write = await stack.enter_async_context(stdio_client(params, errlog=log))
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(30):
                await session.initialize()
        except BaseException:
            await stack.aclose()
            raise
        servers = self._lines("pids")
        assert len(servers) > servers_before, f"proxy {self.starts} started no ledger server"
        pid = int(pidfile.read_text())
        return Running(ProxyClient(session), pid, int(servers[-1]["pid"]), stack)

    def journal(self) -> Journal:
        return Journal.read(self.db)

    async def journal_released(self) -> None:
        """Wait until no proxy is connected to a PostgreSQL journal any more. A killed proxy
        counts as dead once PostgreSQL has seen its connection close, which its backend
        notices a moment after the kill (SQLite: once the process is gone, which
        `Running.close` waits for); the next proxy must start after that."""
        if not is_postgres_url(self.db):
            return
        with anyio.move_on_after(15):
            while proxy_backends(str(self.db)):
                await anyio.sleep(0.02)
            return
        raise AssertionError(
            f"proxies still connected to the journal: {proxy_backends(str(self.db))}"
        )

    def stderr_tail(self, lines: int = 25) -> list[str]:
        path = self.tmp / "proxy-stderr.log"
        return path.read_text().splitlines()[-lines:] if path.exists() else []


def pid_alive(pid: int) -> bool:
    """Whether the process runs (a zombie, exited but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pid: int, what: str) -> None:
    with anyio.move_on_after(15):
        while pid_alive(pid):
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"{what} (pid {pid}) still runs 15 s after its proxy was killed")


# -- the journal as its database sees it -----------------------------------------------------

TEST_APPLICATION = "compensator-tests"
"""The application_name of the tests' own PostgreSQL connections; the proxy's say
`mcp-compensator`."""


def pg_connect(url: str) -> psycopg.Connection[dict[str, Any]]:
    """A connection of the test's own to a PostgreSQL journal, in the journal's schema."""
    con = psycopg.connect(
        url,
        autocommit=True,
        row_factory=dict_row,
        application_name=TEST_APPLICATION,
        connect_timeout=10,
    )
    con.execute("SET search_path = compensator, pg_catalog")
    return con


def proxy_backends(url: str) -> list[int]:
    """The server processes of the journal stores connected to this database (the proxies')."""
    with pg_connect(url) as con:
        rows = con.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'mcp-compensator'"
        ).fetchall()
    return [int(row["pid"]) for row in rows]


CONSISTENCY = {
    "compensations whose change is missing": (
        "SELECT s.id FROM compensations s LEFT JOIN changes c ON c.id = s.change_id "
        "WHERE c.id IS NULL ORDER BY s.id"
    ),
    # recover_abandoned ends a dead session and marks its pending calls unknown together.
    "changes still pending whose session has ended": (
        "SELECT c.id FROM changes c LEFT JOIN sessions s ON s.id = c.session "
        "WHERE c.status = 'pending' AND (s.id IS NULL OR s.ended_at IS NOT NULL) ORDER BY c.id"
    ),
}
"""Queries (the same on both backends) for rows no journal may hold; each names what it
found."""

CHANGES = "SELECT id, tool, status, args, result, undone_at, undo_note FROM changes ORDER BY id"
STEPS = "SELECT id, change_id, step, tool, args, status FROM compensations ORDER BY id"


@dataclass
class Journal:
    integrity: str  # "ok", or what is wrong
    changes: list[dict[str, Any]]
    steps: list[dict[str, Any]]

    @classmethod
    def read(cls, db: Path | str) -> Journal:
        con: Any
        if is_postgres_url(db):
            # PostgreSQL guards its own pages; what is checked is what the journal promises.
            con = pg_connect(str(db))
            problems = []
        else:
            con = sqlite3.connect(db, timeout=10)
            con.row_factory = sqlite3.Row
            pragma = "; ".join(str(r[0]) for r in con.execute("PRAGMA integrity_check"))
            problems = [] if pragma == "ok" else [f"PRAGMA integrity_check: {pragma}"]
        try:
            for what, query in CONSISTENCY.items():
                found = [dict(r)["id"] for r in con.execute(query)]
                if found:
                    problems.append(f"{what}: {found}")
            changes = [dict(r) for r in con.execute(CHANGES)]
            steps = [dict(r) for r in con.execute(STEPS)]
        finally:
            con.close()
        integrity = "; ".join(problems) or "ok"
        for row in [*changes, *steps]:
            for key in ("args", "result"):
                if isinstance(row.get(key), str):
                    row[key] = json.loads(row[key])
        return cls(integrity, changes, steps)

    def of(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        wanted = set(keys)
        return [c for c in self.changes if (c["args"] or {}).get("key") in wanted]

    def steps_of(self, change_id: int) -> list[dict[str, Any]]:
        return [s for s in self.steps if s["change_id"] == change_id]


# -- what the ledger says ------------------------------------------------------------------


@dataclass
class Ledger:
    """The ledger split into forwarded puts (fresh values) and compensating calls."""

    originals: list[dict[str, Any]] = field(default_factory=list)
    compensations: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def split(cls, lines: list[dict[str, Any]]) -> Ledger:
        ledger = cls()
        seen: set[str] = set()
        for line in lines:
            value = line["args"].get("value")
            if line["tool"] == "put" and value not in seen:
                seen.add(value)
                ledger.originals.append(line)
            else:
                ledger.compensations.append(line)
        return ledger

    def compensated(self, key: str, previous: Any) -> int:
        """How many compensating calls undid the put on `key` whose previous value was
        `previous` (delete(key) when it was null, put(key, previous) otherwise)."""
        return sum(
            1
            for line in self.compensations
            if line["args"]["key"] == key
            and (
                (line["tool"] == "delete" and previous is None)
                or (
                    line["tool"] == "put"
                    and previous is not None
                    and line["args"]["value"] == previous
                )
            )
        )


def replay(lines: list[dict[str, Any]]) -> dict[str, Any]:
    store: dict[str, Any] = {}
    for line in lines:
        if line["tool"] == "put":
            store[line["args"]["key"]] = line["args"]["value"]
        else:
            store.pop(line["args"]["key"], None)
    return store


# -- one iteration's audit -------------------------------------------------------------------


@dataclass
class Audit:
    """Problems found in one iteration, with what is needed to explain them."""

    seed: int
    kind: str
    iteration: int
    keys: list[str]
    problems: list[str] = field(default_factory=list)
    lost_calls: set[str] = field(default_factory=set)  # values received but not journaled
    twice_changes: set[int] = field(default_factory=set)  # ids compensated more than once
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return len(self.lost_calls)

    @property
    def twice(self) -> int:
        return len(self.twice_changes)

    def check(self, ok: bool, problem: str) -> None:
        if not ok and problem not in self.problems:
            self.problems.append(problem)

    def report(self, rig: Rig) -> str:
        journal = rig.journal()
        keys = set(self.keys)
        lines = [
            f"{self.kind}, iteration {self.iteration}, seed {self.seed} "
            f"(replay with COMPENSATOR_CRASH_SEED={self.seed}): {len(self.problems)} problem(s)",
            *(f"  - {p}" for p in self.problems),
            f"journal integrity: {journal.integrity}",
            "journal changes of this iteration:",
            *(f"  {c}" for c in journal.of(keys)),
            "journal compensations of those changes:",
            *(f"  {s}" for c in journal.of(keys) for s in journal.steps_of(c["id"])),
            "ledger (applied) for these keys:",
            *(f"  {line}" for line in rig.ledger() if line["args"]["key"] in keys),
            "received for these keys:",
            *(f"  {line}" for line in rig.received() if line["args"]["key"] in keys),
            *(f"{name}: {value}" for name, value in self.notes.items()),
            "tail of the proxies' stderr:",
            *(f"  {line}" for line in rig.stderr_tail()),
        ]
        return "\n".join(lines)


def audit_journal_and_ledger(audit: Audit, rig: Rig, *, final: bool) -> Journal:
    """The invariants that hold after any restart: integrity, nothing pending, nothing lost,
    nothing compensated twice, no compensating step recorded done twice, the store is what the
    ledger says. `final`: undo has run to the end, so every change is undone or left open for a
    reason, and the store must be what undo should have left."""
    journal = rig.journal()
    keys = set(audit.keys)
    changes = journal.of(keys)
    lines = rig.ledger()
    ledger = Ledger.split(lines)
    audit.check(journal.integrity == "ok", f"journal integrity: {journal.integrity}")
    pending = [c["id"] for c in journal.changes if c["status"] == "pending"]
    audit.check(not pending, f"changes {pending} still `pending` after a restart")

    # lost: every forwarded put the server received has its intent in the journal.
    journaled = {(c["args"]["key"], c["args"].get("value")) for c in changes}
    received = Ledger.split([r for r in rig.received() if r["args"]["key"] in keys]).originals
    missing = [
        r["args"] for r in received if (r["args"]["key"], r["args"]["value"]) not in journaled
    ]
    audit.lost_calls.update(str(args["value"]) for args in missing)
    audit.check(not missing, f"lost: the server received {missing} but the journal has no change")

    # the journal's `ok` results agree with what the server applied.
    applied = {(o["args"]["key"], o["args"]["value"]): o for o in ledger.originals}
    for change in changes:
        key, value = change["args"]["key"], change["args"]["value"]
        if change["status"] == "ok":
            line = applied.get((key, value))
            audit.check(
                line is not None and change["result"] == {"previous": line["previous"]},
                f"change {change['id']} is ok with result {change['result']} but the ledger "
                f"shows {line}",
            )

    # twice: each change's compensation reached the server at most once; steps recorded ok once.
    for change in changes:
        key = change["args"]["key"]
        line = applied.get((key, change["args"]["value"]))
        if line is None:
            continue
        count = ledger.compensated(key, line["previous"])
        if count > 1:
            audit.twice_changes.add(change["id"])
        audit.check(count <= 1, f"twice: change {change['id']} was compensated {count} times")
        done = Counter(s["step"] for s in journal.steps_of(change["id"]) if s["status"] == "ok")
        audit.check(
            all(n == 1 for n in done.values()),
            f"change {change['id']}: a step recorded ok more than once: {dict(done)}",
        )
    store = rig.store()
    audit.check(store == replay(lines), f"the store {store} is not the ledger's replay")

    if final:
        expected: dict[str, Any] = {}
        for line in ledger.originals:
            if line["args"]["key"] in keys:
                expected[line["args"]["key"]] = line["args"]["value"]
        for change in sorted(changes, key=lambda c: c["id"], reverse=True):
            key = change["args"]["key"]
            line = applied.get((key, change["args"]["value"]))
            count = 0 if line is None else ledger.compensated(key, line["previous"])
            if change["undone_at"] is not None:
                audit.check(
                    change["status"] == "error" or count == 1,
                    f"change {change['id']} is marked undone but its compensation reached the "
                    f"server {count} times",
                )
            if count and line is not None:
                if line["previous"] is None:
                    expected.pop(key, None)
                else:
                    expected[key] = line["previous"]
        now = {k: v for k, v in store.items() if k in keys}
        audit.check(now == expected, f"after undo the store holds {now}, expected {expected}")
    return journal


# -- driving calls and kills -----------------------------------------------------------------


@dataclass
class Calls:
    answered: dict[tuple[str, str], Any] = field(default_factory=dict)  # (key, value) -> result
    failed: dict[tuple[str, str], str] = field(default_factory=dict)


async def put_all(client: ProxyClient, plan: dict[str, list[str]], calls: Calls) -> None:
    """Put each key's values in order, keys concurrently; stop a key at its first failure."""

    async def one_key(key: str, values: list[str]) -> None:
        for value in values:
            try:
                reply = await client.call("ledger__put", {"key": key, "value": value})
            except Exception as exc:  # the proxy died under the call
                calls.failed[(key, value)] = f"{type(exc).__name__}: {exc}"
                return
            if reply.is_error:
                calls.failed[(key, value)] = reply.text
                return
            calls.answered[(key, value)] = reply.value

    async with anyio.create_task_group() as tg:
        for key, values in plan.items():
            tg.start_soon(one_key, key, values)


def make_plan(rig: Rig, rng: random.Random, iteration: int) -> dict[str, list[str]]:
    keys = [f"i{iteration}k{j}" for j in range(rng.randint(2, 4))]
    return {key: [rig.value() for _ in range(rng.randint(1, 4))] for key in keys}


def draw_delay(rng: random.Random) -> tuple[float, float]:
    if rng.random() < 0.25:
        return 0.0, 0.0
    return round(rng.uniform(0, 0.15), 3), round(rng.uniform(0, 0.15), 3)


async def kill_after(running: Running, seconds: float, work: Awaitable[Any]) -> Any:
    """Await `work` and SIGKILL the proxy `seconds` after it started; returns what `work`
    returned, or None when the kill cut it short."""
    outcome: dict[str, Any] = {}

    async def run() -> None:
        try:
            outcome["value"] = await work
        except Exception as exc:  # the connection closed under the call
            outcome["error"] = exc

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(seconds)  # the fault's random moment, not a synchronisation
            running.kill()
    return outcome.get("value")


async def restart(rig: Rig, dead: Running) -> Running:
    """Reap the killed proxy, start a new one on the same journal, and wait until the old
    downstream (orphaned, maybe finishing a call) has exited before anyone reads the ledger."""
    await dead.close()
    await rig.journal_released()
    rig.delay(0, 0)
    running = await rig.start()
    await wait_gone(dead.server_pid, "the killed proxy's ledger server")
    return running


async def listed(client: ProxyClient, checkpoint: int | None = None) -> dict[int, str]:
    return {c["id"]: c["status"] for c in await client.list_changes(checkpoint)}


def ids(entries: list[dict[str, Any]]) -> set[int]:
    return {int(e["id"]) for e in entries}


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.thorough
async def test_sigkill_during_forwarded_calls(tmp_path: Path, journal_db: Path | str) -> None:
    """Kill the proxy at a random moment while puts are in flight (some slow, some concurrent);
    the next proxy finds every received call journaled, the unanswered ones `unknown` and
    listed, and undo_to puts back exactly the changes known to have happened."""
    rng = random.Random(SEED)
    rig = Rig(tmp_path, journal=journal_db)
    stats: Counter[str] = Counter()
    injected = survived = lost = twice = 0
    running = await rig.start()
    try:
        for iteration in range(CALL_KILLS):
            plan = make_plan(rig, rng, iteration)
            audit = Audit(SEED, DURING_CALL, iteration, list(plan))
            checkpoint = await running.client.checkpoint()
            before, after = draw_delay(rng)
            rig.delay(before, after)
            longest = max(len(v) for v in plan.values()) * (before + after + 0.03)
            moment = round(rng.uniform(0, longest), 3)
            audit.notes["delay (before, after), kill at"] = (before, after, moment)
            calls = Calls()
            await kill_after(running, moment, put_all(running.client, plan, calls))
            injected += 1
            running = await restart(rig, running)

            journal = audit_journal_and_ledger(audit, rig, final=False)
            changes = journal.of(plan)
            by_value = {c["args"]["value"]: c for c in changes}
            for (key, value), result in calls.answered.items():
                change = by_value.get(value)
                audit.check(
                    change is not None and change["status"] == "ok" and change["result"] == result,
                    f"put({key}, {value}) was answered {result} but the journal has {change}",
                )
            statuses = {c["status"] for c in changes}
            audit.check(statuses <= {"ok", "unknown"}, f"unexpected statuses {statuses}")
            unknown = {c["id"] for c in changes if c["status"] == "unknown"}
            seen = {(r["args"]["key"], r["args"].get("value")) for r in rig.received()}
            done = {(r["args"]["key"], r["args"].get("value")) for r in rig.ledger()}
            for c in changes:
                call = (c["args"]["key"], c["args"]["value"])
                if c["status"] == "unknown":
                    outcome = (
                        "applied" if call in done else "received" if call in seen else "unsent"
                    )
                    stats[f"unknown, {outcome}"] += 1
                elif call not in calls.answered:
                    stats["ok, unanswered"] += 1
                else:
                    stats["ok, answered"] += 1
            in_checkpoint = await listed(running.client, checkpoint)
            everything = await listed(running.client)
            audit.notes["list_changes(checkpoint)"] = in_checkpoint
            audit.check(
                in_checkpoint == {c["id"]: c["status"] for c in changes},
                f"list_changes({checkpoint}) shows {in_checkpoint}, the journal "
                f"{ {c['id']: c['status'] for c in changes} }",
            )
            audit.check(
                all(everything.get(i) == "unknown" for i in unknown),
                f"list_changes() does not show every unknown change {sorted(unknown)}",
            )

            report = await running.client.undo_to(checkpoint)
            audit.notes["undo_to report"] = report
            ok_ids = {c["id"] for c in changes if c["status"] == "ok"}
            audit.check(
                ids(report["undone"]) == ok_ids,
                f"undone {ids(report['undone'])}, expected {ok_ids}",
            )
            audit.check(
                ids(report["skipped"]) == unknown,
                f"skipped {ids(report['skipped'])}, expected {unknown}",
            )
            audit.check(
                all(e.get("reason") for e in report["skipped"]), "a skipped change has no reason"
            )
            audit_journal_and_ledger(audit, rig, final=True)
            left = await listed(running.client, checkpoint)
            audit.check(
                set(left) == unknown,
                f"after undo list_changes shows {left}, expected the unknown {unknown}",
            )
            lost += audit.lost
            twice += audit.twice
            assert not audit.problems, audit.report(rig)
            survived += 1
    finally:
        tally(DURING_CALL, injected=injected, survived=survived, lost=lost, twice=twice)
        print(f"seed {SEED}, {DURING_CALL}: {injected} kills, changes by outcome {dict(stats)}")
        await running.close()
    assert (injected, survived, lost, twice) == (CALL_KILLS, CALL_KILLS, 0, 0)


@pytest.mark.thorough
async def test_sigkill_during_undo(tmp_path: Path, journal_db: Path | str) -> None:
    """Kill the proxy at a random moment of undo_to (compensations slow); the next proxy's
    undo_to continues without re-running steps recorded done, reports a step the dead proxy had
    started as in doubt instead of repeating it, and nothing is compensated twice."""
    rng = random.Random(SEED + 1)
    rig = Rig(tmp_path, journal=journal_db)
    stats: Counter[str] = Counter()
    injected = survived = lost = twice = 0
    running = await rig.start()
    try:
        for iteration in range(UNDO_KILLS):
            plan = make_plan(rig, rng, iteration)
            audit = Audit(SEED, DURING_UNDO, iteration, list(plan))
            checkpoint = await running.client.checkpoint()
            rig.delay(0, 0)
            calls = Calls()
            await put_all(running.client, plan, calls)
            assert not calls.failed, f"puts failed with no fault injected: {calls.failed}"
            steps = sum(len(v) for v in plan.values())
            before, after = draw_delay(rng)
            rig.delay(before, after)
            moment = round(rng.uniform(0, steps * (before + after + 0.02)), 3)
            audit.notes["delay (before, after), kill at"] = (before, after, moment)
            await kill_after(running, moment, running.client.undo_to(checkpoint))
            injected += 1
            running = await restart(rig, running)

            journal = audit_journal_and_ledger(audit, rig, final=False)
            changes = journal.of(plan)
            open_ids = {c["id"] for c in changes if c["undone_at"] is None}
            in_checkpoint = await listed(running.client, checkpoint)
            audit.check(
                set(in_checkpoint) == open_ids,
                f"after the kill list_changes({checkpoint}) shows {in_checkpoint}, the journal "
                f"has open {sorted(open_ids)}",
            )
            # A step the dead proxy recorded `started` (and never settled) is in doubt.
            doubtful = {
                c["id"]
                for c in changes
                if c["undone_at"] is None
                and any(s["status"] in ("started", "unknown") for s in journal.steps_of(c["id"]))
            }
            stats["changes"] += len(changes)
            stats["undone before the kill"] += len(changes) - len(open_ids)
            stats["in doubt"] += len(doubtful)
            stats["resumed"] += len(open_ids - doubtful)
            first = await running.client.undo_to(checkpoint)
            audit.notes["undo_to after restart"] = first
            audit.check(
                ids(first["undone"]) == open_ids - doubtful,
                f"undo_to after restart undid {ids(first['undone'])}, expected "
                f"{sorted(open_ids - doubtful)}",
            )
            audit.check(
                ids(first["skipped"]) == doubtful,
                f"skipped {ids(first['skipped'])}, expected in doubt {doubtful}",
            )
            reasons = [str(e.get("reason")) for e in first["skipped"]]
            audit.check(
                all(r.startswith("in doubt:") for r in reasons),
                f"skipped reasons do not start with 'in doubt:': {reasons}",
            )
            again = await running.client.undo_to(checkpoint)
            audit.notes["undo_to again"] = again
            audit.check(not again["undone"], f"a second undo_to still undid {again['undone']}")
            audit.check(
                ids(again["skipped"]) == doubtful, f"a second undo_to skipped {again['skipped']}"
            )
            audit_journal_and_ledger(audit, rig, final=True)
            lost += audit.lost
            twice += audit.twice
            assert not audit.problems, audit.report(rig)
            survived += 1
    finally:
        tally(DURING_UNDO, injected=injected, survived=survived, lost=lost, twice=twice)
        print(f"seed {SEED}, {DURING_UNDO}: {injected} kills, changes {dict(stats)}")
        await running.close()
    assert (injected, survived, lost, twice) == (UNDO_KILLS, UNDO_KILLS, 0, 0)


async def kill_when(running: Running, work: Awaitable[Any], ready: str, seen: Any) -> None:
    """Await `work` and SIGKILL the proxy as soon as `seen()` is true (polled), i.e. while a
    compensating call held by the server's delay is certainly in flight."""

    async def run() -> None:
        with contextlib.suppress(Exception):  # the connection closes under the call
            await work

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.move_on_after(20):
            while not seen():
                await anyio.sleep(0.01)
            running.kill()
            return
        running.kill()
        raise AssertionError(f"{ready} never showed up in the ledger within 20 s")


async def test_in_doubt_step_reruns_only_when_idempotent(
    tmp_path: Path, journal_db: Path | str
) -> None:
    """A compensating step the killed proxy had sent is in doubt. put (not idempotent) is
    reported "in doubt:" and not sent again, even on later undo_to; delete (`idempotent: true`
    in this registry) is simply sent again."""
    rig = Rig(tmp_path, journal=journal_db, idempotent_delete=True)
    injected = survived = 0
    running = await rig.start()
    try:
        await running.client.call_ok("ledger__put", {"key": "b", "value": "w1"})
        checkpoint = await running.client.checkpoint()
        await running.client.call_ok("ledger__put", {"key": "a", "value": "v1"})  # undo: delete
        await running.client.call_ok("ledger__put", {"key": "b", "value": "w2"})  # undo: put w1
        changes = {c["args"]["key"]: c["id"] for c in rig.journal().of("ab")}
        rig.delay(0, HOLD)  # applied, then held: the proxy dies before the answer
        undo = running.client.undo_to(checkpoint)
        await kill_when(
            running, undo, "put(b, w1)", lambda: Ledger.split(rig.ledger()).compensated("b", "w1")
        )
        injected += 1
        running = await restart(rig, running)

        report = await running.client.undo_to(checkpoint)
        ledger = Ledger.split(rig.ledger())
        skipped = {e["id"]: str(e["reason"]) for e in report["skipped"]}
        assert list(skipped) == [changes["b"]], report
        assert skipped[changes["b"]].startswith("in doubt:"), report
        assert ledger.compensated("b", "w1") == 1, rig.ledger()  # not sent again
        assert ids(report["undone"]) == {changes["a"]}, report
        assert ledger.compensated("a", None) == 1, rig.ledger()
        assert await listed(running.client, checkpoint) == {changes["b"]: "ok"}
        assert rig.store() == {"b": "w1"}
        survived += 1

        # Now the idempotent one: delete(d) is in flight when the proxy dies.
        later = await running.client.checkpoint()
        await running.client.call_ok("ledger__put", {"key": "d", "value": "x1"})
        rig.delay(0, HOLD)
        undo = running.client.undo_to(later)
        await kill_when(
            running, undo, "delete(d)", lambda: Ledger.split(rig.ledger()).compensated("d", None)
        )
        injected += 1
        running = await restart(rig, running)
        report = await running.client.undo_to(later)
        assert not report["skipped"], report
        assert [e["args"] for e in report["undone"]] == [{"key": "d", "value": "x1"}], report
        assert Ledger.split(rig.ledger()).compensated("d", None) == 2, rig.ledger()  # re-run
        # The non-idempotent step stays in doubt across restarts and is still not re-sent.
        report = await running.client.undo_to(checkpoint)
        assert ids(report["skipped"]) == {changes["b"]}, report
        assert Ledger.split(rig.ledger()).compensated("b", "w1") == 1, rig.ledger()
        assert rig.store() == {"b": "w1"}
        assert rig.journal().integrity == "ok"
        survived += 1
    finally:
        tally(DURING_UNDO, injected=injected, survived=survived)
        await running.close()


async def test_force_reruns_an_in_doubt_step(tmp_path: Path, journal_db: Path | str) -> None:
    """undo_to(force=true) sends an in-doubt, non-idempotent compensating call again."""
    rig = Rig(tmp_path, journal=journal_db)
    injected = survived = 0
    running = await rig.start()
    try:
        await running.client.call_ok("ledger__put", {"key": "b", "value": "w1"})
        checkpoint = await running.client.checkpoint()
        await running.client.call_ok("ledger__put", {"key": "b", "value": "w2"})
        (change,) = [c["id"] for c in rig.journal().of("b") if c["args"]["value"] == "w2"]
        rig.delay(0, HOLD)
        undo = running.client.undo_to(checkpoint)
        await kill_when(
            running, undo, "put(b, w1)", lambda: Ledger.split(rig.ledger()).compensated("b", "w1")
        )
        injected += 1
        running = await restart(rig, running)

        report = await running.client.undo_to(checkpoint)
        assert ids(report["skipped"]) == {change}, report
        assert str(report["skipped"][0]["reason"]).startswith("in doubt:"), report
        assert Ledger.split(rig.ledger()).compensated("b", "w1") == 1, rig.ledger()
        forced = await running.client.call_ok(
            "undo_to", {"checkpoint_id": checkpoint, "force": True}
        )
        assert ids(forced["undone"]) == {change}, forced
        assert not forced["skipped"], forced
        assert Ledger.split(rig.ledger()).compensated("b", "w1") == 2, rig.ledger()
        assert await listed(running.client, checkpoint) == {}
        assert rig.store() == {"b": "w1"}
        assert rig.journal().integrity == "ok"
        survived += 1
    finally:
        tally(DURING_UNDO, injected=injected, survived=survived)
        await running.close()
