"""The fault tally: what fault-injection and fuzz tests did, summed by `scripts/fault-report`.

One function. A test calls it once per kind of fault it injected (or per fuzz target), after
counting, ideally in a `finally:` so a failing test still reports what it saw:

    from tests.faults import tally

    tally("SIGKILL during call", injected=12, survived=12, lost=0, twice=0)
    tally("registry fuzz", cases=500)

When $COMPENSATOR_FAULT_TALLY names a file, each call appends one JSON line to it:
{"kind": str, "injected": int, "survived": int, "lost": int, "twice": int} for faults
(survived: the proxy restarted and every invariant held; lost: journaled changes the downstream
applied but the journal lacks; twice: changes compensated more than once), or
{"kind": str, "cases": int} for fuzz. Without the variable it does nothing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ENV", "cases_tallied", "tally"]

ENV = "COMPENSATOR_FAULT_TALLY"
_FAULT_FIELDS = ("injected", "survived", "lost", "twice")


def tally(kind: str, **counts: int) -> None:
    """Append {"kind": kind, **counts} to $COMPENSATOR_FAULT_TALLY, if set.

    `counts` is either `cases=` alone, or some of injected/survived/lost/twice (missing ones
    are written as 0)."""
    if set(counts) == {"cases"}:
        record: dict[str, object] = {"kind": kind, "cases": int(counts["cases"])}
    else:
        unknown = sorted(set(counts) - set(_FAULT_FIELDS))
        if unknown:
            raise TypeError(
                f"tally({kind!r}): unknown count {unknown[0]!r}; use cases= alone, or "
                + ", ".join(_FAULT_FIELDS)
            )
        record = {"kind": kind, **{name: int(counts.get(name, 0)) for name in _FAULT_FIELDS}}
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


@contextmanager
def cases_tallied(tried: Counter[str], label: str) -> Iterator[None]:
    """Tally, as `label: kind`, the cases a test adds to `tried` (a per-module Counter) while
    the block runs; per test, so it works whichever xdist worker runs which test."""
    before = Counter(tried)
    yield
    for kind, count in (tried - before).items():
        tally(f"{label}: {kind}", cases=count)
