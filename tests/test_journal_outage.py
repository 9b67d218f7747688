"""A PostgreSQL journal that goes away under a running proxy: its connection killed, its server
restarted, or a proxy that hangs while holding a session.

The proxy is the real one, over stdio, in front of tests/servers/ledger_server.py (the rig of
tests/test_crash.py), so the test knows what reached the server. A call is held in flight by
the ledger's delay file, and every wait is for an event (a ledger line, a backend gone, a lease
renewed), never for a fixed time. The promise checked: a call the server received is never
lost from the journal; the client gets the server's real answer; while the journal cannot
write, mutating calls are refused before anything is sent and reads go on; once it can, the
outcome it could not take is written before anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from pytest_postgresql import factories

from compensator.journal import Intent
from compensator.journal.postgres import PostgresJournal
from pytest_compensator.client import ProxyClient, ToolReply

from .postgres import server_fixture, url_of
from .test_crash import (
    HOLD,
    Ledger,
    Rig,
    ids,
    listed,
    pg_connect,
    pid_alive,
    proxy_backends,
)

pytestmark = pytest.mark.postgres_journal

JOURNAL_REFUSAL = "was not called, because the journal cannot record it"

# -- a PostgreSQL server of this module's own, which a test stops and starts --------------------

# Like tests/postgres.py's, but only the server-restart test uses it, so stopping it disturbs
# no other test of the worker.
restartable_postgresql_proc = server_fixture()
restartable_postgresql = factories.postgresql("restartable_postgresql_proc")


@pytest.fixture
def restartable_postgres_url(restartable_postgresql: Any) -> str:
    return url_of(restartable_postgresql)


# -- waiting for events ------------------------------------------------------------------------


async def until(ready: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """Poll `ready` until it is true; its value. Fails saying `what` never happened."""
    with anyio.move_on_after(timeout):
        while not (value := ready()):
            await anyio.sleep(0.02)
        return value
    raise AssertionError(f"{what} did not happen within {timeout} s")


def wait_for(ready: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """`until` for a test without an event loop."""
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)
    return value


def received(rig: Rig, key: str) -> list[dict[str, Any]]:
    """The mutating calls on `key` that reached the ledger server."""
    return [line for line in rig.received() if line["args"]["key"] == key]


async def call_into(client: ProxyClient, replies: dict[str, ToolReply], key: str, value: str):
    replies[key] = await client.call("ledger__put", {"key": key, "value": value})


async def put_once_the_journal_writes(
    rig: Rig, client: ProxyClient, key: str, value: str, timeout: float = 30
) -> ToolReply:
    """Put until the proxy no longer refuses the call for its journal; every refusal must have
    sent nothing. (A write fails at once while the store's lease thread last found the
    database out of reach; that thread tries again every second.)"""
    with anyio.move_on_after(timeout):
        while True:
            reply = await client.call("ledger__put", {"key": key, "value": value})
            if not reply.is_error:
                return reply
            assert JOURNAL_REFUSAL in reply.text, reply.text
            assert received(rig, key) == [], "a refused call reached the server"
            await anyio.sleep(0.05)
    raise AssertionError(f"put({key}, {value}) still refused after {timeout} s")


def by_key(rig: Rig) -> dict[str, tuple[str, Any]]:
    """Each journaled change's (status, result) by the key it put (one change per key here)."""
    changes = rig.journal().changes
    found = {c["args"]["key"]: (c["status"], c["result"]) for c in changes}
    assert len(found) == len(changes), changes
    return found


def change_id(rig: Rig, key: str) -> int:
    (change,) = rig.journal().of([key])
    return int(change["id"])


def accepting(url: str) -> bool:
    """Whether PostgreSQL takes connections: it opens its port before it has finished starting
    up ("the database system is starting up"), and the executor returns once the port is open."""
    try:
        pg_connect(url).close()
    except psycopg.OperationalError:
        return False
    return True


def sessions_alive(url: str) -> dict[str, bool]:
    """Whether each session of the journal is alive, as any other store sees it."""
    store = PostgresJournal(url, read_only=True)
    try:
        return {session.id: session.alive for session in store.sessions()}
    finally:
        store.close()


