"""Streamable HTTP downstreams: a `servers:` entry with `url:` and `headers:`.

The real proxy runs over stdio, as an agent starts it; behind it a real MCP server
(tests/servers/http_server.py, a key-value store) serves streamable HTTP on a free port of
127.0.0.1. Calls, journal and undo work as for a stdio server; `headers:` arrive with `${VAR}`
expanded (and the value stays out of the proxy's log); a server that goes away and comes back
on the same port is reconnected on the next call.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.errors import RegistryError
from compensator.registry import parse_registry
from pytest_compensator.client import ProxyClient

from .conftest import REPO, SERVERS, Launcher

pytestmark = pytest.mark.anyio

HTTP_SERVER = SERVERS / "http_server.py"
TOKEN = "tok-3b9f0c-sekrit-value"
START_DEADLINE = 30.0
RECONNECT_DEADLINE = 60.0
"""Seconds to wait for the proxy to reach a server that listens again: twice the longest
restart backoff (30 s), so at least one attempt falls after it listens. It only bounds a
failure: a reconnection returns as soon as it happens."""

# The HTTP server is a separate process, so it may run on any SDK line: the dev venv's
# interpreter when there is one, so that the proxy under test can be on the other line.
_VENV = REPO / ".venv" / "bin" / "python"
SERVER_PYTHON = str(_VENV) if _VENV.exists() else sys.executable

REGISTRY = """\
servers:
  kv:
    url: http://127.0.0.1:{port}/mcp
    headers:
      X-Api-Key: "Bearer ${{KV_TOKEN}}"
      X-Plain: plain-value
    call_timeout: 20
state:
  - tool: kv__dump
    select: store
tools:
  kv__get: {{classification: read}}
  kv__dump: {{classification: read}}
  kv__header: {{classification: read}}
  kv__put:
    classification: reversible
    inverse:
      - tool: kv__delete
        args: {{key: "{{args.key}}"}}
        when: "result.previous == `null`"
      - tool: kv__put
        args: {{key: "{{args.key}}", value: "{{result.previous}}"}}
        when: "result.previous != `null`"
  kv__delete:
    classification: compensable
    snapshot_tool: kv__get
    snapshot_args: {{key: "{{args.key}}"}}
    inverse:
      - tool: kv__put
        args: {{key: "{{args.key}}", value: "{{snapshot.value}}"}}
        when: "snapshot.value != `null`"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class HttpServer:
    """The in-test HTTP MCP server as a subprocess that the test can kill and start again."""

    def __init__(self, folder: Path) -> None:
        self.port = _free_port()
        self.store = folder / "store.json"
        self.log = folder / "http-server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SERVER_PYTHON, str(HTTP_SERVER), str(self.port), str(self.store)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + START_DEADLINE
        while not _listening(self.port):
            if self.process.poll() is not None:
                pytest.fail(f"the HTTP server exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the HTTP server did not listen within {START_DEADLINE} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http_config(http_server: HttpServer, tmp_path: Path) -> Path:
    path = tmp_path / "http.yaml"
    path.write_text(REGISTRY.format(port=http_server.port))
    return path


ENV = {"KV_TOKEN": TOKEN}


async def test_calls_headers_and_undo_over_http(
    proxy: Launcher, http_config: Path, proxy_log: Callable[[], str]
) -> None:
    async with proxy(http_config, env=ENV) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"kv__put", "kv__get", "kv__delete", "kv__dump", "kv__header"} <= names
        assert "checkpoint" in names

        # headers: reach the server, ${KV_TOKEN} expanded
        seen = await client.call_ok("kv__header", {"name": "x-api-key"})
        assert seen == {"value": f"Bearer {TOKEN}"}
        assert await client.call_ok("kv__header", {"name": "x-plain"}) == {"value": "plain-value"}

        await client.call_ok("kv__put", {"key": "keep", "value": "v0"})
        checkpoint = await client.checkpoint("before")
        assert await client.call_ok("kv__put", {"key": "keep", "value": "v1"}) == {"previous": "v0"}
        await client.call_ok("kv__put", {"key": "new", "value": "n1"})
        await client.call_ok("kv__delete", {"key": "keep"})
        assert (await client.call_ok("kv__dump"))["store"] == {"new": "n1"}

        changes = await client.list_changes(checkpoint)
        assert [c["tool"] for c in changes] == ["kv__delete", "kv__put", "kv__put"]  # newest first
        assert all(c["status"] == "ok" for c in changes)

        report = await client.undo_to(checkpoint)
        assert (await client.call_ok("kv__dump"))["store"] == {"keep": "v0"}, report
        assert await client.list_changes(checkpoint) == []
    log = proxy_log()
    assert "server 'kv' ready with 5 tools" in log
    assert TOKEN not in log


