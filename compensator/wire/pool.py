"""All downstream servers together: started concurrently, their tools routed by exposed
name, calls sent to the right one, and the servers that failed their first start retried."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp.types as types

from ..errors import DownstreamError
from ..names import exposed_name, hidden_by, resolve
from ..processes import Started
from ..registry import ServerSpec
from . import sdk
from .downstream import STARTUP_TIMEOUT, Downstream, SessionLost, seconds

__all__ = ["DownstreamPool", "Relaying", "RoutedTool"]

log = logging.getLogger(__name__)


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


class Relaying(Protocol):
    """What the pool asks of the relay (compensator/wire/relay.py): a Protocol, so that the
    pool does not import it."""

    def bind(self, pool: DownstreamPool) -> None: ...

    def session_options(self, server: str) -> dict[str, Any]: ...

    def progress_for(self, name: str) -> sdk.ProgressCallback | None: ...

    def server_started(self, server: str) -> None: ...


class DownstreamPool:
    """All downstream servers, started concurrently; failures are reported, not fatal.

    A server that exits is restarted on the next call to it. The tools offered to the client
    are those of each server's first start, so the client's tool list changes only when a
    server announces `notifications/tools/list_changed` (`relist`, called by the relay), or
    when a server that failed its first start starts later (`retry_first_start`: it is
    retried in the background with the restart backoff, and the relay tells the client).
    A stdio server whose process `started` holds adopts it for its first start (the caller
    stops those never adopted)."""

    def __init__(
        self,
        specs: Iterable[ServerSpec],
        *,
        startup_timeout: float = STARTUP_TIMEOUT,
        relay: Relaying | None = None,
        retry_first_start: bool = False,
        started: Started | None = None,
    ) -> None:
        self.servers: dict[str, Downstream] = {
            spec.name: Downstream(
                spec=spec,
                startup_timeout=spec.startup_timeout or startup_timeout,
                started=started,
            )
            for spec in specs
        }
        self.routes: dict[str, RoutedTool] = {}
        self.prefixes: dict[str, str] = {s.prefix: name for name, s in self.servers.items()}
        """Exposed prefix (`prefix:`, else the server name; "" for `prefix: ""`) -> server name."""
        self.hidden: dict[str, str] = {}
        """The unprefixed server's tools that clients cannot reach, by name, with what hides
        each (a meta tool, or another server's prefix); each is logged once."""
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
        self._reroute()
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
                    seconds(server.retry_in),
                )
        self._reroute()
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

    def _reroute(self) -> None:
        """Route every server's tools as they are listed now."""
        self.routes, hidden = _route(self.servers.values(), self.prefixes)
        for name, why in hidden.items():
            if self.hidden.get(name) != why:
                server = self.prefixes[""]
                log.warning(
                    'server %r (prefix: "") offers tool %r, which clients cannot reach: '
                    "%s takes that name. The tool is left out; give the server a prefix: "
                    "to offer it",
                    server,
                    name,
                    why,
                )
        self.hidden = hidden

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
        resolved = resolve(name, self.prefixes)
        if resolved is None:
            known = ", ".join(p for p in self.prefixes if p)
            return f"no server offers tool {name!r}; known servers: {known}"
        if name in self.hidden:
            # The unprefixed server offers it; what hides it is a meta tool or a prefix.
            return (
                f"server {self.prefixes['']!r} offers tool {name!r}, but {self.hidden[name]} "
                "takes that name, so the proxy leaves it out"
            )
        server = self.servers[self.prefixes[resolved[0]]]
        reason = (
            f" (it failed to start: {server.error}{self._retrying(server)})" if server.error else ""
        )
        return f"server {server.name!r} does not offer tool {resolved[1]!r}{reason}"

    def _retrying(self, server: Downstream) -> str:
        """What to add to a failure of `server` when it is being retried in the background."""
        if server.starts or not self._retry_first_start:
            return ""
        return "; the proxy retries it in the background and offers its tools once it starts"

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
    ) -> sdk.ToolResult:
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
        when it is not running (a restart lists them anyway).

        The listing gets the server's startup timeout, which bounds its first listing too;
        past it DownstreamError, and the tools stay as they were."""
        server = self.servers[server_name]
        await server.ready.wait()
        session = server.session
        if session is None:
            return False
        limit = server.startup_timeout
        try:
            with anyio.fail_after(limit):
                tools = await sdk.list_all(session, "tools")
        except TimeoutError:
            raise DownstreamError(
                f"server {server_name!r} did not answer tools/list within {seconds(limit)} "
                "(its startup_timeout); it keeps the tools it had"
            ) from None
        server.tools = tools
        self._reroute()
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


def _route(
    servers: Iterable[Downstream], prefixes: Mapping[str, str]
) -> tuple[dict[str, RoutedTool], dict[str, str]]:
    """The routes of every server's tools, and the unprefixed server's tools left out (with
    what takes their name)."""
    routes: dict[str, RoutedTool] = {}
    hidden: dict[str, str] = {}
    for server in servers:
        for tool in server.tools:
            exposed = exposed_name(server.prefix, tool.name)
            why = None if server.prefix else hidden_by(tool.name, prefixes)
            if why is not None:
                hidden[exposed] = why
                continue
            routes[exposed] = RoutedTool(name=exposed, server=server.name, original=tool)
    return routes, hidden