# -- the proxy's journal connection killed while a call is in flight ------------------------


@pytest.mark.anyio
async def test_a_journal_connection_killed_mid_call_loses_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    """pg_terminate_backend on the proxy's journal connection while a put is held by the
    server: the change stays journaled (pending), the client gets the server's real answer,
    the store opens its connection again (its session alive again, holding its lock), the
    outcome is recorded, the next mutating call goes through, and undo_to takes back both."""
    rig = Rig(tmp_path, journal=postgres_url)
    running = await rig.start()
    try:
        checkpoint = await running.client.checkpoint()
        rig.delay(HOLD)  # received, then held before it applies
        replies: dict[str, ToolReply] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_into, running.client, replies, "a", "v1")
            await until(lambda: received(rig, "a"), "put(a, v1) reaching the server")
            assert by_key(rig) == {"a": ("pending", None)}
            (backend,) = proxy_backends(postgres_url)
            with pg_connect(postgres_url) as con:
                killed = con.execute(
                    "SELECT pid, pg_terminate_backend(pid) AS killed FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = 'mcp-compensator'"
                ).fetchall()
            assert killed == [{"pid": backend, "killed": True}]
            # Once it has ended, the store's next connection can take the session's lock
            # again (the last test shows what happens when it has not yet).
            await until(
                lambda: backend not in proxy_backends(postgres_url), "the killed backend ending"
            )
            assert by_key(rig) == {"a": ("pending", None)}, "the journal lost the held call"
            rig.delay(0, 0)  # let it apply and answer
        reply = replies["a"]
        assert not reply.is_error, reply.text
        assert reply.value == {"previous": None}
        assert [line["args"] for line in rig.ledger()] == [{"key": "a", "value": "v1"}]

        assert await running.client.call_ok("ledger__put", {"key": "b", "value": "v2"}) == {
            "previous": None
        }
        assert by_key(rig) == {"a": ("ok", {"previous": None}), "b": ("ok", {"previous": None})}
        assert rig.journal().integrity == "ok"
        assert list(sessions_alive(postgres_url).values()) == [True]
        log = (tmp_path / "proxy-stderr.log").read_text()
        assert "the journal connection was lost and is open again" in log, log
        first, second = change_id(rig, "a"), change_id(rig, "b")
        assert await listed(running.client, checkpoint) == {first: "ok", second: "ok"}

        report = await running.client.undo_to(checkpoint)
        assert ids(report["undone"]) == {first, second}, report
        assert not report["skipped"], report
        ledger = Ledger.split(rig.ledger())
        assert (ledger.compensated("a", None), ledger.compensated("b", None)) == (1, 1)
        assert rig.store() == {}
        assert await listed(running.client, checkpoint) == {}
    finally:
        await running.close()


# -- the journal's server restarted while a call is in flight ------------------------------


