"""The proxy core: what happens around each tool call, and undo.

It owns forwarding and journaling (`forwarding.py`), how a call is classified and judged
(`calls.py`), the guardrails that deny a call or ask the person first (`approval.py`), the
gate that keeps mutating calls and undo apart (`gate.py`), when to take an automatic
checkpoint (`turns.py`), undo itself (`undo.py`) and the meta tools (`meta.py`). It
imports the journal through `JournalStore`, the registry, and compensator.wire for the
downstream servers; never compensator.cli, but for `__main__.py`, the entry point that makes
`python -m compensator.proxy` run `compensator serve`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .calls import call_outcome, classify, undo_caller
    from .forwarding import INSTRUCTIONS, Proxy
    from .gate import Gate
    from .meta import explain_tool
    from .outcome import Caller, CallOutcome, observed_state
    from .redo import RedoReport
    from .undo import Progress, Undoer, UndoReport

# Each name is imported from its module when first asked for: undo and its plan need no MCP
# SDK (`compensator undo` plans from the journal before it starts a server), forwarding does.
_HOMES = {
    "INSTRUCTIONS": "forwarding",
    "CallOutcome": "outcome",
    "Caller": "outcome",
    "Gate": "gate",
    "Progress": "undo",
    "Proxy": "forwarding",
    "RedoReport": "redo",
    "UndoReport": "undo",
    "Undoer": "undo",
    "call_outcome": "calls",
    "classify": "calls",
    "explain_tool": "meta",
    "observed_state": "outcome",
    "undo_caller": "calls",
}

__all__ = [
    "INSTRUCTIONS",
    "CallOutcome",
    "Caller",
    "Gate",
    "Progress",
    "Proxy",
    "RedoReport",
    "UndoReport",
    "Undoer",
    "call_outcome",
    "classify",
    "explain_tool",
    "observed_state",
    "undo_caller",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
