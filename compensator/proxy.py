"""The proxy: forwards tool calls, journals the mutating ones, and serves the meta tools."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types

from . import __version__, _sdk, meta
from .catalog import Catalog
from .downstream import DownstreamPool, RoutedTool
from .errors import CompensatorError, DownstreamError, MetaArgumentError
from .http_serve import HttpEndpoint, HttpError, exposure_warning, listen, serve_http
from .journal import Journal, Status, default_journal_path
from .names import CLIENT_NAME, MAX_NAME_LENGTH, client_tool_name, too_long
from .redact import redact
from .registry import Classification, Registry, ToolPolicy, load_registry
from .relay import Relay
from .results import parse_result, result_text
from .templates import Expression
from .terminal import log_to_stderr
from .undo import Caller, CallOutcome, Undoer, observed_state

__all__ = ["Proxy", "call_outcome", "classify", "explain_tool", "main", "serve", "undo_caller"]

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Every tool of the servers behind this proxy is available as server__tool. Mutating calls "
    "are journaled. Call `checkpoint` before risky work, `explain_blast_radius` before a tool "
    "whose effect you are unsure of, and `undo_to` to put things back."
)

_META_TOOLS = [types.Tool.model_validate(d) for d in meta.META_TOOL_DEFINITIONS]


class _Gate:
    """Mutating calls share the gate; an undo holds it alone, so they wait for each other.

    Everything runs on one event loop, so the state is plain counters: a mutating call that
    finds the gate open enters without awaiting anything (an anyio.Condition would cost two
    trips through the loop per call); waiters sleep on an event set at each change."""

    def __init__(self) -> None:
        self._active = 0
        self._exclusive = False
        self._waiting = 0
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        while self._exclusive or self._waiting:
            await self._changed.wait()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._notify()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        self._waiting += 1
        try:
            while self._exclusive or self._active:
                await self._changed.wait()
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._notify()  # mutating calls held back by this waiter may go (or re-check)
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._notify()


def json_result(value: Any) -> types.CallToolResult:
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return types.CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "structuredContent": value}
    )


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult.model_validate(
        {"content": [{"type": "text", "text": message}], "isError": True}
    )


class Proxy:
    """Routes `server__tool` calls downstream and answers the meta tools itself."""

    def __init__(self, registry: Registry, journal: Journal, pool: DownstreamPool) -> None:
        self.registry = registry
        self.journal = journal
        self.pool = pool
        self._gate = _Gate()
        self._undoer = Undoer(journal, registry, undo_caller(registry, pool))
        self._meta: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]] = {
            "checkpoint": self._checkpoint,
            "list_checkpoints": self._list_checkpoints,
            "list_changes": self._list_changes,
            "undo_to": self._undo_to,
            "explain_blast_radius": self._explain,
        }

    # -- the two handlers the server exposes -----------------------------------------

    async def list_tools(self, cursor: str | None) -> types.ListToolsResult:
        tools = [routed.exposed() for routed in self.pool.routes.values()]
        return types.ListToolsResult(tools=[*tools, *_META_TOOLS])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        handler = self._meta.get(name)
        if handler is not None:
            return await self._call_meta(name, handler, arguments)
        routed = self.pool.route(name)
        if routed is None:
            return error_result(self.pool.missing_reason(name))
        classification = self.classify(name, arguments)
        if classification is Classification.READ:
            return await self._forward_read(name, arguments)
        async with self._gate.shared():
            return await self._forward_mutating(routed, classification, arguments)

    # -- classification --------------------------------------------------------------

    def classify(self, name: str, arguments: Mapping[str, Any] | None = None) -> Classification:
        """How a call to `name` with `arguments` is treated; `arguments=None` ignores
        `mutating_when` (the tool's classification in general)."""
        return classify(self.registry, self.pool, name, arguments)

    # -- forwarding --------------------------------------------------------------------

    async def _forward_read(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            return await self.pool.call(name, arguments)
        except DownstreamError as exc:
            return error_result(str(exc))

    async def _forward_mutating(
        self, routed: RoutedTool, classification: Classification, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        problem = await self.pool.ensure_running(routed.server)
        if problem is not None:
            # Nothing was sent, so nothing happened and nothing is journaled.
            return error_result(problem)
        policy = self.registry.policy(routed.name)
        hidden = policy.redact if policy is not None else ()
        snapshot, snapshot_error = await self._snapshot(policy, arguments)
        change_id = self.journal.record_intent(
            tool=routed.name,
            classification=classification.value,
            args=redact(arguments, "args", hidden),
            snapshot=snapshot,
            snapshot_error=snapshot_error,
        )
        try:
            result = await self.pool.call(routed.name, arguments)
        except DownstreamError as exc:
            return self._failed_in_transport(change_id, exc)
        except BaseException:
            with anyio.CancelScope(shield=True):
                self.journal.record_outcome(
                    change_id, status=Status.UNKNOWN, error="cancelled before the outcome arrived"
                )
            raise
        outcome = self.outcome(routed.name, arguments, result)
        status = Status.OK if outcome.ok else Status.ERROR
        self.journal.record_outcome(
            change_id,
            status=status,
            result=redact(outcome.value, "result", hidden),
            error=outcome.error,
        )
        if outcome.ok and policy is not None and policy.verify:
            await self._record_post_state(change_id, policy, arguments, outcome.value)
        return result

    def _failed_in_transport(self, change_id: int, exc: DownstreamError) -> types.CallToolResult:
        """A call that got no answer: `unknown` when it may have reached the server."""
        if exc.maybe_applied:
            self.journal.record_outcome(change_id, status=Status.UNKNOWN, error=str(exc))
            return error_result(f"{exc} (journaled as change {change_id}, outcome unknown)")
        self.journal.record_outcome(change_id, status=Status.ERROR, error=str(exc))
        return error_result(f"{exc} (the call was not sent; nothing changed)")

    async def _record_post_state(
        self, change_id: int, policy: ToolPolicy, arguments: dict[str, Any], value: Any
    ) -> None:
        """Read the state again after a verified call (`value` is its result), for undo's
        drift check, which repeats the same read."""
        assert policy.verify_tool is not None
        context = {"args": arguments, "result": redact(value, "result", policy.redact)}
        try:
            args = policy.verify_args.render(context) if policy.verify_args else {}
            result = await self.pool.call(policy.verify_tool, args)
        except (CompensatorError, ValueError, TypeError) as exc:
            self.journal.record_post_state(change_id, None, f"reading the state failed: {exc}")
            return
        outcome = self.outcome(policy.verify_tool, args, result)
        state = observed_state(outcome)
        error = None if state is not None else outcome.error or "the read returned nothing"
        self.journal.record_post_state(change_id, state, error)

    async def _snapshot(
        self, policy: ToolPolicy | None, arguments: dict[str, Any]
    ) -> tuple[Any, str | None]:
        if policy is None or policy.classification is not Classification.COMPENSABLE:
            return None, None
        return await self._read(policy, arguments)

    async def _read(self, policy: ToolPolicy, arguments: dict[str, Any]) -> tuple[Any, str | None]:
        """Call the policy's snapshot tool: (value, None), or (None, why it failed)."""
        assert policy.snapshot_tool is not None
        context = {"args": arguments}
        try:
            snapshot_args = policy.snapshot_args.render(context) if policy.snapshot_args else {}
            result = await self.pool.call(policy.snapshot_tool, snapshot_args)
        except (CompensatorError, ValueError, TypeError) as exc:
            log.warning("snapshot for %s failed: %s", policy.name, exc)
            return None, f"snapshot failed: {exc}"
        outcome = self.outcome(policy.snapshot_tool, snapshot_args, result)
        return (outcome.value, None) if outcome.ok else (None, outcome.error)

    def outcome(
        self, name: str, arguments: Mapping[str, Any], result: types.CallToolResult
    ) -> CallOutcome:
        """Parse a result and decide whether the call worked (isError, then `error_when`)."""
        return call_outcome(self.registry, name, arguments, result)

    # -- meta tools --------------------------------------------------------------------

    async def _call_meta(
        self,
        name: str,
        handler: Callable[[Mapping[str, Any]], Awaitable[Any]],
        arguments: Mapping[str, Any],
    ) -> types.CallToolResult:
        try:
            return json_result(await handler(arguments))
        except MetaArgumentError as exc:
            return error_result(str(exc))

    async def _checkpoint(self, args: Mapping[str, Any]) -> dict[str, Any]:
        label = meta.parse_checkpoint(args)
        return {"checkpoint_id": self.journal.create_checkpoint(label).id}

    async def _list_checkpoints(self, args: Mapping[str, Any]) -> dict[str, Any]:
        meta.parse_list_checkpoints(args)
        return {"checkpoints": [cp.to_json() for cp in self.journal.checkpoints()]}

    async def _list_changes(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id = meta.parse_list_changes(args)
        checkpoint = None
        if checkpoint_id is not None:
            checkpoint = self.journal.checkpoint(checkpoint_id)
            if checkpoint is None:
                raise MetaArgumentError(self._undoer.unknown_checkpoint(checkpoint_id))
        changes = self.journal.open_changes(checkpoint)
        return {"changes": [change.to_json() for change in changes]}

    async def _undo_to(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id, dry_run, force = meta.parse_undo_to(args)
        async with self._gate.exclusive():
            report = await self._undoer.undo_to(checkpoint_id, dry_run=dry_run, force=force)
        return {"checkpoint_id": checkpoint_id, "dry_run": dry_run, **report.to_json()}

    async def _explain(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return explain_tool(self.registry, self.pool, meta.parse_explain(args))


# -- shared with the command line: classification, outcomes, undo calls, explanations -----


def classify(
    registry: Registry,
    pool: DownstreamPool,
    name: str,
    arguments: Mapping[str, Any] | None = None,
) -> Classification:
    """How a call to `name` with `arguments` is treated; `arguments=None` ignores
    `mutating_when` (the tool's classification in general)."""
    policy = registry.policy(name)
    if policy is None:
        routed = pool.route(name)
        hint = routed is not None and routed.annotations.get("readOnlyHint") is True
        if hint and registry.defaults.trust_read_only_hint:
            return Classification.READ
        return Classification.UNKNOWN
    gate = policy.mutating_when
    # When the condition cannot be evaluated, journaling is the safe side.
    if gate is not None and arguments is not None:
        mutating = _holds(gate, {"args": arguments}, default=True)
        return policy.classification if mutating else Classification.READ
    return policy.classification


def call_outcome(
    registry: Registry, name: str, arguments: Mapping[str, Any], result: types.CallToolResult
) -> CallOutcome:
    """Parse a result and decide whether the call worked (isError, then `error_when`)."""
    structured, content, is_error = _sdk.result_parts(result)
    value = parse_result(structured, content)
    if is_error:
        return CallOutcome(ok=False, value=value, error=result_text(content) or "isError")
    policy = registry.policy(name)
    failed = policy.error_when if policy is not None else None
    # A condition that cannot be evaluated counts the call as done, so it stays undoable.
    context = {"result": value, "args": dict(arguments)}
    if failed is not None and _holds(failed, context, default=False):
        return CallOutcome(ok=False, value=value, error=_error_text(value, content))
    return CallOutcome(ok=True, value=value)


def undo_caller(registry: Registry, pool: DownstreamPool) -> Caller:
    """The `Caller` an `Undoer` gets: a transport failure is a failed outcome, never raised."""

    async def call(name: str, arguments: dict[str, Any]) -> CallOutcome:
        try:
            result = await pool.call(name, arguments)
        except DownstreamError as exc:
            return CallOutcome(ok=False, error=str(exc), in_doubt=exc.maybe_applied)
        return call_outcome(registry, name, arguments, result)

    return call


def explain_tool(registry: Registry, pool: DownstreamPool, tool: str) -> dict[str, Any]:
    """What `explain_blast_radius` answers for `tool`; MetaArgumentError when nothing knows it."""
    routed = pool.route(tool)
    if routed is None and registry.policy(tool) is None:
        raise MetaArgumentError(
            f"explain_blast_radius: no tool named {tool!r}; "
            "use a name from tools/list, such as " + ", ".join(list(pool.routes)[:5])
        )
    annotations = routed.annotations if routed is not None else {}
    policy = registry.policy(tool)
    return meta.explain(tool, classify(registry, pool, tool), policy, annotations)


def _holds(condition: Expression, context: Mapping[str, Any], *, default: bool) -> bool:
    try:
        return condition.truthy(context)
    except CompensatorError as exc:
        log.warning("%s; taking it as %s", exc, default)
        return default


def _error_text(value: Any, content: Sequence[Mapping[str, Any]]) -> str:
    if isinstance(value, Mapping):
        for key in ("error", "message"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return result_text(content) or "error_when matched the result"


def registry_environment() -> dict[str, str]:
    """The proxy's environment, plus COMPENSATOR_PYTHON (this interpreter) unless set."""
    return {"COMPENSATOR_PYTHON": sys.executable, **os.environ}


async def serve(
    config: Path,
    db: Path,
    fsync: bool = False,
    http: HttpEndpoint | None = None,
    client_name: str = CLIENT_NAME,
) -> None:
    """Load the registry, start the downstream servers, and serve one client over stdio, or
    any number over streamable HTTP on `http` (compensator/http_serve.py). `client_name` is
    what the client calls the proxy, for the start-up warning about long tool names."""
    registry = load_registry(config, environ=registry_environment())
    journal = Journal(db, fsync=fsync)
    log.info("journal: %s, session: %s", journal.path, journal.session)
    _report_unknown(journal)
    try:
        # The relay outlives the pool: a refresh it runs may still await a server's answer.
        relay = Relay()
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
            server = _sdk.build_server(
                "compensator",
                __version__,
                INSTRUCTIONS,
                proxy.list_tools,
                relay.track_calls(proxy.call_tool),
                catalog=catalog.handlers(),
            )
            _sdk.install_relay(server, relay.handlers())
            if http is None:
                await _sdk.serve_stdio(server)
            else:
                await serve_http(server, http)
    finally:
        journal.close()


def _warn_long_names(pool: DownstreamPool, client: str = CLIENT_NAME) -> None:
    """Claude Code shows a tool as mcp__<client>__<name> and rejects it over 64 characters."""
    for name, length in too_long(pool.routes, client).items():
        server = pool.routes[name].server
        prefix = pool.servers[server].prefix
        room = len(prefix) - (length - MAX_NAME_LENGTH)  # the longest prefix that fits
        if room >= 1:
            fix = f"set a prefix: of at most {room} characters on servers.{server}"
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


def _report_unknown(journal: Journal) -> None:
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
    parser.add_argument("--config", required=True, type=Path, help="the registry YAML file")
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="the journal file (default: $COMPENSATOR_DB, else a file per config under "
        "$XDG_STATE_HOME/mcp-compensator, i.e. ~/.local/state/mcp-compensator)",
    )
    parser.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)"
    )
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="sync every journal commit to disk (SQLite synchronous=FULL), so that even a power "
        "cut loses no journaled call; costs about 1 ms per mutating call. Without it, a "
        "crashed or killed proxy still loses nothing",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        default=None,
        help="serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio, to any "
        "number of clients, which share one journal session (checkpoints and undo_to cover "
        "every client's changes). HOST defaults to 127.0.0.1; any non-loopback address (e.g. "
        "0.0.0.0) lets anyone who can reach the port call the tools, and prints a warning",
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
    if getattr(args, "http", None) is not None:
        try:
            http = listen(args.http)  # before anything starts: a bad value fails at once
        except HttpError as exc:
            print(f"compensator: {exc}", file=sys.stderr)
            return exc.exit_code
        warning = exposure_warning(http)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
    db = args.db if args.db is not None else default_journal_path(args.config)
    try:
        client_name = getattr(args, "client_name", CLIENT_NAME)
        anyio.run(serve, args.config, db, args.fsync, http, client_name)
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
