"""Deliberately broken variants of examples/compensators.yaml: the plugin must catch each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write_example(folder: Path, name: str, edit: Callable[[str], str] = str) -> Path:
    """Write an edited copy of examples/compensators.yaml that still finds the example server."""
    text = edit((EXAMPLES / "compensators.yaml").read_text())
    text = text.replace('"tasks_server.py"', f'"{EXAMPLES / "tasks_server.py"}"')
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def cut(text: str, start: str, end: str) -> str:
    """The text without the part from `start` up to (not including) `end`."""
    return text[: text.index(start)] + text[text.index(end) :]


UNDO_FAILED = "did not restore the state at the checkpoint"


@dataclass(frozen=True)
class Variant:
    name: str
    tool: str  # the tool whose policy is broken: a failure report must name it
    old: str
    new: str
    says: str = UNDO_FAILED  # what the failure report says went wrong
    caught_by: str = ""  # `-k` for the generated tests that catch it (default: its round trip)

    @property
    def selection(self) -> str:
        return self.caught_by or f"roundtrip and {self.tool}"

    def edit(self, text: str) -> str:
        assert self.old in text, f"variant {self.name} no longer applies to compensators.yaml"
        return text.replace(self.old, self.new, 1)

    def write(self, folder: Path) -> Path:
        return write_example(folder, self.name, self.edit)


VARIANTS = (
    Variant(
        # Built from args alone: removes the label even when the call found it already there.
        name="inverse_from_args",
        tool="tasks__add_label",
        old='        when: "result.created"   # re-adding an existing label changes nothing\n',
        new="",
    ),
    Variant(
        # The snapshot sees the task but not the subtasks its delete cascades over.
        name="snapshot_misses_cascade",
        tool="tasks__delete_task",
        old=(
            "    snapshot_tool: tasks__get_task_tree\n"
            '    snapshot_args: {id: "{args.id}"}\n'
            "    inverse:\n"
            "      - tool: tasks__restore_task\n"
            "        args:\n"
            '          id: "{snapshot.task.id}"\n'
            '          title: "{snapshot.task.title}"\n'
            '          status: "{snapshot.task.status}"\n'
            '          parent_id: "{snapshot.task.parent_id}"\n'
            "      - tool: tasks__restore_tasks\n"
            '        args: {tasks: "{snapshot.children}"}\n'
            '        when: "length(snapshot.children) > `0`"\n'
        ),
        new=(
            "    snapshot_tool: tasks__get_task\n"
            '    snapshot_args: {id: "{args.id}"}\n'
            "    inverse_tool: tasks__restore_task\n"
            "    inverse_args:\n"
            '      {id: "{snapshot.id}", title: "{snapshot.title}", status: "{snapshot.status}",\n'
            '       parent_id: "{snapshot.parent_id}"}\n'
        ),
    ),
    Variant(
        # The inverse calls the wrong tool: completing again instead of restoring the status.
        name="wrong_inverse_tool",
        tool="tasks__complete_task",
        old='    inverse_tool: tasks__set_status\n    inverse_args: {id: "{args.id}", status: '
        '"{snapshot.status}"}\n\n  tasks__uncomplete_task:',
        new='    inverse_tool: tasks__complete_task\n    inverse_args: {id: "{args.id}"}\n\n'
        "  tasks__uncomplete_task:",
    ),
    Variant(
        # A multi-step inverse that lost its second step: subtasks are never re-inserted.
        name="dropped_step",
        tool="tasks__delete_task",
        old='      - tool: tasks__restore_tasks\n        args: {tasks: "{snapshot.children}"}\n'
        '        when: "length(snapshot.children) > `0`"\n',
        new="",
    ),
    Variant(
        # A tool that writes, classified read: never journaled, so undo misses what it did.
        name="read_that_writes",
        tool="tasks__complete_task",
        old=(
            "  tasks__complete_task:\n"
            "    classification: compensable\n"
            "    snapshot_tool: tasks__get_task\n"
            '    snapshot_args: {id: "{args.id}"}\n'
            "    inverse_tool: tasks__set_status\n"
            '    inverse_args: {id: "{args.id}", status: "{snapshot.status}"}\n'
        ),
        new="  tasks__complete_task: {classification: read}\n",
        says="tasks__complete_task changed the state, but it is classified `read`",
        # Any round trip whose pre-state completes a task catches it. With test_plugin's seed
        # add_task's does so in seconds; running every round trip with -x took 350 s.
        caught_by="roundtrip and tasks__add_task",
    ),
    Variant(
        # The condition is inverted: real renames are treated as reads, dry runs journaled.
        name="mutating_when_inverted",
        tool="tasks__rename_task",
        old='    mutating_when: "!(args.dry_run)"',
        new='    mutating_when: "args.dry_run"',
        says="tasks__rename_task changed the state, but its mutating_when `args.dry_run` is false",
    ),
    Variant(
        # A compensation that toggles is correct once and wrong when repeated after a crash.
        name="idempotent_toggle",
        tool="tasks__toggle_task",
        old='    inverse_tool: tasks__toggle_task\n    inverse_args: {id: "{args.id}"}\n',
        new='    inverse_tool: tasks__toggle_task\n    inverse_args: {id: "{args.id}"}\n'
        "    idempotent: true\n",
        says="tasks__toggle_task is marked `idempotent: true`, but running it a second time",
    ),
    Variant(
        # Too broad: it also matches successful calls, which are then journaled as failed
        # and never compensated.
        name="error_when_matches_success",
        tool="tasks__set_status",
        old='    error_when: "result.ok == `false`"',
        new="    error_when: \"result.ok == `false` || args.status == 'done'\"",
        # Either a call it judged failed changed the state, or it judged undo's own
        # set_status(done) a failure: which one a seed meets first varies.
        says="its error_when `result.ok == `false` || args.status == 'done'` matched",
    ),
)
