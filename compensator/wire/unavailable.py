"""What a client sees of a proxy that could not start: a server with no tools that says why.

A client shows a server that exits before answering `initialize` as a dead connection
("Connection closed"); the reason, on stderr, is in a log file the person does not know of.
So when `compensator serve` fails on stdio (a registry mistake, a journal it cannot open), it
still answers: the reason goes in `instructions`, in an error log notification once the
client has initialized, and in the answer to every `tools/list` (a JSON-RPC error) and
`tools/call` (an error result). The sentence is the one stderr gets, with file, line, key and
fix when it is a registry's.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp.types as types

from . import sdk

__all__ = ["UNAVAILABLE", "serve_unavailable"]

log = logging.getLogger(__name__)

UNAVAILABLE = "compensator could not start, so it offers no tools"


async def serve_unavailable(reason: str, version: str) -> None:
    """Serve one client over stdio until it leaves, telling it `reason` wherever it looks."""
    sentence = f"{UNAVAILABLE}: {reason}"

    async def list_tools(cursor: str | None) -> types.ListToolsResult:
        # INTERNAL_ERROR: the request was fine, the server behind it is not.
        raise sdk.sdk_error(types.INTERNAL_ERROR, sentence)

    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": sentence}], "isError": True}

    server = sdk.build_server("compensator", version, sentence, list_tools, call_tool)
    async with anyio.create_task_group() as tasks:

        def tell(session: Any) -> None:
            tasks.start_soon(_notify, session, sentence)

        sdk.install_relay(
            server, sdk.RelayHandlers(on_client=tell, set_level=_ignore, roots_changed=_none)
        )
        async with sdk.open_stdio() as wire:
            await wire.serve(server)


async def _notify(session: Any, sentence: str) -> None:
    notification = types.LoggingMessageNotification(
        params=types.LoggingMessageNotificationParams(
            level="error", logger="compensator", data=sentence
        )
    )
    try:
        await sdk.notify_client(session, notification)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        log.debug("the client left before the error log notification was sent")


async def _ignore(level: str) -> None:
    """`logging/setLevel`: the one message there is to log is an error, sent at any level."""


async def _none() -> None:
    """`notifications/roots/list_changed`: there is nothing the roots change."""
