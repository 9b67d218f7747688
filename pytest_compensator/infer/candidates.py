"""Candidate policies for one tool, built from tool names, input schemas and the values that
sample calls returned. Pure: nothing here calls a server."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .filling import (
    Source,
    ToolInfo,
    expression,
    fill,
    json_type,
    normal,
    schema_types,
    singular,
    sources,
    template,
    words,
)

__all__ = [
    "Candidate",
    "Samples",
    "ToolInfo",
    "compensable_candidates",
    "compensable_entry",
    "failed_in_band",
    "in_band_failure",
    "looks_changing",
    "looks_creating",
    "looks_read",
    "opposite_tools",
    "read_candidate",
    "reporting_failures",
    "restores",
    "reversible_candidates",
    "snapshot_tools",
    "words",
    "writers",
]

READ_VERBS = frozenset(
    [
        "get",
        "list",
        "read",
        "describe",
        "search",
        "find",
        "show",
        "query",
        "view",
        "fetch",
        "count",
        "stat",
        "info",
        "lookup",
        "inspect",
        "peek",
        "browse",
        "directory",
        "scan",
    ]
)
CREATE_VERBS = frozenset(
    [
        "add",
        "create",
        "insert",
        "new",
        "make",
        "write",
        "put",
        "append",
        "open",
        "restore",
        "upload",
        "register",
        "post",
    ]
)
CHANGE_VERBS = CREATE_VERBS | frozenset(
    [
        "delete", "remove", "drop", "destroy", "clear", "purge", "reset", "erase", "unset",
        "set", "update", "edit", "modify", "patch", "replace", "save", "move", "rename",
        "merge", "commit", "push", "apply", "close", "archive", "complete", "toggle",
    ]
)  # fmt: skip
"""Verbs of names that say the tool changes something (as any word of the name): never
proven `read` by experiment alone. A delete of what is not there changes nothing, so calls
on the pre-states infer can build (empty ones, while no maker is proven) would 'prove' any
delete a read."""
RESTORE_VERBS = ("set", "update", "restore", "write", "put", "replace", "save", "edit")
"""Verbs of the tools tried for writing a snapshot back, in this order (after the tool
itself)."""

# The opposite actions a name may name. A verb maps to the verbs of its possible inverses, the
# likeliest first; "un" + verb (complete -> uncomplete) is tried besides.
_OPPOSITES: dict[str, tuple[str, ...]] = {
    "add": ("remove", "delete"),
    "remove": ("add", "insert", "create", "put"),
    "create": ("delete", "remove", "drop", "destroy"),
    "insert": ("delete", "remove"),
    "delete": ("restore", "undelete", "create", "add", "insert", "put", "set"),
    "set": ("unset", "delete", "remove", "clear"),
    "unset": ("set",),
    "put": ("delete", "remove"),
    "restore": ("delete", "remove"),
    "open": ("close",),
    "close": ("open", "reopen"),
    "complete": ("uncomplete", "reopen"),
    "enable": ("disable",),
    "disable": ("enable",),
    "start": ("stop",),
    "stop": ("start",),
    "attach": ("detach",),
    "detach": ("attach",),
    "link": ("unlink",),
    "push": ("pop",),
    "archive": ("unarchive", "restore"),
    "hide": ("unhide", "show"),
    "publish": ("unpublish",),
    "assign": ("unassign",),
    "grant": ("revoke",),
    "revoke": ("grant",),
    # Their own inverse: the call again (with swapped ends for a move) puts things back.
    "toggle": ("toggle",),
    "flip": ("flip",),
    "swap": ("swap",),
    "move": ("move",),
}

# Pairs of arguments a move-like call's inverse swaps (`source` <- `args.destination`).
_SWAPS = (
    ("source", "destination"),
    ("from", "to"),
    ("src", "dst"),
    ("old", "new"),
    ("oldpath", "newpath"),
    ("oldname", "newname"),
    ("sourcepath", "destinationpath"),
)

MAX_SNAPSHOT_TOOLS = 3
MAX_COMPENSABLE = 8


@dataclass
class Samples:
    """Values that sample calls of a tool showed: the arguments and results of calls that
    worked, and what each possible snapshot tool returned just before them."""

    args: list[dict[str, Any]] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    snapshots: dict[str, list[Any]] = field(default_factory=dict)
    after: dict[str, list[Any]] = field(default_factory=dict)
    """What each possible snapshot tool returned just after the call: the shape of what it
    reads, even where nothing existed before the call (a new file)."""

    def shapes(self, read: str) -> list[Any]:
        """Values of a snapshot tool, before calls and after them."""
        return [*self.snapshots.get(read, []), *self.after.get(read, [])]

    calls: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # the failed calls' texts
    read_pairs: dict[str, list[tuple[dict[str, Any], Any]]] = field(default_factory=dict)
    """Each snapshot tool's reads, before calls and after them: its arguments and its answer
    (what it answers for nothing, learned in texts.py)."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A policy to try: the registry entry as it would be written, and a one-line summary."""

    kind: str  # read, reversible or compensable
    entry: dict[str, Any]
    summary: str
    needs_calls: int = 0  # a read's calls that must have worked (-1: --min-verified)
    reread: bool = False  # its round trip reads the snapshot again after undo (Settings)
    text_read: str = ""  # a read it needs `plain_text: true` on (texts.py)


