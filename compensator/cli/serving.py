"""The heavy half of `compensator serve`: the proxy and the MCP SDK, imported by
compensator/cli/serve.py once the servers' processes have started (see its `serve`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import JournalError
from ..journal import JournalStore, open_journal
from ..names import CLIENT_NAME, MAX_NAME_LENGTH, client_tool_name, too_long
from ..processes import Started
from ..proxy import INSTRUCTIONS, Proxy
from ..registry import Registry
from ..wire import Catalog, DownstreamPool, Relay, sdk
from ..wire.http_serve import serve_http
from .common import ServeOptions, before_moment, describe_collected, refuse

__all__ = ["serve"]

log = logging.getLogger(__name__)


async def serve(
    registry: Registry, db: str | Path, started: Started, options: ServeOptions
) -> None:
    """Start the downstream servers of `registry` and serve one client over stdio, or any
    number over streamable HTTP on `options.http` (compensator/wire/http_serve.py). Their
    processes are those `started` holds, where it has one.

    Over stdio the servers are initialized once the client's `initialize` has arrived, so
    that they are offered the sampling, elicitation and roots support of that client and no
    other (an MCP client sends it at once; the answer waits for the servers)."""
    http, client_name, scope = options.http, options.client_name, options.scope
    try:
        journal = open_journal(db, fsync=options.fsync, agent=options.agent, scope=scope)
    except JournalError as exc:
        await started.stop()  # nothing will use them, however long the client stays
        await refuse(exc, options)
    log.info(
        "journal: %s, session: %s, agent: %s%s",
        journal.location,
        journal.session,
        journal.agent,
        f", shared scope: {scope}" if scope else "",
    )
    _report_unknown(journal)
    _retain(registry, journal)
    try:
        if http is not None:
            serving = partial(serve_http, endpoint=http)
            await _proxy(registry, journal, started, client_name, Relay(), serving)
            return
        async with sdk.open_stdio() as wire:
            if wire.closed:
                log.info(
                    "the client closed stdin before sending anything; no server was initialized"
                )
                return
            if wire.initialize is None:
                log.warning(
                    "the client's first message is not initialize; the servers are offered "
                    "none of sampling, elicitation and roots"
                )
            client = (wire.initialize or {}).get("capabilities")
            relay = Relay(client=client if isinstance(client, dict) else {})
            await _proxy(registry, journal, started, client_name, relay, wire.serve)
    finally:
        journal.close()


async def _proxy(
    registry: Registry,
    journal: JournalStore,
    started: Started,
    client_name: str,
    relay: Relay,
    serve_with: Callable[[Any], Awaitable[None]],
) -> None:
    """Start the downstream servers and run the proxy's server on them with `serve_with`."""
    # The relay outlives the pool: a refresh it runs may still await a server's answer.
    pool = DownstreamPool(
        registry.servers.values(), relay=relay, retry_first_start=True, started=started
    )
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
            INSTRUCTIONS + _failed_servers(pool),
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


def _failed_servers(pool: DownstreamPool) -> str:
    """For the instructions: the servers that failed to start, which a client otherwise shows
    as tools that are just missing (the reasons are on stderr, which clients hide)."""
    return "".join(
        f"\n\nServer {name!r} failed to start, so its tools are missing until a retry in the "
        f"background starts it: {reason}"
        for name, reason in pool.failures.items()
    )


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


def _retain(registry: Registry, journal: JournalStore) -> None:
    """Drop what the registry's `retention:` says the journal keeps no longer, as `gc` does;
    a journal that cannot be collected (its chain broken) is served as it is."""
    if registry.retention is None:
        return
    retention = registry.retention
    try:
        found = journal.collect(
            before_moment(retention.older_than), keep=retention.keep_checkpoints
        )
    except (JournalError, OverflowError) as exc:
        log.warning("retention: nothing was dropped from the journal: %s", exc)
        return
    log.info("retention: %s", describe_collected(found))


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
