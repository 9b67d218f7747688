"""Which MCP SDK line is installed, and the helpers every module of this package shares."""

from __future__ import annotations

import importlib.metadata
from datetime import timedelta
from typing import Any

import mcp.types as types

__all__ = [
    "MCP2",
    "SDK_MAJOR",
    "SDK_VERSION",
    "SDKError",
    "as_timeout",
    "dump_message",
    "error_data",
    "error_response",
    "parse_message",
    "sdk_error",
    "to_wire",
    "types_v1",
    "wrap_request",
]

SDK_VERSION = importlib.metadata.version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".", 1)[0])
MCP2 = SDK_MAJOR >= 2
"""True on the mcp 2.x line. Branch on this name, not on SDK_MAJOR: mypy's `always_true`
(pyproject.toml) then checks only the branch of the line it is run against."""

if MCP2:
    from mcp.shared.exceptions import MCPError as SDKError
else:  # pragma: no cover - exercised by the mcp 1.x tox env
    from mcp.shared.exceptions import McpError as SDKError


types_v1: Any = types
"""mcp.types for the 1.x-only code of this package: names such as `ServerResult` are classes
there and unions on 2.x, which mypy (checking against 2.x) would report as not callable."""


def as_timeout(seconds: float | None) -> Any:
    """1.x takes a timedelta, 2.x float seconds."""
    if seconds is None or MCP2:
        return seconds
    return timedelta(seconds=seconds)  # pragma: no cover - 1.x only


def wrap_request(request: Any) -> Any:
    """1.x wants requests wrapped in the ClientRequest root model."""
    if MCP2:
        return request
    return types.ClientRequest(request)  # pragma: no cover - 1.x only


def to_wire(model: Any) -> dict[str, Any]:
    """Any protocol model as plain JSON with the protocol's camelCase keys."""
    wire: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return wire


def sdk_error(code: int, message: str, data: Any = None) -> Exception:
    """The SDK's error that a request handler raises to answer with a JSON-RPC error."""
    if MCP2:
        return SDKError(code, message, data)
    return SDKError(types.ErrorData(code=code, message=message, data=data))  # pragma: no cover


def error_data(exc: Exception) -> tuple[int, str, Any]:
    """(code, message, data) of an SDKError."""
    error = exc.error  # type: ignore[attr-defined]
    return int(error.code), str(error.message), error.data


def parse_message(line: str | bytes) -> Any:
    """One JSON-RPC message from a line of a stdio wire, as the SDK's own stdio transport
    parses it (raises on anything that is not one)."""
    if MCP2:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    return types.JSONRPCMessage.model_validate_json(line)  # pragma: no cover - 1.x only


def dump_message(message: Any) -> str:
    """A JSON-RPC message as one line of a stdio wire, as the SDK's own transport writes it
    (2.x leaves out fields never set, 1.x fields that are None)."""
    if MCP2:
        return str(message.model_dump_json(by_alias=True, exclude_unset=True))
    return str(message.model_dump_json(by_alias=True, exclude_none=True))  # pragma: no cover


def error_response(request_id: str | int, code: int, message: str) -> Any:
    """A JSON-RPC error response to `request_id`, as a message a session reads."""
    error = types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )
    if MCP2:
        return error
    return types_v1.JSONRPCMessage(error)  # pragma: no cover - 1.x only
