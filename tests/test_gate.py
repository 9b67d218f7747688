"""The gate between mutating calls (shared) and undo (exclusive), as pure logic on one loop.

The end-to-end race is in tests/test_concurrency.py; these pin down each ordering rule. A task
holds the gate, or lets the others move, until every other task is blocked on something
(`anyio.wait_all_tasks_blocked`): the point where the gate has decided, however slow the
machine, so no test waits a guessed time."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import anyio.abc
import pytest

from compensator.proxy import Gate

pytestmark = pytest.mark.anyio


async def most_inside_at_once(
    enter: Callable[[], AbstractAsyncContextManager[None]], holders: int
) -> int:
    """Start `holders` tasks that each hold `enter()` until every other task waits (inside
    too, or at the gate); how many held it at once."""
    inside = most = 0

    async def hold() -> None:
        nonlocal inside, most
        async with enter():
            inside += 1
            most = max(most, inside)
            await anyio.wait_all_tasks_blocked()
            inside -= 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for _ in range(holders):
                group.start_soon(hold)
    return most


async def test_shared_holders_do_not_wait_for_each_other() -> None:
    assert await most_inside_at_once(Gate().shared, 5) == 5


async def test_undos_take_turns() -> None:
    assert await most_inside_at_once(Gate().exclusive, 3) == 1


class Traffic:
    """A mutating call holding the gate, an undo queued behind it, then a second call."""

    def __init__(self) -> None:
        self.gate = Gate()
        self.events: list[str] = []
        self.release_first = anyio.Event()
        self.undo_scope = anyio.CancelScope()

    async def first_call(self) -> None:
        async with self.gate.shared():
            self.events.append("call 1 in")
            await self.release_first.wait()
            self.events.append("call 1 out")

    async def undo(self) -> None:
        with self.undo_scope:
            async with self.gate.exclusive():
                self.events.append("undo in")
                await anyio.wait_all_tasks_blocked()  # a call let in now would come in here
                self.events.append("undo out")

    async def second_call(self) -> None:
        async with self.gate.shared():
            self.events.append("call 2 in")

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        for task in (self.first_call, self.undo, self.second_call):
            group.start_soon(task)
            await anyio.wait_all_tasks_blocked()  # in, or queued: the order is fixed


async def test_exclusive_waits_for_calls_in_flight_and_later_calls_wait_for_it() -> None:
    traffic = Traffic()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await traffic.start(group)
            assert traffic.events == ["call 1 in"]  # the second call queued behind the undo
            traffic.release_first.set()
    assert traffic.events == ["call 1 in", "call 1 out", "undo in", "undo out", "call 2 in"]


async def test_a_cancelled_undo_lets_held_back_calls_go() -> None:
    traffic = Traffic()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await traffic.start(group)
            traffic.undo_scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert traffic.events == ["call 1 in", "call 2 in"], (
                "the call stayed held back by a cancelled undo"
            )
            traffic.release_first.set()
    assert "undo in" not in traffic.events
