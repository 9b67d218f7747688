"""`compensator serve --http`: the real proxy subprocess serving streamable HTTP, spoken to by
the SDK's streamable HTTP client, one or several sessions at once.

Every proxy here listens on port 0 (the system picks a free port) and the test reads the URL
from the line the proxy logs once it serves, polling its stderr with a deadline.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession

from compensator.wire import sdk as _sdk
from pytest_compensator.client import ProxyClient

from .conftest import EXAMPLES, SERVERS

pytestmark = [
    pytest.mark.anyio,
    # mcp 2.x deprecates logging and roots for protocol 2026-07-28; HTTP sessions here
    # negotiate 2025-11-25, where they are current.
    pytest.mark.filterwarnings("ignore:The .* capability is deprecated"),
]

START = 30.0
"""Seconds the proxy gets to start serving (it starts its servers first)."""
STOP = 15.0
"""Seconds it gets to stop after SIGTERM."""
WAIT = 15.0
"""Seconds to wait for a notification that should come."""

SERVING = re.compile(r"serving MCP over streamable HTTP at (http://\S+)")

ASKER = f"""
servers:
  asker:
    command: "@PYTHON@"
    args: ["{SERVERS / "asking_server.py"}"]
"""


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]
    stderr: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send `signum` (what Ctrl+C or a service manager sends), then wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        with anyio.move_on_after(STOP):
            while self.process.poll() is None:
                await anyio.sleep(0.05)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"the proxy did not stop within {STOP} s of {signum}:\n{self.log()}"
            )
        return self.process.returncode


def command(config: Path, db: Path, http: str, *extra: str) -> list[str]:
    serve = [sys.executable, "-m", "compensator", "serve"]
    return [*serve, "--config", str(config), "--db", str(db), "--http", http, *extra]


def environment(**variables: str) -> dict[str, str]:
    """The proxy's environment: this one without a token, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if k != "COMPENSATOR_HTTP_TOKEN"}
    return {**env, **variables}


@pytest.fixture
def serve(tmp_path: Path) -> Callable[..., Any]:
    """`async with serve(config, http=...) as served:` runs `compensator serve --http`."""
    counter = iter(range(100))

    @asynccontextmanager
    async def start(
        config: Path,
        *,
        http: str = "127.0.0.1:0",
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> AsyncIterator[Served]:
        n = next(counter)
        stderr = tmp_path / f"serve{n}.log"
        env = environment(COMPENSATOR_WORKDIR=str(tmp_path), **(env or {}))
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                command(config, tmp_path / "journal.db", http, *args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )
        served = Served(url="", process=process, stderr=stderr)
        try:
            with anyio.move_on_after(START):
                while not (found := SERVING.search(served.log())):
                    if process.poll() is not None:
                        raise AssertionError(f"the proxy exited early:\n{served.log()}")
                    await anyio.sleep(0.05)
            if not found:
                raise AssertionError(f"the proxy did not serve within {START} s:\n{served.log()}")
            served.url = found.group(1)
            yield served
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    return start


class HttpClient(ProxyClient):
    capabilities: dict[str, Any]
    """What the proxy advertised in its initialize result (wire JSON)."""


@asynccontextmanager
async def connected(
    url: str, token: str | None = None, **options: Any
) -> AsyncIterator[HttpClient]:
    """An initialized MCP session to the proxy at `url`, over the SDK's streamable HTTP client,
    sending `Authorization: Bearer <token>` when given; `options` are ClientSession callbacks."""
    if url.startswith("http://0.0.0.0:"):
        url = url.replace("0.0.0.0", "127.0.0.1", 1)
    headers = None if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        _sdk.streamable_http(url, headers) as (read, write),
        ClientSession(read, write, **options) as session,
    ):
        result = await session.initialize()
        client = HttpClient(session)
        client.capabilities = _sdk.initialize_capabilities(result)
        yield client


def tool_names(tools: list[types.Tool]) -> set[str]:
    return {tool.name for tool in tools}


# -- one client: tools, journal, undo, clean stop ---------------------------------------------


