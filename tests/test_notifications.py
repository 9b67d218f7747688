"""Notifications, progress, logging and server-initiated requests through the real proxy.

A real client (with sampling, elicitation, roots and logging callbacks and a message handler)
talks to the proxy subprocess, which talks to tests/servers/asking_server.py or to
@modelcontextprotocol/server-everything.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest

from compensator.wire import sdk as _sdk
from pytest_compensator.client import ProxyClient, launch_proxy

from .conftest import SERVERS, third_party_servers

pytestmark = pytest.mark.anyio

# mcp 2.x deprecates logging and roots for protocol 2026-07-28; stdio still speaks 2025-11-25.
quiet_deprecation = pytest.mark.filterwarnings("ignore:The .* capability is deprecated")

WAIT = 15.0
"""Seconds to wait for a notification that should come."""

ASKER = f"""
servers:
  asker:
    command: "@PYTHON@"
    args: ["{SERVERS / "asking_server.py"}"]
"""

EVERYTHING_JS = "npm/node_modules/@modelcontextprotocol/server-everything"


class Inbox:
    """What the client received, with a way to wait for something in it."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._arrived = anyio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_for(self, match: Callable[[Any], bool], what: str, count: int = 1) -> list[Any]:
        with anyio.move_on_after(WAIT):
            while True:
                arrived = self._arrived
                found = [item for item in self.items if match(item)]
                if len(found) >= count:
                    return found
                await arrived.wait()
        raise AssertionError(f"the client got no {what} within {WAIT} s; it got {self.items!r}")


def wire(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def method_is(method: str) -> Callable[[Any], bool]:
    return lambda notification: getattr(notification, "method", None) == method


class Client:
    """The callbacks a client gives its session, and what they saw."""

    def __init__(self) -> None:
        self.notifications = Inbox()
        self.logs = Inbox()
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.roots = ["file:///work/one"]
        self.sampling_reply: Any = None

    async def message_handler(self, message: Any) -> None:
        notification = _sdk.notification_of(message)
        if notification is not None:
            self.notifications.add(notification)

    async def logging_callback(self, params: Any) -> None:
        self.logs.add(wire(params))

    async def sampling_callback(self, context: Any, params: Any) -> Any:
        self.asked.append(("sampling", wire(params)))
        if self.sampling_reply is not None:
            return self.sampling_reply
        prompt = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"echo: {prompt}"),
            model="test-model",
        )

    async def elicitation_callback(self, context: Any, params: Any) -> Any:
        self.asked.append(("elicitation", wire(params)))
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def list_roots_callback(self, context: Any) -> Any:
        self.asked.append(("roots", {}))
        listed = [types.Root(uri=uri, name=uri.rsplit("/", 1)[-1]) for uri in self.roots]
        return types.ListRootsResult(roots=listed)

    def options(self, *, capable: bool = True) -> dict[str, Any]:
        """Session arguments; `capable=False` leaves out sampling, elicitation and roots."""
        options: dict[str, Any] = {
            "message_handler": self.message_handler,
            "logging_callback": self.logging_callback,
        }
        if capable:
            options["sampling_callback"] = self.sampling_callback
            options["elicitation_callback"] = self.elicitation_callback
            options["list_roots_callback"] = self.list_roots_callback
        return options


@pytest.fixture
def connect(tmp_path: Path) -> Callable[..., Any]:
    """`async with connect(registry_text, client) as proxy_client:` with the client's callbacks."""

    @asynccontextmanager
    async def start(
        text: str, client: Client, *, capable: bool = True
    ) -> AsyncIterator[ProxyClient]:
        config = tmp_path / "registry.yaml"
        config.write_text(text.replace("@PYTHON@", sys.executable))
        with (tmp_path / "proxy-stderr.log").open("a") as log:
            async with launch_proxy(
                config,
                tmp_path / "journal.db",
                stderr=log,
                session_options=client.options(capable=capable),
            ) as proxy_client:
                yield proxy_client

    return start


def everything_registry() -> str:
    root = third_party_servers(EVERYTHING_JS, node=True)
    script = root / EVERYTHING_JS / "dist" / "index.js"
    return f"""
servers:
  everything:
    command: node
    args: ["{script}", "stdio"]
"""


async def text_of(proxy_client: ProxyClient, name: str, arguments: dict[str, Any]) -> str:
    """The text of a call that must succeed."""
    reply = await proxy_client.call(name, arguments)
    assert not reply.is_error, f"{name} failed: {reply.text}"
    return reply.text


async def call_with_progress(
    proxy_client: ProxyClient, name: str, arguments: dict[str, Any], token: str
) -> types.CallToolResult:
    """A tools/call whose `_meta.progressToken` is the client's own `token`."""
    meta = {"progressToken": token}
    return await _sdk.call_tool_raw(proxy_client.session, name, arguments, meta=meta)


# -- list_changed -------------------------------------------------------------------------


