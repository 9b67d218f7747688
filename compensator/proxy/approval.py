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
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from ..classification import Classification
from ..errors import CompensatorError
from ..journal import Answer
from ..registry import Expression, Registry, ToolPolicy, redact
from ..wire import sdk

__all__ = ["ASK", "DENY", "FORWARD", "Asked", "Verdict", "approval_message", "ask_person", "decide"]

log = logging.getLogger(__name__)

FORWARD, ASK, DENY = "forward", "ask", "deny"

VALUE_LIMIT = 120
"""Characters of one argument's value shown to the person; the rest is cut, saying how much.
Every key is always shown, so no argument can be pushed out of sight by a long one."""


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
        if policy.deny_when is not None:
            holds, failed = _holds(policy.deny_when, context, name, default=True)
            if holds:
                source = policy.deny_when.source
                why = "could not be evaluated, so" if failed else "holds for these arguments:"
                reason = f"denied by the registry: deny_when `{source}` {why} denied"
                return Verdict(action=DENY, reason=reason)
        if policy.approve is not None:
            return Verdict(action=ASK if policy.approve else FORWARD)
        if policy.approve_when is not None:
            asked, _ = _holds(policy.approve_when, context, name, default=True)
            return Verdict(action=ASK if asked else FORWARD)
    if classification in registry.defaults.approve:
        return Verdict(action=ASK)
    return Verdict(action=FORWARD)


def _holds(
    condition: Expression, context: Mapping[str, Any], tool: str, *, default: bool
) -> tuple[bool, bool]:
    """(whether `condition` holds, whether it failed and `default` stands in)."""
    try:
        return condition.truthy(context), False
    except CompensatorError as exc:
        log.warning("%s (a call of %s); taking it as %s", exc, tool, default)
        return default, True


def argument_summary(arguments: Mapping[str, Any], policy: ToolPolicy | None) -> str:
    """The arguments, every key shown, each value as JSON (the tool's `redact:` values
    hidden) cut at VALUE_LIMIT characters; invisible format characters (bidi controls,
    zero-width ones) are escaped so the text reads as it is."""
    hidden = redact(dict(arguments), "args", policy.redact if policy is not None else ())
    parts = []
    for key, value in hidden.items():
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
        if len(text) > VALUE_LIMIT:
            text = f"{text[:VALUE_LIMIT]}… ({len(text) - VALUE_LIMIT} more characters)"
        parts.append(f"{json.dumps(str(key), ensure_ascii=False)}: {text}")
    return _visible("{" + ", ".join(parts) + "}")


def _visible(text: str) -> str:
    """`text` with Unicode format characters (category Cf) written as \\uXXXX."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cf" else c for c in text)


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


async def ask_person(message: str, timeout: float) -> Asked:
    """Ask the person at the client whose `tools/call` is being handled; no answer within
    `timeout` seconds is a refusal."""
    call = sdk.CURRENT_CALL.get()
    if call is None or not sdk.client_supports(call.session, "elicitation"):
        problem = "the client cannot ask its person (it did not advertise elicitation)"
        return Asked(answer=Answer.NO_APPROVAL, problem=problem)
    try:
        with anyio.move_on_after(timeout) as waited:
            action = await sdk.elicit(call.session, message, call.request_id)
        if waited.cancelled_caught:
            problem = f"the person did not answer within {timeout:g} s"
            return Asked(answer=Answer.NO_APPROVAL, problem=problem)
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
