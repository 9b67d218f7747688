"""Time limits several layers share, in a module that imports nothing, so that the command
line can show them in `--help` without importing the registry loader or the MCP SDK."""

from __future__ import annotations

__all__ = ["STARTUP_TIMEOUT"]

STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to spawn, initialize and list its tools before it is left out, when
its registry entry sets no `startup_timeout:`."""
