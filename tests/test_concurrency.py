"""Concurrent calls through one proxy, and several proxies sharing one journal.

Every test drives real proxy subprocesses in front of the real example tasks server, fires
calls at the same time from anyio task groups, and then checks the journal three ways: through
the meta tools, against the state the servers report, and with the database's own view (SQLite's
integrity check; PostgreSQL's rows). Each runs on both journals: a SQLite file, and a fresh
PostgreSQL database, where proxies with different COMPENSATOR_HOST values stand in for
machines sharing one journal.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from pytest_compensator.client import ProxyClient, ToolReply, launch_proxy

from .conftest import by_id

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres_journal)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The journal the test's proxies share: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    return str(request.getfixturevalue("postgres_url"))


# Generous: two proxies and two task servers share two cores with other people's test runs.
DEADLINE = 30.0


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return (self.tool, json.dumps(self.args, sort_keys=True))


@dataclass(frozen=True)
class Done:
    call: Call
    reply: ToolReply

    @property
    def failed(self) -> bool:
        """What the client saw: isError, or set_status's in-band `ok: false`."""
        if self.reply.is_error:
            return True
        value = self.reply.value
        return self.call.tool == "tasks__set_status" and value.get("ok") is False


# -- helpers --------------------------------------------------------------------------------


@asynccontextmanager
async def started(
    config: Path, db: str, workdir: Path, log: Path, **env: str
) -> AsyncIterator[ProxyClient]:
    """One proxy with its own tasks database under `workdir`, its stderr appended to `log`;
    `env` adds to its environment (COMPENSATOR_HOST, COMPENSATOR_JOURNAL_SCOPE)."""
    workdir.mkdir(exist_ok=True)
    with log.open("a") as err:
        async with launch_proxy(
            config, db, env={"COMPENSATOR_WORKDIR": str(workdir), **env}, stderr=err
        ) as client:
            yield client


async def state(client: ProxyClient) -> dict[str, Any]:
    tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
    labels = (await client.call_ok("tasks__list_labels"))["labels"]
    return {"tasks": by_id(tasks), "labels": sorted(labels)}


async def seed(client: ProxyClient, prefix: str, tasks: int) -> list[int]:
    """Tasks and a label made before any checkpoint: what the burst renames and completes."""
    ids = [
        (await client.call_ok("tasks__add_task", {"title": f"{prefix}base{i}"}))["id"]
        for i in range(tasks)
    ]
    await client.call_ok("tasks__add_label", {"name": f"{prefix}keep"})
    return ids


async def fire(client: ProxyClient, calls: list[Call]) -> list[Done]:
    """Send every call at once from one client session; replies in the order of `calls`."""
    replies: list[ToolReply | None] = [None] * len(calls)

    async def one(index: int, call: Call) -> None:
        replies[index] = await client.call(call.tool, call.args)

    async with anyio.create_task_group() as tg:
        for index, call in enumerate(calls):
            tg.start_soon(one, index, call)
    return [
        Done(call, reply) for call, reply in zip(calls, replies, strict=True) if reply is not None
    ]


def mixed_burst(prefix: str, base: list[int], rng: random.Random) -> list[Call]:
    """60 mutating calls: 54 that work (adds, labels, renames, completes) and 6 that fail."""
    calls = [Call("tasks__add_task", {"title": f"{prefix}new{i}"}) for i in range(14)] + [
        Call("tasks__add_task", {"title": f"{prefix}sub{i}", "parent_id": base[i % len(base)]})
        for i in range(6)
    ]
    calls += [Call("tasks__add_label", {"name": f"{prefix}label{i}"}) for i in range(10)]
    # The same label twice at once: exactly one of them creates it.
    calls += [Call("tasks__add_label", {"name": f"{prefix}dup"})] * 2
    calls += [
        Call("tasks__rename_task", {"id": base[i % len(base)], "title": f"{prefix}renamed{i}"})
        for i in range(12)
    ]
    calls += [Call("tasks__complete_task", {"id": task}) for task in base]
    calls += [Call("tasks__complete_task", {"id": 9999})] * 3
    calls += [Call("tasks__delete_task", {"id": 9999})] * 2
    calls += [Call("tasks__set_status", {"id": base[0], "status": "bogus"})]
    rng.shuffle(calls)
    return calls


