"""`compensator serve --http HOST:PORT`: the proxy over streamable HTTP, at http://HOST:PORT/mcp.

Everything the stdio path offers is offered here too (tools, meta tools, resources, prompts,
completion, notifications, progress, logging, sampling, elicitation, roots), with stateful
sessions (the `Mcp-Session-Id` header), several clients at once.

All clients of one process share its journal session, as if they were one agent: a checkpoint
any of them takes covers every client's later changes, `list_changes` shows them all, and
`undo_to` undoes them all. Run one process per agent to keep agents apart. Mutating calls of
all clients are journaled in the order they run; an `undo_to` waits for calls in flight and
holds new ones until it ends, whichever client sent them.

What goes to which client (compensator/wire/relay.py): a `list_changed` goes to every session;
progress and log messages of a forwarded call go to the session that made the call; a log
message no call explains goes to every session; a downstream's sampling, elicitation or roots
request goes to the session whose call caused it when one is in flight, else to the most
recently active session (the last to initialize or call a tool) that advertised the
capability, else it gets the same "client does not support ..." error the stdio path gives.
"Caused by" is inferred from timing (the SDKs carry no link from a downstream's message to a
call): what a server sends while one session's call to it is in flight goes to that session.
`resources/updated` goes to the sessions subscribed to that resource (compensator/wire/catalog.py).
Sessions end when the client deletes them, or after 30 minutes with no request
and no open stream (the SDK's default); an ended session gets nothing more. Sessions start
with `initialize` (protocol 2025-11-25 and earlier, what both SDK lines' clients send); mcp
2.x routes a request of protocol 2026-07-28 (no handshake) to its own stateless path, which
is not tested here.

Safety: HOST defaults to 127.0.0.1 (`--http 8765` or `--http :8765`). On a loopback address
the SDK's DNS-rebinding protection is on: a request whose Host (or Origin) header is not a
loopback name gets 421 (403), so a web page cannot reach the proxy through a rebound name.

A bearer token locks the door: `--token-env VAR` names the environment variable that holds it
(never the command line, which any user of the machine can read in `ps`), else
`COMPENSATOR_HTTP_TOKEN` is used when set. With a token, every request, to any path, without
`Authorization: Bearer <token>` (or with another token) gets 401 with `WWW-Authenticate:
Bearer` and reaches nothing behind it; tokens are compared in constant time. The check is the
MCP SDK's own resource-server middleware with a verifier that knows one static token
(`sdk.require_bearer_token`); no OAuth metadata is published, since there is no authorization
server. A named variable that is unset or empty, or a token with spaces or control
characters, is a usage error at start-up (exit 2).

Any other address than loopback (e.g. 0.0.0.0) must be given explicitly, and without a token
the proxy refuses to start on it (exit 2): anyone who can reach the port could call every tool
and `undo_to`. `--insecure` starts it anyway, with a warning. With a token it starts with a
warning that plain HTTP carries the token in clear text (put TLS or an SSH tunnel in front
across networks you do not trust). On loopback without a token it serves as before and says
at start-up that any local program can call it. SIGINT and SIGTERM stop it cleanly: open
streams are closed, the servers stopped, the journal closed.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import re
import signal
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

__all__ = [
    "TOKEN_VARIABLE",
    "HttpEndpoint",
    "HttpError",
    "exposure",
    "listen",
    "parse_http_address",
    "read_token",
    "serve_http",
]

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
DEFAULT_HOST = "127.0.0.1"
SHUTDOWN_GRACE = 2
"""Seconds open HTTP connections (the clients' SSE streams) get to close on shutdown."""

TOKEN_VARIABLE = "COMPENSATOR_HTTP_TOKEN"
"""The environment variable the `--http` token is read from when `--token-env` names none."""

_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_EXAMPLE = "--http 127.0.0.1:8765"
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[\x21-\x7e]+")
"""Visible ASCII: what a header carries unchanged (HTTP strips surrounding white space)."""


class HttpError(Exception):
    """A `--http` value that cannot be served; `exit_code` 2 for a bad value, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class HttpAddress:
    """A parsed `--http` value (before binding)."""

    value: str
    host: str
    port: int


@dataclass
class HttpEndpoint:
    """A listening socket for `compensator serve --http`."""

    address: HttpAddress
    sock: socket.socket
    loopback: bool
    port: int
    """The bound port (the one the system chose for port 0)."""
    allowed_hosts: list[str] | None = field(default=None)
    """Host header patterns of the DNS-rebinding protection; None when it is off."""
    token: str | None = field(default=None, repr=False)
    """The bearer token every request must carry; None: no authentication."""
    token_source: str | None = None
    """The environment variable the token came from, for the start-up log."""

    @property
    def url(self) -> str:
        host = self.address.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}{MCP_PATH}"

    def close(self) -> None:
        self.sock.close()


def parse_http_address(value: str) -> HttpAddress:
    """HOST:PORT, [IPv6]:PORT, :PORT or PORT (host 127.0.0.1); port 0 means any free port."""
    text = value.strip()
    if "://" in text:
        raise HttpError(
            f"--http {value!r}: give HOST:PORT, not a URL (the proxy serves at "
            f"http://HOST:PORT{MCP_PATH}); e.g. {_EXAMPLE}"
        )
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise HttpError(
                f"--http {value!r}: an IPv6 address in brackets must be followed by :PORT; "
                "e.g. --http [::1]:8765"
            )
        host, port_text = inside, rest[1:]
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        if ":" in host:
            raise HttpError(
                f"--http {value!r}: put an IPv6 address in brackets, e.g. --http [::1]:8765"
            )
    elif text.isdigit():
        host, port_text = "", text
    else:
        raise HttpError(f"--http {value!r} has no port: write HOST:PORT, e.g. {_EXAMPLE}")
    if not port_text:
        raise HttpError(f"--http {value!r} has no port: write HOST:PORT, e.g. {_EXAMPLE}")
    if not port_text.isdigit():
        raise HttpError(
            f"--http {value!r}: port {port_text!r} is not a number; write HOST:PORT, "
            f"e.g. {_EXAMPLE}"
        )
    port = int(port_text)
    if port > 65535:
        raise HttpError(
            f"--http {value!r}: port {port} is out of range; use 1 to 65535 (or 0 for any "
            f"free port), e.g. {_EXAMPLE}"
        )
    return HttpAddress(value=value, host=host or DEFAULT_HOST, port=port)


def listen(value: str) -> HttpEndpoint:
    """Parse `value` and listen on it; HttpError says why not."""
    address = parse_http_address(value)
    try:
        infos = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise HttpError(
            f"--http {value!r}: host {address.host!r} does not resolve ({exc.strerror}); use "
            f"an address of this machine, e.g. {_EXAMPLE}"
        ) from None
    # "localhost" may resolve to ::1 first; clients try 127.0.0.1 first, so prefer IPv4.
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise _bind_error(address, exc) from None
    bound = sock.getsockname()
    loopback = ipaddress.ip_address(bound[0]).is_loopback
    allowed = None
    if loopback:
        allowed = list(_LOOPBACK_HOSTS)
        own = f"[{address.host}]:*" if ":" in address.host else f"{address.host}:*"
        if own not in allowed:
            allowed.append(own)  # a name of this machine that resolves to loopback
    return HttpEndpoint(
        address=address, sock=sock, loopback=loopback, port=int(bound[1]), allowed_hosts=allowed
    )


def _bind_error(address: HttpAddress, exc: OSError) -> HttpError:
    where = f"--http {address.value!r}"
    if exc.errno == errno.EADDRINUSE:
        other = address.port + 1 if 0 < address.port < 65535 else 8766
        return HttpError(
            f"{where}: port {address.port} on {address.host} is already in use (another "
            f"program, or another compensator serve); stop it or choose another port, e.g. "
            f"--http {address.host}:{other}",
            exit_code=1,
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return HttpError(
            f"{where}: {address.host} is not an address of this machine; use 127.0.0.1 (this "
            "machine only) or 0.0.0.0 (every interface)"
        )
    if exc.errno == errno.EACCES:
        return HttpError(
            f"{where}: not allowed to listen on port {address.port} (ports below 1024 need "
            "privileges); choose a port from 1024 to 65535",
            exit_code=1,
        )
    return HttpError(f"{where}: cannot listen there: {exc.strerror or exc}", exit_code=1)


def read_token(variable: str | None, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(token, variable) from `variable` (`--token-env`), else from $COMPENSATOR_HTTP_TOKEN when
    that is set; None when no token is asked for. HttpError (exit 2) for a named variable that
    is unset or empty, or a token a header cannot carry as it is."""
    if variable is None:
        if TOKEN_VARIABLE not in environ:
            return None
        variable = TOKEN_VARIABLE
        where = f"${TOKEN_VARIABLE}"
    else:
        where = f"--token-env {variable}"
        if not _VARIABLE_NAME.fullmatch(variable):
            raise HttpError(
                f"--token-env takes the name of an environment variable that holds the token, "
                f"not the token itself (the value given, {len(variable)} characters, is not "
                "such a name, and is not repeated here); e.g. export "
                f'MY_TOKEN="$(openssl rand -hex 32)" and pass --token-env MY_TOKEN'
            )
    value = environ.get(variable)
    if value is None:
        raise HttpError(
            f"{where}: the environment variable {variable} is not set; set it to the token "
            f'before starting, e.g. export {variable}="$(openssl rand -hex 32)"'
        )
    token = value.strip()
    if not token:
        raise HttpError(
            f"{where}: the environment variable {variable} is empty; set it to the token, e.g. "
            f'export {variable}="$(openssl rand -hex 32)"'
        )
    if not _TOKEN.fullmatch(token):
        raise HttpError(
            f"{where}: the token in {variable} has spaces, control or non-ASCII characters, "
            "which an Authorization header cannot carry as they are; use letters, digits and "
            "punctuation, e.g. openssl rand -hex 32"
        )
    return token, variable


def exposure(endpoint: HttpEndpoint, insecure: bool = False) -> str | None:
    """The start-up warning for `endpoint`, or None; HttpError (exit 2) refuses a non-loopback
    address without a token unless `insecure`."""
    if endpoint.loopback:
        return None
    where = f"{endpoint.address.host}:{endpoint.port}"
    if endpoint.token is not None:
        return (
            f"compensator: warning: serving on {where}, which is not a loopback address: "
            "requests need the token, but plain HTTP carries it in clear text; across a network "
            "you do not trust, put TLS (a reverse proxy) or an SSH tunnel in front "
            "(DNS-rebinding protection is off)"
        )
    if not insecure:
        raise HttpError(
            f"--http {endpoint.address.value!r}: refusing to serve on {where}, which is not a "
            "loopback address, without a token: anyone who can reach this port could call "
            "every tool behind the proxy and undo_to. Put a token in an environment variable "
            f"and pass --token-env VAR (or set ${TOKEN_VARIABLE}), serve on 127.0.0.1, or pass "
            "--insecure if you mean it"
        )
    return (
        f"compensator: warning: serving on {where}, which is not a loopback address, with "
        "--insecure: anyone who can reach this port can call every tool behind the proxy and "
        "undo_to, without authentication (DNS-rebinding protection is off). Use --token-env "
        "VAR, or --http 127.0.0.1:PORT, unless you mean it"
    )


class _QuietSessionEnd(logging.Filter):
    """mcp 1.x logs a traceback at ERROR ("Error in standalone SSE writer") each time a client
    ends its session (DELETE) while its GET stream is open: normal here, so one debug line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, anyio.ClosedResourceError):
            return True
        if not str(record.msg).startswith("Error in standalone SSE writer"):
            return True
        record.msg, record.args = "a client ended its session; its GET stream is closed", None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.exc_info, record.exc_text = None, None
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


logging.getLogger("mcp.server.streamable_http").addFilter(_QuietSessionEnd())


async def serve_http(server: Any, endpoint: HttpEndpoint) -> None:
    """Serve `server` on `endpoint` until SIGINT or SIGTERM."""
    # Here, not at the top: the address and token checks above run before the SDK is imported.
    import uvicorn

    from . import sdk

    manager = sdk.http_session_manager(server, endpoint.allowed_hosts)

    class _Server(uvicorn.Server):
        # uvicorn's own handlers re-raise the signal after shutting down, which would kill
        # the process before the journal is closed; the signals are handled below instead.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def install_signal_handlers(self) -> None:  # uvicorn < 0.29
            pass

    stopping = anyio.Event()
    app = _asgi_app(manager, stopping)
    if endpoint.token is not None:
        app = sdk.require_bearer_token(app, endpoint.token)
    config = uvicorn.Config(
        app,
        lifespan="off",
        interface="asgi3",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
    )
    web = _Server(config)
    web_done = anyio.Event()

    async def run_web() -> None:
        try:
            await web.serve(sockets=[endpoint.sock])
        finally:
            web_done.set()
            stopping.set()

    async with anyio.create_task_group() as group:
        group.start_soon(_watch_signals, web, stopping)
        async with manager.run():
            group.start_soon(run_web)
            log.info("serving MCP over streamable HTTP at %s", endpoint.url)
            if endpoint.token is not None:
                log.info(
                    "every request must carry Authorization: Bearer <the token in $%s>",
                    endpoint.token_source,
                )
            elif endpoint.loopback:
                log.info(
                    "no token: any program on this machine can call the tools; pass --token-env "
                    "VAR (or set $%s) to require one",
                    TOKEN_VARIABLE,
                )
            await stopping.wait()
        # The sessions are closed, and with them the clients' open streams: uvicorn need
        # not wait for those connections.
        web.should_exit = True
        await web_done.wait()
        group.cancel_scope.cancel()
    log.info("stopped serving %s", endpoint.url)


async def _watch_signals(web: Any, stopping: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s: stopping", signal.Signals(signum).name)
            if stopping.is_set():
                web.should_exit = web.force_exit = True  # a second signal: do not wait
            stopping.set()


def _asgi_app(manager: Any, stopping: anyio.Event) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != MCP_PATH:
            await _plain(send, 404, f"not found: the compensator serves MCP at {MCP_PATH}")
        elif stopping.is_set():
            await _plain(send, 503, "the compensator is shutting down")
        else:
            await manager.handle_request(scope, receive, send)

    return app


async def _plain(send: Any, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": f"{text}\n".encode()})
