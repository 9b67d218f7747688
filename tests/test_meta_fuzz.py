"""Fuzzing the meta tools of one real proxy: any arguments get a tool result, never a crash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compensator.names import META_TOOLS
from pytest_compensator.client import ProxyClient, ToolReply, launch_proxy
from tests.faults import cases_tallied

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
CALL_LIMIT = 30.0
"""Seconds one call may take: a hung proxy fails the test instead of stalling it."""
TRIED: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _report_cases() -> Iterator[None]:
    """After each test, add the cases it tried to the fault tally (scripts/fault-report)."""
    with cases_tallied(TRIED, "meta fuzz"):
        yield


_REAL_KEYS = ["label", "checkpoint_id", "dry_run", "force", "tool"]
_TOOL_NAMES = ["tasks__add_task", "tasks__delete_task", "tasks__list_tasks", "checkpoint"]
_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=20),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 1e308, -1e-308]),
    st.text(max_size=30),
    st.text(min_size=1000, max_size=3000),
    st.sampled_from([*_TOOL_NAMES, "", " ", "\u202e\u0000", "💥" * 100, "x" * 20_000]),
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_arguments = st.dictionaries(
    st.one_of(st.sampled_from(_REAL_KEYS), st.text(max_size=12)), _json, max_size=5
)
_ANSWER_KEYS = {
    "checkpoint": {"checkpoint_id"},
    "list_checkpoints": {"checkpoints"},
    "list_changes": {"changes"},
    "undo_to": {"undone", "skipped"},
    "explain_blast_radius": {"tool", "classification", "explanation"},
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlockingPortal, ProxyClient]]:
    """One proxy for every example, driven from the sync tests through a portal."""
    tmp = tmp_path_factory.mktemp("meta-fuzz")
    with start_blocking_portal() as portal, (tmp / "proxy-stderr.log").open("a") as log:
        launch = launch_proxy(
            EXAMPLES / "compensators.yaml",
            tmp / "journal.db",
            env={"COMPENSATOR_WORKDIR": str(tmp)},
            stderr=log,
        )
        with portal.wrap_async_context_manager(launch) as client:
            _seed_changes(portal, client)
            yield portal, client
            _assert_alive(portal, client)


def _call(portal: BlockingPortal, client: ProxyClient, name: str, args: Any) -> ToolReply:
    async def call() -> ToolReply:
        with anyio.fail_after(CALL_LIMIT):
            return await client.call(name, args)

    try:
        return portal.call(call)
    except TimeoutError:
        pytest.fail(f"{name}({_short(args)}) got no answer within {CALL_LIMIT} s")
    except Exception as exc:  # a JSON-RPC error, or the proxy went away
        pytest.fail(f"{name}({_short(args)}) failed as a protocol error: {exc!r}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def _seed_changes(portal: BlockingPortal, client: ProxyClient) -> None:
    """Checkpoints and changes, so random ids reach real checkpoints and real undos."""
    for n in range(3):
        assert not _call(portal, client, "checkpoint", {"label": f"cp{n}"}).is_error
        reply = _call(portal, client, "tasks__add_task", {"title": f"t{n}", "parent_id": None})
        assert not reply.is_error, reply.text


def _assert_alive(portal: BlockingPortal, client: ProxyClient) -> None:
    reply = _call(portal, client, "list_checkpoints", {})
    assert not reply.is_error, reply.text
    assert isinstance(reply.value["checkpoints"], list)


def _check_meta(name: str, args: dict[str, Any], reply: ToolReply) -> None:
    if reply.is_error:
        # A bad argument is answered in words that name the tool or the checkpoint.
        assert reply.text.strip(), f"{name}({_short(args)}): an error result with no text"
        assert name in reply.text or "checkpoint" in reply.text, reply.text[:500]
        return
    assert isinstance(reply.value, dict), reply.text[:500]
    missing = _ANSWER_KEYS[name] - set(reply.value)
    assert not missing, f"{name}({_short(args)}) answered without {missing}: {reply.text[:500]}"


@pytest.mark.parametrize("name", sorted(META_TOOLS))
def test_meta_tools_answer_any_arguments(
    live: tuple[BlockingPortal, ProxyClient], name: str
) -> None:
    portal, client = live

    @FUZZ
    @given(_arguments)
    @example({})
    @example({"checkpoint_id": 10**30})
    @example({"checkpoint_id": 2**63})
    @example({"checkpoint_id": -1, "dry_run": "yes", "force": 1})
    @example({"checkpoint_id": 1, "dry_run": True, "force": "true"})
    @example({"checkpoint_id": 1.0})
    @example({"checkpoint_id": True})
    @example({"label": "x" * 100_000})
    @example({"label": "\ud7ff\u0000💥", "checkpoint_id": None})
    @example({"tool": "checkpoint"})
    @example({"tool": {"nested": [1, {"deep": None}]}})
    def fuzz(args: dict[str, Any]) -> None:
        TRIED[name] += 1
        _check_meta(name, args, _call(portal, client, name, args))

    fuzz()
    _assert_alive(portal, client)


_DOWNSTREAM = [
    "tasks__add_task",
    "tasks__get_task",
    "tasks__rename_task",
    "tasks__set_status",
    "tasks__restore_tasks",
    "tasks__add_label",
    "tasks__list_tasks",
]


@FUZZ
@given(
    st.one_of(
        st.sampled_from(_DOWNSTREAM),
        st.text(max_size=40),
        st.sampled_from(["tasks__", "__add_task", "tasks__nope", "nope__add_task", "a" * 5000]),
    ),
    _arguments,
)
@example("tasks__add_task", {"title": 123, "parent_id": "x"})
@example("tasks__get_task", {"id": 10**30})
@example("tasks__restore_tasks", {"tasks": "not a list"})
@example("tasks__set_status", {"id": [], "status": {}})
@example("", {})
def test_unknown_tools_and_wrong_argument_types(
    live: tuple[BlockingPortal, ProxyClient], name: str, args: dict[str, Any]
) -> None:
    portal, client = live
    TRIED["downstream and unknown tools"] += 1
    reply = _call(portal, client, name, args)
    if name not in _DOWNSTREAM and name not in META_TOOLS:
        assert reply.is_error, f"{name!r} is no tool, yet the call answered {reply.text[:300]}"
        assert reply.text.strip()


def test_undo_arguments_cannot_choose_a_tool(live: tuple[BlockingPortal, ProxyClient]) -> None:
    """Whatever else undo_to is given, it refuses it rather than calling what it names."""
    portal, client = live
    checkpoints = _call(portal, client, "list_checkpoints", {}).value["checkpoints"]
    newest = checkpoints[0]["id"]
    before = _call(portal, client, "tasks__list_tasks", {}).value
    for extra in (
        {"tool": "tasks__reset"},
        {"inverse_tool": "tasks__purge_completed", "inverse_args": {}},
        {"steps": [{"tool": "tasks__reset", "args": {}}]},
        {"server": "tasks", "command": "touch /tmp/x"},
    ):
        reply = _call(portal, client, "undo_to", {"checkpoint_id": newest, **extra})
        assert reply.is_error, reply.text
        assert "unknown argument" in reply.text, reply.text
    assert _call(portal, client, "tasks__list_tasks", {}).value == before
