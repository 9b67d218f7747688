"""The `tools:` section: each tool's classification and how undo puts back what it did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..classification import Classification
from ..errors import did_you_mean
from . import keys
from .expressions import CONTEXT_NAMES, Template
from .model import Defaults, InverseStep, RedactPath, TestSpec, ToolPolicy
from .reader import Reader, describe
from .redaction import parse_redact_path
from .yamlnodes import line_of

__all__ = ["check_verify_reads", "read_tools"]

_ALL_NAMES = frozenset(CONTEXT_NAMES)
_SNAPSHOT_NAMES = frozenset({"snapshot", "snapshot_error"})


def read_tools(r: Reader, raw: Any, defaults: Defaults) -> dict[str, ToolPolicy]:
    raw = r.expect({} if raw is None else raw, dict, "tools")
    return {name: _policy(r, name, value, f"tools.{name}", defaults) for name, value in raw.items()}


def check_verify_reads(r: Reader, policies: Mapping[str, ToolPolicy]) -> None:
    """Every drift check's read is a tool the registry lets be called freely: one that only
    reads (checked once the included files' tools are in too)."""
    for policy in policies.values():
        read = policies.get(policy.verify_tool or "")
        if read is not None and read.classification.behaviour.journaled:
            where = f"tools.{policy.name}.verify"
            where += ".tool" if policy.verify_names_its_read else ""
            problem = (
                f"the drift check calls {read.name} before each undo, and the registry "
                f"classifies it {read.classification.value}: it must only read"
            )
            raise r.error(where, problem, "Name a read tool, or drop verify.")


def _policy(r: Reader, name: str, raw: Any, key: str, defaults: Defaults) -> ToolPolicy:
    r.target(name, key)
    raw = r.mapping(raw, key, keys.POLICY, ("classification",))
    kind = _classification(r, raw["classification"], f"{key}.classification")
    _shape(r, raw, kind, key)
    snapshot_args = _snapshot_args(r, raw, key)
    verify_tool, verify_args = _verify(r, raw, key, defaults, snapshot_args)
    policy = ToolPolicy(
        name=name,
        classification=kind,
        snapshot_tool=r.optional(raw, "snapshot_tool", key, r.target),
        snapshot_args=snapshot_args,
        inverse=_inverse(r, raw, key),
        error_when=r.optional(raw, "error_when", key, r.condition),
        mutating_when=r.optional(raw, "mutating_when", key, r.condition),
        test=r.optional(raw, "test", key, lambda v, k: _test_spec(r, v, k)),
        line=line_of(r.lines, key),
        verify_tool=verify_tool,
        verify_args=verify_args,
        idempotent=r.flag(raw, "idempotent", key),
        plain_text=r.flag(raw, "plain_text", key),
        redact=_redactions(r, raw.get("redact", []), f"{key}.redact"),
        approve=r.optional(raw, "approve", key, lambda v, k: r.expect(v, bool, k)),
        approve_when=r.optional(raw, "approve_when", key, r.condition),
        deny=r.optional(raw, "deny", key, lambda v, k: _deny(r, v, k)),
        deny_when=r.optional(raw, "deny_when", key, r.condition),
    )
    _check_guards(r, raw, key)
    _check_contexts(r, policy)
    _check_redactions(r, policy, f"{key}.redact")
    return policy


def _deny(r: Reader, value: Any, key: str) -> str | None:
    """`deny:` true (""), false (None) or a reason for the person and the agent."""
    fix = 'Write deny: true, or deny: "why it must never run" (a reason the agent is told).'
    if isinstance(value, bool):
        return "" if value else None
    if not isinstance(value, str):
        raise r.error(key, f"expected true, false or a reason, got {describe(value)}", fix)
    if not value.strip():
        raise r.error(key, "the reason is empty", fix)
    return value.strip()


def _check_guards(r: Reader, raw: dict[str, Any], key: str) -> None:
    """The guard keys that contradict each other."""
    if "approve" in raw and "approve_when" in raw:
        problem = "approve and approve_when are both given"
        fix = "Use approve: true (or false) for every call, or approve_when for some, not both."
        raise r.error(f"{key}.approve_when", problem, fix)
    denied = raw.get("deny", False) is not False
    if denied and "deny_when" in raw:
        problem = "deny and deny_when are both given, so deny_when would never decide"
        fix = "Use deny for every call, or deny_when for some, not both."
        raise r.error(f"{key}.deny_when", problem, fix)
    for name in ("approve", "approve_when"):
        if denied and raw.get(name, False) is not False:
            problem = f"the tool is denied, so {name} would never be asked"
            fix = f"Remove {name}, or remove deny (use deny_when to deny only some calls)."
            raise r.error(f"{key}.{name}", problem, fix)


def _classification(r: Reader, value: Any, key: str) -> Classification:
    text = r.expect(value, str, key)
    writable = [kind.value for kind in Classification.writable()]
    if text in writable:
        return Classification(text)
    fallback = f"Use one of {', '.join(writable)}."
    if text in {kind.value for kind in Classification}:  # one no entry can have (unknown)
        fallback = f"Remove the entry to leave the tool {text}. {fallback}"
    raise r.error(key, f"'{text}' is not a classification", did_you_mean(text, writable, fallback))


def _shape(r: Reader, raw: dict[str, Any], kind: Classification, key: str) -> None:
    """The keys a classification needs, and the ones it could never use."""
    if not kind.behaviour.undoable:
        _never_runs(r, raw, kind, key)
        return
    _pairs(r, raw, key)
    if "inverse_tool" not in raw and "inverse" not in raw:
        fix = "Add inverse_tool (with inverse_args) or an inverse list of {tool, args, when}."
        raise r.error(key, f"a {kind.value} tool needs an inverse", fix)
    if kind.behaviour.snapshot and "snapshot_tool" not in raw:
        fix = (
            "Add snapshot_tool (and snapshot_args) to capture what the inverse restores, "
            "or classify the tool reversible if args and result are enough."
        )
        raise r.error(key, f"a {kind.value} tool needs snapshot_tool", fix)
    if not kind.behaviour.snapshot and "snapshot_tool" in raw:
        problem = f"a {kind.value} tool takes no snapshot, so snapshot_tool would never run"
        fix = "Classify the tool compensable, or remove snapshot_tool."
        raise r.error(f"{key}.snapshot_tool", problem, fix)


def _never_runs(r: Reader, raw: dict[str, Any], kind: Classification, key: str) -> None:
    a_kind = f"{'an' if kind.value[0] in 'aeiou' else 'a'} {kind.value} tool"
    for name in keys.UNDO:
        if name in raw:
            problem = f"{a_kind} is never undone, so {name} would never run"
            fix = "Remove it, or classify the tool reversible or compensable."
            raise r.error(f"{key}.{name}", problem, fix)
    if raw.get("verify", False) is not False:
        problem = f"{a_kind} is never undone, so there is no undo to verify"
        fix = "Remove verify, or classify the tool reversible or compensable."
        raise r.error(f"{key}.verify", problem, fix)


def _pairs(r: Reader, raw: dict[str, Any], key: str) -> None:
    if "inverse_tool" in raw and "inverse" in raw:
        fix = "Use inverse_tool with inverse_args for one step, or an inverse list, not both."
        raise r.error(f"{key}.inverse", "inverse_tool and inverse are both given", fix)
    if "inverse_args" in raw and "inverse_tool" not in raw:
        fix = "Add inverse_tool, or write the step in an inverse list as {tool, args}."
        raise r.error(f"{key}.inverse_args", "inverse_args without inverse_tool", fix)
    if "snapshot_args" in raw and "snapshot_tool" not in raw:
        fix = "Add snapshot_tool, or remove snapshot_args."
        raise r.error(f"{key}.snapshot_args", "snapshot_args without snapshot_tool", fix)


def _snapshot_args(r: Reader, raw: dict[str, Any], key: str) -> Template | None:
    if "snapshot_tool" not in raw:
        return None
    return r.template(raw.get("snapshot_args", {}), f"{key}.snapshot_args")


def _inverse(r: Reader, raw: dict[str, Any], key: str) -> tuple[InverseStep, ...]:
    if "inverse_tool" in raw:
        tool = r.target(raw["inverse_tool"], f"{key}.inverse_tool")
        args = r.template(raw.get("inverse_args", {}), f"{key}.inverse_args")
        return (InverseStep(tool=tool, args=args, when=None),)
    if "inverse" not in raw:
        return ()
    steps = r.expect(raw["inverse"], list, f"{key}.inverse")
    if not steps:
        fix = "Add at least one {tool, args} step, or remove the key."
        raise r.error(f"{key}.inverse", "the inverse list is empty", fix)
    return tuple(_step(r, step, f"{key}.inverse[{i}]") for i, step in enumerate(steps))


def _step(r: Reader, raw: Any, key: str) -> InverseStep:
    raw = r.mapping(raw, key, keys.STEP, ("tool",))
    return InverseStep(
        tool=r.target(raw["tool"], f"{key}.tool"),
        args=r.template(raw.get("args", {}), f"{key}.args"),
        when=r.optional(raw, "when", key, r.condition),
    )


def _verify(
    r: Reader, raw: dict[str, Any], key: str, defaults: Defaults, snapshot_args: Template | None
) -> tuple[str | None, Template | None]:
    """`verify:` of the tool as (read tool, read args), both None when off. `true` repeats
    the snapshot read; `{tool, args}` names a read of its own (so tools without a snapshot
    can be verified); the registry default applies to tools that take a snapshot."""
    where = f"{key}.verify"
    value = raw.get("verify", defaults.verify and "snapshot_tool" in raw)
    if isinstance(value, dict):
        read = r.mapping(value, where, keys.VERIFY, ("tool",))
        tool = r.target(read["tool"], f"{where}.tool")
        return tool, r.template(read.get("args", {}), f"{where}.args")
    if not isinstance(value, bool):
        problem = f"expected true, false or a {{tool, args}} read, got {describe(value)}"
        fix = "Write verify: true, or verify: {tool: server__read_tool, args: {...}}."
        raise r.error(where, problem, fix)
    if not value:
        return None, None
    if "snapshot_tool" not in raw:
        problem = "verify: true reads the state again with snapshot_tool, and this tool has none"
        fix = (
            'Name the read: verify: {tool: server__read_tool, args: {id: "{args.id}"}}, '
            "or add snapshot_tool (compensable tools), or drop verify."
        )
        raise r.error(where, problem, fix)
    return r.target(raw["snapshot_tool"], f"{key}.snapshot_tool"), snapshot_args


def _redactions(r: Reader, raw: Any, key: str) -> tuple[RedactPath, ...]:
    items = r.expect(raw, list, key)
    return tuple(_redact_path(r, item, f"{key}[{i}]") for i, item in enumerate(items))


def _redact_path(r: Reader, value: Any, key: str) -> RedactPath:
    text = r.expect(value, str, key)
    path = parse_redact_path(text)
    if path is None:
        problem = f"'{text}' is not a path into args or result"
        fix = "Write a dotted path such as args.password, result.token or result.items[*].key."
        raise r.error(key, problem, fix)
    return path


def _test_spec(r: Reader, value: Any, key: str) -> TestSpec:
    raw = r.mapping(value, key, keys.TEST)
    schema = r.optional(raw, "schema", key, lambda v, k: r.expect(v, dict, k))
    examples = r.expect(raw.get("examples", []), list, f"{key}.examples")
    for index, example in enumerate(examples):
        r.expect(example, dict, f"{key}.examples[{index}]")
    return TestSpec(schema=schema, examples=tuple(examples))


def _check_contexts(r: Reader, policy: ToolPolicy) -> None:
    """Each expression reads only what exists when it is evaluated."""
    if policy.snapshot_args is not None:
        why = "the snapshot is taken before the call, when only args is known"
        r.restrict(policy.snapshot_args.expressions(), {"args"}, why)
    if policy.error_when is not None:
        why = "error_when sees only the call's result and args"
        r.restrict([policy.error_when], {"result", "args"}, why)
    if policy.mutating_when is not None:
        r.restrict([policy.mutating_when], {"args"}, "mutating_when sees only args")
    for name in ("approve_when", "deny_when"):
        condition = getattr(policy, name)
        if condition is not None:
            why = f"{name} is decided before the call, when only args is known"
            r.restrict([condition], {"args"}, why)
    if policy.verify_args is not None:
        why = "the drift check's read is built from the call's args and result"
        r.restrict(policy.verify_args.expressions(), {"args", "result"}, why)
    kind = policy.classification
    if kind.behaviour.undoable and not kind.behaviour.snapshot:
        why = f"a {kind.value} tool takes no snapshot (classify it compensable to take one)"
        r.restrict(policy.step_expressions(), _ALL_NAMES - _SNAPSHOT_NAMES, why)


def _check_redactions(r: Reader, policy: ToolPolicy, key: str) -> None:
    """An inverse that needs a value the journal never stores could never be built."""
    hidden = [path.fields() for path in policy.redact]
    needed = policy.step_expressions()
    if policy.verify_args is not None:
        needed.extend(policy.verify_args.expressions())  # the drift check reads it again
    for expr in needed:
        for read in expr.root_paths():
            read = read[1:] if read[:2] == ("change", "args") else read
            for fields in hidden:
                common = min(len(read), len(fields))
                if read[:common] == fields[:common]:
                    problem = (
                        f"`{expr.source}` reads `{'.'.join(read)}`, which redact keeps out "
                        "of the journal, so undo could never build this call"
                    )
                    fix = "Remove the path from redact, or build the inverse without it."
                    raise r.error(key, problem, fix)