async def test_tools_list_changed_refreshes_routes_and_reaches_the_client(connect):
    client = Client()
    async with connect(ASKER, client) as proxy_client:
        before = {tool.name for tool in await proxy_client.list_tools()}
        missing = await proxy_client.call("asker__sprout", {})
        assert await text_of(proxy_client, "asker__grow", {"name": "sprout"}) == "added sprout"
        await client.notifications.wait_for(
            method_is("notifications/tools/list_changed"), "tools/list_changed"
        )
        after = {tool.name for tool in await proxy_client.list_tools()}
        grown = await text_of(proxy_client, "asker__sprout", {})
    assert "asker__sprout" not in before
    assert missing.is_error and "does not offer tool 'sprout'" in missing.text
    assert after - before == {"asker__sprout"}
    assert grown == "I am sprout"


QUIET = f"""
servers:
  quiet:
    command: "@PYTHON@"
    args: ["{SERVERS / "noisy_server.py"}"]
    startup_timeout: 3
"""


async def test_a_relist_that_is_never_answered_times_out_and_later_changes_get_through(
    connect, tmp_path: Path
):
    # The server announces list_changed and leaves the proxy's tools/list unanswered; its
    # go_quiet answer comes only once that tools/list has reached it. Without a time limit the
    # refresh waits for good, and the next list_changed (from grow) is never relayed.
    client = Client()
    async with connect(QUIET, client) as proxy_client:
        hanging = await text_of(proxy_client, "quiet__go_quiet", {})
        assert await text_of(proxy_client, "quiet__grow", {}) == "grown"
        await client.notifications.wait_for(
            method_is("notifications/tools/list_changed"), "tools/list_changed after grow"
        )
        names = {tool.name for tool in await proxy_client.list_tools()}
        grown = await text_of(proxy_client, "quiet__grown", {})
    assert hanging == "a tools/list is left unanswered"
    assert "quiet__grown" in names and grown == "I am grown"
    log = (tmp_path / "proxy-stderr.log").read_text()
    assert "server 'quiet' did not answer tools/list within 3 s (its startup_timeout)" in log


async def test_everything_tools_announced_after_initialize_are_offered(connect):
    # server-everything registers its sampling, elicitation and roots tools once it knows the
    # client's capabilities, and announces them with tools/list_changed.
    client = Client()
    async with connect(everything_registry(), client) as proxy_client:
        names = {tool.name for tool in await proxy_client.list_tools()}
        reply = await proxy_client.call_ok("everything__echo", {"message": "hi"})
    assert {
        "everything__trigger-sampling-request",
        "everything__trigger-elicitation-request",
        "everything__get-roots-list",
        "everything__trigger-long-running-operation",
    } <= names
    assert "hi" in str(reply)


# -- progress -----------------------------------------------------------------------------


async def test_progress_reaches_the_client_under_its_own_token(connect):
    client = Client()
    async with connect(ASKER, client) as proxy_client:
        result = await call_with_progress(proxy_client, "asker__slow", {"steps": 3}, "mine-7")
        progress = await client.notifications.wait_for(
            method_is("notifications/progress"), "progress notifications", count=3
        )
    _, content, is_error = _sdk.result_parts(result)
    assert not is_error and content[0]["text"] == "did 3 steps"
    assert [wire(n.params) for n in progress] == [
        {"progressToken": "mine-7", "progress": float(i), "total": 3.0, "message": f"step {i}"}
        for i in (1, 2, 3)
    ]


async def test_no_progress_without_a_token(connect):
    client = Client()
    async with connect(ASKER, client) as proxy_client:
        assert await text_of(proxy_client, "asker__slow", {"steps": 2}) == "did 2 steps"
        # A later notification proves the earlier ones would have arrived by now.
        await text_of(proxy_client, "asker__chatty", {"count": 1})
        await client.logs.wait_for(lambda log: True, "log message")
    assert not [n for n in client.notifications.items if n.method == "notifications/progress"]


async def test_everything_long_running_operation_progress(connect):
    client = Client()
    async with connect(everything_registry(), client) as proxy_client:
        arguments = {"duration": 0.3, "steps": 3}
        result = await call_with_progress(
            proxy_client, "everything__trigger-long-running-operation", arguments, "tok-e"
        )
        progress = await client.notifications.wait_for(
            method_is("notifications/progress"), "progress notifications", count=3
        )
    _, content, is_error = _sdk.result_parts(result)
    assert not is_error and "Long running operation completed" in content[0]["text"]
    seen = [wire(n.params) for n in progress]
    assert [p["progressToken"] for p in seen] == ["tok-e"] * 3
    assert [(p["progress"], p["total"]) for p in seen] == [(1, 3), (2, 3), (3, 3)]


# -- logging ------------------------------------------------------------------------------


@quiet_deprecation
async def test_log_messages_are_forwarded_and_set_level_reaches_the_server(connect):
    client = Client()
    async with connect(ASKER, client) as proxy_client:
        advertised = _sdk.server_supports(proxy_client.session, "logging")
        assert await text_of(proxy_client, "asker__chatty", {"count": 3}) == "sent 3"
        logs = await client.logs.wait_for(lambda log: True, "log messages", count=3)
        await proxy_client.session.set_logging_level("error")
        level = await text_of(proxy_client, "asker__level", {})
    assert advertised
    assert logs == [
        {"level": "warning", "logger": "asker/asker", "data": {"i": i}} for i in range(3)
    ]
    assert level == "error"


