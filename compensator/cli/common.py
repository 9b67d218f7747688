"""What several subcommands share: where the journal is, and how its timestamps, values and
checkpoints read to a person."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import CompensatorError
from ..journal import Checkpoint
from ..names import CLIENT_NAME

if TYPE_CHECKING:
    from ..clients import Source
    from ..journal import JournalStore
    from ..journal.retention import Collected
    from ..wire.http_serve import HttpEndpoint

__all__ = [
    "Refused",
    "ServeOptions",
    "add_agent_argument",
    "add_client_arguments",
    "add_registry_arguments",
    "agent_name",
    "before_moment",
    "checkpoint_title",
    "client_sources",
    "compact",
    "db_argument",
    "describe_collected",
    "journal_id",
    "journal_path",
    "local_time",
    "no_such_checkpoint",
    "plural",
    "refuse",
]


@dataclass(frozen=True)
class ServeOptions:
    """How `compensator serve` serves, besides its registry and journal: what
    compensator/cli/serve.py reads from the command line and compensator/cli/serving.py uses."""

    fsync: bool = False
    http: HttpEndpoint | None = None
    """Serve any number of clients over streamable HTTP there; None: one client over stdio."""
    client_name: str = CLIENT_NAME
    """What the client calls the proxy, for the start-up warning about long tool names."""
    agent: str | None = None
    """The agent this proxy works for; None: it continues the last one that ended."""
    scope: str | None = None
    """The shared journal scope it joins; None: none."""


class Refused(CompensatorError):
    """`serve` could not start, and has said why (see `refuse`); exit with 2."""


async def refuse(error: CompensatorError, options: ServeOptions) -> NoReturn:
    """Say why `serve` cannot start: on stderr, and over stdio to the client as well, which
    shows a proxy that just exits as "Connection closed" (compensator/wire/unavailable.py).
    Returns once the client has gone, by raising Refused. Over HTTP, or with a terminal on
    stdin (a person trying the command), stderr is where the person looks."""
    print(f"compensator: {error}", file=sys.stderr, flush=True)
    if options.http is None and not sys.stdin.isatty():
        from .. import __version__
        from ..wire.unavailable import serve_unavailable  # the SDK, only on this path

        await serve_unavailable(str(error), __version__)
    raise Refused(str(error)) from error


def add_registry_arguments(parser: argparse.ArgumentParser, *, db_help: str) -> None:
    """`--config REGISTRY` (required) and `--db JOURNAL`, as the subcommands that act on a
    registry's journal take them."""
    parser.add_argument("--config", required=True, type=Path, help="the registry YAML file")
    parser.add_argument("--db", type=db_argument, default=None, help=db_help)


def db_argument(text: str) -> str | Path:
    """`--db`'s value as a journal address; a usage error for a URL that is not PostgreSQL's."""
    from ..journal import journal_address  # here: `--help` starts without the stores

    try:
        return journal_address(text)
    except CompensatorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_agent_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--agent", metavar="NAME", default=None, help=help)


def agent_name(agent: str | None) -> str:
    """How a change's agent reads: `agent 3f2a9c1b`, or `a person` for none."""
    return "a person" if agent is None else f"agent {agent}"


def plural(count: int, noun: str) -> str:
    """`1 change`, `2 changes`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def journal_path(db: str | Path | None, config: Path | None) -> str | Path:
    """`--db`, else where `serve --config` keeps its journal ($COMPENSATOR_DB, else per config):
    a file path, or a PostgreSQL URL."""
    if db is not None:
        return db
    if config is None:
        raise CompensatorError("pass --db JOURNAL, or --config REGISTRY to use its journal")
    from ..journal import default_journal_path  # here: `--help` starts without the stores

    return default_journal_path(config)


def local_time(iso: str) -> str:
    """A journal timestamp (UTC, ISO 8601) in this machine's time zone, to the second."""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def compact(value: Any) -> str:
    """JSON on one line, readable: `{"id": 3, "title": "x"}`."""
    return json.dumps(value, ensure_ascii=False, default=str)


