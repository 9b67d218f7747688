"""The meta tools: their definitions, argument checks, and the blast-radius explanation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..classification import Classification
from ..errors import MetaArgumentError
from ..journal import turn_label
from ..registry import Defaults, Registry, ToolPolicy
from ..wire import DownstreamPool
from .calls import classify

__all__ = [
    "META_TOOL_DEFINITIONS",
    "explain",
    "explain_tool",
    "parse_checkpoint",
    "parse_explain",
    "parse_list_changes",
    "parse_list_checkpoints",
    "parse_redo",
    "parse_undo_change",
    "parse_undo_to",
]

_MAX_ID = 2**63 - 1  # SQLite's largest integer: no id can be bigger
_INT = {"type": "integer", "minimum": 1, "maximum": _MAX_ID}

META_TOOL_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "name": "checkpoint",
        "title": "Take an undo checkpoint",
        "description": (
            "Mark this moment. Every mutating tool call made after it can later be undone "
            "with undo_to(checkpoint_id). Returns {checkpoint_id}."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "description": "A note for humans."},
                "prompt": {
                    "type": "string",
                    "description": (
                        "Instead of label: the user's prompt that starts a turn (a client "
                        "hook sends it); the label is `turn: ` and its first line, and "
                        "`compensator undo --turns N` undoes the last N turns."
                    ),
                },
            },
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": False},
    },
    {
        "name": "list_checkpoints",
        "title": "List undo checkpoints",
        "description": "Checkpoints taken so far, newest first: {id, label, created_at}.",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "list_changes",
        "title": "List journaled changes",
        "description": (
            "Mutating calls not yet undone, newest first; only those made after "
            "checkpoint_id when given."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"checkpoint_id": _INT},
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "undo_to",
        "title": "Undo back to a checkpoint",
        "description": (
            "Compensate every change made after the checkpoint, newest first. Returns "
            "{undone, skipped (with reasons), nothing_to_undo}. With dry_run it returns the "
            "plan and changes nothing. force=true compensates changes skipped for drift or "
            "because an earlier undo was interrupted mid-call: only after a person checked."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "checkpoint_id": _INT,
                "dry_run": {"type": "boolean", "default": False},
                "force": {"type": "boolean", "default": False},
            },
            "required": ["checkpoint_id"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    {
        "name": "undo_change",
        "title": "Undo one change",
        "description": (
            "Compensate one change (an id from list_changes) and nothing else. Done only when "
            "no later open change could depend on it: it is the newest open change to its "
            "server, or its tool's verify read shows the state it left unchanged; otherwise "
            "it is skipped with a reason naming the later changes. Returns {undone, skipped, "
            "nothing_to_undo} as undo_to does; dry_run returns the plan. force=true undoes it "
            "anyway (and overrides drift and doubt): only after a person checked."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "change_id": _INT,
                "dry_run": {"type": "boolean", "default": False},
                "force": {"type": "boolean", "default": False},
            },
            "required": ["change_id"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    {
        "name": "redo",
        "title": "Redo what an undo took back",
        "description": (
            "Replay, oldest first, the changes an undo took back: every one after "
            "checkpoint_id, or the one change_id. Each replay is a new journaled change, so "
            "undo can take it back again. A change is refused with a reason when replaying "
            "cannot give the same effect (arguments journaled redacted, a later change still "
            "in effect, drift since the undo, an id the server handed out that its replay did "
            "not get), and so is every change after it. Returns {redone (with "
            "new_change_id), skipped (with reasons)}; dry_run returns the plan."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "checkpoint_id": _INT,
                "change_id": _INT,
                "dry_run": {"type": "boolean", "default": False},
            },
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    {
        "name": "explain_blast_radius",
        "title": "Explain what undo can do for a tool",
        "description": (
            "Before calling a tool, ask what undo would and would not restore after it. "
            "Returns its classification and a plain-language account."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"tool": {"type": "string", "description": "e.g. tasks__add_task"}},
            "required": ["tool"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    },
)

_SCHEMAS = {d["name"]: d["inputSchema"] for d in META_TOOL_DEFINITIONS}


def _check_keys(tool: str, args: Mapping[str, Any]) -> None:
    allowed = set(_SCHEMAS[tool]["properties"])
    extra = sorted(set(args) - allowed)
    if extra:
        valid = ", ".join(sorted(allowed)) or "none"
        raise MetaArgumentError(f"{tool}: unknown argument(s) {', '.join(extra)}; valid: {valid}")


def _checkpoint_id(tool: str, value: Any) -> int:
    return _id(tool, "checkpoint_id", "`checkpoint` or `list_checkpoints`", value)


def _id(tool: str, name: str, source: str, value: Any) -> int:
    # bool is an int subclass in Python, but `true` is no id.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_ID:
        # Shown as the client sent it (JSON): `null`, `"abc"`, not Python's None and 'abc'.
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        hint = (
            " (a client that could not read what you typed as a number sends null: "
            "give the number itself, e.g. 3)"
            if value is None
            else ""
        )
        raise MetaArgumentError(
            f"{tool}: {name} must be a positive integer from {source}, got {shown}{hint}"
        )
    return value


def _flags(tool: str, args: Mapping[str, Any]) -> tuple[bool, bool]:
    """(dry_run, force), false when absent."""
    flags = []
    for name in ("dry_run", "force"):
        value = args.get(name, False)
        if not isinstance(value, bool):
            raise MetaArgumentError(f"{tool}: {name} must be true or false, got {value!r}")
        flags.append(value)
    return flags[0], flags[1]


def parse_checkpoint(args: Mapping[str, Any]) -> str | None:
    """The checkpoint's label: `label`, or a turn's made from `prompt`."""
    _check_keys("checkpoint", args)
    label, prompt = args.get("label"), args.get("prompt")
    for name, value in (("label", label), ("prompt", prompt)):
        if value is not None and not isinstance(value, str):
            raise MetaArgumentError(f"checkpoint: {name} must be a string, got {value!r}")
    if prompt is None:
        return label
    if label is not None:
        raise MetaArgumentError(
            "checkpoint: pass label or prompt, not both (a turn's label is its prompt's first line)"
        )
    return turn_label(prompt)


def parse_list_checkpoints(args: Mapping[str, Any]) -> None:
    _check_keys("list_checkpoints", args)


def parse_list_changes(args: Mapping[str, Any]) -> int | None:
    _check_keys("list_changes", args)
    value = args.get("checkpoint_id")
    return None if value is None else _checkpoint_id("list_changes", value)


def parse_undo_to(args: Mapping[str, Any]) -> tuple[int, bool, bool]:
    """(checkpoint_id, dry_run, force)."""
    _check_keys("undo_to", args)
    if "checkpoint_id" not in args:
        raise MetaArgumentError("undo_to: checkpoint_id is required")
    return (_checkpoint_id("undo_to", args["checkpoint_id"]), *_flags("undo_to", args))


def parse_undo_change(args: Mapping[str, Any]) -> tuple[int, bool, bool]:
    """(change_id, dry_run, force)."""
    _check_keys("undo_change", args)
    if "change_id" not in args:
        raise MetaArgumentError("undo_change: change_id is required; see list_changes")
    change_id = _id("undo_change", "change_id", "`list_changes`", args["change_id"])
    return (change_id, *_flags("undo_change", args))


def parse_redo(args: Mapping[str, Any]) -> tuple[int | None, int | None, bool]:
    """(checkpoint_id, change_id, dry_run): exactly one of the two ids."""
    _check_keys("redo", args)
    # A client that leaves a field empty may send null for it: null is not given.
    args = {name: value for name, value in args.items() if value is not None}
    if ("checkpoint_id" in args) == ("change_id" in args):
        raise MetaArgumentError(
            "redo: give checkpoint_id (redo what undo_to took back after it) or change_id "
            "(one change), not both or neither"
        )
    checkpoint_id = (
        _checkpoint_id("redo", args["checkpoint_id"]) if "checkpoint_id" in args else None
    )
    change_id = (
        _id("redo", "change_id", "`list_changes` or undo's report", args["change_id"])
        if "change_id" in args
        else None
    )
    dry_run = args.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise MetaArgumentError(f"redo: dry_run must be true or false, got {dry_run!r}")
    return checkpoint_id, change_id, dry_run


def parse_explain(args: Mapping[str, Any]) -> str:
    _check_keys("explain_blast_radius", args)
    tool = args.get("tool")
    if not isinstance(tool, str) or not tool:
        raise MetaArgumentError("explain_blast_radius: tool must be a tool name string")
    return tool


def explain(
    tool: str,
    classification: Classification,
    policy: ToolPolicy | None,
    annotations: Mapping,
    defaults: Defaults | None = None,
) -> dict[str, Any]:
    """What undo would and would not do after `tool`, and whether the registry's guardrails
    deny its calls or ask the person first, for an agent to read before calling it."""
    text = classification.explanation(
        tool,
        snapshot_tool=policy.snapshot_tool if policy else None,
        inverse_tools=[step.tool for step in policy.inverse] if policy else (),
        annotations=annotations,
    )
    if policy is not None and policy.mutating_when is not None:
        text += (
            f" Calls where `{policy.mutating_when.source}` is false are treated as reads "
            "and not journaled."
        )
    if policy is not None and policy.verify:
        text += (
            f" Verified: the proxy reads {policy.verify_tool} again after the call, and undo "
            "skips the change (reason `drift`) if that state changed by then."
        )
    if policy is not None and policy.redact:
        paths = ", ".join(path.source for path in policy.redact)
        text += f" Never stored in the journal: {paths}."
    if policy is not None and policy.error_when is not None:
        text += (
            f" A result matching `{policy.error_when.source}` counts as a failed call: "
            "journaled, never compensated."
        )
    guard, said = _guardrails(classification, policy, defaults or Defaults())
    return {
        "tool": tool,
        "classification": classification.value,
        "journaled": classification.behaviour.journaled,
        "undoable": classification.behaviour.undoable,
        "snapshot": _snapshot(policy),
        "inverse": [_step(step) for step in policy.inverse] if policy else [],
        "guardrails": guard,
        "explanation": text + said,
    }


def _guardrails(
    classification: Classification, policy: ToolPolicy | None, defaults: Defaults
) -> tuple[dict[str, Any], str]:
    """The registry's `deny*` and `approve*` for the tool (in the order the proxy applies
    them, compensator/proxy/approval.py) as a record and as sentences."""
    deny: str | bool = False
    approve: str | bool = False
    said = ""
    if policy is not None and policy.deny is not None:
        deny = policy.deny or True
        reason = f" ({policy.deny})" if policy.deny else ""
        return {"deny": deny, "approve": False}, (
            f" Denied by the registry{reason}: the proxy never sends its calls."
        )
    if policy is not None and policy.deny_when is not None:
        deny = f"when {policy.deny_when.source}"
        said += f" Calls where `{policy.deny_when.source}` holds are denied, never sent."
    if policy is not None and policy.approve is not None:
        approve = policy.approve
    elif policy is not None and policy.approve_when is not None:
        approve = f"when {policy.approve_when.source}"
    else:
        approve = classification in defaults.approve
    if approve:
        which = "each call" if approve is True else f"calls where `{approve[5:]}` holds"
        unasked = "refused" if defaults.on_no_approval == "deny" else "sent unasked"
        said += (
            f" The proxy asks the person before {which} (elicitation); a declined call is "
            f"not sent, and a client that cannot ask gets it {unasked}."
        )
    return {"deny": deny, "approve": approve}, said


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
    return explain(tool, classify(registry, pool, tool), policy, annotations, registry.defaults)


def _snapshot(policy: ToolPolicy | None) -> dict[str, Any] | None:
    if policy is None or policy.snapshot_tool is None:
        return None
    args = policy.snapshot_args.source if policy.snapshot_args is not None else {}
    return {"tool": policy.snapshot_tool, "args": args}


def _step(step: Any) -> dict[str, Any]:
    described: dict[str, Any] = {"tool": step.tool, "args": step.args.source}
    if step.when is not None:
        described["when"] = step.when.source
    return described
