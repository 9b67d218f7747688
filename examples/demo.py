"""Ctrl+Z for an agent, end to end: a real proxy in front of a real task server.

Run it from anywhere:  python examples/demo.py
It works in a fresh temporary directory and leaves nothing behind. It exits 1 unless the
state after undo_to equals the state at the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from pytest_compensator.client import ProxyClient, launch_proxy

HERE = Path(__file__).resolve().parent
REGISTRY = HERE / "compensators.yaml"


def show(step: str, detail: Any = None) -> None:
    print(f"\n== {step}")
    if detail is not None:
        print(json.dumps(detail, indent=2))


async def snapshot(client: ProxyClient) -> list[dict[str, Any]]:
    tasks = (await client.call_ok("tasks__list_tasks"))["tasks"]
    return sorted(tasks, key=lambda task: task["id"])


def table(tasks: list[dict[str, Any]]) -> str:
    rows = [f"  #{t['id']:<3} {t['status']:<5} {t['title']}" for t in tasks]
    return "\n".join(rows) or "  (no tasks)"


async def story(client: ProxyClient) -> bool:
    show("The user already has a project with two subtasks")
    project = await client.call_ok("tasks__add_task", {"title": "Quarterly report"})
    for title in ("Collect numbers", "Draft summary"):
        await client.call_ok("tasks__add_task", {"title": title, "parent_id": project["id"]})
    before = await snapshot(client)
    print(table(before))

    checkpoint = await client.checkpoint("before the agent starts")
    show(f"checkpoint -> {checkpoint}")

    show("The agent adds two tasks")
    first = await client.call_ok("tasks__add_task", {"title": "Book meeting room"})
    second = await client.call_ok("tasks__add_task", {"title": "Send invites"})
    print(f"  added #{first['id']} and #{second['id']}")

    show(f"The agent completes #{first['id']}")
    await client.call_ok("tasks__complete_task", {"id": first["id"]})

    show(f"The mistake: the agent deletes #{project['id']}, cascading over its subtasks")
    deleted = await client.call_ok("tasks__delete_task", {"id": project["id"]})
    print(f"  deleted {deleted['deleted']}")
    print(table(await snapshot(client)))

    show("What the journal holds since the checkpoint (list_changes)")
    for change in await client.list_changes(checkpoint):
        print(f"  change {change['id']}: {change['tool']} {json.dumps(change['args'])}")

    show(f"undo_to({checkpoint})")
    report = await client.undo_to(checkpoint)
    for change in report["undone"]:
        calls = ", ".join(f"{c['tool']}({json.dumps(c['args'])})" for c in change["calls"])
        print(f"  undid change {change['id']} {change['tool']} with {calls or 'nothing needed'}")
    for change in report["skipped"]:
        print(f"  SKIPPED change {change['id']} {change['tool']}: {change['reason']}")

    after = await snapshot(client)
    show("State after undo")
    print(table(after))
    return after == before and not report["skipped"]


async def main(registry: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="compensator-demo-") as tmp:
        env = {"COMPENSATOR_WORKDIR": tmp}
        journal = Path(tmp) / "journal.db"
        with (Path(tmp) / "proxy.log").open("w") as log:
            async with launch_proxy(registry, journal, env=env, cwd=tmp, stderr=log) as client:
                restored = await story(client)
    if restored:
        print("\nOK: the state after undo equals the state at the checkpoint.")
        return 0
    print("\nFAILED: the state after undo differs from the state at the checkpoint.")
    return 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, default=REGISTRY, help="registry to use (default: %(default)s)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args().config.resolve()))