async def test_a_server_that_went_away_and_came_back_is_reconnected(
    proxy: Launcher, http_config: Path, http_server: HttpServer, proxy_log: Callable[[], str]
) -> None:
    async with proxy(http_config, env=ENV) as client:
        await client.call_ok("kv__put", {"key": "a", "value": "1"})

        # Restarted between two calls: the new process does not know the old session.
        http_server.stop()
        http_server.start()
        assert await client.call_ok("kv__get", {"key": "a"}) == {"value": "1"}
        checkpoint = await client.checkpoint()
        assert await client.call_ok("kv__put", {"key": "a", "value": "2"}) == {"previous": "1"}

        # Down at the time of a call: the call fails with a clear error, and the next call
        # after it came back reconnects.
        http_server.stop()
        # The first call is sent and gets no answer: journaled with an unknown outcome,
        # at once, not after call_timeout.
        lost = await client.call("kv__put", {"key": "b", "value": "lost"})
        assert lost.is_error and "outcome unknown" in lost.text, lost.text
        assert "did not answer" not in lost.text
        changes = await client.list_changes(checkpoint)
        assert [(c["tool"], c["status"]) for c in changes] == [
            ("kv__put", "unknown"),
            ("kv__put", "ok"),
        ]
        # The next one finds it still down: not sent, nothing journaled.
        down = await client.call("kv__get", {"key": "a"})
        assert down.is_error and "is down and could not be restarted" in down.text, down.text
        http_server.start()
        reply = await _retry_until_ok(client, "kv__get", {"key": "a"})
        assert reply == {"value": "2"}

        # The journal survived the reconnections: undo puts the value back.
        await client.undo_to(checkpoint)
        assert await client.call_ok("kv__get", {"key": "a"}) == {"value": "1"}
    log = proxy_log()
    assert "lost its HTTP session" in log
    assert TOKEN not in log


async def _retry_until_ok(client: object, tool: str, args: dict[str, str]) -> object:
    """Calls until one succeeds: a failed reconnection waits out a backoff (0.5 s, doubling)."""
    deadline = anyio.current_time() + RECONNECT_DEADLINE
    while True:
        reply = await client.call(tool, args)  # type: ignore[attr-defined]
        if not reply.is_error:
            return reply.value
        if anyio.current_time() > deadline:
            pytest.fail(f"{tool} still failing after {RECONNECT_DEADLINE} s: {reply.text}")
        await anyio.sleep(0.2)


async def test_unreachable_url_is_offered_once_it_listens(
    proxy: Launcher, tmp_path: Path, proxy_log: Callable[[], str]
) -> None:
    """A server started after the proxy (the usual order mistake) is picked up by the
    background retry: its tools appear, calls are journaled and undone."""
    late = HttpServer(tmp_path)  # not listening yet
    config = tmp_path / "down.yaml"
    config.write_text(
        f"servers:\n  kv:\n    url: http://127.0.0.1:{late.port}/mcp\n    startup_timeout: 10\n"
        "    headers: {X-Api-Key: '${KV_TOKEN}'}\n"
        "tools:\n  kv__put:\n    classification: reversible\n"
        "    inverse_tool: kv__delete\n    inverse_args: {key: '{args.key}'}\n"
    )
    try:
        async with proxy(config, env=ENV) as client:
            names = {tool.name for tool in await client.list_tools()}
            assert not any(name.startswith("kv__") for name in names)
            reply = await client.call("kv__get", {"key": "a"})
            assert reply.is_error and "retries it in the background" in reply.text, reply.text
            checkpoint = await client.checkpoint()
            late.start()
            # The background retry backs off while kv is down, up to 30 s between attempts.
            deadline = anyio.current_time() + RECONNECT_DEADLINE
            while "kv__put" not in {tool.name for tool in await client.list_tools()}:
                if anyio.current_time() > deadline:
                    pytest.fail(
                        f"kv's tools not offered {RECONNECT_DEADLINE} s after it listened: "
                        f"{proxy_log()}"
                    )
                await anyio.sleep(0.2)
            await client.call_ok("kv__put", {"key": "a", "value": "1"})
            assert await client.call_ok("kv__get", {"key": "a"}) == {"value": "1"}
            await client.undo_to(checkpoint)
            assert await client.call_ok("kv__get", {"key": "a"}) == {"value": None}
    finally:
        late.stop()
    log = proxy_log()
    assert "server 'kv' failed to start" in log
    assert "server 'kv' started on attempt" in log
    assert TOKEN not in log


