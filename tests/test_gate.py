"""The gate between mutating calls (shared) and undo (exclusive), as pure logic on one loop.

The end-to-end race is in tests/test_concurrency.py; these pin down each ordering rule."""

from __future__ import annotations

import anyio
import pytest

from compensator.proxy import _Gate

pytestmark = pytest.mark.anyio


async def test_shared_holders_do_not_wait_for_each_other() -> None:
    gate = _Gate()
    inside = 0
    most = 0

    async def call() -> None:
        nonlocal inside, most
        async with gate.shared():
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            inside -= 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(call)
    assert most == 5


async def test_exclusive_waits_for_calls_in_flight_and_later_calls_wait_for_it() -> None:
    gate = _Gate()
    events: list[str] = []
    release_first = anyio.Event()

    async def first_call() -> None:
        async with gate.shared():
            events.append("call 1 in")
            await release_first.wait()
            events.append("call 1 out")

    async def undo() -> None:
        async with gate.exclusive():
            events.append("undo in")
            await anyio.sleep(0.05)
            events.append("undo out")

    async def second_call() -> None:
        async with gate.shared():
            events.append("call 2 in")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(first_call)
            await anyio.sleep(0.01)
            group.start_soon(undo)
            await anyio.sleep(0.01)
            group.start_soon(second_call)  # arrives while the undo waits: queues behind it
            await anyio.sleep(0.01)
            assert events == ["call 1 in"]
            release_first.set()
    assert events == ["call 1 in", "call 1 out", "undo in", "undo out", "call 2 in"]


async def test_a_cancelled_undo_lets_held_back_calls_go() -> None:
    gate = _Gate()
    events: list[str] = []
    release_first = anyio.Event()

    async def first_call() -> None:
        async with gate.shared():
            await release_first.wait()

    async def second_call() -> None:
        async with gate.shared():
            events.append("call 2 in")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(first_call)
            await anyio.sleep(0.01)
            undo_scope = anyio.CancelScope()

            async def undo() -> None:
                with undo_scope:
                    async with gate.exclusive():
                        events.append("undo in")

            group.start_soon(undo)
            await anyio.sleep(0.01)
            group.start_soon(second_call)
            await anyio.sleep(0.01)
            assert events == []
            undo_scope.cancel()
            await anyio.sleep(0.01)
            assert events == ["call 2 in"], "the call stayed held back by a cancelled undo"
            release_first.set()
    assert "undo in" not in events


async def test_undos_take_turns() -> None:
    gate = _Gate()
    inside = 0
    most = 0

    async def undo() -> None:
        nonlocal inside, most
        async with gate.exclusive():
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            inside -= 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(undo)
    assert most == 1
