"""Every difference between the mcp 1.x and 2.x lines, split by concern; nothing outside this
package branches on the SDK version.

`base` says which line is installed; `client` holds the proxy's calls to its downstream
servers, `server` and `catalog` the proxy's own server, `stdio` the stdio wires (serving the
proxy to one client, and talking to each server process), `session` what passes between that
server and its clients besides tools, and `http` streamable HTTP on both sides. The names
below are the layer's interface: import them from here.
"""

from __future__ import annotations

from .base import MCP2, SDK_MAJOR, SDK_VERSION, SDKError, error_data, sdk_error, to_wire
from .catalog import CatalogHandlers
from .client import (
    ProgressCallback,
    ToolResult,
    call_tool_raw,
    connection_closed,
    initialize_capabilities,
    list_all,
    list_page,
    next_cursor,
    notification_of,
    result_parts,
    send_wire_request,
    server_supports,
    tool_to_wire,
)
from .http import (
    connection_failed,
    http_session_manager,
    require_bearer_token,
    streamable_http,
)
from .server import ToolCaller, ToolLister, build_server
from .session import (
    CURRENT_CALL,
    ClientCall,
    RelayHandlers,
    ask_client,
    client_key,
    client_supports,
    elicit,
    install_relay,
    notify_client,
    on_client_closed,
)
from .stdio import StdioWire, open_stdio, process_stdio, serve_stdio

__all__ = [
    "CURRENT_CALL",
    "MCP2",
    "SDK_MAJOR",
    "SDK_VERSION",
    "CatalogHandlers",
    "ClientCall",
    "ProgressCallback",
    "RelayHandlers",
    "SDKError",
    "StdioWire",
    "ToolCaller",
    "ToolLister",
    "ToolResult",
    "ask_client",
    "build_server",
    "call_tool_raw",
    "client_key",
    "client_supports",
    "connection_closed",
    "connection_failed",
    "elicit",
    "error_data",
    "http_session_manager",
    "initialize_capabilities",
    "install_relay",
    "list_all",
    "list_page",
    "next_cursor",
    "notification_of",
    "notify_client",
    "on_client_closed",
    "open_stdio",
    "process_stdio",
    "require_bearer_token",
    "result_parts",
    "sdk_error",
    "send_wire_request",
    "serve_stdio",
    "server_supports",
    "streamable_http",
    "to_wire",
    "tool_to_wire",
]
