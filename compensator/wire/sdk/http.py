"""Streamable HTTP on both SDK lines: the client side (`url:` servers), and the session
manager and bearer-token check behind `compensator serve --http`."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from mcp.server.lowlevel import Server

from ._private import create_http_client

__all__ = ["connection_failed", "http_session_manager", "require_bearer_token", "streamable_http"]


@contextlib.asynccontextmanager
async def streamable_http(
    url: str,
    headers: Mapping[str, str] | None = None,
    on_session_lost: Callable[[], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) streams to the MCP server at `url`, every request carrying `headers`.

    Both lines have `streamable_http_client(url, http_client=...)`, with headers set on the
    client (1.x httpx, 2.x httpx2; `create_mcp_http_client` makes either, with the SDK's
    timeouts); 1.x yields a third item (a session-id getter), 2.x only the two streams.
    `on_session_lost` runs when the server answers 404 to a request that names a session: it
    no longer knows the session (it restarted), so it did not handle the request. The SDK then
    fails the request with an error whose text differs by line and server."""
    from mcp.client.streamable_http import streamable_http_client

    client = create_http_client(dict(headers) if headers else None)
    if on_session_lost is not None:
        callback = on_session_lost

        async def watch(response: Any) -> None:
            if response.status_code == 404 and "mcp-session-id" in response.request.headers:
                callback()

        client.event_hooks["response"].append(watch)
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams[0], streams[1]


def connection_failed(message: Any) -> bool:
    """Whether a message from an HTTP transport's read stream is an HTTP client's transport
    error (httpx or httpx2 `TransportError`: refused, reset, timed out): the server is gone.
    1.x puts such errors in the stream and leaves the request waiting; 2.x fails the
    transport instead."""
    if not isinstance(message, Exception):
        return False
    return any(
        cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
        for cls in type(message).__mro__
    )


def http_session_manager(server: Server[Any], allowed_hosts: list[str] | None) -> Any:
    """The SDK's StreamableHTTPSessionManager for `server`, with stateful sessions.

    Same module, class and arguments on both lines. `allowed_hosts` (Host header patterns such
    as "127.0.0.1:*") turns on the SDK's DNS-rebinding protection, Origin limited to the same
    hosts over http; None leaves it off. Both lines start each session with
    `server.create_initialization_options()` and no arguments, whose defaults a
    `ProxyServer` (compensator/wire/sdk/server.py) sets."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    if allowed_hosts is None:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    else:
        origins = [f"http://{host}" for host in allowed_hosts]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=origins,
        )
    return StreamableHTTPSessionManager(app=server, security_settings=security)


BEARER_CLIENT = "compensator-http-token"
"""The client id every holder of the `--http` token is known by (the SDK's `AccessToken`)."""


def require_bearer_token(app: Any, token: str) -> Any:
    """`app` behind the SDK's bearer-token check: a request whose `Authorization` header is not
    `Bearer <token>` gets 401 with `WWW-Authenticate: Bearer error="invalid_token", ...` and
    never reaches `app`.

    The SDK's resource-server pieces fit a static token on both lines, with the same names and
    arguments: a `TokenVerifier` (any object with `async verify_token(str) -> AccessToken |
    None`) behind `BearerAuthBackend`, in Starlette's `AuthenticationMiddleware` (which puts
    the SDK's `AuthenticatedUser` in the ASGI scope), then `RequireAuthMiddleware`, which
    answers 401 when that user is missing. `AuthSettings` and `Server.streamable_http_app`
    are not used: they need an OAuth issuer URL and publish protected-resource metadata
    pointing at it, which would send clients looking for an authorization server that does
    not exist. Every token holder is one principal, so the session manager's check that a
    session is used with the credential that opened it always passes."""
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from mcp.server.auth.provider import AccessToken
    from starlette.middleware.authentication import AuthenticationMiddleware

    expected = token.encode()

    class StaticToken:
        async def verify_token(self, offered: str) -> AccessToken | None:
            # compare_digest takes as long whatever prefix matches; bytes, because it refuses
            # str with non-ASCII characters (which a header may carry).
            if not hmac.compare_digest(offered.encode(), expected):
                return None
            return AccessToken(token="<the --http token>", client_id=BEARER_CLIENT, scopes=[])

    return AuthenticationMiddleware(
        RequireAuthMiddleware(app, required_scopes=[]), backend=BearerAuthBackend(StaticToken())
    )
