"""The MCP side: everything that speaks the protocol.

It owns the downstream servers (`downstream.py` one server over stdio or streamable HTTP,
`pool.py` all of them with their tools routed by exposed name), what passes through besides
tool calls (`catalog.py` resources and prompts, named and routed by `routing.py`; `relay.py`
notifications and server-initiated requests), serving the proxy to clients (`stdio.py`,
`http_serve.py`), tool results as values (`results.py`), and `sdk/`, the only place that
knows the two MCP SDK lines apart. A new downstream transport goes in
`Downstream._transport`; a new way to serve clients beside `stdio.py` and `http_serve.py`. It
imports compensator.registry (server entries), never the journal or the proxy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import sdk
    from .catalog import Catalog
    from .downstream import STARTUP_TIMEOUT, Downstream, SessionLost
    from .pool import DownstreamPool, RoutedTool
    from .relay import Relay
    from .results import parse_result, result_text

# Each name is imported from its module when first asked for, so that a light module of this
# package (`stdio.py`, `http_serve.py`'s address and token checks) does not bring in the SDK:
# `compensator serve` starts its servers' processes before it imports the SDK.
_HOMES = {
    "STARTUP_TIMEOUT": "downstream",
    "Catalog": "catalog",
    "Downstream": "downstream",
    "DownstreamPool": "pool",
    "Relay": "relay",
    "RoutedTool": "pool",
    "SessionLost": "downstream",
    "parse_result": "results",
    "result_text": "results",
}

__all__ = [
    "STARTUP_TIMEOUT",
    "Catalog",
    "Downstream",
    "DownstreamPool",
    "Relay",
    "RoutedTool",
    "SessionLost",
    "parse_result",
    "result_text",
    "sdk",
]


def __getattr__(name: str) -> object:
    if name == "sdk":
        return importlib.import_module(".sdk", __name__)
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
