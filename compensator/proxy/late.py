"""Changes journaled while their tool had no registry entry, met by the policy added since.

A person who sees `unknown` in `log` adds the tool's policy and undoes again. A reversible
policy needs nothing recorded before the call (its inverse is built from the call's arguments
and result, both journaled), so undo uses today's policy and says so in the journal. A
compensable one restores from a snapshot the proxy never took, since it did not know the tool
then: undo, `list_changes`, `log` and `explain` all say exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..classification import Classification
from ..errors import CompensatorError
from ..journal import Change, Status
from ..registry import Registry, ToolPolicy

__all__ = ["BEFORE_POLICY", "LatePolicy", "late_policy"]

BEFORE_POLICY = "journaled before this tool had a policy"


@dataclass(frozen=True)
class LatePolicy:
    """What today's policy can do for a change journaled as `unknown`."""

    policy: ToolPolicy
    usable: bool
    """Undo compensates the change with `policy`."""
    note: str
    nothing: bool = False
    """By `policy` the call changed nothing (a read, or a failure by its error_when): undo
    settles it with nothing to undo."""
    """One sentence for the person: which policy, and why it can or cannot undo the change."""

    @property
    def undo_note(self) -> str:
        """What the journal records as the change's undo: the policy it used."""
        return f"compensated with the {self.policy.classification.value} policy added after it"


def late_policy(change: Change, registry: Registry) -> LatePolicy | None:
    """For a change journaled as `unknown` whose tool has a policy now, what that policy can
    do; None for any other change."""
    if change.classification != Classification.UNKNOWN.value or change.status != Status.OK:
        return None  # a failed call, or one whose outcome nobody knows: undo says why anyway
    policy = registry.policy(change.tool)
    if policy is None:
        return None
    kind = policy.classification
    if _read_for(policy, change):
        kind = Classification.READ
    if policy.error_when is not None and _failed_for(policy, change):
        why = f"its error_when `{policy.error_when.source}` added since says the call failed"
        return LatePolicy(policy, False, f"{BEFORE_POLICY}; {why}: nothing to undo", True)
    if kind == Classification.REVERSIBLE and policy.inverse:
        note = f"{BEFORE_POLICY}; undo uses its reversible policy added since"
        return LatePolicy(policy, True, note)
    if kind == Classification.COMPENSABLE:
        why = (
            "no snapshot was taken, so its compensable policy (which restores from one) "
            "cannot undo it: check its effect by hand"
        )
    elif kind == Classification.READ:
        why = "its policy added since says such a call only reads: there is nothing to undo"
        return LatePolicy(policy, False, f"{BEFORE_POLICY}; {why}", True)
    elif kind == Classification.REVERSIBLE:
        why = "its reversible policy added since has no inverse"
    else:
        why = f"its policy added since says it is {kind.value}: it cannot be undone"
    return LatePolicy(policy, False, f"{BEFORE_POLICY}; {why}")


def _failed_for(policy: ToolPolicy, change: Change) -> bool:
    """Whether the policy's `error_when` calls the journaled answer a failure (the proxy
    judged it by isError alone then); unreadable: it did not fail, as the proxy takes it."""
    if policy.error_when is None:
        return False
    try:
        return policy.error_when.truthy({"result": change.result, "args": change.args})
    except CompensatorError:
        return False


def _read_for(policy: ToolPolicy, change: Change) -> bool:
    """Whether the policy's `mutating_when` makes this call a read (unreadable: it mutates)."""
    if policy.mutating_when is None:
        return False
    try:
        return not policy.mutating_when.truthy({"args": change.args})
    except CompensatorError:
        return False
