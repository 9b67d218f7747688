"""What each classification means, in one place.

A classification says how a tool's effects can be undone. Everything that depends on it reads
it from here: whether the proxy journals a call, takes a snapshot first, whether undo can take
the call back (and the reason it gives when it cannot), what `explain_blast_radius` says, which
classifications a registry may write, and how the pytest plugin uses the tool. Adding a
classification is one enum member and one `Behaviour` in `_BEHAVIOURS`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Behaviour", "Classification"]


class Classification(str, enum.Enum):
    """How a tool's effects can be undone; UNKNOWN is for tools with no registry entry."""

    READ = "read"
    REVERSIBLE = "reversible"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"
    UNKNOWN = "unknown"

    @property
    def behaviour(self) -> Behaviour:
        """What the classification means to the proxy, undo, explanations and the plugin."""
        return _BEHAVIOURS[self]

    @classmethod
    def named(cls, value: str) -> Classification:
        """The classification called `value`; UNKNOWN for a name this version does not know
        (a journal written by a newer one), which undo refuses."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def writable(cls) -> tuple[Classification, ...]:
        """The classifications a registry may write, in declaration order."""
        return tuple(kind for kind in cls if kind.behaviour.in_registry)

    def refusal(self, tool: str) -> str:
        """Why undo does not compensate a journaled call of `tool` (not undoable only)."""
        return self.behaviour.refusal.format(tool=tool)

    def explanation(
        self,
        tool: str,
        *,
        snapshot_tool: str | None = None,
        inverse_tools: Sequence[str] = (),
        annotations: Mapping[str, Any] | None = None,
    ) -> str:
        """What `explain_blast_radius` says undo would and would not do after `tool`."""
        return self.behaviour.explanation.format(
            tool=tool,
            snapshot=snapshot_tool or "?",
            steps=", then ".join(inverse_tools) or "?",
            hint=_hint(annotations or {}),
            caveats=_CAVEATS,
        )


@dataclass(frozen=True, kw_only=True)
class Behaviour:
    """The facts about one classification that the rest of the package acts on."""

    journaled: bool
    """The intent of a call is written before it is forwarded (else only forwarded)."""
    undoable: bool
    """`undo_to` compensates its calls, so its registry entry needs an inverse."""
    snapshot: bool
    """The proxy reads the state with the entry's `snapshot_tool` just before each call."""
    in_registry: bool
    """A registry may write it as `classification:` (unknown is the absence of an entry)."""
    exercised: bool
    """The pytest plugin calls such a tool in round trips and state-machine rules."""
    builds_state: bool
    """The plugin prefers it when building a pre-state: its inverse is built from what the call
    returns, which in most registries means that it creates something."""
    explanation: str
    """`str.format` text with {tool}, {snapshot}, {steps}, {hint} and {caveats}."""
    refusal: str = ""
    """`str.format` text with {tool}: undo's reason for skipping a journaled call of a tool
    that is not undoable."""
    approval: str = ""
    """One sentence for the person asked to approve a call: what undo can and cannot do."""


_CAVEATS = (
    "Undo is a new write that approximates the earlier state, not a rollback: effects outside "
    "the proxied calls (emails sent, webhooks fired, other clients' reads) do not unwind, and "
    "identities such as ids or hashes may differ after a restore."
)

_BEHAVIOURS: Mapping[Classification, Behaviour] = {
    Classification.READ: Behaviour(
        journaled=False,
        undoable=False,
        snapshot=False,
        in_registry=True,
        exercised=False,
        builds_state=False,
        explanation="{tool} only reads. It is not journaled, and there is nothing to undo.",
        refusal="read: the registry says {tool} only reads, so there is nothing to undo",
        approval="It only reads: nothing changes, so there is nothing to undo.",
    ),
    Classification.REVERSIBLE: Behaviour(
        journaled=True,
        undoable=True,
        snapshot=False,
        in_registry=True,
        exercised=True,
        builds_state=True,
        explanation=(
            "{tool} is journaled. undo_to calls {steps}, with arguments built from this call's "
            "arguments and result. {caveats}"
        ),
        approval=(
            "Undo can take it back with an inverse call built from its arguments and result, "
            "but not what happens outside the server (emails sent, other clients' reads)."
        ),
    ),
    Classification.COMPENSABLE: Behaviour(
        journaled=True,
        undoable=True,
        snapshot=True,
        in_registry=True,
        exercised=True,
        builds_state=False,
        explanation=(
            "{tool} is journaled. Just before it runs, the proxy records a snapshot with "
            "{snapshot}; undo_to calls {steps} to put back what the snapshot saw. The snapshot "
            "is only as fresh as that moment: changes made by anything else between this call "
            "and the undo may be overwritten. {caveats}"
        ),
        approval=(
            "Undo can put back what a snapshot taken just before the call saw, but not what "
            "happens outside the server, and it overwrites changes others make meanwhile."
        ),
    ),
    Classification.IRREVERSIBLE: Behaviour(
        journaled=True,
        undoable=False,
        snapshot=False,
        in_registry=True,
        exercised=False,
        builds_state=False,
        explanation=(
            "{tool} is IRREVERSIBLE: it is journaled for the record, but undo_to will never "
            "undo it and reports it as skipped. Ask the user before calling it."
        ),
        refusal="irreversible: the registry says this tool cannot be undone",
        approval="Undo cannot take it back: it is recorded in the journal, never undone.",
    ),
    Classification.UNKNOWN: Behaviour(
        journaled=True,
        undoable=False,
        snapshot=False,
        in_registry=False,
        exercised=False,
        builds_state=False,
        explanation=(
            "{tool} has no policy in the registry{hint}. It is journaled, but undo_to refuses "
            "to undo it and reports it as skipped. Treat it as irreversible."
        ),
        refusal=(
            "unknown: the registry has no policy for {tool}; add one under `tools:` to make it "
            "undoable"
        ),
        approval=(
            "The registry does not describe this tool, so undo cannot take it back: it is "
            "recorded in the journal, never undone."
        ),
    ),
}


def _hint(annotations: Mapping[str, Any]) -> str:
    """What a tool's own annotations add to an explanation, e.g. " (its server marks it ...)"."""
    hints = []
    if annotations.get("destructiveHint"):
        hints.append("its server marks it destructive")
    if annotations.get("readOnlyHint"):
        hints.append("its server marks it read-only, but the registry does not trust that")
    return f" ({'; '.join(hints)})" if hints else ""