async def test_everything_simulated_logging_is_forwarded(connect):
    client = Client()
    async with connect(everything_registry(), client) as proxy_client:
        await proxy_client.call_ok("everything__toggle-simulated-logging", {})
        logs = await client.logs.wait_for(
            lambda log: "-level message" in str(log.get("data")), "a simulated log message"
        )
        await proxy_client.call_ok("everything__toggle-simulated-logging", {})  # stop it again
    assert logs[0]["logger"] == "everything"
    assert logs[0]["level"] in {
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    }


@quiet_deprecation
async def test_leaving_while_the_proxy_still_forwards_is_clean(connect):
    # The client leaves in the middle of a flood of log messages: what the proxy still writes
    # while the client shuts down must not escape as BrokenResourceError (mcp 1.x's
    # stdio_client; launch_proxy reads the proxy's output to its end).
    client = Client()
    async with connect(ASKER, client) as proxy_client, anyio.create_task_group() as group:
        group.start_soon(proxy_client.call, "asker__chatty", {"count": 100_000})
        await client.logs.wait_for(lambda log: True, "a log message")
        group.cancel_scope.cancel()
    assert 0 < len(client.logs.items) < 100_000  # it left mid-flood


# -- server-initiated requests --------------------------------------------------------------


async def test_sampling_elicitation_and_roots_round_trip(connect):
    client = Client()
    async with connect(ASKER, client) as proxy_client:
        sampled = await proxy_client.call_ok("asker__ask_model", {"prompt": "hello"})
        elicited = await proxy_client.call_ok("asker__ask_user", {"question": "Colour?"})
        rooted = await proxy_client.call_ok("asker__roots", {})
    assert sampled == {"text": "echo: hello", "model": "test-model"}
    assert elicited == {"action": "accept", "answer": "blue"}
    assert rooted == {"roots": ["file:///work/one"]}
    kinds = [kind for kind, _ in client.asked]
    assert kinds == ["sampling", "elicitation", "roots"]
    sampling, elicitation = client.asked[0][1], client.asked[1][1]
    assert sampling["messages"][0]["content"]["text"] == "hello"
    assert sampling["maxTokens"] == 32
    assert elicitation["message"] == "Colour?"


async def test_a_clients_error_answer_goes_back_to_the_server(connect):
    client = Client()
    client.sampling_reply = types.ErrorData(code=-32001, message="the user declined sampling")
    async with connect(ASKER, client) as proxy_client:
        reply = await proxy_client.call("asker__ask_model", {"prompt": "hello"})
    assert reply.is_error
    assert "the user declined sampling" in reply.text


async def test_a_client_without_the_capability_gets_the_server_an_error(connect):
    # Over stdio the server is not offered what the client lacks, so the SDK's own session
    # refuses its request (compensator/wire/relay.py words it when the capability was offered,
    # as over HTTP: tests/test_serve_http.py).
    client = Client()
    async with connect(ASKER, client, capable=False) as proxy_client:
        sampled = await proxy_client.call("asker__ask_model", {"prompt": "hello"})
        elicited = await proxy_client.call("asker__ask_user", {"question": "Colour?"})
        rooted = await proxy_client.call("asker__roots", {})
    for reply, capability in ((sampled, "sampling"), (elicited, "elicitation"), (rooted, "roots")):
        assert reply.is_error, reply
        assert "not supported" in reply.text, (capability, reply.text)
    assert client.asked == []


async def test_tools_for_capabilities_the_client_lacks_are_not_offered(connect):
    # server-everything lists these three only to a client that advertised sampling,
    # elicitation or roots: the proxy offers the servers what its stdio client offers.
    needs = {
        "everything__trigger-sampling-request",
        "everything__trigger-elicitation-request",
        "everything__get-roots-list",
    }
    async with connect(everything_registry(), Client(), capable=False) as proxy_client:
        lacking = {tool.name for tool in await proxy_client.list_tools()}
    async with connect(everything_registry(), Client()) as proxy_client:
        capable = {tool.name for tool in await proxy_client.list_tools()}
    assert "everything__echo" in lacking
    assert not needs & lacking, sorted(needs & lacking)
    assert needs <= capable


@quiet_deprecation
async def test_roots_list_changed_reaches_the_server(connect):
    # server-everything asks for roots shortly after start-up (possibly before the client is
    # there: then the proxy tells it the roots changed once the client connects) and asks
    # again on every notifications/roots/list_changed, logging how many roots it got.
    client = Client()
    async with connect(everything_registry(), client) as proxy_client:
        await client.logs.wait_for(
            lambda log: "Roots updated: 1 root(s)" in str(log.get("data")), "first roots sync"
        )
        client.roots = ["file:///work/one", "file:///work/two"]
        await proxy_client.session.send_roots_list_changed()
        await client.logs.wait_for(
            lambda log: "Roots updated: 2 root(s)" in str(log.get("data")), "second roots sync"
        )
        listed = await proxy_client.call_ok("everything__get-roots-list", {})
    assert "file:///work/two" in str(listed)