@pytest.mark.anyio
async def test_a_journal_server_restarted_mid_call_refuses_then_recovers(
    tmp_path: Path, restartable_postgresql_proc: Any, restartable_postgres_url: str
) -> None:
    """PostgreSQL stops while a put is held by the server. The put still gets its real answer
    (its outcome kept by the proxy); while the database is down a put is refused with nothing
    sent and a read works; once it is back the kept outcome is written before the next put,
    which goes through, and undo_to takes back both."""
    server, url = restartable_postgresql_proc, restartable_postgres_url
    rig = Rig(tmp_path, journal=url)
    running = await rig.start()
    down = False
    try:
        checkpoint = await running.client.checkpoint()
        rig.delay(HOLD)
        replies: dict[str, ToolReply] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_into, running.client, replies, "a", "v1")
            await until(lambda: received(rig, "a"), "put(a, v1) reaching the server")
            held = change_id(rig, "a")
            assert by_key(rig) == {"a": ("pending", None)}
            await anyio.to_thread.run_sync(server.stop)
            down = True
            rig.delay(0, 0)
        reply = replies["a"]
        assert not reply.is_error, reply.text
        assert reply.value == {"previous": None}
        assert [line["args"] for line in rig.ledger()] == [{"key": "a", "value": "v1"}]

        refused = await running.client.call("ledger__put", {"key": "b", "value": "v2"})
        assert refused.is_error
        assert JOURNAL_REFUSAL in refused.text, refused.text
        assert received(rig, "b") == [], "a call the journal could not record reached the server"
        assert [line["args"] for line in rig.ledger()] == [{"key": "a", "value": "v1"}]
        assert await running.client.call_ok("ledger__get", {"key": "a"}) == {"value": "v1"}

        await anyio.to_thread.run_sync(server.start)
        down = False
        await until(lambda: accepting(url), "PostgreSQL accepting connections again")
        # The held call's outcome waits in the proxy until its next journal write.
        assert by_key(rig) == {"a": ("pending", None)}
        reply = await put_once_the_journal_writes(rig, running.client, "c", "v3")
        assert reply.value == {"previous": None}
        assert by_key(rig) == {"a": ("ok", {"previous": None}), "c": ("ok", {"previous": None})}
        assert rig.journal().integrity == "ok"
        assert list(sessions_alive(url).values()) == [True]
        later = change_id(rig, "c")
        assert await listed(running.client, checkpoint) == {held: "ok", later: "ok"}

        report = await running.client.undo_to(checkpoint)
        assert ids(report["undone"]) == {held, later}, report
        assert not report["skipped"], report
        assert rig.store() == {}
        assert [line["args"]["key"] for line in rig.received()] == ["a", "c", "c", "a"]
    finally:
        if down:  # for the fixture's teardown, which drops the database
            await anyio.to_thread.run_sync(server.start)
            await until(lambda: accepting(url), "PostgreSQL accepting connections again")
        await running.close()


# -- a hung proxy: connection open, lease no longer renewed --------------------------------

LEASE = 2.0
"""The hung store's lease, in seconds: short, with room for the check right after the stop."""

HUNG_STORE = """\
import json, sys
from compensator.journal import Intent
from compensator.journal.postgres import PostgresJournal

journal = PostgresJournal(sys.argv[1], lease=float(sys.argv[2]))
change = journal.record_intent(
    Intent(tool="ledger__put", classification="reversible", args={"key": "k", "value": "v"})
)
print(json.dumps({"session": journal.session, "change": change}), flush=True)
sys.stdin.read()  # until killed
"""


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def lease_until(con: psycopg.Connection[Any], session: str) -> Any:
    return con.execute("SELECT lease_until FROM sessions WHERE id = %s", (session,)).fetchone()[
        "lease_until"
    ]


def clock(con: psycopg.Connection[Any]) -> Any:
    return con.execute("SELECT clock_timestamp() AS now").fetchone()["now"]


def lock_held(con: psycopg.Connection[Any], session: str) -> bool:
    """Whether some connection still holds the session's advisory lock."""
    row = con.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN sessions s "
        "ON ((l.classid::bigint << 32) | l.objid::bigint) = s.lock_key "
        "WHERE s.id = %s AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ") AS held",
        (session,),
    ).fetchone()
    return bool(row["held"])


