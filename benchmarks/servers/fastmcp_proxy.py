"""FastMCP's proxy (fastmcp 4.x, `create_proxy`) in front of a stdio command: the comparison
point for the compensator's forwarding overhead."""

from __future__ import annotations

import sys

from fastmcp.client.transports import StdioTransport
from fastmcp.server import create_proxy

if __name__ == "__main__":
    command, *args = sys.argv[1:]
    create_proxy(StdioTransport(command=command, args=args), name="fastmcp-proxy").run(
        show_banner=False
    )
