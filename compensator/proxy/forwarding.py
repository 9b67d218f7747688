"""The proxy: forwards tool calls, journals the mutating ones, and serves the meta tools."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp.types as types

from ..classification import Classification
from ..errors import CompensatorError, DownstreamError, JournalError, MetaArgumentError
from ..journal import Answer, Change, Intent, JournalStore, Status
from ..registry import Registry, ToolPolicy, redact
from ..wire import DownstreamPool, RoutedTool, sdk
from . import meta
from .approval import ASK, DENY, FORWARD, Asked, approval_message, ask_person, decide
from .calls import call_outcome, classify, observed_state, undo_caller
from .gate import Gate
from .late import late_policy
from .redo import Redoer, RedoReport, Refused
from .turns import Turns
from .undo import Undoer

__all__ = ["INSTRUCTIONS", "Proxy", "error_result", "json_result"]

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Every tool of the servers behind this proxy is available as server__tool (a server set "
    "up without a prefix keeps its own tool names). Mutating calls are journaled. Call "
    "`checkpoint` before risky work, `explain_blast_radius` before a tool whose effect you "
    "are unsure of, `undo_to` to put things back, and `undo_change` to take back one change "
    "alone."
)

_META_TOOLS = [types.Tool.model_validate(d) for d in meta.META_TOOL_DEFINITIONS]


def json_result(value: Any) -> sdk.ToolResult:
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return {"content": [{"type": "text", "text": text}], "structuredContent": value}


def error_result(message: str) -> sdk.ToolResult:
    return {"content": [{"type": "text", "text": message}], "isError": True}


class Proxy:
    """Routes `server__tool` calls (and the unprefixed server's own names) downstream and
    answers the meta tools itself."""

    def __init__(
        self,
        registry: Registry,
        journal: JournalStore,
        pool: DownstreamPool,
        *,
        redo_agent: str | None = None,
    ) -> None:
        """`redo_agent`: on a person's journal (`compensator redo`), the one agent whose
        changes redo covers; otherwise the journal's agent's (every agent's for a person)."""
        self.registry = registry
        self.journal = journal
        self.pool = pool
        self._gate = Gate()
        self._turns = Turns(registry.checkpoints)
        # Mutating calls to one server go one at a time, so the order their intents are
        # journaled is the order the server applied them, and undo reverses exactly that.
        self._serial: dict[str, anyio.Lock] = {}
        # Outcomes the journal could not take yet: written before anything else is journaled.
        self._unsettled: dict[int, tuple[str, Any, str | None]] = {}
        self._undoer = Undoer(
            journal, registry, undo_caller(registry, pool), agent=journal.agent, scope=journal.scope
        )
        self._redoer = Redoer(
            journal,
            registry,
            replay=self._replay,
            probe=self._replay_problem,
            read=self._read,
            agent=redo_agent if redo_agent is not None else journal.agent,
            scope=journal.scope,
        )
        self._meta: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]] = {
            "checkpoint": self._checkpoint,
            "list_checkpoints": self._list_checkpoints,
            "list_changes": self._list_changes,
            "undo_to": self._undo_to,
            "undo_change": self._undo_change,
            "redo": self._redo,
            "explain_blast_radius": self._explain,
        }

    # -- the two handlers the server exposes -----------------------------------------

    async def list_tools(self, cursor: str | None) -> types.ListToolsResult:
        tools = [routed.exposed() for routed in self.pool.routes.values()]
        return types.ListToolsResult(tools=[*tools, *_META_TOOLS])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> sdk.ToolResult:
        with self._turns.call() as quiet:
            handler = self._meta.get(name)
            if handler is not None:
                return await self._call_meta(name, handler, arguments)
            routed = self.pool.route(name)
            if routed is None:
                return error_result(self.pool.missing_reason(name))
            classification = classify(self.registry, self.pool, name, arguments)
            refused = await self._guard(name, classification, arguments)
            if refused is not None:
                return refused
            if not classification.behaviour.journaled:
                return await self._forward_read(name, arguments)
            label = self._turns.checkpoint_before(quiet)
            if label is not None:
                await self._auto_checkpoint(label)
            async with self._gate.shared():
                return await self._forward_mutating(routed, classification, arguments)

    # -- guardrails --------------------------------------------------------------------

    @property
    def needs_approval(self) -> bool:
        """Whether any call can need the person's approval under this registry."""
        return bool(self.registry.defaults.approve) or any(
            policy.approve or policy.approve_when is not None
            for policy in self.registry.tools.values()
        )

    def client_attached(self, session: Any) -> None:
        """Say once per client, when it has initialized, how calls needing approval go."""
        if not self.needs_approval:
            return
        if sdk.client_supports(session, "elicitation"):
            log.info(
                "approvals: the client supports elicitation, so a call that needs approval is "
                "put to its person first"
            )
        elif self.registry.defaults.on_no_approval == "allow":
            log.info(
                "approvals: the client does not support elicitation; calls that need approval "
                "are forwarded without asking (defaults.on_no_approval: allow)"
            )
        else:
            log.info(
                "approvals: the client does not support elicitation; calls that need approval "
                "are refused (defaults.on_no_approval: deny)"
            )

    async def _guard(
        self, name: str, classification: Classification, arguments: dict[str, Any]
    ) -> sdk.ToolResult | None:
        """None when the call may go on; else the error result that refuses it (recorded).
        Nothing is sent downstream before this returns None."""
        verdict = decide(self.registry, name, classification, arguments)
        if verdict.action == FORWARD:
            return None
        if verdict.action == DENY:
            return self._refuse(
                name, classification, arguments, Asked(answer=Answer.DENIED), verdict.reason
            )
        assert verdict.action == ASK
        call = sdk.CURRENT_CALL.get()
        capable = call is not None and sdk.client_supports(call.session, "elicitation")
        if not capable and self.registry.defaults.on_no_approval == "allow":
            log.info("%s forwarded without approval: the client cannot ask its person", name)
            return None
        policy = self.registry.policy(name)
        try:
            message = approval_message(name, classification, arguments, policy)
            asked = await ask_person(message, self.registry.defaults.approval_timeout)
        except BaseException:  # cancelled while the person was asked: nothing was sent
            with anyio.CancelScope(shield=True):
                why = "the call was cancelled while the person was asked; nothing was sent"
                self._record_decision(name, classification, arguments, Answer.CANCELLED, why)
            raise
        if asked.answer != Answer.APPROVED:
            return self._refuse(name, classification, arguments, asked, asked.problem)
        try:
            self._journal_decision(name, classification, arguments, Answer.APPROVED, None)
        except JournalError as exc:
            log.error("refused %s: the approval cannot be recorded: %s", name, exc)
            return error_result(
                f"{name} was not called: the person approved it, but the journal cannot "
                f"record the approval: {exc}. Nothing was sent to the server."
            )
        log.info("%s approved by the person", name)
        return None

    def _refuse(
        self,
        name: str,
        classification: Classification,
        arguments: dict[str, Any],
        asked: Asked,
        reason: str,
    ) -> sdk.ToolResult:
        """Record a refused call and the error result that tells the agent why."""
        self._record_decision(name, classification, arguments, asked.answer, reason or None)
        log.info("%s refused (%s)%s", name, asked.answer, f": {reason}" if reason else "")
        why = {
            Answer.DENIED: reason,
            Answer.DECLINED: "the person declined it",
            Answer.CANCELLED: "the person cancelled the question without approving it",
            Answer.NO_APPROVAL: (
                f"it needs a person's approval, and {reason}"
                if reason
                else "it needs a person's approval, and nobody could be asked"
            ),
        }[asked.answer]
        return error_result(f"{name} was not called: {why}. Nothing was sent to the server.")

    def _record_decision(
        self,
        name: str,
        classification: Classification,
        arguments: dict[str, Any],
        answer: str,
        reason: str | None,
    ) -> None:
        """Record a refusal; one the journal cannot take is logged (the call is refused
        anyway, and nothing was sent)."""
        try:
            self._journal_decision(name, classification, arguments, answer, reason)
        except JournalError as exc:
            log.error("the %s call of %s is not journaled: %s", answer, name, exc)

    def _journal_decision(
        self,
        name: str,
        classification: Classification,
        arguments: dict[str, Any],
        answer: str,
        reason: str | None,
    ) -> None:
        policy = self.registry.policy(name)
        self.journal.record_decision(
            tool=name,
            classification=classification.value,
            args=redact(arguments, "args", policy.redact if policy is not None else ()),
            answer=answer,
            reason=reason,
        )

    # -- forwarding --------------------------------------------------------------------

    async def _forward_read(self, name: str, arguments: dict[str, Any]) -> sdk.ToolResult:
        try:
            return await self.pool.call(name, arguments)
        except DownstreamError as exc:
            return error_result(str(exc))

    async def _forward_mutating(
        self, routed: RoutedTool, classification: Classification, arguments: dict[str, Any]
    ) -> sdk.ToolResult:
        problem = await self.pool.ensure_running(routed.server)
        if problem is not None:
            # Nothing was sent, so nothing happened and nothing is journaled.
            return error_result(problem)
        async with self._serial.setdefault(routed.server, anyio.Lock()):
            return (await self._journaled_call(routed, classification, arguments))[0]

    async def _replay(self, change: Change) -> int:
        """Send a journaled call again for redo, through the same guardrails and journal as
        the agent's calls, as a change of the agent whose it was; the new change's id.
        Refused when it was not sent."""
        routed = self.pool.route(change.tool)
        if routed is None:
            raise Refused(self.pool.missing_reason(change.tool))
        arguments = dict(change.args)
        classification = classify(self.registry, self.pool, change.tool, arguments)
        refused = await self._guard(change.tool, classification, arguments)
        if refused is None:
            problem = await self.pool.ensure_running(routed.server)
        else:
            problem = " ".join(item.get("text", "") for item in refused["content"])
        if problem:
            raise Refused(problem)
        async with self._serial.setdefault(routed.server, anyio.Lock()):
            _, change_id = await self._journaled_call(routed, classification, arguments, change)
        if change_id is None:
            raise Refused(f"{change.tool} was not called: the journal cannot record it")
        return change_id

    def _replay_problem(self, change: Change) -> str | None:
        """Why a replay would not be sent now, asking nobody and sending nothing."""
        if self.pool.route(change.tool) is None:
            return self.pool.missing_reason(change.tool)
        classification = classify(self.registry, self.pool, change.tool, dict(change.args))
        verdict = decide(self.registry, change.tool, classification, change.args)
        return verdict.reason if verdict.action == DENY else None

    async def _journaled_call(
        self,
        routed: RoutedTool,
        classification: Classification,
        arguments: dict[str, Any],
        redo: Change | None = None,
    ) -> tuple[sdk.ToolResult, int | None]:
        """Journal the call (as a replay of `redo`, for its agent, when given), forward it,
        record its outcome: the result for the client and the change's id (None: the journal
        refused it, nothing was sent)."""
        policy = self.registry.policy(routed.name)
        hidden = policy.redact if policy is not None else ()
        snapshot, snapshot_error = await self._snapshot(policy, arguments)
        intent = Intent(
            tool=routed.name,
            classification=classification.value,
            args=redact(arguments, "args", hidden),
            snapshot=snapshot,
            snapshot_error=snapshot_error,
            redo_of=None if redo is None else redo.id,
            owner=None if redo is None else (redo.agent, redo.scope),
        )
        try:
            self.settle_outcomes()
            change_id = self.journal.record_intent(intent)
        except JournalError as exc:
            log.error("refused %s: %s", routed.name, exc)
            refused = error_result(
                f"{routed.name} was not called, because the journal cannot record it: {exc}. "
                "Reads still work; mutating calls go through again once the journal can "
                "record them."
            )
            return refused, None
        try:
            result = await self.pool.call(routed.name, arguments)
        except DownstreamError as exc:
            return self._failed_in_transport(change_id, exc), change_id
        except BaseException:
            with anyio.CancelScope(shield=True):
                self._settle(
                    change_id, Status.UNKNOWN, None, "cancelled before the outcome arrived"
                )
            raise
        # The server answered: whatever goes wrong from here on, the client gets that answer.
        try:
            outcome = call_outcome(self.registry, routed.name, arguments, result)
        except Exception as exc:  # a bug here must not turn a done call into an error
            log.exception("judging the answer of %s (change %d) failed", routed.name, change_id)
            self._settle(change_id, Status.UNKNOWN, None, f"the proxy could not judge it: {exc}")
            return result, change_id
        status = Status.OK if outcome.ok else Status.ERROR
        value = redact(outcome.value, "result", hidden)
        recorded = self._settle(change_id, status, value, outcome.error)
        if recorded and outcome.ok and policy is not None and policy.verify:
            try:
                await self._record_post_state(change_id, policy, arguments, outcome.value)
            except Exception:  # undo then says the state after the call was not recorded
                log.exception("recording the state after change %d failed", change_id)
        return result, change_id

    def _settle(self, change_id: int, status: str, value: Any, error: str | None) -> bool:
        """Record a call's outcome; when the journal cannot take it, keep it to write before
        the next journal write (the change stays `pending` meanwhile, and becomes `unknown` if
        this process ends first). Whether it was recorded."""
        try:
            self.journal.record_outcome(change_id, status=status, result=value, error=error)
        except JournalError as exc:
            log.error(
                "the outcome of change %d (%s) is not journaled yet: %s", change_id, status, exc
            )
            self._unsettled[change_id] = (status, value, error)
            return False
        return True

    def settle_outcomes(self) -> None:
        """Write the outcomes the journal could not take before; JournalError if it still
        cannot."""
        for change_id, (status, value, error) in list(self._unsettled.items()):
            self.journal.record_outcome(change_id, status=status, result=value, error=error)
            del self._unsettled[change_id]

    def _failed_in_transport(self, change_id: int, exc: DownstreamError) -> sdk.ToolResult:
        """A call that got no result: `unknown` when it may have reached the server, `error`
        when the server answered with a JSON-RPC error or the call was never sent."""
        if exc.maybe_applied:
            self._settle(change_id, Status.UNKNOWN, None, str(exc))
            return error_result(f"{exc} (journaled as change {change_id}, outcome unknown)")
        self._settle(change_id, Status.ERROR, None, str(exc))
        if exc.answered:
            return error_result(f"{exc} (journaled as change {change_id}, a failed call)")
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
        outcome = call_outcome(self.registry, policy.verify_tool, args, result)
        state = observed_state(outcome)
        error = None if state is not None else outcome.error or "the read returned nothing"
        self.journal.record_post_state(change_id, state, error)

    async def _snapshot(
        self, policy: ToolPolicy | None, arguments: dict[str, Any]
    ) -> tuple[Any, str | None]:
        if policy is None or not policy.classification.behaviour.snapshot:
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
        outcome = call_outcome(self.registry, policy.snapshot_tool, snapshot_args, result)
        return (outcome.value, None) if outcome.ok else (None, outcome.error)

    # -- meta tools --------------------------------------------------------------------

    async def _call_meta(
        self,
        name: str,
        handler: Callable[[Mapping[str, Any]], Awaitable[Any]],
        arguments: Mapping[str, Any],
    ) -> sdk.ToolResult:
        try:
            return json_result(await handler(arguments))
        except MetaArgumentError as exc:
            return error_result(str(exc))
        except JournalError as exc:
            return error_result(f"{name} failed: {exc}")

    async def _checkpoint(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id = await self._take_checkpoint(meta.parse_checkpoint(args))
        return {"checkpoint_id": checkpoint_id}

    async def _take_checkpoint(self, label: str | None) -> int:
        # Taken between mutating calls, never during one: every call that started before it
        # is journaled (with its outcome) before it, every later call after it.
        async with self._gate.exclusive():
            self.settle_outcomes()
            return self.journal.create_checkpoint(label).id

    async def _auto_checkpoint(self, label: str) -> None:
        """A checkpoint the registry's `checkpoints:` asks for; one the journal cannot take is
        logged and the call goes on (it is journaled, or refused, as any other)."""
        try:
            checkpoint_id = await self._take_checkpoint(label)
        except JournalError as exc:
            log.error("the %r checkpoint was not taken: %s", label, exc)
            return
        log.info("checkpoint %d taken (%s)", checkpoint_id, label)

    async def _list_checkpoints(self, args: Mapping[str, Any]) -> dict[str, Any]:
        meta.parse_list_checkpoints(args)
        checkpoints = self.journal.checkpoints(self.journal.agent, scope=self.journal.scope)
        return {"checkpoints": [cp.to_json() for cp in checkpoints]}

    async def _list_changes(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id = meta.parse_list_changes(args)
        checkpoint = None
        if checkpoint_id is not None:
            checkpoint = self.journal.checkpoint(checkpoint_id)
            if checkpoint is None:
                raise MetaArgumentError(self._undoer.unknown_checkpoint(checkpoint_id))
        whose = {"agent": self.journal.agent, "scope": self.journal.scope}
        changes = self.journal.open_changes(checkpoint, **whose)
        refused = self.journal.decisions(checkpoint, **whose, refused=True)
        return {
            "changes": [self._listed(change) for change in changes],
            "refused": [decision.to_json() for decision in refused],
        }

    def _listed(self, change: Change) -> dict[str, Any]:
        """A change as list_changes shows it; with what a policy added later can do for it."""
        late = late_policy(change, self.registry)
        if late is None:
            return change.to_json()
        return {**change.to_json(), "policy_added_later": late.note}

    async def _undo_to(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id, dry_run, force = meta.parse_undo_to(args)
        async with self._gate.exclusive():
            self.settle_outcomes()
            report = await self._undoer.undo_to(checkpoint_id, dry_run=dry_run, force=force)
        return {"checkpoint_id": checkpoint_id, "dry_run": dry_run, **report.to_json()}

    async def _undo_change(self, args: Mapping[str, Any]) -> dict[str, Any]:
        change_id, dry_run, force = meta.parse_undo_change(args)
        async with self._gate.exclusive():
            self.settle_outcomes()
            report = await self._undoer.undo_change(change_id, dry_run=dry_run, force=force)
        return {"change_id": change_id, "dry_run": dry_run, **report.to_json()}

    async def _redo(self, args: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint_id, change_id, dry_run = meta.parse_redo(args)
        report = await self.redo(checkpoint_id=checkpoint_id, change_id=change_id, dry_run=dry_run)
        target = {"checkpoint_id": checkpoint_id} if change_id is None else {"change_id": change_id}
        return {**target, "dry_run": dry_run, **report.to_json()}

    async def redo(
        self, *, checkpoint_id: int | None = None, change_id: int | None = None, dry_run: bool
    ) -> RedoReport:
        """Replay what an undo took back after the checkpoint, or the one change (redo.py);
        between mutating calls, as undo runs. MetaArgumentError for an id it cannot use."""
        async with self._gate.exclusive():
            self.settle_outcomes()
            if change_id is not None:
                return await self._redoer.redo_change(change_id, dry_run=dry_run)
            assert checkpoint_id is not None
            return await self._redoer.redo_to(checkpoint_id, dry_run=dry_run)

    async def _explain(self, args: Mapping[str, Any]) -> dict[str, Any]:
        tool = meta.parse_explain(args)
        explained = meta.explain_tool(self.registry, self.pool, tool)
        whose = {"agent": self.journal.agent, "scope": self.journal.scope}
        mine = [c for c in self.journal.open_changes(None, **whose) if c.tool == tool]
        late = [found for c in mine if (found := late_policy(c, self.registry)) is not None]
        if late:
            # The same note for each: it depends on the policy, not on the call.
            count = "1 open change" if len(late) == 1 else f"{len(late)} open changes"
            explained["explanation"] += f" {count} of {tool} {late[0].note}."
        return explained
