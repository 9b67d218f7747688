"""Guardrails end to end: a real proxy subprocess in front of the example task server, and a
real SDK client that answers (or cannot answer) the proxy's `elicitation/create`.

Approve asks the person first and forwards only on accept; deny never forwards; both can be
conditional on the arguments; a client without elicitation gets `defaults.on_no_approval`.
Every approval and refusal is a journal record, shown by `list_changes` (refused) and
`compensator log`, and never a change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest

from compensator.journal import SQLiteJournal
from compensator.proxy.approval import VALUE_LIMIT, argument_summary
from pytest_compensator.client import ProxyClient

pytestmark = pytest.mark.anyio

REGISTRY = """
servers:
  tasks:
    command: "@PYTHON@"
    args: ["@TASKS_SERVER@", "--db", "@TMP@/tasks.db"]
defaults:
  approve: [unknown]
  on_no_approval: @ON_NO_APPROVAL@
tools:
  tasks__list_tasks: {classification: read}
  tasks__add_task:
    classification: reversible
    inverse_tool: tasks__delete_task
    inverse_args: {id: "{result.id}"}
    approve_when: "args.title == 'ask me'"
    deny_when: "contains(args.title, 'forbidden')"
  tasks__complete_task:
    classification: irreversible
    approve: true
  tasks__rename_task:
    classification: irreversible
    approve: true
    redact: [args.title]
  tasks__delete_task:
    classification: irreversible
    deny: "deleting is for people"
"""


class Person:
    """The client's elicitation callback: answers each question with the next action."""

    def __init__(self, *actions: str) -> None:
        self.actions = list(actions)
        self.asked: list[dict[str, Any]] = []

    async def elicitation_callback(self, context: Any, params: Any) -> Any:
        self.asked.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        if not self.actions:
            raise AssertionError(f"asked more often than expected: {self.asked}")
        return types.ElicitResult(action=self.actions.pop(0))

    def options(self) -> dict[str, Any]:
        return {"elicitation_callback": self.elicitation_callback}


@pytest.fixture
def registry(write_registry: Callable[[str], Path]) -> Callable[..., Path]:
    def write(on_no_approval: str = "deny") -> Path:
        return write_registry(REGISTRY.replace("@ON_NO_APPROVAL@", on_no_approval))

    return write


async def tasks(client: ProxyClient) -> dict[int, dict[str, Any]]:
    """The task server's own state, by id."""
    listed = await client.call_ok("tasks__list_tasks")
    return {task["id"]: task for task in listed["tasks"]}


def decisions(db: Path) -> list[tuple[str, str, Any]]:
    """(tool, answer, args) of every decision in the journal, oldest first."""
    journal = SQLiteJournal(db, read_only=True)
    try:
        return [(d.tool, d.answer, d.args) for d in reversed(journal.decisions())]
    finally:
        journal.close()


async def test_accept_forwards_the_call_and_journals_it(proxy, registry, proxy_log, tmp_path):
    person = Person("accept")  # asked once: the meta tools below are never put to the person
    async with proxy(registry(), session_options=person.options()) as client:
        task = await client.call_ok("tasks__add_task", {"title": "plain"})
        assert person.asked == [], "add_task needs approval only for 'ask me'"
        done = await client.call_ok("tasks__complete_task", {"id": task["id"]})
        assert done["status"] == "done"
        assert (await tasks(client))[task["id"]]["status"] == "done"
        changes = await client.call_ok("list_changes")
    (question,) = person.asked
    message = question["message"]
    assert "tasks__complete_task" in message
    assert f'{{"id": {task["id"]}}}' in message
    assert "Classification: irreversible." in message
    assert "Undo cannot take it back" in message
    assert question["requestedSchema"] == {"type": "object", "properties": {}}
    assert [c["tool"] for c in changes["changes"]] == ["tasks__complete_task", "tasks__add_task"]
    assert changes["refused"] == []
    assert decisions(tmp_path / "journal.db") == [
        ("tasks__complete_task", "approved", {"id": task["id"]})
    ]
    lines = [line for line in proxy_log().splitlines() if "approvals:" in line]
    assert len(lines) == 1 and "the client supports elicitation" in lines[0]


