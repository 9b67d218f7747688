"""Deliberately broken variants of examples/compensators.yaml: the plugin must catch each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@dataclass(frozen=True)
class Variant:
    name: str
    tool: str  # the tool whose policy is broken: a failure report must name it
    old: str
    new: str

    def write(self, folder: Path) -> Path:
        text = (EXAMPLES / "compensators.yaml").read_text()
        assert self.old in text, f"variant {self.name} no longer applies to compensators.yaml"
        text = (
            text.replace(self.old, self.new, 1)
            if self.new or "\n" in self.old
            else (_drop_line(text, self.old))
        )
        # The copy lives elsewhere: point it at the example server by absolute path.
        text = text.replace('"tasks_server.py"', f'"{EXAMPLES / "tasks_server.py"}"')
        path = folder / f"{self.name}.yaml"
        path.write_text(text)
        return path


def _drop_line(text: str, start: str) -> str:
    """Remove the whole line that begins with `start`."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(start))


VARIANTS = (
    Variant(
        # Built from args alone: removes the label even when the call found it already there.
        name="inverse_from_args",
        tool="tasks__add_label",
        old='        when: "result.created"     # adding an existing label is a no-op',
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
)
