"""A client of the proxy as an agent sees it: a real subprocess spoken to over stdio MCP."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.errors import CompensatorError
from compensator.registry import Registry
from compensator.wire import parse_result, result_text, sdk

from .state import observe_state

__all__ = ["ProxyClient", "ToolCallFailed", "ToolReply", "error_when_matched", "launch_proxy"]


@dataclass(frozen=True, kw_only=True)
class ToolReply:
    """One tool result: parsed the way the registry sees it, with the raw result kept."""

    is_error: bool
    value: Any
    text: str
    raw: dict[str, Any]
    """The result as the wire JSON the proxy sent."""


class ToolCallFailed(AssertionError):
    """A call expected to succeed came back with isError."""


def error_when_matched(registry: Registry, tool: str, args: Mapping[str, Any], value: Any) -> bool:
    """Whether the tool's `error_when` says this result is a failure (as the proxy decides)."""
    policy = registry.policy(tool)
    if policy is None or policy.error_when is None:
        return False
    try:
        return policy.error_when.truthy({"result": value, "args": dict(args)})
    except CompensatorError:
        return False  # the proxy, too, counts the call as done when it cannot tell


class ProxyClient:
    """Calls the proxy's tools; the meta tools get typed helpers."""

    def __init__(
        self,
        session: ClientSession,
        registry: Registry | None = None,
        instructions: str | None = None,
    ) -> None:
        self.session = session
        self.registry = registry
        self.instructions = instructions
        """What the proxy's answer to `initialize` says to the agent about it."""

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolReply:
        result = await sdk.call_tool_raw(self.session, name, dict(arguments or {}))
        structured, content, is_error = sdk.result_parts(result)
        policy = self.registry.policy(name) if self.registry is not None else None
        return ToolReply(
            is_error=is_error,
            value=parse_result(structured, content, plain_text=bool(policy and policy.plain_text)),
            text=result_text(content),
            raw=result,
        )

    async def call_ok(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        reply = await self.call(name, arguments)
        if reply.is_error:
            raise ToolCallFailed(f"{name}({dict(arguments or {})}) failed: {reply.text}")
        return reply.value

    async def list_tools(self) -> list[types.Tool]:
        return await sdk.list_all(self.session, "tools")

    async def checkpoint(self, label: str | None = None) -> int:
        args = {} if label is None else {"label": label}
        value = await self.call_ok("checkpoint", args)
        return int(value["checkpoint_id"])

    async def list_checkpoints(self) -> list[dict[str, Any]]:
        return list((await self.call_ok("list_checkpoints"))["checkpoints"])

    async def list_changes(self, checkpoint_id: int | None = None) -> list[dict[str, Any]]:
        args = {} if checkpoint_id is None else {"checkpoint_id": checkpoint_id}
        return list((await self.call_ok("list_changes", args))["changes"])

    async def undo_to(self, checkpoint_id: int, *, dry_run: bool = False) -> dict[str, Any]:
        args = {"checkpoint_id": checkpoint_id, "dry_run": dry_run}
        value: dict[str, Any] = await self.call_ok("undo_to", args)
        return value

    async def observe_state(self) -> dict[str, Any]:
        """What the registry's `state:` probes see now, normalised for comparison."""
        if self.registry is None:
            raise ValueError("this client was launched without a registry to observe")
        return await observe_state(self.registry, self.call)


def proxy_parameters(
    config: str | os.PathLike[str],
    db: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> StdioServerParameters:
    """How to start the proxy: this interpreter, the caller's whole environment plus `env`."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "compensator.proxy", "--config", str(config), "--db", str(db)],
        env={**os.environ, **(env or {})},
        cwd=str(cwd) if cwd is not None else None,
    )


@asynccontextmanager
async def launch_proxy(
    config: str | os.PathLike[str],
    db: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stderr: TextIO | None = None,
    registry: Registry | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> AsyncIterator[ProxyClient]:
    """Start the proxy as a subprocess, initialize a session, and stop it on exit.

    `registry` (loaded by the caller) enables `observe_state`. `session_options` are extra
    `ClientSession` arguments: `sampling_callback`, `elicitation_callback`,
    `list_roots_callback`, `logging_callback`, `message_handler` (a callback given makes the
    client advertise that capability)."""
    params = proxy_parameters(config, db, env=env, cwd=cwd)
    relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
    async with anyio.create_task_group() as relays:
        async with stdio_client(params, errlog=stderr or sys.stderr) as (read, write):
            relays.start_soon(_relay, read, relay_in)
            async with ClientSession(relay_out, write, **dict(session_options or {})) as session:
                initialized = await session.initialize()
                yield ProxyClient(session, registry, initialized.instructions)
        relays.cancel_scope.cancel()


async def _relay(source: Any, sink: Any) -> None:
    """Pass the proxy's messages to the session; once it has closed, read and drop the rest
    until the proxy's output ends.

    mcp 1.x's stdio_client reader lets a send into a closed stream escape its exit: whatever
    the proxy says while the client shuts down (a server's notification, say) must still be
    read by somebody."""
    # ClosedResourceError: stdio_client closed `source` on its way out; nothing more comes.
    with contextlib.suppress(anyio.ClosedResourceError):
        async with sink:
            async for message in source:
                try:
                    await sink.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
        async for _ in source:
            pass
