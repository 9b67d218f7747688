"""Each private MCP SDK name in compensator/wire/sdk/_private.py, checked against the installed
SDK: a failure names the attribute that changed or went away, and what the proxy needs it for.

The checks run a real server and client of the installed SDK over in-memory streams. Names
used on the other SDK line are skipped here; the mcp1 tox env checks those."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession

from compensator.wire import sdk
from compensator.wire.sdk import _private

pytestmark = pytest.mark.anyio

SDK_PACKAGE = Path(sdk.__file__).parent


def use(name: str) -> _private.PrivateUse:
    [found] = [each for each in _private.USES if each.name.endswith(name)]
    if sdk.SDK_MAJOR not in found.lines:
        pytest.skip(f"{found.name} is used on mcp {found.lines} only; this is {sdk.SDK_VERSION}")
    return found


def changed(found: _private.PrivateUse, what: str) -> str:
    return (
        f"mcp {sdk.SDK_VERSION}: {found.name} {what}. compensator/wire/sdk/_private.py needs it: "
        f"{found.why}"
    )


@asynccontextmanager
async def memory_streams() -> AsyncIterator[tuple[Any, Any, Any, Any]]:
    """(client read, client write, server read, server write), all closed on exit."""
    to_client, from_server = anyio.create_memory_object_stream[Any](16)
    to_server, from_client = anyio.create_memory_object_stream[Any](16)
    async with to_client, from_server, to_server, from_client:
        yield from_server, to_server, from_client, to_client


async def _list_tools(cursor: str | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])


async def _call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": []}


async def serve_one_client(on_client: Callable[[Any], None]) -> None:
    """A proxy server with the relay installed, one client that initializes and leaves."""
    server = sdk.build_server("private", "0", "", _list_tools, _call_tool)

    async def nothing(*args: Any) -> None:
        return None

    sdk.install_relay(
        server, sdk.RelayHandlers(on_client=on_client, set_level=nothing, roots_changed=nothing)
    )
    async with (
        memory_streams() as (client_read, client_write, server_read, server_write),
        anyio.create_task_group() as group,
    ):
        options = server.create_initialization_options()
        group.start_soon(server.run, server_read, server_write, options)
        async with ClientSession(client_read, client_write) as client:
            await client.initialize()
            await client.list_tools()  # answered after the initialized notification was handled
        group.cancel_scope.cancel()


def test_every_private_use_is_named_once_with_its_lines() -> None:
    names = [each.name for each in _private.USES]
    assert len(names) == len(set(names))
    assert all(each.lines and set(each.lines) <= {1, 2} and each.why for each in _private.USES)


def test_no_other_sdk_module_reaches_for_private_names() -> None:
    # A private attribute of an SDK object (session._x, server._x) or a private SDK module.
    private = re.compile(r"\b(session|server|connection|client)\._[a-z]|mcp\.[\w.]*\._[a-z]")
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(SDK_PACKAGE.glob("*.py"))
        if path.name != "_private.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not offenders, "private SDK names outside _private.py:\n" + "\n".join(offenders)


async def test_request_id_numbers_the_next_request() -> None:
    found = use("BaseSession._request_id")
    async with (
        memory_streams() as (client_read, client_write, server_read, _),
        ClientSession(client_read, client_write) as session,
    ):
        if not isinstance(getattr(session, "_request_id", None), int):
            pytest.fail(changed(found, "is not an int attribute of a ClientSession any more"))
        expected = _private.next_request_id_v1(session)
        async with anyio.create_task_group() as group:
            group.start_soon(session.send_ping)
            written = await server_read.receive()
            group.cancel_scope.cancel()
    message = written.message
    sent = getattr(message, "root", message).id
    assert sent == expected, changed(found, f"was {expected}, the request went out as {sent}")


async def test_handle_message_sees_the_session_at_initialized() -> None:
    found = use("Server._handle_message")
    from mcp.server.lowlevel.server import Server

    if not callable(getattr(Server, "_handle_message", None)):
        pytest.fail(changed(found, "is not a method of the low-level Server any more"))
    sessions: list[Any] = []
    await serve_one_client(sessions.append)
    assert len(sessions) == 1, changed(found, "was not called with notifications/initialized")
    assert sdk.client_supports(sessions[0], "sampling") is False


async def test_connection_identifies_the_client_and_tells_when_it_leaves() -> None:
    found = use("ServerSession._connection")
    sessions: list[Any] = []
    await serve_one_client(sessions.append)
    [session] = sessions
    connection = _private.connection(session)
    if connection is None:
        pytest.fail(changed(found, "is gone from the ServerSession"))
    if not hasattr(getattr(connection, "exit_stack", None), "callback"):
        pytest.fail(changed(found, "has no exit_stack with callback() any more"))
    assert sdk.client_key(session) is connection


def test_http_client_carries_the_headers() -> None:
    found = use("create_mcp_http_client")
    try:
        client = _private.create_http_client({"X-Test": "1"})
    except ImportError as exc:
        pytest.fail(changed(found, f"cannot be imported ({exc})"))
    assert client.headers.get("X-Test") == "1", changed(found, "dropped the headers")
    assert "response" in client.event_hooks, changed(found, "has no response event hooks")