def test_a_hung_session_is_dead_once_its_lease_runs_out(tmp_path: Path, postgres_url: str):
    """A store that hangs (SIGSTOP) keeps its connection and its session lock but renews its
    lease no more: another store sees it alive, its call pending, right after the stop, and
    takes it for dead (the call `unknown`) once the lease has run out on the database's clock,
    never before, while its lock is still held."""
    with (tmp_path / "hung-stderr.log").open("w") as errors:
        hung = subprocess.Popen(
            [sys.executable, "-c", HUNG_STORE, postgres_url, str(LEASE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    other: PostgresJournal | None = None
    try:
        assert hung.stdout is not None
        ready, _, _ = select.select([hung.stdout], [], [], 30)
        line = hung.stdout.readline() if ready else ""
        assert line, f"the store never started: {(tmp_path / 'hung-stderr.log').read_text()}"
        started = json.loads(line)
        session, change = started["session"], started["change"]
        other = PostgresJournal(postgres_url)  # opening it runs recover_abandoned too
        with pg_connect(postgres_url) as con:
            # Stop it right after it renewed its lease, so that most of the lease is left.
            renewed = lease_until(con, session)
            wait_for(lambda: lease_until(con, session) != renewed, "the lease renewed")
            os.kill(hung.pid, signal.SIGSTOP)
            wait_for(lambda: process_state(hung.pid) == "T", "the store stopping")

            assert other.recover_abandoned() == 0
            assert other.change(change).status == "pending"
            assert {s.id: s.alive for s in other.sessions()}[session] is True

            checks = []  # (database clock before, marked unknown, clock after)
            deadline = time.monotonic() + LEASE + 30
            while True:
                before = clock(con)
                marked = other.recover_abandoned()
                checks.append((before, marked, clock(con)))
                if marked:
                    break
                assert time.monotonic() < deadline, f"alive long after its lease: {checks[-1]}"
                time.sleep(0.02)
            expiry = lease_until(con, session)
            assert marked == 1
            alive_checks = [before for before, marked, _ in checks if not marked]
            assert all(before < expiry for before in alive_checks), (expiry, checks)
            assert checks[-1][2] >= expiry, (expiry, checks[-1])
            assert other.change(change).status == "unknown"
            assert {s.id: s.alive for s in other.sessions()}[session] is False
            assert lock_held(con, session), "the hung store's connection (and lock) went away"
    finally:
        if hung.poll() is None:
            os.kill(hung.pid, signal.SIGCONT)
            hung.kill()
        hung.communicate(timeout=30)  # reaps it and closes its pipes
        if other is not None:
            other.close()


# -- a connection opened again while its old backend still holds the session's lock -----------


def lock_awaited(con: psycopg.Connection[Any], session: str) -> bool:
    """Whether a connection waits for the session's advisory lock (held by another)."""
    row = con.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN sessions s "
        "ON ((l.classid::bigint << 32) | l.objid::bigint) = s.lock_key "
        "WHERE s.id = %s AND l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1"
        ") AS waiting",
        (session,),
    ).fetchone()
    return bool(row["waiting"])


def test_a_session_reopened_while_its_old_backend_lingers_stays_alive(postgres_url: str):
    """The store's side of its connection breaks while PostgreSQL's backend for it lingers
    (a network cut the server has not noticed yet; here that backend is stopped with SIGSTOP
    and the store's socket shut down). The store opens a new connection while the old backend
    still holds the session's advisory lock; once that backend has ended, the session must
    still count as alive, and its pending calls must not be taken for abandoned by another
    store. The old backend is let go (SIGCONT) once the new connection waits for the lock, or
    else once the write that reopened the connection has returned. (The store ends its old
    backend and waits for the lock: before it did, the session ran on without its lock.)"""
    store = PostgresJournal(postgres_url)
    other: PostgresJournal | None = None
    try:
        first = store.record_intent(Intent(tool="t", classification="reversible", args={"n": 1}))
        (old,) = proxy_backends(postgres_url)
        os.kill(old, signal.SIGSTOP)
        reopened = threading.Event()

        def let_go() -> None:
            with pg_connect(postgres_url) as con:
                while not (reopened.is_set() or lock_awaited(con, store.session)):
                    time.sleep(0.02)
            os.kill(old, signal.SIGCONT)

        watcher = threading.Thread(target=let_go, daemon=True)
        watcher.start()
        try:
            with store._raw() as conn:
                cut = socket.socket(fileno=os.dup(conn.fileno()))
            cut.shutdown(socket.SHUT_RDWR)
            cut.close()
            second = store.record_intent(
                Intent(tool="t", classification="reversible", args={"n": 2})
            )
        finally:
            reopened.set()
            watcher.join(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # ended already, once let go
                os.kill(old, signal.SIGCONT)
        wait_for(lambda: not pid_alive(old), "the old backend ending")
        assert old not in proxy_backends(postgres_url)

        assert sessions_alive(postgres_url) == {store.session: True}
        other = PostgresJournal(postgres_url)  # opening it runs recover_abandoned
        assert other.recover_abandoned() == 0
        assert [store.change(first).status, store.change(second).status] == [
            "pending",
            "pending",
        ]
    finally:
        if other is not None:
            other.close()
        store.close()
