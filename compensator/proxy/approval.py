"""Guardrails: which calls the registry denies, which need the person's approval first, and how
the person is asked (an `elicitation/create` to the client session that made the call).

The decision reads the tool's entry first (`deny`, `deny_when`, then `approve` or
`approve_when`), and `defaults.approve` only for a tool whose entry says neither. A condition
that cannot be evaluated takes the safe side: a `deny_when` denies, an `approve_when` asks.
Meta tools never come here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..classification import Classification
from ..errors import CompensatorError
from ..journal import Answer
from ..registry import Expression, Registry, ToolPolicy, redact
from ..wire import sdk

__all__ = ["ASK", "DENY", "FORWARD", "Asked", "Verdict", "approval_message", "ask_person", "decide"]

log = logging.getLogger(__name__)

FORWARD, ASK, DENY = "forward", "ask", "deny"

SUMMARY_LIMIT = 400
"""Characters of the arguments shown to the person; the rest is cut with an ellipsis."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What to do with a call before anything is sent: forward it, ask first, or deny it
    (with the reason the agent and the journal are given)."""

    action: str
    reason: str = ""


def decide(
    registry: Registry,
    name: str,
    classification: Classification,
    arguments: Mapping[str, Any],
) -> Verdict:
    """The verdict for a call of `name` with `arguments`, classified `classification`."""
    policy = registry.policy(name)
    context = {"args": dict(arguments)}
    if policy is not None:
        if policy.deny is not None:
            said = f": {policy.deny}" if policy.deny else ""
            return Verdict(action=DENY, reason=f"denied by the registry{said}")
        if policy.deny_when is not None and _holds(policy.deny_when, context, name, default=True):
            source = policy.deny_when.source
            reason = f"denied by the registry: deny_when `{source}` holds for these arguments"
            return Verdict(action=DENY, reason=reason)
        if policy.approve is not None:
            return Verdict(action=ASK if policy.approve else FORWARD)
        if policy.approve_when is not None:
            asked = _holds(policy.approve_when, context, name, default=True)
            return Verdict(action=ASK if asked else FORWARD)
    if classification in registry.defaults.approve:
        return Verdict(action=ASK)
    return Verdict(action=FORWARD)


def _holds(condition: Expression, context: Mapping[str, Any], tool: str, *, default: bool) -> bool:
    try:
        return condition.truthy(context)
    except CompensatorError as exc:
        log.warning("%s (a call of %s); taking it as %s", exc, tool, default)
        return default


def argument_summary(arguments: Mapping[str, Any], policy: ToolPolicy | None) -> str:
    """The arguments as one line of JSON, with the tool's `redact:` values hidden, cut short."""
    hidden = redact(dict(arguments), "args", policy.redact if policy is not None else ())
    text = json.dumps(hidden, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def approval_message(
    name: str,
    classification: Classification,
    arguments: Mapping[str, Any],
    policy: ToolPolicy | None,
) -> str:
    """What the person reads: the tool, its arguments, its classification and what undo can
    and cannot do about it."""
    return (
        f"The agent wants to call {name}.\n"
        f"Arguments: {argument_summary(arguments, policy)}\n"
        f"Classification: {classification.value}. {classification.behaviour.approval}\n"
        "Accept to run it; decline and nothing is sent to the server."
    )


@dataclass(frozen=True, kw_only=True)
class Asked:
    """The person's answer (an `Answer`), with why there is none when nobody could be asked."""

    answer: str
    problem: str = ""


_ACTIONS = {"accept": Answer.APPROVED, "decline": Answer.DECLINED, "cancel": Answer.CANCELLED}


async def ask_person(message: str) -> Asked:
    """Ask the person at the client whose `tools/call` is being handled."""
    call = sdk.CURRENT_CALL.get()
    if call is None or not sdk.client_supports(call.session, "elicitation"):
        problem = "the client cannot ask its person (it did not advertise elicitation)"
        return Asked(answer=Answer.NO_APPROVAL, problem=problem)
    try:
        action = await sdk.elicit(call.session, message, call.request_id)
    except sdk.SDKError as exc:
        _, text, _ = sdk.error_data(exc)
        return Asked(answer=Answer.NO_APPROVAL, problem=f"asking the person failed: {text}")
    except Exception as exc:  # the connection went away, or a malformed answer
        problem = f"asking the person failed: {exc or type(exc).__name__}"
        return Asked(answer=Answer.NO_APPROVAL, problem=problem)
    answer = _ACTIONS.get(action)
    if answer is None:
        return Asked(answer=Answer.NO_APPROVAL, problem=f"the client answered {action!r}")
    return Asked(answer=answer)