async def test_one_client_lists_calls_and_undoes_over_http(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    async with serve(EXAMPLES / "compensators.yaml") as served:
        assert "warning" not in served.log(), served.log()  # loopback: no exposure warning
        assert "no token: any program on this machine" in served.log(), served.log()
        async with connected(served.url) as client:
            # As over stdio: tools/list_changed is announced, and so is logging.
            assert client.capabilities["tools"] == {"listChanged": True}, client.capabilities
            assert "logging" in client.capabilities, client.capabilities
            names = tool_names(await client.list_tools())
            assert {"tasks__add_task", "tasks__list_tasks", "checkpoint", "undo_to"} <= names
            await client.call_ok("tasks__add_task", {"title": "before"})
            checkpoint = await client.checkpoint("over http")
            added = await client.call_ok("tasks__add_task", {"title": "after"})
            await client.call_ok("tasks__complete_task", {"id": 1})
            changes = await client.list_changes(checkpoint)
            assert sorted(c["tool"] for c in changes) == ["tasks__add_task", "tasks__complete_task"]

            report = await client.undo_to(checkpoint)
            assert len(report["undone"]) == 2, report
            tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
            assert [(t["title"], t["status"]) for t in tasks] == [("before", "open")]
            assert added["id"] not in {t["id"] for t in tasks}
        code = await served.stop()
    log = served.log()
    assert code == 0, log
    assert "Traceback" not in log, log
    assert "stopped serving" in log, log
    # A closed SQLite connection in WAL mode folds its -wal file back and deletes it.
    assert (tmp_path / "journal.db").exists()
    assert not (tmp_path / "journal.db-wal").exists(), "the journal was not closed"


# -- several clients at once ------------------------------------------------------------------


async def test_two_clients_share_one_journal_session(serve: Callable[..., Any]) -> None:
    async with (
        serve(EXAMPLES / "compensators.yaml") as served,
        connected(served.url) as alice,
        connected(served.url) as bob,
    ):
        assert "tasks__add_task" in tool_names(await alice.list_tools())
        assert "tasks__add_task" in tool_names(await bob.list_tools())
        checkpoint = await alice.checkpoint()
        async with anyio.create_task_group() as group:  # both at once
            group.start_soon(bob.call_ok, "tasks__add_task", {"title": "bob's"})
            group.start_soon(alice.call_ok, "tasks__add_task", {"title": "alice's"})

        # Alice sees Bob's change in her checkpoint, and her undo_to undoes it too.
        changes = await alice.list_changes(checkpoint)
        assert sorted(c["args"]["title"] for c in changes) == ["alice's", "bob's"]
        assert checkpoint in {cp["id"] for cp in await bob.list_checkpoints()}
        report = await alice.undo_to(checkpoint)
        assert len(report["undone"]) == 2, report
        assert (await bob.call_ok("tasks__list_tasks"))["tasks"] == []
        # Ctrl+C with two sessions (and their GET streams) open still stops it cleanly.
        assert await served.stop(signal.SIGINT) == 0, served.log()
        assert "Traceback" not in served.log(), served.log()


class Client:
    """One session's callbacks and what they saw; `name` goes into its sampling answers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.notifications: list[Any] = []
        self.logs: list[dict[str, Any]] = []
        self.sampled: list[str] = []
        self._arrived = anyio.Event()

    def _add(self, into: list[Any], item: Any) -> None:
        into.append(item)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait(self, what: str, check: Callable[[], bool]) -> None:
        with anyio.move_on_after(WAIT):
            while not check():
                await self._arrived.wait()
            return
        raise AssertionError(f"{self.name} got no {what} in {WAIT} s: {self.notifications!r}")

    async def message_handler(self, message: Any) -> None:
        notification = _sdk.notification_of(message)
        if notification is not None:
            self._add(self.notifications, notification)

    async def logging_callback(self, params: Any) -> None:
        self._add(self.logs, params.model_dump(mode="json"))

    async def sampling_callback(self, context: Any, params: Any) -> Any:
        self.sampled.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"{self.name} answers"),
            model=f"{self.name}-model",
        )

    def options(self, *, sampling: bool = True) -> dict[str, Any]:
        options: dict[str, Any] = {
            "message_handler": self.message_handler,
            "logging_callback": self.logging_callback,
        }
        if sampling:
            options["sampling_callback"] = self.sampling_callback
        return options

    def tools_changed(self) -> int:
        return sum(
            getattr(n, "method", None) == "notifications/tools/list_changed"
            for n in self.notifications
        )


async def test_each_session_gets_its_own_calls_traffic_and_every_list_changed(
    serve: Callable[..., Any], write_registry: Callable[[str], Path]
) -> None:
    alice, bob, carol = Client("alice"), Client("bob"), Client("carol")
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(serve(write_registry(ASKER)))
        a = await stack.enter_async_context(connected(served.url, **alice.options()))
        b = await stack.enter_async_context(connected(served.url, **bob.options()))
        c = await stack.enter_async_context(connected(served.url, **carol.options(sampling=False)))

        # Sampling goes to the session whose call caused it, not the latest one (carol).
        assert (await a.call_ok("asker__ask_model", {"prompt": "for a"}))["model"] == "alice-model"
        assert (await b.call_ok("asker__ask_model", {"prompt": "for b"}))["model"] == "bob-model"
        assert (alice.sampled, bob.sampled) == (["for a"], ["for b"])
        # Carol cannot sample: her call gets the clear error, not somebody else's model.
        refused = await c.call("asker__ask_model", {"prompt": "for c"})
        assert refused.is_error and "does not support sampling" in refused.text, refused.text
        assert (alice.sampled, bob.sampled) == (["for a"], ["for b"])

        # Log messages of a call go to the caller's session.
        await a.call_ok("asker__chatty", {"count": 2})
        await b.call_ok("asker__chatty", {"count": 3})
        await a.call_ok("asker__chatty", {"count": 1})  # a round trip after bob's call
        assert [log["logger"] for log in alice.logs] == ["asker/asker"] * 3, alice.logs
        assert len(bob.logs) == 3 and carol.logs == [], (bob.logs, carol.logs)

        # Progress of a call goes to the caller under the caller's own token.
        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append((done, total, message))

        result = await _sdk.call_tool_raw(a.session, "asker__slow", {"steps": 3}, None, progress)
        assert not _sdk.result_parts(result)[2]
        assert [s[0] for s in seen] == [1, 2, 3] and seen[-1][2] == "step 3", seen

        # A changed tool list reaches every session.
        await c.call_ok("asker__grow", {"name": "sprout"})
        for client in (alice, bob, carol):
            await client.wait("tools/list_changed", lambda cl=client: cl.tools_changed() >= 1)
        assert "asker__sprout" in tool_names(await b.list_tools())
        assert (await a.call("asker__sprout")).text == "I am sprout"
        assert await served.stop() == 0


# A downstream that asks for roots when told they changed: a server-initiated request that no
# client call is in flight for. `hello` keeps its session (1.x notification handlers get none).
# It writes the answers to the file named by its argument: a call to read them would be in
# flight when the next request comes, and the proxy would send that to the caller.
ROAMER_SOURCE = """
import asyncio
import json
import os
import sys
import mcp.types as types
try:
    from mcp.server.fastmcp import Context, FastMCP as MCPServer
except ModuleNotFoundError:
    from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("roamer")
sessions = []
seen = []
tasks = set()

@mcp.tool()
async def hello(ctx: Context) -> str:
    sessions.append(ctx.session)
    return "hi"

async def ask() -> None:
    try:
        listed = await sessions[0].list_roots()
        seen.append([str(root.uri) for root in listed.roots])
    except Exception as exc:
        seen.append(f"error: {exc}")
    with open(sys.argv[1] + ".new", "w") as out:
        json.dump(seen, out)
    os.replace(sys.argv[1] + ".new", sys.argv[1])

def on_roots_changed(*args) -> None:
    task = asyncio.get_running_loop().create_task(ask())
    tasks.add(task)
    task.add_done_callback(tasks.discard)

async def handler(*args) -> None:
    on_roots_changed()

low = getattr(mcp, "_lowlevel_server", None) or mcp._mcp_server
if hasattr(low, "add_notification_handler"):
    low.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, handler
    )
