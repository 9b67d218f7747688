"""The registry as loaded: frozen records of servers, state probes and per-tool policies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..classification import Classification
from ..names import resolve
from .expressions import Expression, Template


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """How to start one downstream server."""

    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    line: int
    call_timeout: float | None = None
    """Seconds a call may take before it is abandoned (its effect then unknown); None: no limit."""
    startup_timeout: float | None = None
    """Seconds to spawn, initialize and list tools; None: the pool's (or CLI's) default."""
    expanded: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The `${NAME}` values this entry expanded, so messages can hide them again."""
    url: str | None = None
    """A streamable HTTP endpoint to connect to instead of starting `command` (then empty)."""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """HTTP headers sent with every request to `url`, `${NAME}` expanded."""
    prefix: str | None = None
    """Replaces `name` in the exposed tool names: `prefix__tool`; "" exposes them unprefixed."""

    @property
    def exposed_prefix(self) -> str:
        """What exposed tool names of this server start with (before `__`); "" when they are
        exposed under the server's own names."""
        return self.name if self.prefix is None else self.prefix


@dataclass(frozen=True, kw_only=True)
class StateProbe:
    """A read-only call whose (selected) result describes the world's state."""

    tool: str
    args: Template
    select: Expression | None
    unordered: bool
    line: int


@dataclass(frozen=True, kw_only=True)
class ResetCall:
    """A call that puts a server back to its empty state (used by the pytest plugin)."""

    tool: str
    args: Template
    line: int


@dataclass(frozen=True, kw_only=True)
class InverseStep:
    """One call of an inverse, skipped when `when` is given and falsy."""

    tool: str
    args: Template
    when: Expression | None


@dataclass(frozen=True, kw_only=True)
class TestSpec:
    """Hints for generated tests: an input JSON Schema and example arguments."""

    __test__ = False

    schema: Mapping[str, Any] | None
    examples: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, kw_only=True)
class ToolPolicy:
    """What the proxy does around calls to one downstream tool."""

    name: str
    classification: Classification
    snapshot_tool: str | None
    snapshot_args: Template | None
    inverse: tuple[InverseStep, ...]
    error_when: Expression | None
    mutating_when: Expression | None
    test: TestSpec | None
    line: int
    verify_tool: str | None = None
    """The read the drift check repeats (with `verify_args`): `verify: {tool, args}`, else
    the tool's snapshot_tool and snapshot_args; None when verify is off."""
    verify_args: Template | None = None
    idempotent: bool = False
    plain_text: bool = False
    """The tool answers in plain text: its result (as `result`, a `snapshot`, a state probe's
    value) is the text as sent, never read as JSON ("1.50" stays "1.50", not 1.5)."""
    redact: tuple[RedactPath, ...] = ()
    approve: bool | None = None
    """`approve:` true asks the person before every call, false never; None: not written, so
    `approve_when`, else the registry's `defaults.approve`, decides."""
    approve_when: Expression | None = None
    """Ask the person before the calls whose `args` make it true (and only those)."""
    deny: str | None = None
    """Never forward a call of this tool: the reason (`deny: "reason"`), "" for `deny: true`;
    None when the tool is not denied outright."""
    deny_when: Expression | None = None
    """Never forward the calls whose `args` make it true."""

    @property
    def verify(self) -> bool:
        """Whether undo checks this tool's changes for drift."""
        return self.verify_tool is not None

    @property
    def verify_names_its_read(self) -> bool:
        """`verify: {tool, args}`, rather than `verify: true` repeating the snapshot read."""
        return self.verify_tool is not None and self.verify_args is not self.snapshot_args

    def step_expressions(self) -> list[Expression]:
        """Every expression of the inverse: each step's args, then its `when`."""
        found: list[Expression] = []
        for step in self.inverse:
            found.extend(step.args.expressions())
            if step.when is not None:
                found.append(step.when)
        return found


@dataclass(frozen=True, kw_only=True)
class RedactPath:
    """A path into a call's args or result whose value is never stored, e.g. `args.password`.

    `parts` are field names, `"*"` for every item of a list, or ints for one item."""

    source: str
    root: str
    parts: tuple[str | int, ...]

    def fields(self) -> tuple[str, ...]:
        """The leading field names, up to the first list step: what a template could read."""
        leading: list[str] = [self.root]
        for part in self.parts:
            if not isinstance(part, str) or part == "*":
                break
            leading.append(part)
        return tuple(leading)


@dataclass(frozen=True, kw_only=True)
class Defaults:
    """Registry-wide settings."""

    trust_read_only_hint: bool = False
    verify: bool = False
    approve: frozenset[Classification] = frozenset()
    """The classifications whose calls need the person's approval unless the tool's entry
    says otherwise (`unknown`: tools with no entry)."""
    on_no_approval: str = "deny"
    """`deny` or `allow`: what happens to a call that needs approval when the client cannot
    ask its person (it did not advertise `elicitation`)."""
    approval_timeout: float = 300.0
    """Seconds to wait for the person's answer; then the call is refused, never sent."""


@dataclass(frozen=True, kw_only=True)
class AutoCheckpoints:
    """The checkpoints the proxy takes by itself, each just before a mutating call, so that
    no change of the session (or the agent's turn) is left without one before it."""

    on_session_start: bool = False
    """One before the first mutating call of each proxy session, labelled `session start`."""
    after_idle: float | None = None
    """One before the first mutating call after this many seconds without any tool call,
    labelled `after N s idle`; None: never."""


@dataclass(frozen=True, kw_only=True)
class Retention:
    """What `serve` drops from its journal at start-up, as `compensator gc` does."""

    older_than: int
    """Seconds: what was made longer ago than this goes (when it may)."""
    keep_checkpoints: tuple[int, ...] = ()
    """Checkpoints kept, with every change after them."""


@dataclass(frozen=True, kw_only=True)
class Registry:
    """A loaded, validated registry file."""

    path: Path
    servers: Mapping[str, ServerSpec]
    state: tuple[StateProbe, ...]
    tools: Mapping[str, ToolPolicy]
    defaults: Defaults
    reset: tuple[ResetCall, ...] = ()
    checkpoints: AutoCheckpoints = field(default_factory=AutoCheckpoints)
    retention: Retention | None = None
    origins: Mapping[str, tuple[Path, str]] = field(default_factory=dict)
    """Where an entry is written when that is not its own key in this file: `tools.NAME`,
    `servers.NAME`, `state[i]` or `reset[i]` -> (the file, the entry's key there); for
    entries taken from `include:` files, and this file's state and reset calls that come
    after included ones."""

    def policy(self, tool: str) -> ToolPolicy | None:
        """The policy for `tool` (as `server__tool`), or None when it has no entry."""
        return self.tools.get(tool)

    @property
    def prefixes(self) -> dict[str, str]:
        """Exposed prefix ("" for the unprefixed server) -> server name."""
        return {spec.exposed_prefix: name for name, spec in self.servers.items()}

    def server_for(self, tool: str) -> str | None:
        """The server the exposed name `tool` goes to (by its prefix, or to the server set up
        without one), or None for a meta tool's name or a prefix no server has."""
        prefixes = self.prefixes
        resolved = resolve(tool, prefixes)
        return None if resolved is None else prefixes[resolved[0]]
