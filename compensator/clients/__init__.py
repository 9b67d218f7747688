"""MCP clients' configurations: where Claude Code, Claude Desktop, VS Code and Cursor keep
their servers, reading them (JSON with comments), the registry `compensator init` proposes
for those servers, and rewiring a client to launch the proxy instead.

It imports only compensator.errors (and PyYAML, to read the shipped registries): it starts
no server and speaks no MCP; the command line does that with compensator.wire.
"""

from __future__ import annotations

from .hooks import SETTINGS, with_turn_hook, without_turn_hook
from .jsonc import ConfigFileError
from .proposal import (
    Proposal,
    ServerReport,
    matching_registry,
    prefixed,
    propose,
    secret_values,
    variables,
)
from .sources import (
    CLIENTS,
    ClientServer,
    Collected,
    Source,
    collect,
    discover,
    read_file,
    sources_of,
)
from .wiring import (
    BACKUP_SUFFIX,
    PROXY_NAME,
    backup_of,
    diff,
    replace_atomically,
    still_wired,
    unwired,
    wired,
)

__all__ = [
    "BACKUP_SUFFIX",
    "CLIENTS",
    "PROXY_NAME",
    "SETTINGS",
    "ClientServer",
    "Collected",
    "ConfigFileError",
    "Proposal",
    "ServerReport",
    "Source",
    "backup_of",
    "collect",
    "diff",
    "discover",
    "matching_registry",
    "prefixed",
    "propose",
    "read_file",
    "replace_atomically",
    "secret_values",
    "sources_of",
    "still_wired",
    "unwired",
    "variables",
    "wired",
    "with_turn_hook",
    "without_turn_hook",
]
