"""`${VAR}` references in a registry: the environment they expand from, the expansion, and
the concealment that puts the references back into messages.

A registry passes tokens and passwords to its servers as `${VAR}` in `command`, `args`, `env`,
`cwd`, `url` and `headers`. Once expanded, an operating-system error (a command not found,
say) quotes them; `Concealer` puts the reference back, so a message reads
`.../${API_TOKEN}/server` instead.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from ..errors import CompensatorError

__all__ = [
    "Concealer",
    "StartsNoServer",
    "VariableError",
    "expand",
    "referenced",
    "registry_environment",
]

MIN_LENGTH = 4
"""Shorter values (`1`, `on`, `.`) are never concealed: replacing them would garble every
message."""

_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|(\{))")
_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.S)
_FIX = "Write ${NAME} or ${NAME:-default}, and $$ for a literal $"


class VariableError(CompensatorError, ValueError):
    """A reference that cannot be expanded; the loader adds where it stands."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}. {fix}")
        self.problem = problem
        self.fix = fix


def registry_environment(
    extra: Mapping[str, str] | None = None, *, starts_servers: bool = True
) -> dict[str, str]:
    """What `${VAR}` expand from: this process's environment, with COMPENSATOR_PYTHON (the
    interpreter running it, so a Python server can share its packages) unless set, and
    `extra` on top. For a command that starts no server, a variable not set is no error."""
    made = {"COMPENSATOR_PYTHON": sys.executable, **os.environ, **(extra or {})}
    return made if starts_servers else StartsNoServer(made)


class StartsNoServer(dict[str, str]):
    """The environment of a command that starts no server (`undo --dry-run`): a variable
    it lacks stays its own `${NAME}` reference, since only a server's start needs it."""


_NEEDED_BY = (
    "the commands that start this registry's servers need it (serve, check, explain, undo, "
    "init --infer, pytest --compensator-config); undo --dry-run does not"
)


def expand(text: str, environ: Mapping[str, str], used: dict[str, str]) -> str:
    """`text` with `${NAME}` and `${NAME:-default}` replaced from `environ` (the default also
    applies to an empty value) and `$$` by `$`. Each value taken is added to `used`, so that
    messages can conceal it later. Raises VariableError."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        body = _BODY.fullmatch(match.group(2) or "")
        if match.group(3) or body is None:
            raise VariableError("malformed ${...} reference", f"{_FIX}.")
        name, default = body.groups()
        value = environ.get(name)
        if value or (value is not None and default is None):
            used[name] = value
            return value
        if default is not None:
            return default
        if isinstance(environ, StartsNoServer):
            return match.group(0)
        fix = f"Export it (export {name}=...) or write ${{{name}:-default}}."
        raise VariableError(f"environment variable {name} is not set; {_NEEDED_BY}", fix)

    return _REFERENCE.sub(substitute, text)


def referenced(text: str) -> set[str]:
    """The NAMEs a text reads as `${NAME}` or `${NAME:-default}` (`$$` is no reference)."""
    found = set()
    for match in _REFERENCE.finditer(text):
        body = _BODY.fullmatch(match.group(2) or "")
        if body is not None:
            found.add(body.group(1))
    return found


class Concealer:
    """Replaces each known value in a text by its `${NAME}`, longest values first."""

    def __init__(self, values: Mapping[str, str]) -> None:
        kept = {name: value for name, value in values.items() if len(value) >= MIN_LENGTH}
        self._pairs = sorted(kept.items(), key=lambda pair: -len(pair[1]))

    def __call__(self, text: str) -> str:
        for name, value in self._pairs:
            text = text.replace(value, f"${{{name}}}")
        return text

    def __bool__(self) -> bool:
        return bool(self._pairs)
