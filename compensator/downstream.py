"""Downstream MCP servers: start them concurrently, list their tools, call them, stop them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from . import _sdk
from .errors import DownstreamError
from .registry import ServerSpec
from .secrets import Concealer

__all__ = [
    "PASS_ENV",
    "STARTUP_TIMEOUT",
    "Downstream",
    "DownstreamPool",
    "RoutedTool",
    "SessionLost",
    "child_environment",
    "split_name",
]

log = logging.getLogger(__name__)

STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to spawn, initialize and list its tools before it is left out."""

RESTART_BACKOFF = 0.5
"""Seconds before retrying a server whose restart failed; doubled after each failed retry."""

RESTART_BACKOFF_MAX = 30.0
"""The longest wait between restart attempts."""

MAX_TOOL_PAGES = 1000
"""A bound on `tools/list` pagination, against a server whose cursor never ends."""

SEPARATOR = "__"

CATALOG = {"resources": "resources", "resource_templates": "resources", "prompts": "prompts"}
"""The lists `Downstream.list_catalog` keeps, and the capability each needs."""

PASS_ENV = "COMPENSATOR_PASS_ENV"


class _QuietGarbage(logging.Filter):
    """The SDK logs a full traceback for every stdout line of a server that is not JSON-RPC.
    A stray print in a server is common and harmless here (the line is dropped), so say it in
    one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Failed to parse JSONRPC message"):
            error = record.exc_info[1]
            first = str(error).splitlines()[0] if error is not None and str(error) else "?"
            record.msg = "a downstream server wrote a line that is not JSON-RPC; dropped it (%s)"
            record.args = (first,)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("mcp.client.stdio").addFilter(_QuietGarbage())

# The HTTP clients of `url:` servers log every request at INFO, with its URL, which may hold
# an expanded ${VAR}: one line per call is noise, and the URL must stay out of logs.
for _name in ("httpx", "httpx2", "httpcore", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class _ConcealHttpLogs(logging.Filter):
    """The SDK's HTTP client logs its URL (at DEBUG): put `${NAME}` back for expanded values."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _HTTP_LOG_SECRETS:
            message = record.getMessage()
            concealed = Concealer(_HTTP_LOG_SECRETS)(message)
            if concealed != message:
                record.msg, record.args = concealed, None
        return True


_HTTP_LOG_SECRETS: dict[str, str] = {}
"""The `${NAME}` values that `url:` server entries expanded."""
for _name in ("mcp.client.streamable_http", "httpx", "httpx2"):
    logging.getLogger(_name).addFilter(_ConcealHttpLogs())


def split_name(name: str) -> tuple[str, str] | None:
    """`tasks__add_task` -> ("tasks", "add_task"); None when the name has no server prefix."""
    server, sep, tool = name.partition(SEPARATOR)
    return (server, tool) if sep and server and tool else None


@dataclass(frozen=True, kw_only=True)
class RoutedTool:
    """A downstream tool as the client sees it: renamed, otherwise untouched."""

    name: str
    server: str
    original: types.Tool

    @property
    def annotations(self) -> dict[str, Any]:
        ann = self.original.annotations
        return {} if ann is None else ann.model_dump(by_alias=True, exclude_none=True)

    def exposed(self) -> types.Tool:
        return self.original.model_copy(update={"name": self.name})


