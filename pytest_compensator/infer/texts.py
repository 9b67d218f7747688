"""Candidates for servers that answer in text: a read whose answer is the value itself ("1.50"),
or a sentence saying there is none ("Key not found: a"), as server-redis' `get` does. Pure:
nothing here calls a server.

The undo of a write (`set(key, value)`) or a delete of one thing is then: read it before the
call, and put the text back with a writer that takes the call's identity arguments (`key`) and
one text more (`value`); or, when the read said there was nothing, take away what the call made
with the tool's opposite (`delete(key)`). The sentence for "nothing" is learned from the sample
reads: the same words around the read's argument for at least two different arguments."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .candidates import Candidate, Samples, compensable_entry, opposite_tools, writers
from .filling import ToolInfo, expression, normal, schema_types, sources, template

__all__ = ["Absence", "absence", "answers_in_text", "text_candidates", "text_field"]

MIN_ARGUMENTS = 2
"""Different argument values the same sentence must have been seen around before it is taken
for the read's answer for nothing: one could be a value that happens to hold its key."""

MIN_WORDING = 3
"""Characters of a sentence around the argument, at least: a value equal to its key ("a" for
key "a", which generated arguments often are) is no sentence."""


@dataclass(frozen=True)
class Absence:
    """The read's answer when there is nothing: `prefix`, the value of its argument
    `argument` (the call's argument `own`), `suffix`."""

    argument: str
    own: str
    prefix: str
    suffix: str

    def expression(self) -> str:
        """JMESPath for that answer, built from the call's arguments."""
        parts = [_literal(self.prefix), f"to_string({expression('args', self.own)})"]
        if self.suffix:
            parts.append(_literal(self.suffix))
        return f"join('', [{', '.join(parts)}])"

    def describe(self) -> str:
        return f"{self.prefix}<{self.argument}>{self.suffix}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "\\'") + "'"


def answers_in_text(values: Sequence[Any]) -> bool:
    """Whether a read answers in text: some answer was no JSON (it came back as a string).
    Its answers must then be kept as sent (`plain_text`): a value "1.50" read as JSON would be
    put back as the number 1.5."""
    return any(isinstance(value, str) for value in values)


def text_field(values: Sequence[Any]) -> str | None:
    """Where a read's answers hold their text: "" when some answer is the text itself (no
    JSON), the key of an object with one text in it (`result`: the structured content the
    Python SDK's FastMCP makes of a function that returns a str, as redis-mcp-server's
    `get` does) when every answer is such an object, None otherwise."""
    if answers_in_text(values):
        return ""
    keys = {
        key
        for value in values
        if isinstance(value, Mapping) and len(value) == 1
        for key, inner in value.items()
        if isinstance(inner, str)
    }
    wrapped = all(
        isinstance(v, Mapping) and len(v) == 1 and all(isinstance(i, str) for i in v.values())
        for v in values
    )
    return keys.pop() if values and wrapped and len(keys) == 1 else None


def _unwrapped(answer: Any, field: str) -> Any:
    return answer.get(field) if field and isinstance(answer, Mapping) else answer


def absence(
    pairs: Sequence[tuple[Mapping[str, Any], Any]], filling: Mapping[str, str]
) -> Absence | None:
    """The read's answer for nothing, from its sample reads (its arguments, its answer): the
    wording around one of its arguments that most different argument values showed, if at
    least MIN_ARGUMENTS did. Wording with a backslash is not taken (it would need escapes that
    JMESPath raw strings do not have)."""
    seen: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for args, answer in pairs:
        if not isinstance(answer, str):
            continue
        for argument in filling:
            value = args.get(argument)
            if not isinstance(value, (str, int)) or isinstance(value, bool) or value == "":
                continue
            text = str(value)
            start = answer.find(text)
            while start >= 0:
                prefix, suffix = answer[:start], answer[start + len(text) :]
                wording = prefix + suffix
                if len(wording) >= MIN_WORDING and "\\" not in wording:
                    seen[(argument, prefix, suffix)].add(text)
                start = answer.find(text, start + 1)
    best = max(
        seen.items(), key=lambda item: (len(item[1]), len(item[0][1] + item[0][2])), default=None
    )
    if best is None or len(best[1]) < MIN_ARGUMENTS:
        return None
    (argument, prefix, suffix), _ = best
    return Absence(argument, filling[argument], prefix, suffix)


