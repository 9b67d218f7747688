"""`compensator serve` (and `python -m compensator.proxy`): load the registry, start the
servers, and serve the proxy to one client over stdio or to many over streamable HTTP."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from .. import __version__
from ..errors import CompensatorError, JournalError
from ..journal import JournalStore, default_journal_path, open_journal
from ..names import CLIENT_NAME, MAX_NAME_LENGTH, client_tool_name, too_long
from ..proxy import INSTRUCTIONS, Proxy
from ..registry import Registry, load_registry, registry_environment
from ..wire import Catalog, DownstreamPool, Relay, sdk
from ..wire.http_serve import (
    TOKEN_VARIABLE,
    HttpEndpoint,
    HttpError,
    exposure,
    listen,
    read_token,
    serve_http,
)
from .common import add_registry_arguments
from .terminal import log_to_stderr

__all__ = ["add_serve_arguments", "main", "run_serve", "serve"]

log = logging.getLogger(__name__)


async def serve(
    config: Path,
    db: str | Path,
    fsync: bool = False,
    http: HttpEndpoint | None = None,
    client_name: str = CLIENT_NAME,
    agent: str | None = None,
    scope: str | None = None,
) -> None:
    """Load the registry, start the downstream servers, and serve one client over stdio, or
    any number over streamable HTTP on `http` (compensator/wire/http_serve.py). `client_name` is
    what the client calls the proxy, for the start-up warning about long tool names. `agent`
    names the agent this proxy works for (None: it continues the last one that ended), and
    `scope` the shared journal scope it joins (None: none).

    Over stdio the servers start once the client's `initialize` has arrived, so that they are
    offered the sampling, elicitation and roots support of that client and no other (an MCP
    client sends it at once; the answer waits for the servers, as it always did)."""
    registry = load_registry(config, environ=registry_environment())
    journal = open_journal(db, fsync=fsync, agent=agent, scope=scope)
    log.info(
        "journal: %s, session: %s, agent: %s%s",
        journal.location,
        journal.session,
        journal.agent,
        f", shared scope: {scope}" if scope else "",
    )
    _report_unknown(journal)
    try:
        if http is not None:
            await _proxy(
                registry, journal, client_name, Relay(), partial(serve_http, endpoint=http)
            )
            return
        async with sdk.open_stdio() as wire:
            if wire.closed:
                log.info("the client closed stdin before sending anything; no server started")
                return
            if wire.initialize is None:
                log.warning(
                    "the client's first message is not initialize; the servers are offered "
                    "none of sampling, elicitation and roots"
                )
            client = (wire.initialize or {}).get("capabilities")
            relay = Relay(client=client if isinstance(client, dict) else {})
            await _proxy(registry, journal, client_name, relay, wire.serve)
    finally:
        journal.close()


async def _proxy(
    registry: Registry,
    journal: JournalStore,
    client_name: str,
    relay: Relay,
    serve_with: Callable[[Any], Awaitable[None]],
) -> None:
    """Start the downstream servers and run the proxy's server on them with `serve_with`."""
    # The relay outlives the pool: a refresh it runs may still await a server's answer.
    pool = DownstreamPool(registry.servers.values(), relay=relay, retry_first_start=True)
    catalog = Catalog(pool)
    catalog.watch()  # before the servers start: it forwards their resources/updated
    relay.on_list_changed("resources", catalog.refresh_resources)
    relay.on_list_changed("prompts", catalog.refresh_prompts)
    async with relay, pool:
        for name, reason in pool.failures.items():
            log.error(
                "server %r failed to start: %s; it is retried in the background and its "
                "tools are offered once it starts",
                name,
                reason,
            )
        _warn_long_names(pool, client_name)
        proxy = Proxy(registry, journal, pool)
        relay.on_client_attached(proxy.client_attached)
        server = sdk.build_server(
            "compensator",
            __version__,
            INSTRUCTIONS,
            proxy.list_tools,
            relay.track_calls(proxy.call_tool),
            catalog=catalog.handlers(),
        )
        sdk.install_relay(server, relay.handlers())
        try:
            await serve_with(server)
        finally:
            # Outcomes the journal could not take yet: a last try, or they become `unknown`.
            try:
                proxy.settle_outcomes()
            except JournalError as exc:
                log.error("outcomes not journaled at shutdown (they become unknown): %s", exc)


def _warn_long_names(pool: DownstreamPool, client: str = CLIENT_NAME) -> None:
    """Claude Code shows a tool as mcp__<client>__<name> and rejects it over 64 characters."""
    for name, length in too_long(pool.routes, client).items():
        server = pool.routes[name].server
        prefix = pool.servers[server].prefix
        room = len(prefix) - (length - MAX_NAME_LENGTH)  # the longest prefix that fits
        if room >= 1:
            fix = f"set a prefix: of at most {room} characters on servers.{server}"
        elif not prefix:
            fix = f'servers.{server} has prefix: "", so the server has to rename the tool'
        else:
            fix = "even a one-letter prefix: is too long; the server has to rename the tool"
        log.warning(
            "tool %s will be %s in Claude Code: %d characters, over its limit of %d, so the "
            "client rejects it; %s",
            name,
            client_tool_name(name, client),
            length,
            MAX_NAME_LENGTH,
            fix,
        )