@pytest.mark.parametrize(("action", "answer"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_declined_call_sends_nothing_and_is_journaled_as_refused(
    proxy, registry, tmp_path: Path, action: str, answer: str
):
    person = Person(action)
    async with proxy(registry(), session_options=person.options()) as client:
        checkpoint = await client.checkpoint()
        task = await client.call_ok("tasks__add_task", {"title": "keep me open"})
        reply = await client.call("tasks__complete_task", {"id": task["id"]})
        assert reply.is_error
        said = "the person declined it" if action == "decline" else "the person cancelled"
        assert said in reply.text and "Nothing was sent to the server" in reply.text
        assert (await tasks(client))[task["id"]]["status"] == "open"
        changes = await client.call_ok("list_changes")
        assert [c["tool"] for c in changes["changes"]] == ["tasks__add_task"]
        (refused,) = changes["refused"]
        assert (refused["tool"], refused["answer"], refused["args"]) == (
            "tasks__complete_task",
            answer,
            {"id": task["id"]},
        )
        # Undo never sees a refusal: it takes back the one change and nothing else.
        report = await client.undo_to(checkpoint)
        assert [c["tool"] for c in report["undone"]] == ["tasks__add_task"]
        assert report["skipped"] == [] and report["nothing_to_undo"] == []
        assert await tasks(client) == {}
        assert len((await client.call_ok("list_changes"))["refused"]) == 1
    assert len(person.asked) == 1
    assert decisions(tmp_path / "journal.db") == [
        ("tasks__complete_task", answer, {"id": task["id"]})
    ]


async def test_deny_never_reaches_the_server_nor_the_person(proxy, registry, tmp_path: Path):
    person = Person()
    async with proxy(registry(), session_options=person.options()) as client:
        task = await client.call_ok("tasks__add_task", {"title": "stays"})
        reply = await client.call("tasks__delete_task", {"id": task["id"]})
        assert reply.is_error
        assert "denied by the registry: deleting is for people" in reply.text
        assert task["id"] in await tasks(client)
        (refused,) = (await client.call_ok("list_changes"))["refused"]
        assert refused["answer"] == "denied"
    assert person.asked == []
    assert decisions(tmp_path / "journal.db") == [
        ("tasks__delete_task", "denied", {"id": task["id"]})
    ]


async def test_approve_when_and_deny_when_select_by_arguments(proxy, registry, tmp_path: Path):
    person = Person("accept")
    async with proxy(registry(), session_options=person.options()) as client:
        await client.call_ok("tasks__add_task", {"title": "plain"})
        assert person.asked == []
        await client.call_ok("tasks__add_task", {"title": "ask me"})
        assert len(person.asked) == 1 and '"title": "ask me"' in person.asked[0]["message"]
        reply = await client.call("tasks__add_task", {"title": "a forbidden one"})
        assert reply.is_error and "deny_when" in reply.text
        titles = sorted(task["title"] for task in (await tasks(client)).values())
    assert titles == ["ask me", "plain"]
    assert len(person.asked) == 1, "a denied call is never put to the person"
    assert [(tool, answer) for tool, answer, _ in decisions(tmp_path / "journal.db")] == [
        ("tasks__add_task", "approved"),
        ("tasks__add_task", "denied"),
    ]


async def test_redacted_arguments_stay_hidden_from_the_person_and_the_journal(
    proxy, registry, tmp_path: Path
):
    person = Person("decline")
    async with proxy(registry(), session_options=person.options()) as client:
        task = await client.call_ok("tasks__add_task", {"title": "old"})
        reply = await client.call("tasks__rename_task", {"id": task["id"], "title": "s3cret"})
        assert reply.is_error
        assert (await tasks(client))[task["id"]]["title"] == "old"
    (question,) = person.asked
    assert "s3cret" not in question["message"] and "[redacted]" in question["message"]
    assert decisions(tmp_path / "journal.db") == [
        ("tasks__rename_task", "declined", {"id": task["id"], "title": "[redacted]"})
    ]


async def test_a_client_without_elicitation_is_refused_by_default(
    proxy, registry, proxy_log, tmp_path: Path
):
    async with proxy(registry()) as client:
        task = await client.call_ok("tasks__add_task", {"title": "toggle me"})
        # toggle_task has no entry: unknown, which defaults.approve lists.
        reply = await client.call("tasks__toggle_task", {"id": task["id"]})
        assert reply.is_error
        assert "needs a person's approval" in reply.text
        assert "did not advertise elicitation" in reply.text
        assert (await tasks(client))[task["id"]]["status"] == "open"
        (refused,) = (await client.call_ok("list_changes"))["refused"]
        assert (refused["tool"], refused["classification"], refused["answer"]) == (
            "tasks__toggle_task",
            "unknown",
            "no-approval-possible",
        )
    lines = [line for line in proxy_log().splitlines() if "approvals:" in line]
    assert len(lines) == 1 and "are refused (defaults.on_no_approval: deny)" in lines[0]


async def test_a_client_without_elicitation_is_forwarded_when_allowed(
    proxy, registry, proxy_log, tmp_path: Path
):
    async with proxy(registry("allow")) as client:
        task = await client.call_ok("tasks__add_task", {"title": "toggle me"})
        toggled = await client.call_ok("tasks__toggle_task", {"id": task["id"]})
        assert toggled["status"] == "done"
        assert (await tasks(client))[task["id"]]["status"] == "done"
        changes = await client.call_ok("list_changes")
        assert [c["tool"] for c in changes["changes"]] == ["tasks__toggle_task", "tasks__add_task"]
        assert changes["refused"] == []
        # A denial still holds: allow is about asking, not about deny.
        assert (await client.call("tasks__delete_task", {"id": task["id"]})).is_error
    lines = [line for line in proxy_log().splitlines() if "approvals:" in line]
    assert len(lines) == 1 and "forwarded without asking" in lines[0]


async def test_compensator_log_shows_the_refusal(proxy, registry, tmp_path: Path):
    person = Person("decline")
    db = tmp_path / "journal.db"
    async with proxy(registry(), db=db, session_options=person.options()) as client:
        task = await client.call_ok("tasks__add_task", {"title": "logged"})
        assert (await client.call("tasks__complete_task", {"id": task["id"]})).is_error
    shown = subprocess.run(
        [sys.executable, "-m", "compensator", "log", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    lines = shown.splitlines()
    refusal = next(line for line in lines if "tasks__complete_task" in line)
    assert "declined by the person" in refusal
    change = next(line for line in lines if "tasks__add_task" in line)
    assert lines.index(refusal) < lines.index(change), "newest first: the refusal came later"
    assert "declined by the person" not in change


async def test_explain_says_what_the_guardrails_do_before_a_call(proxy, registry, tmp_path: Path):
    """An agent that asks before calling learns what the person or the registry will do, and
    `compensator explain` shows the same."""
    async with proxy(registry()) as client:
        explained = {
            tool: await client.call_ok("explain_blast_radius", {"tool": tool})
            for tool in (
                "tasks__delete_task",
                "tasks__add_task",
                "tasks__complete_task",
                "tasks__restore_task",
                "tasks__list_tasks",
            )
        }
    denied = explained["tasks__delete_task"]
    assert denied["guardrails"] == {"deny": "deleting is for people", "approve": False}
    assert "Denied by the registry (deleting is for people)" in denied["explanation"]
    added = explained["tasks__add_task"]
    assert added["guardrails"] == {
        "deny": "when contains(args.title, 'forbidden')",
        "approve": "when args.title == 'ask me'",
    }
    assert "calls where `args.title == 'ask me'` holds" in added["explanation"]
    assert "a client that cannot ask gets it refused" in added["explanation"]
    assert explained["tasks__complete_task"]["guardrails"] == {"deny": False, "approve": True}
    # No entry, so unknown, which defaults.approve lists.
    assert explained["tasks__restore_task"]["guardrails"] == {"deny": False, "approve": True}
    assert explained["tasks__list_tasks"]["guardrails"] == {"deny": False, "approve": False}
    assert "asks the person" not in explained["tasks__list_tasks"]["explanation"]

    explain = [sys.executable, "-m", "compensator", "explain", "--config", str(registry("allow"))]
    shown = subprocess.run(
        [*explain, "tasks__add_task"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    ).stdout
    lines = [" ".join(line.split()) for line in shown.splitlines()]
    assert "denied when contains(args.title, 'forbidden')" in lines
    assert "asks first when args.title == 'ask me'" in lines
    assert "a client that cannot ask gets it sent unasked" in " ".join(lines)


def test_a_long_argument_cannot_push_another_out_of_sight():
    shown = argument_summary(
        {"content": "x" * 1000, "path": "/etc/shadow", "bidi": "a\u202eb"}, None
    )
    assert '"path": "/etc/shadow"' in shown
    assert f'"content": "{"x" * (VALUE_LIMIT - 1)}… ({1002 - VALUE_LIMIT} more characters)' in shown
    assert '"bidi": "a\\u202eb"' in shown and "\u202e" not in shown


async def test_a_person_who_never_answers_refuses_the_call(
    proxy, registry, write_registry, proxy_log, tmp_path: Path
):
    """The question is dropped after `approval_timeout`: the call is refused and unsent, and a
    late answer changes nothing. (The person answers only once the proxy has given up: mcp 1.x
    clients handle a request inline, so one that never answered would never read the result.)"""
    text = REGISTRY.replace("@ON_NO_APPROVAL@", "deny").replace(
        "  on_no_approval:", "  approval_timeout: 0.5\n  on_no_approval:"
    )
    asked = anyio.Event()

    async def late(context: Any, params: Any) -> Any:
        asked.set()
        with anyio.fail_after(60):
            while "refused (no-approval-possible)" not in proxy_log():
                await anyio.sleep(0.05)  # until the proxy has logged that it gave up
        return types.ElicitResult(action="accept")

    async with proxy(
        write_registry(text), session_options={"elicitation_callback": late}
    ) as client:
        task = await client.call_ok("tasks__add_task", {"title": "plain"})
        refused = await client.call("tasks__complete_task", {"id": task["id"]})
        assert asked.is_set()
        assert refused.is_error and "did not answer within 0.5 s" in refused.text
        assert (await tasks(client))[task["id"]]["status"] != "done", "nothing was sent"
    assert decisions(tmp_path / "journal.db")[-1][:2] == (
        "tasks__complete_task",
        "no-approval-possible",
    )