@dataclass(kw_only=True)
class Downstream:
    """One server process and the client session that talks to it.

    Each process life runs in one task (`run`), because the SDK's contexts must exit in the
    task that entered them. The task ends when the pool closes or the server's output ends
    (it exited); `ensure_running` then starts a new life, with backoff after failed starts.
    """

    spec: ServerSpec
    startup_timeout: float = STARTUP_TIMEOUT
    session: ClientSession | None = None
    tools: list[types.Tool] = field(default_factory=list)
    capabilities: dict[str, Any] = field(default_factory=dict)
    """The server's capabilities from its initialize result, as wire JSON."""
    resources: list[types.Resource] = field(default_factory=list)
    resource_templates: list[types.ResourceTemplate] = field(default_factory=list)
    prompts: list[types.Prompt] = field(default_factory=list)
    error: str | None = None
    session_options: dict[str, Any] = field(default_factory=dict)
    """Extra ClientSession arguments (the relay's callbacks: compensator/relay.py)."""
    ready: anyio.Event = field(default_factory=anyio.Event)
    starts: int = 0
    """Successful starts so far (the first one included)."""
    _exited: anyio.Event = field(default_factory=anyio.Event)
    _ended: anyio.Event = field(default_factory=anyio.Event)
    _lock: anyio.Lock = field(default_factory=anyio.Lock)
    _backoff: float = 0.0
    _retry_at: float | None = None
    _session_gone: bool = False
    _calls: set[anyio.CancelScope] = field(default_factory=set)
    _closing: anyio.Event = field(default_factory=anyio.Event)
    on_restart: Callable[[str], Awaitable[None]] | None = None
    """Awaited with the server's name after each successful restart, before the call that
    caused it goes on (the pool renews what the server forgot)."""

    def conceal(self, text: str) -> str:
        """`text` with this server's expanded `${NAME}` values put back as references: an OS
        error quotes the command line, which may hold a token."""
        return Concealer(self.spec.expanded)(text)

    @property
    def failure_level(self) -> int:
        """How loudly a failed start or an exit is logged: DEBUG while a first start is being
        retried (the pool reports each new reason itself), else ERROR."""
        return logging.DEBUG if not self.starts and self._retry_at is not None else logging.ERROR

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def prefix(self) -> str:
        """What this server's exposed tool names start with: its `prefix:`, else its name."""
        return self.spec.exposed_prefix

    async def run(self, closing: anyio.Event) -> None:
        """One process life: start, serve until the pool closes or the server exits, stop."""
        self._exited, self._ended = anyio.Event(), anyio.Event()
        self._closing = closing
        self._session_gone = False
        self.error = None
        try:
            await self._serve(closing, self._exited)
        except Exception as exc:
            self.error = self.error or self.conceal(_describe(exc))
            log.log(self.failure_level, "server %r is unavailable: %s", self.name, self.error)
        finally:
            if self.spec.url is not None and not closing.is_set():
                self._exited.set()  # the connection ended: calls in flight may have run
            self.session = None
            for call in list(self._calls):
                call.cancel()
            self.ready.set()
            self._ended.set()

    def _transport(self) -> Any:
        """The streams to the server: its stdin/stdout for `command`, HTTP for `url`."""
        if self.spec.url is not None:
            _HTTP_LOG_SECRETS.update(self.spec.expanded)
            return _sdk.streamable_http(self.spec.url, self.spec.headers, self._forgotten)
        params = StdioServerParameters(
            command=self.spec.command,
            args=list(self.spec.args),
            env=child_environment(self.spec.env),
            cwd=str(self.spec.cwd),
            # One stray non-UTF-8 byte must not stall the session: with "strict" the SDK's
            # reader dies on it and every later call to the server times out.
            encoding_error_handler="replace",
        )
        return stdio_client(params, errlog=sys.stderr)

    async def _serve(self, closing: anyio.Event, exited: anyio.Event) -> None:
        relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
        async with (
            self._transport() as (read, write),
            anyio.create_task_group() as relays,
        ):
            relays.start_soon(self._relay, read, relay_in, exited)
            async with ClientSession(relay_out, write, **self.session_options) as session:
                await self._start(session, exited)
                await _first(closing, exited)
            relays.cancel_scope.cancel()

    async def _start(self, session: ClientSession, exited: anyio.Event) -> None:
        try:
            with anyio.fail_after(self.startup_timeout):
                initialized = await session.initialize()
                self.capabilities = _sdk.initialize_capabilities(initialized)
                self.tools = await _list_all_tools(session)
        except Exception as exc:
            if exited.is_set():
                self.error = "exited during start-up; its stderr is in the proxy's log"
            elif isinstance(exc, TimeoutError):
                self.error = f"did not finish starting within {_seconds(self.startup_timeout)}"
            else:
                self.error = self.conceal(_describe(exc))
            self.ready.set()  # report now: stopping a stuck process takes seconds more
            raise
        await self.list_catalog(session)
        self.error = None
        self.starts += 1
        self.session = session
        log.info("server %r ready with %d tools", self.name, len(self.tools))
        self.ready.set()

    async def list_catalog(self, session: ClientSession, kinds: Iterable[str] = CATALOG) -> None:
        """List the server's resources, resource templates and prompts (those of `kinds` that
        its capabilities advertise). A failure leaves that list as it was and is logged: it
        does not stop the server's tools from being offered."""
        for kind in kinds:
            if CATALOG[kind] not in self.capabilities:
                setattr(self, kind, [])
                continue
            try:
                with anyio.fail_after(self.startup_timeout):
                    setattr(self, kind, await _list_all(session, kind))
            except Exception as exc:
                why = "timed out" if isinstance(exc, TimeoutError) else _describe(exc)
                log.warning(
                    "server %r: listing its %s failed (%s); they are not offered",
                    self.name,
                    kind.replace("_", " "),
                    self.conceal(why),
                )

    async def _relay(self, source: Any, sink: Any, exited: anyio.Event) -> None:
        """Pass the server's messages on, and notice when its output ends: it exited."""
        try:
            async with sink:
                async for message in source:
                    if _sdk.connection_failed(message):
                        break  # an HTTP server is unreachable (1.x reports it in the stream)
                    await sink.send(message)
                if self._closing.is_set():
                    return  # an HTTP transport ends its stream when the pool closes it
                # Before the sink closes: a call woken by the close must see why.
                self.session = None
                self.error = "exited" if self.spec.url is None else "lost its connection"
                exited.set()
                log.log(
                    self.failure_level,
                    "server %r %s; it will be restarted on the next call",
                    self.name,
                    self.error,
                )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is being closed

    async def ensure_running(self, group: Any, closing: anyio.Event) -> str | None:
        """Restart the server if it exited; None when it runs, else why it cannot be called."""
        if self.session is not None:
            return None
        if not self.starts:
            return f"server {self.name!r} failed to start: {self.error}"
        return await self.restart(group, closing)

    async def restart(self, group: Any, closing: anyio.Event) -> str | None:
        """Start a new life unless one runs or the backoff says not yet; None when it runs."""
        async with self._lock:
            if self.session is not None:
                return None
            now = anyio.current_time()
            if self._retry_at is not None and now < self._retry_at:
                wait = _seconds(self._retry_at - now)
                return (
                    f"server {self.name!r} is down: {self.error}. The next restart attempt "
                    f"will be made on a call in {wait} or later"
                )
            await self._ended.wait()  # the previous life has stopped its process
            self.ready = anyio.Event()
            group.start_soon(self.run, closing)
            await self.ready.wait()
            problem = self._restarted()
            if problem is None and self.on_restart is not None:
                await self.on_restart(self.name)
            return problem

    def back_off(self) -> float:
        """Put the next start attempt off (0.5 s, doubling up to 30 s); the seconds until it."""
        self._backoff = min(max(2 * self._backoff, RESTART_BACKOFF), RESTART_BACKOFF_MAX)
        self._retry_at = anyio.current_time() + self._backoff
        return self._backoff

    @property
    def retry_in(self) -> float:
        """Seconds until the next start attempt is allowed (0 when it is now)."""
        if self._retry_at is None:
            return 0.0
        return max(0.0, self._retry_at - anyio.current_time())

    def _restarted(self) -> str | None:
        if self.session is None:
            self.back_off()
            return (
                f"server {self.name!r} is down and could not be restarted: {self.error}. "
                f"The next attempt will be made on a call in {_seconds(self._backoff)} or later"
            )
        self._backoff, self._retry_at = 0.0, None
        log.info("server %r %s", self.name, "restarted" if self.starts > 1 else "started")
        return None

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        progress: _sdk.ProgressCallback | None = None,
    ) -> types.CallToolResult:
        """Forward one call; transport failures raise DownstreamError, isError results return.

        `progress` gets the server's progress notifications for the call."""
        session, exited = self.session, self._exited
        if session is None:
            raise DownstreamError(f"server {self.name!r} is not running: {self.error or 'stopped'}")
        if all(offered.name != tool for offered in self.tools):
            raise DownstreamError(
                f"server {self.name!r} no longer offers tool {tool!r}: it was restarted and now "
                "offers " + (", ".join(t.name for t in self.tools) or "no tools")
            )
        limit = timeout if timeout is not None else self.spec.call_timeout
        watch = anyio.CancelScope()  # cancelled when this life ends under the call
        self._calls.add(watch)
        try:
            with anyio.fail_after(limit):
                with watch:
                    return await _sdk.call_tool_raw(
                        session, tool, arguments, progress_callback=progress
                    )
            # 1.x leaves a request waiting when its HTTP transport fails; `run` ends it here.
            ended = "exited" if self.spec.url is None else "lost its connection"
            message = (
                f"server {self.name!r} {ended} while handling {tool!r} "
                f"({self.error or 'stopped'}); it will be restarted on the next call"
            )
            raise DownstreamError(message, maybe_applied=True)
        except TimeoutError as exc:
            # Abandoning the request sent notifications/cancelled, but it may have run.
            message = f"server {self.name!r} did not answer {tool!r} within {_seconds(limit)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        except (_sdk.SDKError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if exited.is_set() or _sdk.connection_closed(exc):
                ended = "exited" if self.spec.url is None else "lost its connection"
                message = (
                    f"server {self.name!r} {ended} while handling {tool!r}; "
                    "it will be restarted on the next call"
                )
                raise DownstreamError(message, maybe_applied=True) from exc
            if self._session_gone:  # HTTP 404: the server restarted and forgot the session
                self._lose_session()
                message = f"server {self.name!r} lost its HTTP session (it restarted)"
                raise SessionLost(message) from exc
            if isinstance(exc, _sdk.SDKError):  # the server answered with a JSON-RPC error
                raise DownstreamError(f"server {self.name!r} failed on {tool!r}: {exc}") from exc
            message = f"server {self.name!r} is gone: {_describe(exc)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        except OSError as exc:
            message = f"server {self.name!r} is gone: {_describe(exc)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        finally:
            self._calls.discard(watch)

    def _forgotten(self) -> None:
        """The server answered 404 for the session (see `_sdk.streamable_http`)."""
        self._session_gone = True

    def _lose_session(self) -> None:
        """End this life (the server forgot the session); the next call starts a new one."""
        self.session = None
        self.error = "its HTTP session was lost"
        self._exited.set()
        log.warning("server %r lost its HTTP session; reconnecting on the next call", self.name)


