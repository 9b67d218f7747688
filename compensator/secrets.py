"""Keep the values of a registry's `${VAR}` references out of messages and logs.

A registry passes tokens and passwords to its servers as `${VAR}` in `command`, `args`, `env`
and `cwd`. Once expanded, an operating-system error (a command not found, say) quotes them;
`Concealer` puts the reference back, so a message reads `.../${API_TOKEN}/server` instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["Concealer", "ConcealingFilter", "referenced_variables"]

MIN_LENGTH = 4
"""Shorter values (`1`, `on`, `.`) are left alone: replacing them would garble every message."""

_REFERENCE = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\})")


def referenced_variables(text: str) -> frozenset[str]:
    """The names written as `${NAME}` or `${NAME:-default}` in `text` (`$$` escapes)."""
    return frozenset(name for name in _REFERENCE.findall(text) if name)


class Concealer:
    """Replaces each known value in a text by its `${NAME}`, longest values first."""

    def __init__(self, values: Mapping[str, str]) -> None:
        kept = {name: value for name, value in values.items() if len(value) >= MIN_LENGTH}
        self._pairs = sorted(kept.items(), key=lambda pair: -len(pair[1]))

    @classmethod
    def for_text(cls, text: str, environ: Mapping[str, str]) -> Concealer:
        """For the variables registry `text` references, with their values in `environ`."""
        names = referenced_variables(text)
        return cls({name: environ[name] for name in names if name in environ})

    @classmethod
    def for_file(cls, path: str | Path, environ: Mapping[str, str]) -> Concealer:
        """Like `for_text`, reading the registry at `path` (no values when it is unreadable)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return cls({})
        return cls.for_text(text, environ)

    def __call__(self, text: str) -> str:
        for name, value in self._pairs:
            text = text.replace(value, f"${{{name}}}")
        return text

    def __bool__(self) -> bool:
        return bool(self._pairs)


class ConcealingFilter(logging.Filter):
    """A logging filter that conceals the values in every record it passes on."""

    def __init__(self, conceal: Concealer) -> None:
        super().__init__()
        self.conceal = conceal

    def filter(self, record: logging.LogRecord) -> bool:
        if self.conceal:
            message = record.getMessage()
            concealed = self.conceal(message)
            if concealed != message:
                record.msg, record.args = concealed, None
        return True