else:
    low.notification_handlers[types.RootsListChangedNotification] = handler
mcp.run()
"""


def roots_client(*uris: str) -> dict[str, Any]:
    async def list_roots(context: Any) -> Any:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in uris])

    return {"list_roots_callback": list_roots}


async def seen_roots(answers: Path, count: int) -> list[Any]:
    """The roots answers the roamer got, once there are `count` of them."""
    seen: list[Any] = []
    with anyio.move_on_after(WAIT):
        while len(seen := json.loads(answers.read_text() or "[]")) < count:
            await anyio.sleep(0.05)
        return seen
    raise AssertionError(f"the roamer got {seen!r} within {WAIT} s, not {count} answers")


async def test_a_request_no_call_explains_goes_to_the_latest_capable_live_session(
    serve: Callable[..., Any], write_registry: Callable[[str], Path], tmp_path: Path
) -> None:
    roamer, answers = tmp_path / "roamer.py", tmp_path / "answers.json"
    roamer.write_text(ROAMER_SOURCE)
    answers.write_text("")
    config = write_registry(
        f'servers:\n  roamer:\n    command: "@PYTHON@"\n    args: ["{roamer}", "{answers}"]\n'
    )
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(serve(config))
        a = await stack.enter_async_context(connected(served.url, **roots_client("file:///a")))
        c = await stack.enter_async_context(connected(served.url))  # no roots
        async with connected(served.url, **roots_client("file:///b")) as b:
            await a.call_ok("roamer__hello")
            await b.call_ok("roamer__hello")
            await c.call_ok("roamer__hello")  # c is the latest, but cannot answer
            await c.session.send_roots_list_changed()
            assert await seen_roots(answers, 1) == [["file:///b"]]
        # Bob is gone (his session ended): the next such request goes to a, not to nobody.
        await c.session.send_roots_list_changed()
        assert await seen_roots(answers, 2) == [["file:///b"], ["file:///a"]]
        assert await served.stop() == 0


# -- safety -------------------------------------------------------------------------------------


def _raw_post(port: int, host_header: str, origin: str | None = None) -> tuple[int, str]:
    """POST an initialize to /mcp with the given Host (and Origin) header: (status, body)."""
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}'
    )
    headers = {
        "Host": host_header,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if origin is not None:
        headers["Origin"] = origin
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/mcp", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(200).decode(errors="replace")
    finally:
        connection.close()


async def test_loopback_keeps_dns_rebinding_protection(serve: Callable[..., Any]) -> None:
    async with serve(EXAMPLES / "compensators.yaml") as served:
        port = served.port
        post = anyio.to_thread.run_sync
        assert (await post(_raw_post, port, f"127.0.0.1:{port}"))[0] == 200
        assert (await post(_raw_post, port, f"localhost:{port}"))[0] == 200
        rebound = await post(_raw_post, port, f"evil.example:{port}")
        assert rebound[0] == 421, rebound
        cross = await post(_raw_post, port, f"127.0.0.1:{port}", "http://evil.example")
        assert cross[0] == 403, cross

        def elsewhere() -> int:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                connection.request("GET", "/")
                return connection.getresponse().status
            finally:
                connection.close()

        assert await anyio.to_thread.run_sync(elsewhere) == 404
        assert await served.stop() == 0


async def test_non_loopback_address_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    done = await anyio.run_process(
        command(EXAMPLES / "compensators.yaml", tmp_path / "journal.db", "0.0.0.0:0"),
        check=False,
        env=environment(),
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("compensator: --http '0.0.0.0:0': refusing to serve on 0.0.0.0:")
    assert "without a token" in lines[0] and "--token-env VAR" in lines[0], stderr
    assert "--insecure" in lines[0], stderr
    assert not (tmp_path / "journal.db").exists(), "nothing may start on a refused address"


async def test_non_loopback_address_with_insecure_warns_and_serves(
    serve: Callable[..., Any],
) -> None:
    async with serve(EXAMPLES / "compensators.yaml", http="0.0.0.0:0", args=("--insecure",)) as (
        served
    ):
        log = served.log()
        assert "anyone who can reach this port can call" in log, log
        assert "not a loopback address, with --insecure" in log, log
        async with connected(served.url) as client:
            assert "tasks__add_task" in tool_names(await client.list_tools())
        assert await served.stop() == 0


TOKEN = "t0k3n-for-the-tests_0123456789abcdef"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str


def _request(
    port: int,
    method: str,
    path: str = "/mcp",
    message: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One plain HTTP request to the proxy on 127.0.0.1:`port` (a JSON-RPC `message` as body)."""
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    sent.update(headers or {})
    body = None if message is None else json.dumps({"jsonrpc": "2.0", **message})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        got = {k.lower(): v for k, v in response.getheaders()}
        return Reply(response.status, got, response.read().decode(errors="replace"))
    finally:
        connection.close()