def looks_read(tool: ToolInfo) -> bool:
    found = words(tool.short)
    return bool(found) and found[0] in READ_VERBS


def looks_changing(tool: ToolInfo) -> bool:
    """Any word of the name (`redis_delete`, `kv_set` name their server first)."""
    return any(word in CHANGE_VERBS for word in words(tool.short))


def looks_creating(tool: ToolInfo) -> bool:
    found = words(tool.short)
    return bool(found) and found[0] in CREATE_VERBS


def opposite_tools(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> list[ToolInfo]:
    """Tools of the same server whose name is the opposite action of this one's, likeliest
    first: same words after the verb, the verb replaced by an opposite (or un-prefixed)."""
    found = words(tool.short)
    if not found:
        return []
    verb, rest = found[0], found[1:]
    verbs = list(_OPPOSITES.get(verb, ()))
    verbs += [f"un{verb}"] if not verb.startswith("un") else [verb[2:]]
    by_words: dict[tuple[str, ...], ToolInfo] = {}
    for other in offered.values():
        if other.prefix == tool.prefix:
            # `delete_entity` answers `create_entities`: nouns compared singular
            by_words.setdefault(_nouns(words(other.short)), other)
    out: list[ToolInfo] = []
    for opposite in verbs:
        match = by_words.get(_nouns([opposite, *rest]))
        if match is not None and match not in out:
            out.append(match)
    return out


def _nouns(found: Sequence[str]) -> tuple[str, ...]:
    return tuple(singular(word) if at else word for at, word in enumerate(found))


# -- the candidates ------------------------------------------------------------------------


def read_candidate(tool: ToolInfo, *, experiment: bool = False, probe: bool = False) -> Candidate:
    """`read`. Annotated readOnlyHint or called by a probe, it is checked only to change
    nothing; known by its name only, one of its calls must also have worked; known by
    experiment only, as many as a round trip needs undos (--min-verified)."""
    if experiment:
        why = "its calls never changed the state"
    elif probe:
        why = "a state probe calls it"
    else:
        why = "annotated readOnlyHint" if tool.read_only else "its name reads"
    return Candidate(
        kind="read",
        entry={"classification": "read"},
        summary=f"read ({why})",
        needs_calls=-1 if experiment else int(not (probe or tool.read_only)),
    )


def reversible_candidates(
    tool: ToolInfo, offered: Mapping[str, ToolInfo], samples: Samples
) -> list[Candidate]:
    """An opposite tool with arguments from the call's `args` and `result`; first with a
    `when` for each boolean field of the result (`created`: only undo what was made)."""
    arg_sources = sources("args", samples.args)
    result_sources = sources("result", samples.results)
    flags = [
        s.path[1]
        for s in result_sources
        if len(s.path) == 2 and s.values and all(isinstance(v, bool) for v in s.values)
    ]
    # A tool that makes things answers with what it made (only what was new, where a batch
    # skips what exists): its inverse is filled from the result first, then from the args.
    orders = [[*arg_sources, *result_sources]]
    if looks_creating(tool):
        orders.insert(0, [*result_sources, *arg_sources])
    out: list[Candidate] = []
    for inverse in opposite_tools(tool, offered):
        fillings: list[dict[str, str]] = []
        for order in orders if inverse.name != tool.name else [[]]:
            args = (
                _swapped(tool)
                if inverse.name == tool.name
                else fill(inverse, order, id_from=result_sources)
            )
            if args is not None and args not in fillings:
                fillings.append(args)
        for args in fillings:
            for flag in [*flags, None]:
                step: dict[str, Any] = {"tool": inverse.name, "args": args}
                if flag is not None:
                    step["when"] = expression("result", flag)
                out.append(_reversible(step))
    return out


def _swapped(tool: ToolInfo) -> dict[str, str]:
    """The call again with the ends of each swap pair exchanged (none: the same arguments)."""
    names = {normal(n): n for n in tool.properties}
    args = {name: template("args", name) for name in tool.required}
    for one, other in _SWAPS:
        if one in names and other in names:
            args[names[one]] = template("args", names[other])
            args[names[other]] = template("args", names[one])
    return args


def _reversible(step: dict[str, Any]) -> Candidate:
    if "when" in step:
        entry = {"classification": "reversible", "inverse": [step]}
    else:
        entry = {
            "classification": "reversible",
            "inverse_tool": step["tool"],
            "inverse_args": step["args"],
        }
    return Candidate(kind="reversible", entry=entry, summary=f"reversible: {_steps([step])}")


def snapshot_tools(
    tool: ToolInfo, reads: Iterable[ToolInfo], whole: Iterable[str] = ()
) -> list[tuple[ToolInfo, dict]]:
    """Read tools of the same server whose required arguments the call's own arguments fill
    by name, each with that filling ({its argument: the call's}): the snapshot before the
    call, fewest arguments first. Then the reads in `whole` (the state probes' tools, which
    read the server's whole state without arguments): a snapshot of everything, for a tool
    whose own arguments name what no read takes (the names of entities to delete)."""
    own = {normal(n): n for n in tool.properties}
    found: list[tuple[ToolInfo, dict[str, str]]] = []
    everything: list[tuple[ToolInfo, dict[str, str]]] = []
    for read in reads:
        if read.prefix != tool.prefix or read.name == tool.name:
            continue
        if not read.required:
            if read.name in whole:
                everything.append((read, {}))
        elif all(normal(r) in own for r in read.required):
            found.append((read, {r: own[normal(r)] for r in read.required}))
    found.sort(key=lambda pair: (len(pair[0].required), not looks_read(pair[0])))
    return found[: MAX_SNAPSHOT_TOOLS - min(1, len(everything))] + everything[:1]


def compensable_candidates(
    tool: ToolInfo,
    offered: Mapping[str, ToolInfo],
    reads: Iterable[ToolInfo],
    samples: Samples,
    whole: Iterable[str] = (),
) -> list[Candidate]:
    """A snapshot read plus writes that put it back: one write (the tool itself, then set /
    update / restore ... tools), and for a snapshot holding an object and a list of objects
    (a task and its subtasks) the two-step shape for cascades."""
    arg_sources = sources("args", samples.args)
    ranked = writers(tool, offered)
    out: list[Candidate] = []
    for read, filling in snapshot_tools(tool, reads, whole):
        snapshot_args = {r: template("args", own) for r, own in filling.items()}
        if not samples.snapshots.get(read.name):
            continue  # never read before a call: a snapshot would fail every time
        snap = sources("snapshot", samples.shapes(read.name))
        if not filling:
            # A maker's opposite filled from the snapshot would take away what was there
            # before: makers get their opposite from their result, then the snapshot's lists.
            if not looks_creating(tool):
                out += _whole_restores(tool, offered, read, snap)
            out += _whole_after_inverse(tool, offered, read, snap, samples)
            continue
        for writer in ranked:
            args = fill(writer, [*snap, *arg_sources])
            if args is not None and restores(args):
                out.append(
                    compensable_entry(read, snapshot_args, [{"tool": writer.name, "args": args}])
                )
        out += _cascades(read, snapshot_args, snap, ranked)
    return out[:MAX_COMPENSABLE]


def _whole_restores(
    tool: ToolInfo, offered: Mapping[str, ToolInfo], read: ToolInfo, snap: list[Source]
) -> list[Candidate]:
    """Undo from a snapshot of the whole state: the tool's opposite (`create_entities` for
    `delete_entities`) filled from the snapshot's lists; then the same followed by each other
    tool of the server that makes things and takes a list the snapshot holds (the relations
    that went with deleted entities), one at a time, then all of them. All rely on the server
    skipping what is still there, which the round trip shows or refutes."""
    opposites = [o for o in opposite_tools(tool, offered) if o.name != tool.name]
    makers = _makers(tool, offered)
    lists = [s for s in snap if len(s.path) == 2 and s.object_list]
    out: list[Candidate] = []
    for first in opposites:
        first_args = fill(first, lists)
        if not first_args or not restores(first_args):
            continue
        step = {"tool": first.name, "args": first_args}
        out.append(compensable_entry(read, {}, [step], shape="whole state"))
        used = set(first_args.values())
        others = []
        for other in makers:
            other_args = fill(other, lists)
            if other is first or not other_args or set(other_args.values()) & used:
                continue
            if restores(other_args):
                used |= set(other_args.values())
                others.append({"tool": other.name, "args": other_args})
        shapes = [[o] for o in others] + ([others] if len(others) > 1 else [])
        for shape in shapes:
            out.append(compensable_entry(read, {}, [step, *shape], shape="whole state"))
    return out


def _makers(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> list[ToolInfo]:
    """The server's other tools that make things (by name; not annotated read-only)."""
    return [
        o
        for o in offered.values()
        if o.prefix == tool.prefix
        and looks_creating(o)
        and not o.read_only
        and not looks_read(o)
        and o.name != tool.name
    ]


def _whole_after_inverse(
    tool: ToolInfo,
    offered: Mapping[str, ToolInfo],
    read: ToolInfo,
    snap: list[Source],
    samples: Samples,
) -> list[Candidate]:
    """For a tool that makes things: its opposite on what it made, then the server's other
    makers filled from a snapshot of the whole state, for what the opposite takes away
    besides (deleting an entity deletes the relations that named it before it existed).
    One candidate per maker, then one with them all: a maker the undo does not need can
    break it (observations put back on an entity that is gone)."""
    if not looks_creating(tool):
        return []
    results, arg_sources = sources("result", samples.results), sources("args", samples.args)
    lists = [s for s in snap if len(s.path) == 2 and s.object_list]
    out: list[Candidate] = []
    for inverse in opposite_tools(tool, offered):
        args = fill(inverse, [*results, *arg_sources], id_from=results)
        if inverse.name == tool.name or args is None:
            continue
        first = {"tool": inverse.name, "args": args}
        makers = []
        for other in _makers(tool, offered):
            other_args = fill(other, lists)
            if other_args and restores(other_args):
                makers.append({"tool": other.name, "args": other_args})
        shapes = [[maker] for maker in makers] + ([makers] if len(makers) > 1 else [])
        for shape in shapes:
            out.append(compensable_entry(read, {}, [first, *shape], shape="whole state"))
    return out


def writers(tool: ToolInfo, offered: Mapping[str, ToolInfo]) -> list[ToolInfo]:
    ranked = [tool]
    for verb in RESTORE_VERBS:
        for other in offered.values():
            first = words(other.short)[:1]
            if other.prefix == tool.prefix and first == [verb] and other not in ranked:
                ranked.append(other)
    return ranked


def restores(args: Mapping[str, str]) -> bool:
    """Whether a write takes something other than an identity (an id, a path, a name) from
    the snapshot: else it only repeats the call on the same thing."""
    return any(
        template.startswith(("{snapshot.", "{first_by(snapshot.")) and not _is_identity(name)
        for name, template in args.items()
    )


def _is_identity(name: str) -> bool:
    found = words(name)
    return bool(found) and found[-1] in ("id", "path", "name", "key")


def _cascades(
    read: ToolInfo, snapshot_args: dict[str, str], snap: list[Source], writers: list[ToolInfo]
) -> Iterator[Candidate]:
    """Restore the object from `snapshot.<object>.*`, then the list `snapshot.<list>` with a
    tool that takes a list of objects: a deleted thing and what its deletion cascaded over."""
    objects = [
        s for s in snap if len(s.path) == 2 and all(isinstance(v, Mapping) for v in s.values)
    ]
    lists = [s for s in snap if len(s.path) == 2 and s.object_list]
    for obj in objects:
        inner = [s for s in snap if s.path[:2] == obj.path and len(s.path) == 3]
        for first in writers:
            first_args = fill(first, inner)
            if not first_args or not restores(first_args):
                continue
            for listed in lists:
                for second in writers:
                    second_args = fill(second, [listed])
                    if not second_args or second.name == first.name:
                        continue
                    steps = [
                        {"tool": first.name, "args": first_args},
                        {
                            "tool": second.name,
                            "args": second_args,
                            "when": f"length({expression(*listed.path)}) > `0`",
                        },
                    ]
                    yield compensable_entry(read, snapshot_args, steps)


def compensable_entry(
    read: ToolInfo, snapshot_args: dict[str, str], steps: list[dict], shape: str = ""
) -> Candidate:
    entry: dict[str, Any] = {"classification": "compensable", "snapshot_tool": read.name}
    if snapshot_args:
        entry["snapshot_args"] = snapshot_args
    if len(steps) == 1 and "when" not in steps[0]:
        entry |= {"inverse_tool": steps[0]["tool"], "inverse_args": steps[0]["args"]}
    else:
        entry["inverse"] = steps
    kind = f"compensable ({shape})" if shape else "compensable"
    summary = f"{kind}: snapshot {_call(read.name, snapshot_args)}, then {_steps(steps)}"
    return Candidate(kind="compensable", entry=entry, summary=summary)


def _call(tool: str, args: Mapping[str, str]) -> str:
    return f"{tool}({', '.join(f'{k}={v}' for k, v in args.items())})"


def _steps(steps: Sequence[Mapping[str, Any]]) -> str:
    shown = []
    for step in steps:
        when = f" when {step['when']}" if "when" in step else ""
        shown.append(_call(step["tool"], step["args"]) + when)
    return "; ".join(shown)


_OK_FLAGS = ("ok", "success", "succeeded")


def in_band_failure(samples: Samples) -> str | None:
    """An `error_when` for a tool that reports failure inside a normal result: a boolean
    `ok` (or `success`) field that some sample call answered false. Without it such calls
    are journaled as done, and undo tries to compensate what never happened."""
    for source in sources("result", samples.results, depth=1):
        flag = source.path[-1]
        booleans = [v for v in source.values if isinstance(v, bool)]
        if flag.lower() in _OK_FLAGS and booleans and not all(booleans):
            return f"{expression('result', flag)} == `false`"
    return None


MAX_EXAMPLES = 5


def reporting_failures(candidates: list[Candidate], samples: Samples) -> list[Candidate]:
    """The candidates, each with the tool's `error_when` when its results report failure,
    and with `test.examples` (arguments of sample calls that worked) when most sample calls
    failed: random arguments rarely meet what the tool accepts, and a round trip needs calls
    that work to have something to undo."""
    error_when = in_band_failure(samples)
    worked = [
        args
        for args, result in zip(samples.args, samples.results, strict=True)
        if error_when is None or not failed_in_band(result)
    ]
    extra: dict[str, Any] = {}
    notes = []
    if error_when is not None:
        extra["error_when"] = error_when
        notes.append(f"error_when {error_when}")
    if worked and 2 * len(worked) < samples.calls:
        unique = list({json.dumps(a, sort_keys=True): a for a in worked}.values())
        extra["test"] = {"examples": unique[:MAX_EXAMPLES]}
        notes.append(f"test.examples from {len(worked)} of {samples.calls} sample calls")
    if not extra:
        return candidates
    return [
        Candidate(
            kind=c.kind,
            entry={"classification": c.entry["classification"]}
            | {k: v for k, v in c.entry.items() if k != "classification"}
            | extra
            | _merged_test(c.entry, extra),
            summary=f"{c.summary} ({'; '.join(notes)})",
            needs_calls=c.needs_calls,
            reread=c.reread,
            text_read=c.text_read,
        )
        for c in candidates
    ]


def _merged_test(entry: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate's own `test:` (a narrowed schema) with the examples added to it."""
    if "test" in entry and "test" in extra:
        schema = entry["test"]["schema"]
        fitting = [e for e in extra["test"]["examples"] if _fits_types(e, schema)]
        return {"test": {**entry["test"], **({"examples": fitting} if fitting else {})}}
    return {}


def _fits_types(example: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    """Whether each argument has a type its property in `schema` allows: a sample call's
    key list does not fit a schema narrowed to one key."""
    properties = schema.get("properties") or {}
    for name, value in example.items():
        types = schema_types(properties.get(name))
        kind = json_type(value)
        if kind == "integer" and types is not None and "number" in types:
            continue
        if types is not None and kind not in types:
            return False
    return True


def failed_in_band(result: Any) -> bool:
    """A result that says, inside it, that the call failed (`ok: false`, `success: false`)."""
    return isinstance(result, Mapping) and any(
        result.get(flag) is False for flag in result if str(flag).lower() in _OK_FLAGS
    )
