"""Arguments of a compensating call as templates: each taken from a field of the call's
`args`, its `result` or the `snapshot` whose name and type fit (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Source",
    "ToolInfo",
    "expression",
    "fill",
    "normal",
    "schema_types",
    "singular",
    "sources",
    "template",
    "words",
]


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    """What infer knows of an offered tool without calling it."""

    name: str
    prefix: str  # "tasks__" (the server's prefix; "" when unprefixed)
    schema: Mapping[str, Any]  # its inputSchema
    read_only: bool = False  # annotated readOnlyHint
    destructive: bool = False  # annotated destructiveHint

    @property
    def short(self) -> str:
        return self.name[len(self.prefix) :]

    @property
    def properties(self) -> Mapping[str, Any]:
        properties = self.schema.get("properties")
        return properties if isinstance(properties, Mapping) else {}

    @property
    def required(self) -> list[str]:
        required = self.schema.get("required")
        return [str(r) for r in required] if isinstance(required, list) else []


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def words(name: str) -> list[str]:
    """`add_task`, `addTask` and `add-task` -> ["add", "task"]."""
    return [w.lower() for part in re.split(r"[_\-\s.]+", name) for w in _WORD.findall(part)]


def normal(name: str) -> str:
    return "".join(words(name))


def singular(word: str) -> str:
    """`entities` -> `entity`, `boxes` -> `box`, `relations` -> `relation`: enough English
    for the plural nouns of tool names and argument names."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def expression(*parts: str) -> str:
    """A JMESPath to a field: `result.id`, `args."old-name"`."""
    return ".".join(p if _IDENTIFIER.match(p) else '"' + p.replace('"', '\\"') + '"' for p in parts)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def schema_types(schema: Any) -> set[str] | None:
    """The JSON types a schema allows; None when it does not say."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind, "integer"} if kind == "number" else {kind}
    if isinstance(kind, list):
        return {str(k) for k in kind} | ({"integer"} if "number" in kind else set())
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            found: set[str] = set()
            for option in options:
                inner = schema_types(option)
                if inner is None:
                    return None
                found |= inner
            return found
    if "enum" in schema and isinstance(schema["enum"], list):
        return {json_type(v) for v in schema["enum"]}
    return None


@dataclass(frozen=True)
class Source:
    """A field a compensating call may take a value from: its path and the values seen."""

    path: tuple[str, ...]  # ("result", "id")
    values: tuple[Any, ...]
    always: bool = True  # every sample value had this field

    @property
    def leaf(self) -> str:
        return normal(self.path[-1])

    def fits(self, schema: Any) -> bool:
        allowed = schema_types(schema)
        seen = {json_type(v) for v in self.values if v is not None}
        return allowed is None or not seen or seen <= allowed

    @property
    def item_keys(self) -> list[str]:
        """For a list of objects, the keys every item of every sample has, in first-seen
        order; empty otherwise (or when no sample had an item)."""
        items = [i for v in self.values if isinstance(v, list) for i in v]
        if not self.object_list or not items:
            return []
        first = [str(k) for k in items[0]]
        return [k for k in first if all(k in item for item in items)]

    def item_values(self, key: str) -> list[Any]:
        """For a list of objects, what its items hold under `key`, over every sample."""
        return [
            item[key]
            for value in self.values
            if isinstance(value, list)
            for item in value
            if isinstance(item, Mapping) and key in item
        ]

    @property
    def object_list(self) -> bool:
        """A list whose items (in the samples that had any) are objects."""
        lists = [v for v in self.values if isinstance(v, list)]
        return len(lists) == len(self.values) and all(
            isinstance(item, Mapping) for value in lists for item in value
        )


def sources(root: str, values: Iterable[Any], depth: int = 2) -> list[Source]:
    """Every field of the sample values under `root`, shallow ones first."""
    collected: dict[tuple[str, ...], list[Any]] = {}
    parents: dict[tuple[str, ...], int] = {}  # how many sample values were objects there

    def walk(path: tuple[str, ...], value: Any, level: int) -> None:
        if not isinstance(value, Mapping) or level > depth:
            return
        parents[path] = parents.get(path, 0) + 1
        for key, inner in value.items():
            collected.setdefault((*path, str(key)), []).append(inner)
            walk((*path, str(key)), inner, level + 1)

    for value in values:
        walk((root,), value, 1)
    ordered = sorted(collected.items(), key=lambda item: len(item[0]))
    return [
        Source(path, tuple(found), always=len(found) == parents.get(path[:-1], 0))
        for path, found in ordered
    ]


def template(*path: str) -> str:
    """A whole-value template of a field: `{result.id}` renders the id itself."""
    return "{" + expression(*path) + "}"


def fill(
    target: ToolInfo, available: Sequence[Source], *, id_from: Sequence[Source] = ()
) -> dict[str, str] | None:
    """Arguments for `target` as templates, each taken from the first source whose field has
    the argument's name and a fitting type; an `...id` argument may take an `id` from
    `id_from`, and a list of objects the only such list. Optional arguments are filled only
    when a source names them. None when a required argument finds no source."""
    filled: dict[str, str] = {}
    for name, schema in target.properties.items():
        source = _source_for(name, schema, available, id_from)
        if source is not None and name not in target.required and not source.always:
            source = None  # a field only some results have would render null, or the wrong type
        projected = _projection(name, schema, available) if source is None else None
        if source is not None:
            filled[name] = template(*source.path)
        elif projected is not None and name in target.required:
            filled[name] = projected
        elif name in target.required:
            return None
    return filled


def _source_for(
    name: str, schema: Any, available: Sequence[Source], id_from: Sequence[Source]
) -> Source | None:
    wanted = normal(name)
    for source in available:
        if source.leaf == wanted and source.fits(schema):
            return source
    if words(name)[-1:] == ["id"]:
        for source in id_from:
            if source.leaf == "id" and source.fits(schema):
                return source
    if (schema_types(schema) or set()) == {"array"}:
        lists = [s for s in available if s.object_list and any(s.values)]
        if len(lists) == 1 and _has_required_keys(lists[0], schema):
            return lists[0]
    return None


def _has_required_keys(source: Source, schema: Any) -> bool:
    """Whether the list's items (objects) can be the array's items: objects are allowed
    there (a list of entities is no list of names), with every key the items require (nor
    a list of `{entityName, contents}`)."""
    items = schema.get("items") if isinstance(schema, Mapping) else None
    allowed = schema_types(items)
    if allowed is not None and "object" not in allowed:
        return False
    required = items.get("required") if isinstance(items, Mapping) else None
    if not isinstance(required, list):
        return True
    return set(map(str, required)) <= set(source.item_keys)


def _projection(name: str, schema: Any, available: Sequence[Source]) -> str | None:
    """A template that projects a list of objects onto what an array argument takes: the
    items' `name` for `entityNames` (`{result.entities[*].name}`), or each item re-keyed for
    an array of objects (`{result.results[*].{entityName: entityName, observations:
    addedObservations}}`); the list whole when its items already have the argument's keys.
    Batch tools take and return such arrays, and their inverses take them back this way."""
    if not isinstance(schema, Mapping) or (schema_types(schema) or set()) != {"array"}:
        return None
    items = schema.get("items")
    item_types = schema_types(items) or set()
    for source in available:
        keys = source.item_keys
        if not keys:
            continue
        noun = singular(source.leaf)
        if item_types and item_types <= {"string", "integer", "number"}:
            wanted = normal(name)
            for key in keys:
                field = normal(key)
                if wanted in (field + "s", noun + field + "s", singular(noun + field) + "s"):
                    return "{" + expression(*source.path) + "[*]." + expression(key) + "}"
        elif item_types == {"object"} and isinstance(items, Mapping):
            mapped = _rekeyed(items, source, noun)
            if mapped is None:
                continue
            path = expression(*source.path)
            if all(k == v for k, v in mapped.items()) and set(mapped) == set(keys):
                return "{" + path + "}"
            address = _address(mapped, noun)
            if address is not None and source.path[0] == "snapshot":
                # Items are addressed by this key: where a snapshot holds two alike (two
                # entities named "a"), the server acts on the first, so only that one goes.
                path = f"first_by({path}, &{expression(address)})"
            pairs = ", ".join(f"{expression(k)}: {expression(v)}" for k, v in mapped.items())
            return "{" + path + "[*].{" + pairs + "}}"
    return None


def _address(mapped: Mapping[str, str], noun: str) -> str | None:
    """The source key whose value names the item itself (`name` for `entityName` of an
    `entities` list), when the argument's items have one; never a key naming another item
    (`parentId`), by which first_by would drop siblings."""
    own = {f"{noun}{word}" for word in ("name", "id", "key")} | {"name", "id", "key"}
    for prop, key in mapped.items():
        if normal(prop) in own:
            return key
    return None


def _rekeyed(items: Mapping[str, Any], source: Source, noun: str) -> dict[str, str] | None:
    """The item properties an array argument takes -> the source items' keys to fill them
    from: the same name, a name ending in it (`addedObservations` for `observations`), or
    the list's noun with it (`name` of an `entities` item for `entityName`); last, for a
    required property still without one, the only key left whose values are lists and fit
    it (`contents` from an entity's `observations`). None when a required property (every
    property, when the schema names none) has no key."""
    properties = items.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    keys = source.item_keys
    required = items.get("required")
    needed = [str(r) for r in required] if isinstance(required, list) else list(properties)
    mapped: dict[str, str] = {}
    for prop in properties:
        wanted = normal(prop)
        found = [k for k in keys if normal(k) == wanted]
        found += [k for k in keys if normal(k).endswith(wanted) and normal(k) != wanted]
        found += [k for k in keys if noun + normal(k) == wanted]
        if found:
            mapped[prop] = found[0]
    for prop in needed:
        if prop in mapped:
            continue
        # Only lists are matched by shape: two strings (a name, a type) are told apart by
        # name alone, and a wrong pick there would write one into the other.
        left = [
            k
            for k in keys
            if k not in mapped.values()
            and (schema_types(properties.get(prop)) or set()) == {"array"}
            and Source((k,), tuple(source.item_values(k))).fits(properties.get(prop))
            and _lists_fit(source.item_values(k), properties.get(prop))
        ]
        if len(left) != 1:
            return None
        mapped[prop] = left[0]
    return mapped


def _lists_fit(values: Sequence[Any], schema: Any) -> bool:
    """Every value is a list whose elements fit the array schema's `items`."""
    items = schema.get("items") if isinstance(schema, Mapping) else None
    allowed = schema_types(items)
    return all(
        isinstance(value, list) and (allowed is None or all(json_type(v) in allowed for v in value))
        for value in values
    )