class SessionLost(DownstreamError):
    """The server answered that it does not know the session: the request was not handled,
    so it is safe to send again on a new session."""


async def _first(*events: anyio.Event) -> None:
    """Wait until any of `events` is set."""
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


def _seconds(value: float | None) -> str:
    return "no limit" if value is None else f"{value:.3g} s"


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await _sdk.list_tools_page(session, cursor)
        tools.extend(page.tools)
        cursor = _sdk.next_cursor(page)
        if not cursor:
            return tools
    raise DownstreamError(f"tools/list did not end after {MAX_TOOL_PAGES} pages")


async def _list_all(session: ClientSession, kind: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page, cursor = await _sdk.list_page(session, kind, cursor)
        items.extend(page)
        if not cursor:
            return items
    what = kind.replace("_", " ")
    raise DownstreamError(f"{what} listing did not end after {MAX_TOOL_PAGES} pages")


def child_environment(explicit: Mapping[str, str]) -> dict[str, str] | None:
    """What a server gets on top of the SDK's allow-list (HOME, PATH, USER, ...): the
    variables named in $COMPENSATOR_PASS_ENV (comma-separated), then its registry `env`."""
    names = (n.strip() for n in os.environ.get(PASS_ENV, "").split(","))
    passed = {name: os.environ[name] for name in names if name and name in os.environ}
    merged = {**passed, **explicit}
    return merged or None


def _describe(exc: BaseException) -> str:
    """Flatten exception groups into one readable line."""
    inner = getattr(exc, "exceptions", None)  # an exception group, on 3.10 too
    if isinstance(inner, (list, tuple)):
        return "; ".join(_describe(each) for each in inner)
    if isinstance(exc, TimeoutError):
        return "did not finish starting in time"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if isinstance(exc, OSError) else text


class Relaying(Protocol):
    """What the pool asks of compensator/relay.py (a Protocol: this module does not import it)."""

    def bind(self, pool: DownstreamPool) -> None: ...

    def session_options(self, server: str) -> dict[str, Any]: ...

    def progress_for(self, name: str) -> _sdk.ProgressCallback | None: ...

    def server_started(self, server: str) -> None: ...


class DownstreamPool:
    """All downstream servers, started concurrently; failures are reported, not fatal.

    A server that exits is restarted on the next call to it. The tools offered to the client
    are those of each server's first start, so the client's tool list changes only when a
    server announces `notifications/tools/list_changed` (`relist`, called by the relay), or
    when a server that failed its first start starts later (`retry_first_start`: it is
    retried in the background with the restart backoff, and the relay tells the client)."""

    def __init__(
        self,
        specs: Iterable[ServerSpec],
        *,
        startup_timeout: float = STARTUP_TIMEOUT,
        relay: Relaying | None = None,
        retry_first_start: bool = False,
    ) -> None:
        self.servers: dict[str, Downstream] = {
            spec.name: Downstream(
                spec=spec, startup_timeout=spec.startup_timeout or startup_timeout
            )
            for spec in specs
        }
        self.routes: dict[str, RoutedTool] = {}
        self.prefixes: dict[str, str] = {s.prefix: name for name, s in self.servers.items()}
        """Exposed prefix (`prefix:`, else the server name) -> server name."""
        self.restart_hooks: list[Callable[[str], Awaitable[None]]] = []
        """Awaited with a server's name after it was restarted (e.g. the catalog renews its
        resource subscriptions); a failing hook is logged."""
        for server in self.servers.values():
            server.on_restart = self._after_restart
        self._closing = anyio.Event()
        self._group: Any = None
        self._retry_first_start = retry_first_start
        self.relay = relay
        if relay is not None:
            relay.bind(self)
            for server in self.servers.values():
                server.session_options = relay.session_options(server.name)

    async def __aenter__(self) -> DownstreamPool:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        try:
            for server in self.servers.values():
                self._group.start_soon(server.run, self._closing)
            for server in self.servers.values():
                await server.ready.wait()
        except BaseException:
            await self.__aexit__(*sys.exc_info())
            raise
        self.routes = _route(self.servers.values())
        if self._retry_first_start:
            for server in self.servers.values():
                if not server.starts:
                    self._group.start_soon(self._start_late, server)
        return self

    async def _start_late(self, server: Downstream) -> None:
        """Retry a server that failed its first start until it starts or the pool closes,
        then offer its tools. Only a new reason for failing is logged above DEBUG."""
        reported = server.error
        attempts = 1
        server.back_off()
        while True:
            with anyio.move_on_after(server.retry_in):
                await self._closing.wait()
            if self._closing.is_set():
                return
            attempts += 1
            if await server.restart(self._group, self._closing) is None:
                break
            if server.error != reported:
                reported = server.error
                log.warning(
                    "server %r still fails to start (attempt %d): %s; retrying in %s",
                    server.name,
                    attempts,
                    reported,
                    _seconds(server.retry_in),
                )
        self.routes = _route(self.servers.values())
        log.info(
            "server %r started on attempt %d; its %d tools are offered now",
            server.name,
            attempts,
            len(server.tools),
        )
        if self.relay is not None:
            self.relay.server_started(server.name)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self._closing.set()
        group, self._group = self._group, None
        if group is None:
            return None
        result: bool | None = await group.__aexit__(*exc_info)
        return result

    @property
    def failures(self) -> Mapping[str, str]:
        """Servers not running now, with the reason."""
        return {name: s.error or "stopped" for name, s in self.servers.items() if s.session is None}

    def route(self, name: str) -> RoutedTool | None:
        return self.routes.get(name)

    async def _after_restart(self, server_name: str) -> None:
        for hook in self.restart_hooks:
            try:
                await hook(server_name)
            except Exception as exc:
                what = getattr(hook, "__qualname__", repr(hook))
                log.warning("server %r: after its restart, %s failed: %s", server_name, what, exc)

    def missing_reason(self, name: str) -> str:
        """Why no tool `name` is offered, in words a client can act on."""
        split = split_name(name)
        if split is None or split[0] not in self.prefixes:
            return f"no server offers tool {name!r}; known servers: {', '.join(self.prefixes)}"
        server = self.servers[self.prefixes[split[0]]]
        reason = (
            f" (it failed to start: {server.error}{self._retrying(server)})" if server.error else ""
        )
        return f"server {server.name!r} does not offer tool {split[1]!r}{reason}"

    def _retrying(self, server: Downstream) -> str:
        """What to add to a failure of `server` when it is being retried in the background."""
        if server.starts or not self._retry_first_start:
            return ""
        return "; the proxy retries it in the background and offers its tools once it starts"

    def server_of(self, name: str) -> str | None:
        """The server whose prefix the exposed tool `name` starts with, if any."""
        split = split_name(name)
        return None if split is None else self.prefixes.get(split[0])

    async def ensure_running(self, server_name: str) -> str | None:
        """Restart `server_name` if it exited (within its startup timeout, with backoff after
        failures); None when it runs, else why it cannot be called now."""
        server = self.servers[server_name]
        if self._group is None or self._closing.is_set():
            return None if server.session is not None else f"server {server_name!r} is stopped"
        previous = {t.name for t in server.tools}
        problem = await server.ensure_running(self._group, self._closing)
        if problem is not None:
            problem += self._retrying(server)
        now = {t.name for t in server.tools}
        if problem is None and now != previous:
            _warn_changed_tools(server_name, previous, now)
        return problem

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> types.CallToolResult:
        """Call a tool by its exposed name (`server__tool`), restarting its server if it exited.

        `timeout` overrides the server's `call_timeout`."""
        routed = self.routes.get(name)
        if routed is None:
            raise DownstreamError(self.missing_reason(name))
        problem = await self.ensure_running(routed.server)
        if problem is not None:
            raise DownstreamError(problem)
        progress = self.relay.progress_for(name) if self.relay is not None else None
        try:
            return await self.servers[routed.server].call(
                routed.original.name, arguments, timeout, progress
            )
        except SessionLost:
            # Not handled by the server: send it once more, on a new session.
            problem = await self.ensure_running(routed.server)
            if problem is not None:
                raise DownstreamError(problem) from None
            return await self.servers[routed.server].call(
                routed.original.name, arguments, timeout, progress
            )

    async def relist(self, server_name: str) -> bool:
        """List `server_name`'s tools again (it announced a change) and re-route them; False
        when it is not running (a restart lists them anyway)."""
        server = self.servers[server_name]
        await server.ready.wait()
        session = server.session
        if session is None:
            return False
        server.tools = await _list_all_tools(session)
        self.routes = _route(self.servers.values())
        return True


def _warn_changed_tools(server: str, before: set[str], after: set[str]) -> None:
    gone, new = sorted(before - after), sorted(after - before)
    log.warning(
        "server %r restarted with a different tool list (gone: %s; new: %s); the client keeps "
        "the first list: calls to gone tools fail, new tools are offered after a proxy restart",
        server,
        ", ".join(gone) or "none",
        ", ".join(new) or "none",
    )


def _route(servers: Iterable[Downstream]) -> dict[str, RoutedTool]:
    routes: dict[str, RoutedTool] = {}
    for server in servers:
        for tool in server.tools:
            exposed = f"{server.prefix}{SEPARATOR}{tool.name}"
            routes[exposed] = RoutedTool(name=exposed, server=server.name, original=tool)
    return routes
