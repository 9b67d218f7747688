"""pytest_compensator: launch the compensator proxy from tests and prove a registry's undo."""

from __future__ import annotations

from .client import ProxyClient, ToolCallFailed, ToolReply, launch_proxy

__all__ = ["ProxyClient", "ToolCallFailed", "ToolReply", "launch_proxy"]
