"""The registry: a YAML file naming the downstream servers, the state probes, and how to undo
each tool.

It owns the model (frozen records), the loader with its file:line:key errors, line-numbered
YAML, JMESPath expressions and templates, `${VAR}` expansion, redaction, and the lint against
the tools a server really offers. It imports only compensator.errors, .classification and
.names: it knows nothing of MCP, the journal or the proxy.
"""

from __future__ import annotations

from ..classification import Classification
from ..limits import STARTUP_TIMEOUT  # the default of a server's `startup_timeout:`
from .expressions import CONTEXT_NAMES, Expression, Template, compile_expression, compile_template
from .loader import load_registry, parse_registry
from .model import (
    AutoCheckpoints,
    Defaults,
    InverseStep,
    RedactPath,
    Registry,
    ResetCall,
    Retention,
    ServerSpec,
    StateProbe,
    TestSpec,
    ToolPolicy,
)
from .redaction import REDACTED, redact
from .variables import Concealer, referenced, registry_environment

__all__ = [
    "CONTEXT_NAMES",
    "REDACTED",
    "STARTUP_TIMEOUT",
    "AutoCheckpoints",
    "Classification",
    "Concealer",
    "Defaults",
    "Expression",
    "InverseStep",
    "RedactPath",
    "Registry",
    "ResetCall",
    "Retention",
    "ServerSpec",
    "StateProbe",
    "Template",
    "TestSpec",
    "ToolPolicy",
    "compile_expression",
    "compile_template",
    "load_registry",
    "parse_registry",
    "redact",
    "referenced",
    "registry_environment",
]
