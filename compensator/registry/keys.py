"""Every key a registry file may hold, by where it stands. The loader refuses any other key
(with a "did you mean"), so a new key starts here."""

from __future__ import annotations

__all__ = [
    "CHECKPOINTS",
    "COMMAND_ONLY",
    "DEFAULTS",
    "ON_NO_APPROVAL",
    "POLICY",
    "RESET",
    "SERVER",
    "STATE",
    "STEP",
    "TEST",
    "TOP",
    "UNDO",
    "VERIFY",
]

TOP = (
    "include",
    "servers",
    "defaults",
    "checkpoints",
    "retention",
    "state",
    "reset",
    "tools",
)
SERVER = (
    "command",
    "args",
    "env",
    "cwd",
    "call_timeout",
    "startup_timeout",
    "url",
    "headers",
    "prefix",
)
COMMAND_ONLY = ("args", "env", "cwd")
"""Server keys that only a server started with `command:` can use (not a `url:` one)."""
DEFAULTS = ("trust_read_only_hint", "verify", "approve", "on_no_approval", "approval_timeout")
ON_NO_APPROVAL = ("deny", "allow")
"""What `defaults.on_no_approval` may say: refuse, or forward unasked, a call that needs
approval when the client cannot ask its person (no `elicitation` capability)."""
CHECKPOINTS = ("on_session_start", "after_idle")
"""The checkpoints the proxy takes by itself."""
RETENTION = ("older_than", "keep_checkpoints")
"""What `serve` drops from its journal at start-up."""
STATE = ("tool", "args", "select", "unordered")
RESET = ("tool", "args")
POLICY = (
    "classification",
    "inverse_tool",
    "inverse_args",
    "snapshot_tool",
    "snapshot_args",
    "inverse",
    "error_when",
    "mutating_when",
    "test",
    "verify",
    "idempotent",
    "plain_text",
    "redact",
    "approve",
    "approve_when",
    "deny",
    "deny_when",
)
UNDO = ("inverse_tool", "inverse_args", "inverse", "snapshot_tool", "snapshot_args")
"""Policy keys that only an undoable tool can use."""
STEP = ("tool", "args", "when")
VERIFY = ("tool", "args")
TEST = ("schema", "examples")
