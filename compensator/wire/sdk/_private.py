"""Every private name of the MCP SDK that compensator uses, in one place, each with why no
public way does the job. Nothing else in compensator touches an SDK name that starts with an
underscore; tests/test_sdk_private.py checks each one against the installed SDK and names
the one that changed or went away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "USES",
    "PrivateUse",
    "connection",
    "create_http_client",
    "next_request_id_v1",
    "wrap_handle_message_v1",
]


@dataclass(frozen=True, kw_only=True)
class PrivateUse:
    """One private SDK name: where it lives, on which SDK line(s) it is used, and why."""

    name: str
    lines: tuple[int, ...]
    why: str


USES = (
    PrivateUse(
        name="mcp.shared.session.BaseSession._request_id",
        lines=(1,),
        why="1.x sends no notifications/cancelled when a request's task is cancelled, and "
        "send_request does not tell the id it used: the proxy reads the next id before "
        "sending, to cancel the request itself",
    ),
    PrivateUse(
        name="mcp.server.lowlevel.server.Server._handle_message",
        lines=(1,),
        why="1.x hands notification handlers no session: wrapping the method `run` calls for "
        "every message is the only place to learn the client's session at "
        "notifications/initialized",
    ),
    PrivateUse(
        name="mcp.server.session.ServerSession._connection",
        lines=(2,),
        why="2.x builds a ServerSession per message; its Connection is what identifies a "
        "client across messages, and its exit_stack the only notice that the client left",
    ),
    PrivateUse(
        name="mcp.shared._httpx_utils.create_mcp_http_client",
        lines=(1, 2),
        why="headers and a response hook need an HTTP client passed in; this makes one with "
        "the SDK's own timeouts and redirect policy (httpx on 1.x, httpx2 on 2.x), which "
        "differ by line",
    ),
)
"""Every private SDK name used; tests/test_sdk_private.py checks each on its lines."""


def next_request_id_v1(session: Any) -> int:
    """The id the next request of a 1.x session will carry."""
    request_id: int = session._request_id
    return request_id


def wrap_handle_message_v1(server: Any, wrap: Callable[[Any], Any]) -> None:
    """Replace a 1.x server's `_handle_message(message, session, ...)` with `wrap(original)`."""
    server._handle_message = wrap(server._handle_message)


def connection(session: Any) -> Any:
    """The 2.x Connection behind a ServerSession, or None when there is none."""
    return getattr(session, "_connection", None)


def create_http_client(headers: dict[str, str] | None) -> Any:
    """The SDK's HTTP client for MCP (httpx or httpx2), sending `headers` on every request."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    return create_mcp_http_client(headers=headers)
