"""One downstream MCP server: a process (or an HTTP connection) started, listed, called,
restarted after it exits, and stopped."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession

from ..errors import DownstreamError
from ..processes import Started, start_process
from ..registry import STARTUP_TIMEOUT, Concealer, ServerSpec
from . import sdk

__all__ = [
    "CATALOG",
    "STARTUP_TIMEOUT",
    "Downstream",
    "SessionLost",
    "describe",
    "seconds",
]

log = logging.getLogger(__name__)


RESTART_BACKOFF = 0.5
"""Seconds before retrying a server whose restart failed; doubled after each failed retry."""

RESTART_BACKOFF_MAX = 30.0
"""The longest wait between restart attempts."""

CATALOG = {"resources": "resources", "resource_templates": "resources", "prompts": "prompts"}
"""The lists `Downstream.list_catalog` keeps, and the capability each needs."""

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
    """Extra ClientSession arguments (the relay's callbacks: compensator/wire/relay.py)."""
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
    started: Started | None = None
    """Processes started ahead of their servers' first start (`compensator serve` starts
    them); this server's first start adopts its own, if there is one, instead of starting
    one. One never adopted is stopped by whoever made `started`."""
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
            self.error = self.error or self.conceal(describe(exc))
            log.log(self.failure_level, "server %r is unavailable: %s", self.name, self.error)
        finally:
            if self.spec.url is not None and not closing.is_set():
                self._exited.set()  # the connection ended: calls in flight may have run
            self.session = None
            for call in list(self._calls):
                call.cancel()
            self.ready.set()
            self._ended.set()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """The streams to the server: its stdin/stdout for `command`, HTTP for `url`."""
        if self.spec.url is not None:
            _HTTP_LOG_SECRETS.update(self.spec.expanded)
            async with sdk.streamable_http(
                self.spec.url, self.spec.headers, self._forgotten
            ) as streams:
                yield streams
            return
        process = self.started.take(self.name) if self.started is not None else None
        if process is None:
            spec = self.spec
            process = await start_process(spec.command, spec.args, spec.env, spec.cwd)
        async with sdk.process_stdio(process, self.name) as streams:
            yield streams

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
                self.capabilities = sdk.initialize_capabilities(initialized)
                self.tools = await sdk.list_all(session, "tools")
        except Exception as exc:
            if exited.is_set():
                self.error = "exited during start-up; its stderr is in the proxy's log"
            elif isinstance(exc, TimeoutError):
                self.error = f"did not finish starting within {seconds(self.startup_timeout)}"
            else:
                self.error = self.conceal(describe(exc))
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
                    setattr(self, kind, await sdk.list_all(session, kind))
            except Exception as exc:
                why = "timed out" if isinstance(exc, TimeoutError) else describe(exc)
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
                    if sdk.connection_failed(message):
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
                wait = seconds(self._retry_at - now)
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
                f"The next attempt will be made on a call in {seconds(self._backoff)} or later"
            )
        self._backoff, self._retry_at = 0.0, None
        log.info("server %r %s", self.name, "restarted" if self.starts > 1 else "started")
        return None

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        progress: sdk.ProgressCallback | None = None,
    ) -> sdk.ToolResult:
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
                    return await sdk.call_tool_raw(
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
            message = f"server {self.name!r} did not answer {tool!r} within {seconds(limit)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        except (sdk.SDKError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if exited.is_set() or sdk.connection_closed(exc):
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
            if isinstance(exc, sdk.SDKError):  # the server answered with a JSON-RPC error
                message = f"server {self.name!r} failed on {tool!r}: {exc}"
                raise DownstreamError(message, answered=True) from exc
            message = f"server {self.name!r} is gone: {describe(exc)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        except OSError as exc:
            message = f"server {self.name!r} is gone: {describe(exc)}"
            raise DownstreamError(message, maybe_applied=True) from exc
        finally:
            self._calls.discard(watch)

    def _forgotten(self) -> None:
        """The server answered 404 for the session (see `sdk.streamable_http`)."""
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


def seconds(value: float | None) -> str:
    return "no limit" if value is None else f"{value:.3g} s"


def describe(exc: BaseException) -> str:
    """Flatten exception groups into one readable line."""
    inner = getattr(exc, "exceptions", None)  # an exception group, on 3.10 too
    if isinstance(inner, (list, tuple)):
        return "; ".join(describe(each) for each in inner)
    if isinstance(exc, TimeoutError):
        return "did not finish starting in time"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if isinstance(exc, OSError) else text
