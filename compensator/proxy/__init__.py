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

from .calls import Caller, CallOutcome, call_outcome, classify, observed_state, undo_caller
from .forwarding import INSTRUCTIONS, Proxy
from .gate import Gate
from .meta import explain_tool
from .undo import Progress, Undoer, UndoReport

__all__ = [
    "INSTRUCTIONS",
    "CallOutcome",
    "Caller",
    "Gate",
    "Progress",
    "Proxy",
    "UndoReport",
    "Undoer",
    "call_outcome",
    "classify",
    "explain_tool",
    "observed_state",
    "undo_caller",
]