INITIALIZE = {
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


def _assert_refused(reply: Reply) -> None:
    assert reply.status == 401, reply
    assert reply.headers.get("www-authenticate", "").startswith("Bearer "), reply
    assert "invalid_token" in reply.body, reply


async def test_token_is_required_of_every_request(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    args = ("--token-env", "MY_PROXY_TOKEN")
    async with serve(
        EXAMPLES / "compensators.yaml", args=args, env={"MY_PROXY_TOKEN": f"  {TOKEN}\n"}
    ) as served:
        assert "every request must carry Authorization: Bearer" in served.log(), served.log()
        assert "$MY_PROXY_TOKEN" in served.log() and TOKEN not in served.log(), served.log()
        assert "no token" not in served.log(), served.log()
        port = served.port

        async def request(*args: Any, **kwargs: Any) -> Reply:
            return await anyio.to_thread.run_sync(partial(_request, port, *args, **kwargs))

        def bearer(token: str, session: str | None = None) -> dict[str, str]:
            headers = {"Authorization": f"Bearer {token}"}
            return headers if session is None else {**headers, "Mcp-Session-Id": session}

        # No header, no scheme, a wrong token, a prefix of the token: all 401.
        _assert_refused(await request("POST", message=INITIALIZE))
        _assert_refused(await request("POST", message=INITIALIZE, headers={"Authorization": TOKEN}))
        _assert_refused(await request("POST", message=INITIALIZE, headers=bearer("wrong")))
        _assert_refused(await request("POST", message=INITIALIZE, headers=bearer(TOKEN[:-1])))
        _assert_refused(await request("GET", "/"))  # every path, not only /mcp

        # A real MCP client with the token lists and calls tools.
        async with connected(served.url, TOKEN) as client:
            assert {"tasks__add_task", "undo_to"} <= tool_names(await client.list_tools())
            checkpoint = await client.checkpoint("before anyone else")

            # A raw session with the token; then the same tools/call on it, without the token
            # and with a wrong one, is refused and changes nothing; with the token it runs.
            opened = await request("POST", message=INITIALIZE, headers=bearer(TOKEN))
            assert opened.status == 200, opened
            session = opened.headers["mcp-session-id"]
            initialized = {"method": "notifications/initialized"}
            acked = await request("POST", message=initialized, headers=bearer(TOKEN, session))
            assert acked.status == 202, acked
            call = {
                "id": 2,
                "method": "tools/call",
                "params": {"name": "tasks__add_task", "arguments": {"title": "intruder"}},
            }
            _assert_refused(
                await request("POST", message=call, headers={"Mcp-Session-Id": session})
            )
            _assert_refused(await request("POST", message=call, headers=bearer("x", session)))
            _assert_refused(
                await request("DELETE", headers={"Mcp-Session-Id": session})
            )  # nor may it end the session
            undo = {
                "id": 3,
                "method": "tools/call",
                "params": {"name": "undo_to", "arguments": {"checkpoint_id": checkpoint}},
            }
            _assert_refused(
                await request("POST", message=undo, headers={"Mcp-Session-Id": session})
            )
            assert await client.list_changes(checkpoint) == []
            assert (await client.call_ok("tasks__list_tasks"))["tasks"] == []

            allowed = await request("POST", message=call, headers=bearer(TOKEN, session))
            assert allowed.status == 200 and "intruder" in allowed.body, allowed
            changes = await client.list_changes(checkpoint)
            assert [c["tool"] for c in changes] == ["tasks__add_task"], changes
            tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
            assert [t["title"] for t in tasks] == ["intruder"], tasks
        assert await served.stop() == 0


async def test_token_from_compensator_http_token_on_any_address(
    serve: Callable[..., Any],
) -> None:
    env = {"COMPENSATOR_HTTP_TOKEN": TOKEN}
    async with serve(EXAMPLES / "compensators.yaml", http="0.0.0.0:0", env=env) as served:
        log = served.log()
        assert "$COMPENSATOR_HTTP_TOKEN" in log, log
        assert "plain HTTP carries it in clear text" in log, log  # the only warning left
        assert "refusing" not in log and "--insecure" not in log, log
        post = partial(_request, served.port, "POST", message=INITIALIZE)
        _assert_refused(await anyio.to_thread.run_sync(post))
        async with connected(served.url, TOKEN) as client:
            assert "tasks__add_task" in tool_names(await client.list_tools())
        assert await served.stop() == 0


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--token-env", "MY_PROXY_TOKEN"), {}, "MY_PROXY_TOKEN is not set"),
        (("--token-env", "MY_PROXY_TOKEN"), {"MY_PROXY_TOKEN": " "}, "MY_PROXY_TOKEN is empty"),
        ((), {"COMPENSATOR_HTTP_TOKEN": ""}, "COMPENSATOR_HTTP_TOKEN is empty"),
        (("--token-env", "T"), {"T": "two words"}, "spaces, control or non-ASCII"),
        (("--token-env", "s3cr3t-token!"), {}, "not the token itself"),
    ],
)
async def test_missing_or_unusable_token_is_a_usage_error(
    args: tuple[str, ...], env: dict[str, str], expected: str, tmp_path: Path
) -> None:
    done = await anyio.run_process(
        command(EXAMPLES / "compensators.yaml", tmp_path / "journal.db", "127.0.0.1:0", *args),
        check=False,
        env=environment(**env),
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compensator: "), stderr
    assert expected in lines[0], stderr
    assert "s3cr3t" not in stderr, "a token given in place of a name is not repeated"
    assert not (tmp_path / "journal.db").exists(), "nothing may start without its token"


async def test_token_options_need_http(tmp_path: Path) -> None:
    serve = [sys.executable, "-m", "compensator", "serve"]
    for option in (("--token-env", "MY_PROXY_TOKEN"), ("--insecure",)):
        done = await anyio.run_process(
            [*serve, "--config", str(EXAMPLES / "compensators.yaml"), *option],
            check=False,
            env=environment(MY_PROXY_TOKEN=TOKEN),
        )
        stderr = done.stderr.decode()
        assert done.returncode == 2, stderr
        assert stderr == f"compensator: {option[0]} applies only with --http HOST:PORT\n"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1", "has no port"),
        ("localhost:", "has no port"),
        ("127.0.0.1:70000", "out of range"),
        ("127.0.0.1:http", "is not a number"),
        ("http://127.0.0.1:8765/mcp", "not a URL"),
        ("::1:8765", "in brackets"),
    ],
)
async def test_bad_http_value_is_one_line_usage_error(
    value: str, expected: str, tmp_path: Path
) -> None:
    done = await anyio.run_process(
        command(EXAMPLES / "compensators.yaml", tmp_path / "journal.db", value), check=False
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("compensator: --http ") and repr(value) in lines[0], stderr
    assert expected in lines[0] and "e.g. --http " in lines[0], stderr
    assert not (tmp_path / "journal.db").exists(), "nothing may start for a bad --http value"


async def test_port_in_use_is_one_line_error_exit_1(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        value = f"127.0.0.1:{port}"
        done = await anyio.run_process(
            command(EXAMPLES / "compensators.yaml", tmp_path / "journal.db", value), check=False
        )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert repr(value) in lines[0] and "already in use" in lines[0], stderr
    assert f"--http 127.0.0.1:{port + 1}" in lines[0], stderr
    assert not (tmp_path / "journal.db").exists()


# -- resource subscriptions of several sessions -----------------------------------------------

CATALOG = f"""
servers:
  beta:
    command: "@PYTHON@"
    args: ["{SERVERS / "catalog_server.py"}", "--label", "beta"]
"""


def updates(client: Client) -> list[str]:
    return [
        str(n.params.uri)
        for n in client.notifications
        if getattr(n, "method", None) == "notifications/resources/updated"
    ]


async def subscription(session: ClientSession, method: str, uri: str) -> None:
    request = (
        types.SubscribeRequest if method == "resources/subscribe" else types.UnsubscribeRequest
    )
    await _sdk.send_wire_request(session, method, {"uri": uri}, request, types.EmptyResult)


async def test_resource_updates_go_to_the_sessions_subscribed(
    serve: Callable[..., Any], write_registry: Callable[[str], Path]
) -> None:
    alice, bob = Client("alice"), Client("bob")
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(serve(write_registry(CATALOG)))
        a = await stack.enter_async_context(connected(served.url, **alice.options()))
        b = await stack.enter_async_context(connected(served.url, **bob.options()))
        await subscription(a.session, "resources/subscribe", "beta://notes/a")
        await subscription(b.session, "resources/subscribe", "beta://notes/b")
        await subscription(a.session, "resources/subscribe", "beta://notes/both")
        await subscription(b.session, "resources/subscribe", "beta://notes/both")

        for uri in ("beta://notes/a", "beta://notes/b", "beta://notes/both"):
            assert await b.call_ok("beta__touch", {"uri": uri}) == "notified"
        await alice.wait("updates", lambda: "beta://notes/both" in updates(alice))
        await bob.wait("updates", lambda: "beta://notes/both" in updates(bob))
        # Bob unsubscribing from the shared one keeps the server subscribed for Alice.
        await subscription(b.session, "resources/unsubscribe", "beta://notes/both")
        assert await a.call_ok("beta__touch", {"uri": "beta://notes/both"}) == "notified"
        await alice.wait("a second update", lambda: updates(alice).count("beta://notes/both") == 2)
        assert await served.stop() == 0
    assert updates(alice) == ["beta://notes/a", "beta://notes/both", "beta://notes/both"]
    assert updates(bob) == ["beta://notes/b", "beta://notes/both"]
