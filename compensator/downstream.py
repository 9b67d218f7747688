"""Downstream MCP servers: start them concurrently, list their tools, call them, stop them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from . import _sdk
from .errors import DownstreamError
from .registry import ServerSpec

__all__ = [
    "PASS_ENV",
    "STARTUP_TIMEOUT",
    "Downstream",
    "DownstreamPool",
    "RoutedTool",
    "child_environment",
    "split_name",
]

log = logging.getLogger(__name__)

STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to spawn, initialize and list its tools before it is left out."""

MAX_TOOL_PAGES = 1000
"""A bound on `tools/list` pagination, against a server whose cursor never ends."""

SEPARATOR = "__"

PASS_ENV = "COMPENSATOR_PASS_ENV"


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
    """One server process and the client session that talks to it."""

    spec: ServerSpec
    session: ClientSession | None = None
    tools: list[types.Tool] = field(default_factory=list)
    error: str | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)

    @property
    def name(self) -> str:
        return self.spec.name

    async def run(self, closing: anyio.Event, startup_timeout: float) -> None:
        """Own the server's whole life in one task: the SDK's contexts must exit where entered."""
        try:
            await self._serve(closing, startup_timeout)
        except Exception as exc:
            self.error = self.error or _describe(exc)
            log.error("server %r is unavailable: %s", self.name, self.error)
        finally:
            self.session = None
            self.ready.set()

    async def _serve(self, closing: anyio.Event, startup_timeout: float) -> None:
        params = StdioServerParameters(
            command=self.spec.command,
            args=list(self.spec.args),
            env=child_environment(self.spec.env),
            cwd=str(self.spec.cwd),
        )
        async with (
            stdio_client(params, errlog=sys.stderr) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(startup_timeout):
                await session.initialize()
                self.tools = await _list_all_tools(session)
            self.session = session
            log.info("server %r ready with %d tools", self.name, len(self.tools))
            self.ready.set()
            await closing.wait()

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> types.CallToolResult:
        """Forward one call; transport failures raise DownstreamError, isError results return."""
        if self.session is None:
            raise DownstreamError(f"server {self.name!r} is not running: {self.error or 'stopped'}")
        try:
            return await _sdk.call_tool_raw(self.session, tool, arguments, timeout)
        except _sdk.SDKError as exc:
            raise DownstreamError(f"server {self.name!r} failed on {tool!r}: {exc}") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise DownstreamError(f"server {self.name!r} is gone: {_describe(exc)}") from exc


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


class DownstreamPool:
    """All downstream servers, started concurrently; failures are reported, not fatal."""

    def __init__(
        self, specs: Iterable[ServerSpec], *, startup_timeout: float = STARTUP_TIMEOUT
    ) -> None:
        self.servers: dict[str, Downstream] = {spec.name: Downstream(spec=spec) for spec in specs}
        self.routes: dict[str, RoutedTool] = {}
        self._startup_timeout = startup_timeout
        self._closing = anyio.Event()
        self._group: Any = None

    async def __aenter__(self) -> DownstreamPool:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        try:
            for server in self.servers.values():
                self._group.start_soon(server.run, self._closing, self._startup_timeout)
            for server in self.servers.values():
                await server.ready.wait()
        except BaseException:
            await self.__aexit__(*sys.exc_info())
            raise
        self.routes = _route(self.servers.values())
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self._closing.set()
        group, self._group = self._group, None
        if group is None:
            return None
        result: bool | None = await group.__aexit__(*exc_info)
        return result

    @property
    def failures(self) -> Mapping[str, str]:
        return {name: s.error for name, s in self.servers.items() if s.error is not None}

    def route(self, name: str) -> RoutedTool | None:
        return self.routes.get(name)

    def missing_reason(self, name: str) -> str:
        """Why no tool `name` is offered, in words a client can act on."""
        split = split_name(name)
        if split is None or split[0] not in self.servers:
            return f"no server offers tool {name!r}; known servers: {', '.join(self.servers)}"
        server = self.servers[split[0]]
        reason = f" (it failed to start: {server.error})" if server.error else ""
        return f"server {split[0]!r} does not offer tool {split[1]!r}{reason}"

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> types.CallToolResult:
        """Call a tool by its exposed name (`server__tool`)."""
        routed = self.routes.get(name)
        if routed is None:
            raise DownstreamError(self.missing_reason(name))
        return await self.servers[routed.server].call(routed.original.name, arguments, timeout)


def _route(servers: Iterable[Downstream]) -> dict[str, RoutedTool]:
    routes: dict[str, RoutedTool] = {}
    for server in servers:
        for tool in server.tools:
            exposed = f"{server.name}{SEPARATOR}{tool.name}"
            routes[exposed] = RoutedTool(name=exposed, server=server.name, original=tool)
    return routes
