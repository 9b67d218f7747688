"""Fuzzing the registry loader: whatever the text, a Registry or a located RegistryError."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compensator.errors import RegistryError
from compensator.registry import Registry, keys, parse_registry
from tests.faults import cases_tallied

REPO = Path(__file__).resolve().parent.parent
SHIPPED = {
    path.name: path.read_text(encoding="utf-8")
    for path in [
        REPO / "examples" / "compensators.yaml",
        *(REPO / "examples" / "registries").glob("*.yaml"),
    ]
}
PATH = Path("/fuzz/registry.yaml")
SECRET = "s3cr3t-Fuzz-Value-9f2"
ENVIRON = {
    "COMPENSATOR_PYTHON": "/usr/bin/python3",
    "COMPENSATOR_WORKDIR": "/tmp/fuzz-work",
    "COMPENSATOR_SERVERS": "/tmp/fuzz-servers",
    "COMPENSATOR_POSTGRES_URL": "postgresql:///fuzz",
    "TOKEN": SECRET,
    "EMPTY": "",
}
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same cases on every run: a failure here is a regression
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
TRIED: Counter[str] = Counter()
"""How many cases each property tried, for the fault tally."""


@pytest.fixture(autouse=True)
def _report_cases() -> Iterator[None]:
    """After each test, add the cases it tried to the fault tally (scripts/fault-report)."""
    with cases_tallied(TRIED, "registry fuzz"):
        yield


_ALL_KEYS = sorted(
    {
        *keys.TOP,
        *keys.SERVER,
        *keys.POLICY,
        *keys.STEP,
        *keys.STATE,
        *keys.RESET,
        *keys.DEFAULTS,
        *keys.CHECKPOINTS,
        *keys.TEST,
    }
)
_NAMES = ["tasks", "tasks__add_task", "tasks__delete_task", "fs", "fs__write", "a__b", "x", "<<"]
_TEMPLATES = [
    "{args.id}",
    "{result.id}",
    "{snapshot.status}",
    "{args.",
    "{",
    "}",
    "{}",
    "{ }",
    "{foo.bar}",
    "{length(args)}",
    "{nope(args)}",
    "{regex(args.x, '(')}",
    "{!args.a.b}",
    "result.ok == `false`",
    "`1",
    "${UNSET}",
    "${TOKEN}",
    "${TOKEN:-x}",
    "${EMPTY:-fallback}",
    "${",
    "${1BAD}",
    "$$",
    "$",
    "~nosuchuser-fuzz/x",
    "~",
    "read",
    "reversible",
    "compensable",
    "irreversible",
    "unknown",
    "args.password",
    "result.items[*].token",
    "args[0",
]


# -- the property -----------------------------------------------------------------------------


def check(text: str, kind: str) -> None:
    """`text` loads into a Registry or raises a RegistryError naming file, line and key."""
    TRIED[kind] += 1
    try:
        loaded = parse_registry(text, PATH, ENVIRON)
    except RegistryError as exc:
        message = str(exc)
        assert message.startswith(f"{PATH}:"), message
        assert exc.path == str(PATH)
        assert exc.line is not None, message
        # A line the file has (or the one just past a text without a final newline).
        assert 1 <= exc.line <= text.count("\n") + 1, (exc.line, message)
        assert message.startswith(f"{PATH}:{exc.line}: {exc.key}: "), message
        assert exc.key, message
        assert "Traceback" not in message
        assert SECRET not in message, message
        return
    assert isinstance(loaded, Registry)


# -- (a) generated documents --------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(_TEMPLATES),
    st.sampled_from(_NAMES + _ALL_KEYS),
)
_keys = st.one_of(
    st.sampled_from(_ALL_KEYS), st.sampled_from(_NAMES), st.text(max_size=12), st.integers()
)
_trees = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=25,
)


@st.composite
def _near_registries(draw: st.DrawFn) -> dict[str, Any]:
    """Documents shaped like a registry, so validation gets past the top level."""
    server = draw(st.sampled_from(["tasks", "fs", "bad name", "a__b", "x_"]))
    spec = {"command": draw(st.sampled_from(["${COMPENSATOR_PYTHON}", "${UNSET}", "", "run"]))}
    spec.update(draw(st.dictionaries(st.sampled_from(keys.SERVER), _trees, max_size=3)))
    doc: dict[str, Any] = {"servers": {server: spec}}
    policies = st.dictionaries(
        st.sampled_from([*keys.POLICY, "inverse_too", "clasification"]), _trees, max_size=5
    )
    tools = draw(st.dictionaries(st.sampled_from(_NAMES), policies, max_size=3))
    steps = st.lists(st.dictionaries(st.sampled_from(keys.STEP), _trees), max_size=3)
    for policy in tools.values():
        if draw(st.booleans()):
            policy["inverse"] = draw(steps)
    doc["tools"] = tools
    for section in ("state", "reset", "defaults"):
        if draw(st.booleans()):
            doc[section] = draw(_trees)
    return doc


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=None, allow_unicode=True, sort_keys=False)


@FUZZ
@given(_trees)
def test_random_documents(tree: Any) -> None:
    check(_dump(tree), "random documents")


@FUZZ
@given(_near_registries())
@example({"servers": {"tasks": {"command": "run", "call_timeout": 10**400}}})
@example({"servers": {"tasks": {"command": "run", "cwd": "~nosuchuser-fuzz/x"}}})
@example(
    {
        "servers": {"tasks": {"command": "run"}},
        "tools": {
            "tasks__a": {
                "classification": "reversible",
                "inverse_tool": "tasks__b",
                "inverse_args": {"id": "{" + "(" * 2000 + "args.id" + ")" * 2000 + "}"},
            }
        },
    }
)
def test_registry_shaped_documents(doc: dict[str, Any]) -> None:
    check(_dump(doc), "registry-shaped documents")


_YAML_BITS = [
    "\n",
    " ",
    "  ",
    "\t",
    ":",
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "'",
    '"',
    "#",
    "&a ",
    "*a",
    "<<: *a",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!timestamp ",
    "!!binary ",
    "!!python/object ",
    "!!set ",
    "!!omap ",
    "!!str ",
    "!custom ",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "? ",
    "|\n",
    ">\n",
    "\x00",
    "\x07",
    "\ufeff",
    "\ud800",
    "servers",
    "tools",
    "command",
    "${UNSET}",
]


@FUZZ
@given(
    st.one_of(st.text(max_size=200), st.lists(st.sampled_from(_YAML_BITS + _ALL_KEYS)).map("".join))
)
@example("!!int abc")
@example("!!int")
@example("!!float abc")
@example("!!bool maybe")
@example("!!timestamp 2020-99-99")
@example("a: !!timestamp x")
@example("[" * 5000)
@example("a: " + "[" * 3000 + "]" * 3000)
@example("x\x07y")
@example("servers:\n  t:\n    command: run\n\x00")
def test_random_text(text: str) -> None:
    check(text, "random text")


def _laughs(levels: int, width: int) -> str:
    """A 'billion laughs' document: each alias level multiplies the values by `width`."""
    lines = ["l0: &l0 [lol]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_quickly() -> None:
    with pytest.raises(RegistryError, match=r"registry\.yaml:\d+: .*alias"):
        parse_registry(_laughs(9, 9), PATH, ENVIRON)


# -- (b) mutations of the shipped registries ----------------------------------------------------

_KEY_LINE = re.compile(r"^(\s*-?\s*)([A-Za-z_][A-Za-z0-9_]*)(:\s*)(.*)$")
_REPLACEMENTS = [
    "123",
    "-1",
    "0",
    "1.5",
    "1e400",
    "true",
    "null",
    "~",
    "[]",
    "{}",
    "[1, 2]",
    "{a: b}",
    "'text'",
    ".nan",
    "!!int x",
    "!!bool maybe",
    "&x 1",
    "*x",
    '"{args."',
    '"{args.id"',
    '"${UNSET}"',
    '"${TOKEN}"',
    '"~nosuchuser-fuzz"',
    '"{(((args.id}"',
    "|\n  block",
]


def _mutate(text: str, op: str, at: int, param: int) -> str:
    lines = text.split("\n")
    i = at % len(lines)
    line = lines[i]
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, line)
    elif op == "indent":
        shift = param % 9 - 4
        lines[i] = " " * max(0, len(line) - len(line.lstrip(" ")) + shift) + line.lstrip(" ")
    elif op == "swap":
        j = param % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "retype":
        match = _KEY_LINE.match(line)
        if match:
            lines[i] = match[1] + match[2] + match[3] + _REPLACEMENTS[param % len(_REPLACEMENTS)]
    elif op == "near_miss":
        match = _KEY_LINE.match(line)
        if match:
            key = match[2]
            cut = param % len(key)
            miss = key[:cut] + key[cut + 1 :] if param % 2 else key[:cut] + "x" + key[cut:]
            lines[i] = match[1] + miss + match[3] + match[4]
    elif op == "truncate":
        return text[: param % (len(text) + 1)]
    elif op == "unset":
        cut = param % (len(line) + 1)
        lines[i] = line[:cut] + "${UNSET}" + line[cut:]
    elif op == "tab":
        cut = param % (len(line) + 1)
        lines[i] = line[:cut] + "\t" + line[cut:]
    elif op == "brace":
        for old, new in (("{args.", "{args."), ('}"', '"'), ("{", "{{"), ("}", "")):
            if old in line:
                lines[i] = (
                    line.replace(old, new, 1)
                    if old != "{args."
                    else line.replace("{args.", "{args." + "(" * (param % 3), 1)
                )
                break
        else:
            lines[i] = line + ' "{args.'
    elif op == "insert":
        cut = param % (len(line) + 1)
        bit = _YAML_BITS[param % len(_YAML_BITS)]
        lines[i] = line[:cut] + bit + line[cut:]
    return "\n".join(lines)


_OPS = ["delete", "duplicate", "indent", "swap", "retype", "near_miss", "truncate", "unset"]
_OPS += ["tab", "brace", "insert"]
_mutations = st.lists(
    st.tuples(st.sampled_from(_OPS), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1,
    max_size=4,
)


def test_shipped_registries_load() -> None:
    """The mutations start from files that load, so each error comes from a mutation."""
    for name, text in SHIPPED.items():
        assert isinstance(parse_registry(text, PATH, ENVIRON), Registry), name


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_mutated_shipped_registries(name: str) -> None:
    text = SHIPPED[name]

    @FUZZ
    @given(_mutations)
    def mutated(mutations: list[tuple[str, int, int]]) -> None:
        result = text
        for op, at, param in mutations:
            result = _mutate(result, op, at, param)
        check(result, f"mutations of {name}")

    mutated()