async def test_debug_logs_keep_expanded_values_out(http_server: HttpServer, tmp_path: Path) -> None:
    """At DEBUG the SDK logs the URL it connects to; a token in it is put back as ${KV_TOKEN}."""
    config = tmp_path / "debug.yaml"
    config.write_text(
        f"servers:\n  kv:\n    url: 'http://127.0.0.1:{http_server.port}/mcp?key=${{KV_TOKEN}}'\n"
        "    headers: {X-Api-Key: '${KV_TOKEN}'}\n"
    )
    args = ["-m", "compensator.proxy", "--config", str(config), "--db", str(tmp_path / "j.db")]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*args, "--log-level", "DEBUG"],
        env={**os.environ, **ENV},
    )
    log = tmp_path / "debug.log"
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            client = ProxyClient(session)
            assert await client.call_ok("kv__header", {"name": "x-api-key"}) == {"value": TOKEN}
    text = log.read_text()
    assert "key=${KV_TOKEN}" in text  # the URL was logged, with the reference put back
    assert TOKEN not in text


def test_check_reports_an_unreachable_url_server(tmp_path: Path) -> None:
    config = tmp_path / "down.yaml"
    config.write_text(
        f"servers:\n  kv:\n    url: http://127.0.0.1:{_free_port()}/mcp\n"
        "    headers: {X-Api-Key: '${KV_TOKEN}'}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "compensator.cli", "check", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **ENV},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["key"] == "servers.kv" and finding["severity"] == "error"
    assert "failed to start" in finding["message"]
    assert "answers MCP at its url" in finding["message"]
    assert TOKEN not in result.stdout + result.stderr


# -- registry errors for url:, headers: ------------------------------------------------------


def _error(tmp_path: Path, server: str, environ: dict[str, str] | None = None) -> RegistryError:
    text = "servers:\n  web:\n" + "".join(f"    {line}\n" for line in server.splitlines())
    with pytest.raises(RegistryError) as info:
        parse_registry(text, tmp_path / "r.yaml", environ or {})
    return info.value


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ("command: x\nurl: http://h/mcp", "servers.web.url", "command and url are both given"),
        ("url: http://h/mcp\nargs: [a]", "servers.web.args", "args applies to a server started"),
        ("url: http://h/mcp\nenv: {A: b}", "servers.web.env", "env applies to a server started"),
        ("url: http://h/mcp\ncwd: /tmp", "servers.web.cwd", "cwd applies to a server started"),
        ("url: ftp://h/mcp", "servers.web.url", "not an http:// or https:// address"),
        ("url: http:///mcp", "servers.web.url", "not an http:// or https:// address"),
        ("url: 42", "servers.web.url", "expected a string"),
        ("url: http://h/mcp\nheaders: [a]", "servers.web.headers", "expected a mapping"),
        ("url: http://h/mcp\nheaders: {A: 1}", "servers.web.headers.A", "expected a string"),
        ("url: http://h/mcp\nheaders: {'a b': x}", "servers.web.headers", "a header name"),
        ("url: http://h/mcp\nheaders: {A: '${NOPE}'}", "servers.web.headers.A", "NOPE is not"),
        ("command: x\nheaders: {A: b}", "servers.web.headers", "headers are sent to a url"),
        ("args: [a]", "servers.web.command", "missing required key"),
        ("url: http://h/mcp\ncall_timeout: 0", "servers.web.call_timeout", "greater than 0"),
    ],
)
def test_registry_errors_for_url_servers(tmp_path: Path, body: str, key: str, words: str) -> None:
    error = _error(tmp_path, body)
    assert key in str(error) and words in str(error), str(error)
    assert "r.yaml:" in str(error)  # located: file and line


def test_missing_command_names_both_choices(tmp_path: Path) -> None:
    assert "or 'url:'" in str(_error(tmp_path, "args: [a]"))


def test_url_server_spec_expands_headers_and_url(tmp_path: Path) -> None:
    text = (
        "servers:\n  web:\n    url: 'https://${HOST}/mcp'\n    startup_timeout: 3\n"
        "    headers: {Authorization: 'Bearer ${TOKEN}'}\n"
        "  local:\n    command: x\n"
        "tools:\n  web__put: {classification: irreversible}\n"
    )
    env = {"HOST": "example.test:8443", "TOKEN": TOKEN}
    spec = parse_registry(text, tmp_path / "r.yaml", env).servers["web"]
    assert spec.url == "https://example.test:8443/mcp"
    assert dict(spec.headers) == {"Authorization": f"Bearer {TOKEN}"}
    assert spec.startup_timeout == 3.0
    assert spec.expanded == {"HOST": "example.test:8443", "TOKEN": TOKEN}
    assert TOKEN not in repr(spec)


def test_a_bad_url_does_not_quote_the_expanded_value(tmp_path: Path) -> None:
    error = _error(tmp_path, "url: 'ftp://${TOKEN}/x'", {"TOKEN": TOKEN})
    assert TOKEN not in str(error)
