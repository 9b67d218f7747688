"""State probes infer picks itself for a server that no `state:` probe reads: a read tool
without arguments whose result shows what the server's writes do. Without one nothing a
write does can be seen, so nothing can be proven."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st

from ..harness import Harness
from ..plan import Plan
from ..recorder import Recorder
from ..report import Coverage
from ..state import canonical
from .filling import ToolInfo, expression, words

__all__ = ["AutoProbe", "probe_entries", "rank_probe_tools", "try_probe"]

PROBE_EXAMPLES = 12
"""Fresh states on which a possible probe is read, written to and read again."""

WRITES_PER_EXAMPLE = 4
"""Writes an example tries, reading the probe after each that worked, until one shows."""

_WHOLE_STATE_VERBS = (("read",), ("list",), ("get", "all"), ("dump",), ("export",))


@dataclass
class AutoProbe:
    """A probe tool tried for one server, and what its trial saw."""

    tool: str
    entries: list[dict[str, Any]] = field(default_factory=list)  # the `state:` entries
    changed_by: str = ""  # the write after which its result changed
    reason: str = ""  # why it was chosen, or why not

    @property
    def chosen(self) -> bool:
        return bool(self.entries)


def rank_probe_tools(tools: Sequence[ToolInfo]) -> list[ToolInfo]:
    """Reads without arguments, likeliest to show the whole state first: named read_*,
    list_*, get_all_*, then with `all` anywhere in the name (redis-mcp-server's
    scan_all_keys, where get_indexes and info come first by name), then the rest; within
    each group those annotated readOnlyHint first, then by name."""

    def rank(tool: ToolInfo) -> tuple[int, int, int, str]:
        found = tuple(words(tool.short))
        named = any(found[: len(verbs)] == verbs for verbs in _WHOLE_STATE_VERBS)
        return (not named, "all" not in found, not tool.read_only, tool.name)

    return sorted(tools, key=rank)


def try_probe(harness: Harness, probe: str, writers: Sequence[str], seed: int) -> AutoProbe:
    """Read `probe` on fresh states, call one of `writers` (unregistered, so journaled) and
    read it again. Chosen when its result is the same twice in a row and the same on every
    fresh state (so resetting the state shows as such), and changed after a write that
    worked: then what the write did can be seen, and an undo shows as the change going
    back. The `state:` entries follow the shape of what it returned after the write. The
    harness must not rewind (it has no `state:` to rewind by): each example is new servers."""
    found = AutoProbe(tool=probe)
    fresh: list[str] = []
    unstable: list[str] = []
    after: list[tuple[str, Any]] = []
    plan = Plan.of(harness, also=writers)

    @hypothesis.seed(seed)
    @hypothesis.settings(
        max_examples=PROBE_EXAMPLES,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def trial(data: st.DataObject) -> None:
        with harness.example() as driver:
            first = driver.call(probe, {})
            if first.is_error:
                unstable.append(f"it failed: {first.text[:120]}")
                return
            again = driver.call(probe, {})
            if canonical(again.value) != canonical(first.value):
                unstable.append("two reads in a row differed")
            fresh.append(canonical(first.value))
            recorder = Recorder(driver, Coverage(), harness.registry, plan)
            # Several writes an example: a random write is often a no-op (an empty list, a
            # delete on an empty server), and one per example left the verdict to the seed.
            for _ in range(WRITES_PER_EXAMPLE):
                writer = data.draw(st.sampled_from(list(writers)), label="writer")
                reply = driver.call(writer, recorder.draw_args(data, writer))
                if reply.is_error:
                    continue
                later = driver.call(probe, {})
                if not later.is_error and canonical(later.value) != canonical(first.value):
                    after.append((writer, later.value))
                    return

    trial()
    if unstable:
        found.reason = f"not used: {unstable[0]}"
    elif len(set(fresh)) > 1:
        found.reason = "not used: it read differently on fresh states"
    elif not after:
        found.reason = (
            f"not used: its result never changed after up to {PROBE_EXAMPLES * WRITES_PER_EXAMPLE} "
            "sample writes "
            f"({', '.join(writers)})"
        )
    else:
        found.changed_by = after[0][0]
        found.entries = probe_entries(probe, [value for _, value in after])
        shown = "; ".join(f"select {e['select']}" for e in found.entries if "select" in e)
        found.reason = (
            f"it takes no arguments, reads the same twice in a row and on every fresh state, "
            f"and its result changed after {found.changed_by}"
            + (f" (compared as multisets: {shown})" if shown else "")
        )
    return found


def probe_entries(tool: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    """`state:` entries for a probe whose results looked like `values`: an object of lists
    becomes one multiset probe per list (restores put things back at the end of a list,
    which is no difference), with lists of strings or numbers inside items sorted; any
    other result is compared whole."""
    objects = [v for v in values if isinstance(v, Mapping)]
    if values and len(objects) == len(values):
        keys = list(dict.fromkeys(str(k) for v in objects for k in v))
        if keys and all(isinstance(v.get(k, []), list) for v in objects for k in keys):
            return [
                {
                    "tool": tool,
                    "select": _select(expression(k), [v.get(k) for v in objects]),
                    "unordered": True,
                }
                for k in keys
            ]
    if values and all(isinstance(v, list) for v in values):
        return [{"tool": tool, "select": _select("@", list(values)), "unordered": True}]
    if values and all(isinstance(v, str) for v in values) and any("\n" in v for v in values):
        # Text a line per thing (server-redis' list: "Found keys:", then a key a line, in
        # the order Redis happens to keep them): its lines, compared as a multiset.
        return [{"tool": tool, "select": LINES, "unordered": True}]
    return [{"tool": tool}]


LINES = "regex_all(@, '(?m)^.+$')"
"""The lines of a text answer, empty ones left out (`regex_all` is the registry's own)."""


def _select(path: str, lists: Sequence[Any]) -> str:
    """`path`, or `path[*].{...}` with each item's lists of scalars sorted."""
    items = [i for value in lists if isinstance(value, list) for i in value]
    if not items or not all(isinstance(i, Mapping) for i in items):
        return path
    keys = list(dict.fromkeys(str(k) for i in items for k in i))
    sorted_keys = {
        k
        for k in keys
        if all(_scalars(i.get(k, [])) for i in items)
        and any(isinstance(i.get(k), list) for i in items)
    }
    if not sorted_keys:
        return path
    pairs = ", ".join(
        f"{expression(k)}: "
        + (f"sort({expression(k)} || `[]`)" if k in sorted_keys else expression(k))
        for k in keys
    )
    return f"{path}[*].{{{pairs}}}"


def _scalars(value: Any) -> bool:
    """A list JMESPath's sort() takes: all strings, or all numbers."""
    if not isinstance(value, list):
        return False
    kinds = {type(v) for v in value}
    return kinds <= {str} or kinds <= {int, float}
