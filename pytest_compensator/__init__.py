"""pytest_compensator: launch the compensator proxy from tests and prove a registry's undo.

Names are imported on first use, so that pytest loading the plugin costs nothing (no mcp,
no Hypothesis) until a registry is actually tested.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Driver", "Harness", "ProxyClient", "ToolCallFailed", "ToolReply", "launch_proxy"]

_WHERE = {
    "Driver": "harness",
    "Harness": "harness",
    "ProxyClient": "client",
    "ToolCallFailed": "client",
    "ToolReply": "client",
    "launch_proxy": "client",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