def _report_unknown(journal: JournalStore) -> None:
    """Say at start-up which calls, of this or an earlier process, have no recorded outcome."""
    unknown = journal.unknown_changes()
    if unknown:
        ids = ", ".join(str(change.id) for change in unknown[:50])
        log.warning(
            "%d journaled call(s) have an unknown outcome (the proxy stopped, or no answer "
            "came); undo skips them, check their effect by hand: change ids %s",
            len(unknown),
            ids,
        )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(
        parser,
        db_help="the journal: a SQLite file, or a postgresql://USER:PASSWORD@HOST:PORT/DB URL "
        "that proxies on many machines can share (needs mcp-compensator[postgres]). Default: "
        "$COMPENSATOR_DB, else a file per config under $XDG_STATE_HOME/mcp-compensator, i.e. "
        "~/.local/state/mcp-compensator",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,  # before choices are checked, so `debug` is as good as `DEBUG`
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR (logs go to stderr; default INFO)",
    )
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="sync every journal commit to disk (SQLite synchronous=FULL), so that even a power "
        "cut loses no journaled call; costs about 1 ms per mutating call. Without it, a "
        "crashed or killed proxy still loses nothing. On PostgreSQL: synchronous_commit=on, "
        "which is the server's default anyway",
    )
    parser.add_argument(
        "--journal-scope",
        metavar="NAME",
        default=os.environ.get("COMPENSATOR_JOURNAL_SCOPE") or None,
        help="join the shared scope NAME: checkpoints, list_changes and undo_to then cover the "
        "changes of every agent that joined it (on any machine sharing the journal), not only "
        "this agent's. Off by default: an agent undoes only its own changes. Default: "
        "$COMPENSATOR_JOURNAL_SCOPE",
    )
    parser.add_argument(
        "--agent",
        metavar="NAME",
        default=os.environ.get("COMPENSATOR_AGENT") or None,
        help="the agent this proxy works for: checkpoints, list_changes and undo_to cover only "
        "this agent's changes. Default: $COMPENSATOR_AGENT, else the agent of the last proxy on "
        "this journal that has ended (a restarted proxy carries on), else a new one. Name it "
        "when several agents take turns on one journal",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        default=None,
        help="serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio, to any "
        "number of clients, which share one journal session (checkpoints and undo_to cover "
        "every client's changes). HOST defaults to 127.0.0.1. A non-loopback address (e.g. "
        "0.0.0.0) needs a token (--token-env) or --insecure",
    )
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        default=None,
        help="with --http: require every request to carry `Authorization: Bearer TOKEN`, "
        "TOKEN being the value of the environment variable VAR (the token itself never goes "
        "on the command line, where other users can read it); others get 401. Default: "
        f"${TOKEN_VARIABLE} when it is set, else no token. An unset or empty VAR is an error",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="with --http on a non-loopback address: serve without a token (with a warning) "
        "instead of refusing to start; anyone who can reach the port can then call every "
        "tool and undo_to",
    )
    parser.add_argument(
        "--client-name",
        default=CLIENT_NAME,
        help="the name your MCP client knows the proxy by, for the start-up warning about tool "
        f"names over {MAX_NAME_LENGTH} characters as mcp__<name>__server__tool (default "
        f"{CLIENT_NAME})",
    )


def run_serve(args: argparse.Namespace) -> int:
    log_to_stderr(str(args.log_level).upper())
    http = None
    token_env = getattr(args, "token_env", None)
    insecure = getattr(args, "insecure", False)
    if getattr(args, "http", None) is None and (token_env is not None or insecure):
        option = "--token-env" if token_env is not None else "--insecure"
        print(f"compensator: {option} applies only with --http HOST:PORT", file=sys.stderr)
        return 2
    if getattr(args, "http", None) is not None:
        # Before anything starts: a bad value, a missing token or a refused address fail at once.
        try:
            token = read_token(token_env, os.environ)
            http = listen(args.http)
            if token is not None:
                http.token, http.token_source = token
            warning = exposure(http, insecure)
        except HttpError as exc:
            if http is not None:
                http.close()
            print(f"compensator: {exc}", file=sys.stderr)
            return exc.exit_code
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
    scope = getattr(args, "journal_scope", None)
    try:
        db = args.db if args.db is not None else default_journal_path(args.config)
        client_name = getattr(args, "client_name", CLIENT_NAME)
        agent = getattr(args, "agent", None)
        anyio.run(serve, args.config, db, args.fsync, http, client_name, agent, scope)
    except CompensatorError as exc:
        print(f"compensator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if http is not None:
            http.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compensator.proxy", description="Serve the compensator proxy over stdio."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