def journaled(changes: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter(Call(c["tool"], c["args"]).key for c in changes)


def read_journal(db: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of `query` on the journal's own database, read-only."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db, options="-c search_path=compensator") as conn:
            return conn.execute(query).fetchall()  # type: ignore[arg-type]
    conn = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def integrity(db: str) -> str:
    """SQLite's own verdict on the journal file; on PostgreSQL, that no change is left pending
    and no compensation is orphaned."""
    if not db.startswith("postgresql://"):
        return str(read_journal(db, "PRAGMA integrity_check")[0][0])
    ((pending, orphans),) = read_journal(
        db,
        "SELECT (SELECT COUNT(*) FROM changes WHERE status = 'pending'), "
        "(SELECT COUNT(*) FROM compensations p LEFT JOIN changes c ON c.id = p.change_id "
        "WHERE c.id IS NULL)",
    )
    problems = [f"{pending} pending"] * bool(pending) + [f"{orphans} orphans"] * bool(orphans)
    return "; ".join(problems) or "ok"


def change_rows(db: str) -> int:
    return int(read_journal(db, "SELECT COUNT(*) FROM changes")[0][0])


def sessions(log: Path) -> list[str]:
    return re.findall(r"session:? ([0-9a-f]{32})", log.read_text())


def assert_never_locked(done: list[Done], *logs: Path) -> None:
    locked = [d for d in done if "locked" in d.reply.text]
    assert locked == [], f"calls saw a locked journal: {[(d.call, d.reply.text) for d in locked]}"
    for log in logs:
        assert "database is locked" not in log.read_text(), f"{log}:\n{log.read_text()}"


async def after_n(
    n: int, first: Callable[[], Awaitable[Any]], then: Callable[[], Awaitable[Any]]
) -> None:
    """Run `first` n times at once and start `then` as soon as n/3 of them have returned."""
    ready = anyio.Event()
    finished = 0

    async def one() -> None:
        nonlocal finished
        await first()
        finished += 1
        if finished >= n // 3:
            ready.set()

    async def later() -> None:
        await ready.wait()
        await then()

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        for _ in range(n):
            tg.start_soon(one)


# -- one client, many calls at once ---------------------------------------------------------


async def test_concurrent_calls_from_one_client_keep_the_journal_consistent(
    tasks_config: Path, tmp_path: Path, db: str
) -> None:
    log = tmp_path / "proxy.log"
    rng = random.Random(20240611)
    with anyio.fail_after(DEADLINE):
        async with started(tasks_config, db, tmp_path / "a", log) as client:
            base = await seed(client, "", 10)
            before = await state(client)
            cp = await client.checkpoint("before the burst")
            calls = mixed_burst("", base, rng)

            side: list[Any] = []

            async def meta_and_reads() -> None:
                # Meta tools and reads interleaved with the burst must answer, not block.
                side.append(await client.list_changes(cp))
                side.append(await client.checkpoint("in the middle"))
                side.append(await client.call_ok("tasks__list_tasks"))
                side.append(await client.list_changes())
                side.append(await client.checkpoint())
                side.append(await client.call_ok("tasks__get_task", {"id": base[1]}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(meta_and_reads)
                done = await fire(client, calls)

            assert len(done) == len(calls) == 60
            assert len(side) == 6
            for listed in (side[0], side[3]):
                assert {c["status"] for c in listed} <= {"pending", "ok", "error"}
            assert cp < side[1] < side[4]

            changes = await client.list_changes(cp)
            assert journaled(changes) == Counter(d.call.key for d in done), (
                "every call needs exactly one change row"
            )
            assert [c for c in changes if c["status"] == "pending"] == []
            seen = Counter((d.call.key, "error" if d.failed else "ok") for d in done)
            recorded = Counter((Call(c["tool"], c["args"]).key, c["status"]) for c in changes)
            assert recorded == seen, "journal statuses differ from what the client saw"
            assert sum(d.failed for d in done) == 6
            dup = [d.reply.value["created"] for d in done if d.call.args == {"name": "dup"}]
            assert sorted(dup) == [False, True]

            report = await client.undo_to(cp)
            assert report["skipped"] == []
            assert len(report["undone"]) == 54 and len(report["nothing_to_undo"]) == 6
            assert await state(client) == before
            assert await client.list_changes(cp) == []
    assert integrity(db) == "ok"
    assert change_rows(db) == 11 + 60


async def test_undo_waits_for_concurrent_mutating_calls_and_they_for_it(
    tasks_config: Path, tmp_path: Path, db: str
) -> None:
    """An undo_to in the middle of a burst: each change ends either undone or open, never half,
    and every undone change is older than every change left open."""
    log = tmp_path / "proxy.log"
    with anyio.fail_after(DEADLINE):
        async with started(tasks_config, db, tmp_path / "a", log) as client:
            base = await seed(client, "", 4)
            before = await state(client)
            cp = await client.checkpoint()
            counter = iter(range(1000))
            done: list[Done] = []
            reports: list[dict[str, Any]] = []

            async def mutate() -> None:
                i = next(counter)
                kind = i % 4
                if kind == 0:
                    call = Call("tasks__add_task", {"title": f"t{i}"})
                elif kind == 1:
                    call = Call("tasks__add_label", {"name": f"l{i}"})
                elif kind == 2:
                    call = Call("tasks__rename_task", {"id": base[i % 4], "title": f"r{i}"})
                else:
                    call = Call("tasks__complete_task", {"id": base[i % 4]})
                done.extend(await fire(client, [call]))

            async def undo_and_more() -> None:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: _append(reports, client.undo_to(cp)))
                    for _ in range(12):  # sent right after the undo: these queue behind it
                        tg.start_soon(mutate)

            await after_n(36, mutate, undo_and_more)

            assert len(done) == 48 and not any(d.failed for d in done)
            (report,) = reports
            assert report["skipped"] == [], "the undo met a call still in flight"
            assert report["nothing_to_undo"] == []
            undone = {c["id"]: c for c in report["undone"]}
            still_open = {c["id"]: c for c in await client.list_changes(cp)}
            assert not set(undone) & set(still_open)
            assert len(undone) + len(still_open) == 48
            assert journaled([*undone.values(), *still_open.values()]) == Counter(
                d.call.key for d in done
            )
            assert len(undone) >= 12, "the calls that returned before the undo were not undone"
            if still_open:
                assert max(undone) < min(still_open), "an undone change is newer than an open one"
            assert await state(client) == expected_state(before, done, still_open)
            # Everything left open still undoes cleanly.
            assert (await client.undo_to(cp))["skipped"] == []
            assert await state(client) == before
    assert integrity(db) == "ok"


async def _append(into: list[Any], awaitable: Awaitable[Any]) -> None:
    into.append(await awaitable)


def expected_state(
    before: dict[str, Any], done: list[Done], still_open: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """The state `before` with exactly the open changes applied, in journal order."""
    tasks = {k: dict(v) for k, v in before["tasks"].items()}
    labels = set(before["labels"])
    results = {d.call.key: d.reply.value for d in done}
    for change in sorted(still_open.values(), key=lambda c: c["id"]):
        args = change["args"]
        if change["tool"] == "tasks__add_task":
            added = results[Call(change["tool"], args).key]
            tasks[added["id"]] = added
        elif change["tool"] == "tasks__add_label":
            labels.add(args["name"])
        elif change["tool"] == "tasks__rename_task":
            tasks[args["id"]]["title"] = args["title"]
        elif change["tool"] == "tasks__complete_task":
            tasks[args["id"]]["status"] = "done"
    return {"tasks": tasks, "labels": sorted(labels)}


# -- two proxies, one journal ---------------------------------------------------------------


def agent_burst(prefix: str, base: list[int], count: int) -> list[Call]:
    calls: list[Call] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            calls.append(Call("tasks__add_task", {"title": f"{prefix}t{i}"}))
        elif kind == 1:
            calls.append(Call("tasks__add_label", {"name": f"{prefix}l{i}"}))
        elif kind == 2:
            calls.append(Call("tasks__rename_task", {"id": base[i % 3], "title": f"{prefix}{i}"}))
        else:
            calls.append(Call("tasks__complete_task", {"id": base[i % 3]}))
    return calls


async def test_two_proxies_on_one_journal_never_undo_each_other(
    tasks_config: Path, tmp_path: Path, db: str
) -> None:
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with anyio.fail_after(DEADLINE * 1.5):
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(
                started(tasks_config, db, tmp_path / "a", log_a, COMPENSATOR_HOST="machine-a")
            )
            b = await stack.enter_async_context(
                started(tasks_config, db, tmp_path / "b", log_b, COMPENSATOR_HOST="machine-b")
            )
            base_a, base_b = await seed(a, "A-", 3), await seed(b, "B-", 3)
            # Both servers number their tasks from 1: the same args can mean two tasks.
            assert base_a == base_b
            before_a, before_b = await state(a), await state(b)
            cp_a, cp_b = await a.checkpoint("agent A"), await b.checkpoint("agent B")
            calls_a, calls_b = agent_burst("A-", base_a, 40), agent_burst("B-", base_b, 40)

            done_a: list[Done] = []
            done_b: list[Done] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _extend(done_a, fire(a, calls_a)))
                tg.start_soon(lambda: _extend(done_b, fire(b, calls_b)))
            assert_never_locked(done_a + done_b, log_a, log_b)
            assert [d for d in done_a + done_b if d.failed] == []

            assert len(await a.list_changes()) == 4 + 40, "list_changes() lists another agent's"
            assert journaled(await a.list_changes(cp_a)) == Counter(c.key for c in calls_a)
            assert journaled(await b.list_changes(cp_b)) == Counter(c.key for c in calls_b)
            # A's checkpoint is a moment for B too, but B sees (and would undo) only its own.
            assert journaled(await b.list_changes(cp_a)) == Counter(c.key for c in calls_b)
            assert [cp["id"] for cp in await b.list_checkpoints()] == [cp_b]

            # A undoes while B keeps adding labels; B's new labels must survive A's undo.
            mid_b = await state(b)
            more_b = [Call("tasks__add_label", {"name": f"B-more{i}"}) for i in range(20)]
            reports: list[dict[str, Any]] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _append(reports, a.undo_to(cp_a)))
                tg.start_soon(lambda: _extend(done_b, fire(b, more_b)))
            (report_a,) = reports
            assert_never_locked(done_b, log_a, log_b)
            assert report_a["skipped"] == []
            assert journaled(report_a["undone"]) == Counter(c.key for c in calls_a)
            assert await state(a) == before_a
            assert await a.list_changes(cp_a) == []
            after_b = await state(b)
            assert after_b["tasks"] == mid_b["tasks"], "A's undo touched B's tasks"
            assert after_b["labels"] == sorted(mid_b["labels"] + [c.args["name"] for c in more_b])
            assert journaled(await b.list_changes(cp_b)) == Counter(c.key for c in calls_b + more_b)

            report_b = await b.undo_to(cp_b)
            assert report_b["skipped"] == [] and len(report_b["undone"]) == 60
            assert await state(b) == before_b
            assert await state(a) == before_a
            assert len(await a.list_changes()) == 4
    assert integrity(db) == "ok"
    assert change_rows(db) == 2 * 4 + 40 + 60
    assert len(set(sessions(log_a) + sessions(log_b))) == 2


async def _extend(into: list[Done], awaitable: Awaitable[list[Done]]) -> None:
    into.extend(await awaitable)


# -- a proxy restarted on the same journal --------------------------------------------------


def proxy_pids(db: str) -> list[int]:
    """Our own child processes running the proxy on `db` (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"compensator.proxy" in cmdline and str(db).encode() in cmdline:
            found.append(int(entry.name))
    return found


async def gone(pid: int) -> bool:
    with anyio.move_on_after(10):
        while Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid):
            await anyio.sleep(0.02)
        return True
    return False


def _proc_state(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


@pytest.mark.parametrize("ending", ["stopped", "killed"])
async def test_restarted_proxy_undoes_the_checkpoint_of_its_previous_process(
    tasks_config: Path, tmp_path: Path, ending: str, db: str
) -> None:
    log, workdir = tmp_path / "proxy.log", tmp_path / "a"
    with anyio.fail_after(DEADLINE):
        async with started(tasks_config, db, workdir, log) as first:
            base = await seed(first, "", 3)
            before = await state(first)
            cp = await first.checkpoint("before the crash")
            calls = agent_burst("", base, 12)
            done = await fire(first, calls)
            assert [d for d in done if d.failed] == []
            if ending == "killed":
                (pid,) = proxy_pids(db)
                os.kill(pid, signal.SIGKILL)
                assert await gone(pid), f"proxy {pid} still runs after SIGKILL"
    with anyio.fail_after(DEADLINE):
        async with started(tasks_config, db, workdir, log) as second:
            assert journaled(await second.list_changes(cp)) == Counter(c.key for c in calls)
            report = await second.undo_to(cp)
            assert report["skipped"] == []
            assert journaled(report["undone"]) == Counter(c.key for c in calls)
            assert await state(second) == before
            assert await second.list_changes(cp) == []
    assert integrity(db) == "ok"
    first_session, second_session = sessions(log)
    assert first_session != second_session


# -- two machines, one PostgreSQL journal, one system -------------------------------------


@pytest.mark.postgres_journal
@pytest.mark.parametrize("scope", [None, "team"], ids=["own-changes", "shared-scope"])
async def test_two_machines_on_one_postgres_journal_undo_their_own_or_the_teams(
    tasks_config: Path, tmp_path: Path, postgres_url: str, scope: str | None
) -> None:
    """Two proxies with different host identities work on one tasks database and share one
    PostgreSQL journal. By default A's undo_to reverts A's change only; when both joined the
    scope `team`, A's undo_to reverts B's changes too, through A's own server."""
    system = tmp_path / "system"  # the one system both agents work on
    joined = {"COMPENSATOR_JOURNAL_SCOPE": scope} if scope else {}
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    with anyio.fail_after(DEADLINE * 1.5):
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(
                started(
                    tasks_config,
                    postgres_url,
                    system,
                    log_a,
                    COMPENSATOR_HOST="machine-a",
                    **joined,
                )
            )
            b = await stack.enter_async_context(
                started(
                    tasks_config,
                    postgres_url,
                    system,
                    log_b,
                    COMPENSATOR_HOST="machine-b",
                    **joined,
                )
            )
            await seed(a, "", 2)
            before = await state(a)
            cp = await a.checkpoint("before the team's work")
            await a.call_ok("tasks__add_task", {"title": "from A"})
            await b.call_ok("tasks__add_task", {"title": "from B"})
            await b.call_ok("tasks__add_label", {"name": "from-B"})
            theirs = {"tasks__add_task": 1, "tasks__add_label": 1}
            listed = Counter(c["tool"] for c in await a.list_changes(cp))
            if scope is None:
                assert listed == {"tasks__add_task": 1}, "A sees B's changes without a scope"
                assert [c["id"] for c in await b.list_checkpoints()] == []
            else:
                assert listed == {"tasks__add_task": 2, "tasks__add_label": 1}
                assert [c["id"] for c in await b.list_checkpoints()] == [cp]
            report = await a.undo_to(cp)
            assert report["skipped"] == []
            after = await state(b)
            titles = sorted(t["title"] for t in after["tasks"].values())
            if scope is None:
                assert len(report["undone"]) == 1
                assert titles == sorted([*(t["title"] for t in before["tasks"].values()), "from B"])
                assert after["labels"] == sorted([*before["labels"], "from-B"])
                assert Counter(c["tool"] for c in await b.list_changes(cp)) == theirs
            else:
                assert len(report["undone"]) == 3
                assert after == before
                assert await b.list_changes(cp) == []
    assert integrity(postgres_url) == "ok"
    hosts = read_journal(
        postgres_url,
        "SELECT DISTINCT s.host, c.tool FROM changes c JOIN sessions s ON s.id = c.session "
        "WHERE c.args LIKE '%from%' ORDER BY 1, 2",
    )
    assert hosts == [
        ("machine-a", "tasks__add_task"),
        ("machine-b", "tasks__add_label"),
        ("machine-b", "tasks__add_task"),
    ]
