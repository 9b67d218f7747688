"""Limits several layers share, in a module that imports nothing, so that the command line can
show them in `--help`, and start servers' processes, without importing the registry loader or
the MCP SDK."""

from __future__ import annotations

__all__ = ["LINE_LIMIT", "STARTUP_TIMEOUT"]

STARTUP_TIMEOUT = 30.0
"""Seconds a server gets to spawn, initialize and list its tools before it is left out, when
its registry entry sets no `startup_timeout:`."""

LINE_LIMIT = 64 * 1024 * 1024
"""Bytes in one message line of a stdio wire (the client's or a server's); past this, the line
is refused. A request or result may be large (a file's content), so the limit is generous."""