def checkpoint_title(checkpoint: Checkpoint) -> str:
    """`checkpoint 3 "label" (time)`; a turn's shows its prompt's first line as it was typed:
    `turn: fix the tests (checkpoint 3, time)`."""
    when = local_time(checkpoint.created_at)
    if checkpoint.turn is not None:
        return f"turn: {checkpoint.turn} (checkpoint {checkpoint.id}, {when})"
    label = f" {compact(checkpoint.label)}" if checkpoint.label else ""
    return f"checkpoint {checkpoint.id}{label} ({when})"


def no_such_checkpoint(journal: JournalStore, checkpoint_id: int) -> str:
    """The error for an unknown checkpoint id, listing the valid ones (newest first)."""
    known = journal.checkpoints()
    if not known:
        return (
            f"no checkpoint {checkpoint_id} in {journal.location}: it has none yet "
            "(an agent takes one with the `checkpoint` tool)"
        )
    shown = "; ".join(checkpoint_title(cp) for cp in known[:20])
    more = f"; and {len(known) - 20} older" if len(known) > 20 else ""
    return f"no checkpoint {checkpoint_id} in {journal.location}. Valid checkpoints: {shown}{more}"


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """`--from FILE` and `--project DIR`: which client configurations `init`, `wire` and
    `unwire` read."""
    parser.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        metavar="FILE",
        help="read only this client configuration (an .mcp.json, claude_desktop_config.json, "
        ".vscode/mcp.json, .cursor/mcp.json or ~/.claude.json) instead of looking for them",
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=Path.cwd(),
        metavar="DIR",
        help="the project whose configurations are read (.mcp.json, .vscode/mcp.json, "
        ".cursor/mcp.json, and its entry in ~/.claude.json); default: this directory",
    )


def client_sources(from_file: Path | None, project: Path) -> list[Source]:
    # Imported here: reading clients' configurations is for init and wire alone, and costs
    # the other subcommands' start-up (YAML among it).
    from ..clients import discover, sources_of

    """The server lists of --from FILE, else every one found for the project and this user.
    Raises CompensatorError when there is none."""
    if from_file is not None:
        return sources_of(from_file)
    found = discover(project, Path.home())
    if not found:
        raise CompensatorError(
            f"found no MCP client configuration for {project.resolve()}: looked for "
            ".mcp.json, .vscode/mcp.json and .cursor/mcp.json there, and for ~/.claude.json, "
            "~/.cursor/mcp.json and Claude Desktop's claude_desktop_config.json. Name one "
            "with --from FILE"
        )
    return found


def before_moment(seconds: float, now: datetime | None = None) -> str:
    """The moment `seconds` before `now`, as the journal writes times (ISO 8601, UTC)."""
    moment = (now or datetime.now(timezone.utc)) - timedelta(seconds=seconds)
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def describe_collected(found: Collected) -> str:
    """What gc dropped (or would drop), and what it kept though older, for a person."""
    since = local_time(found.before)
    if not found.records:
        text = f"Nothing made before {since} may go."
    else:
        verb = "Would drop" if found.dry_run else "Dropped"
        parts = [
            plural(found.changes, "change")
            + (
                f" ({found.never_undone} never undone: beyond undo now)"
                if found.never_undone
                else ""
            ),
            plural(found.compensations, "compensating step"),
            plural(found.checkpoints, "checkpoint"),
            plural(found.decisions, "decision"),
        ]
        text = f"{verb} what was made before {since}: {', '.join(parts)}."
    kept = []
    if found.unsettled:
        kept.append(f"{plural(found.unsettled, 'change')} not settled (`compensator log`)")
    if found.pinned:
        kept.append(f"{plural(found.pinned, 'change')} after a kept checkpoint")
    if kept:
        text += f" Kept though older: {', '.join(kept)}."
    return text


def journal_id(what: str, listed: str) -> Callable[[str], int]:
    """An argparse type for a checkpoint or change id: a whole number from 1 to SQLite's
    largest integer (a bigger one would end in an OverflowError deep in the journal)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= 2**63 - 1:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a {what} id; `compensator log` lists them{listed}"
            )
        return value

    return parse