def text_candidates(
    tool: ToolInfo,
    offered: Mapping[str, ToolInfo],
    snapshots: Sequence[tuple[ToolInfo, dict[str, str]]],
    samples: Samples,
) -> list[Candidate]:
    """For each snapshot read that answers in text and takes the call's own arguments: each
    writer (the tool itself, then set / update / ... tools) that takes those arguments and one
    required text besides, given the snapshot. With the answer for nothing known, first that
    write only when the read found something, and the tool's opposite on the same arguments
    when it did not (a set that made the key is undone by deleting it); then the write alone
    when it found something (a delete of nothing is undone by nothing)."""
    arg_sources = sources("args", samples.args)
    out: list[tuple[Candidate, ToolInfo, dict[str, str]]] = []
    for read, filling in snapshots:
        field = text_field(samples.shapes(read.name)) if filling else None
        if field is None:
            continue
        snapshot_args = {r: template("args", own) for r, own in filling.items()}
        pairs = [(a, _unwrapped(v, field)) for a, v in samples.read_pairs.get(read.name, [])]
        found = absence(pairs, filling)
        text = ("snapshot", field) if field else ("snapshot",)
        for writer in writers(tool, offered):
            args = _write_back(writer, filling, template(*text))
            if args is None:
                continue
            write = {"tool": writer.name, "args": args}
            if found is None:
                only = compensable_entry(read, snapshot_args, [write], shape="text")
                out.append((only, read, filling))
                continue
            nothing = found.expression()
            present = {**write, "when": f"{_read_worked()} && {expression(*text)} != {nothing}"}
            for opposite in opposite_tools(tool, offered):
                undo = _fill_by_name(opposite, arg_sources)
                if opposite.name != tool.name and undo is not None:
                    absent = {
                        "tool": opposite.name,
                        "args": undo,
                        "when": f"{_read_worked()} && {expression(*text)} == {nothing}",
                    }
                    both = compensable_entry(read, snapshot_args, [present, absent], shape="text")
                    out.append((both, read, filling))
            alone = compensable_entry(read, snapshot_args, [present], shape="text")
            out.append((alone, read, filling))
    # The state probes may not show what these put back (server-redis' list shows keys, not
    # values): their round trips read the snapshot again after each undo. A read whose text
    # is the answer itself is kept as sent (`plain_text`); one inside JSON already is.
    return [
        replace(
            _narrowed(c, tool, read, filling),
            reread=True,
            text_read=read.name if answers_in_text(samples.shapes(read.name)) else "",
        )
        for c, read, filling in out
    ]


def _narrowed(
    candidate: Candidate, tool: ToolInfo, read: ToolInfo, filling: Mapping[str, str]
) -> Candidate:
    """The candidate tested only on calls whose arguments the read takes as well: where the
    tool takes more (server-redis' delete takes a key or a list of keys, its get one key),
    the undo of the other calls fails with the read's error, which is what a person is told;
    a round trip would count it a failure."""
    properties = dict(tool.properties)
    narrowed = []
    for theirs, own in filling.items():
        mine = schema_types(properties.get(own))
        read_takes = read.properties.get(theirs)
        fewer = schema_types(read_takes)
        if mine is not None and fewer is not None and fewer < mine:  # strictly fewer types
            properties[own] = read_takes
            narrowed.append(own)
    if not narrowed:
        return candidate
    schema = {**tool.schema, "properties": properties}
    return Candidate(
        kind=candidate.kind,
        entry={**candidate.entry, "test": {"schema": schema}},
        summary=f"{candidate.summary} (tested with {', '.join(narrowed)} as {read.short} takes it)",
    )


def _read_worked() -> str:
    """A `when` that holds when the snapshot read worked, and otherwise fails the undo of the
    change with the read's error: doing nothing would report it undone."""
    return (
        "(!snapshot_error || fail(join('', ['the read before the call failed, so what it "
        "changed is not known: ', snapshot_error])))"
    )


def _write_back(writer: ToolInfo, filling: Mapping[str, str], text: str) -> dict[str, str] | None:
    """The writer's arguments: those the snapshot read took (by name) from the call's, and
    `text` (`{snapshot}`) for its one other required argument, which must take text. None
    when it has not exactly one such argument, or takes none of the read's."""
    own = {normal(name): name for name in filling.values()}
    args: dict[str, str] = {}
    rest = []
    for name in writer.required:
        if normal(name) in own:
            args[name] = template("args", own[normal(name)])
        else:
            rest.append(name)
    if not args or len(rest) != 1:
        return None
    types = schema_types(writer.properties.get(rest[0]))
    if types is not None and "string" not in types:
        return None
    args[rest[0]] = text
    return args


def _fill_by_name(target: ToolInfo, available: Sequence[Any]) -> dict[str, str] | None:
    """The opposite's required arguments, each from the call's argument of the same name."""
    names = {normal(s.path[-1]): s for s in available if len(s.path) == 2}
    args = {}
    for name in target.required:
        source = names.get(normal(name))
        if source is None:
            return None
        args[name] = template(*source.path)
    return args or None
