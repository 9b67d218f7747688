"""`compensator log`: a journal's checkpoints and changes, newest first, for a person or a script.

It opens the journal read-only, so it is safe on a journal a running proxy is writing, and it
never creates one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CompensatorError
from ..journal import Answer, Change, Checkpoint, Decision, Session, Status
from .common import (
    add_agent_argument,
    agent_name,
    checkpoint_title,
    compact,
    db_argument,
    journal_path,
    local_time,
    no_such_checkpoint,
    plural,
)
from .terminal import Cell, Column, Rule, Styler, render_table, terminal_width

if TYPE_CHECKING:
    from ..journal import JournalStore
    from ..journal.chain import Verdict
    from ..proxy.late import LatePolicy

__all__ = ["ANSWER_TEXT", "LOG_EPILOG", "Listing", "add_log_arguments", "run_log", "select"]

ANSWER_TEXT = {
    Answer.APPROVED: "approved by the person",
    Answer.DECLINED: "declined by the person",
    Answer.CANCELLED: "cancelled, not run",
    Answer.DENIED: "denied by the registry",
    Answer.NO_APPROVAL: "refused: nobody could approve",
}
"""How the STATUS column shows a decision (a call asked about, or refused unasked)."""

_STATUS_STYLES = {Status.OK: "green", Status.ERROR: "red"}
_COLUMNS = (
    Column(header="TIME"),
    Column(header="CP"),
    Column(header="CHANGE"),
    Column(header="TOOL", overflow="truncate", min_width=16),
    Column(header="CLASS"),
    Column(header="STATUS"),
    Column(header="ARGS", overflow="truncate", min_width=16),
)
_AGENT_COLUMN = Column(header="AGENT", overflow="truncate", min_width=8)
_FROM_COLUMN = Column(header="FROM", overflow="truncate", min_width=12)


@dataclass(frozen=True, kw_only=True)
class Listing:
    """What `log` shows: checkpoints and changes newest first, and how many it left out."""

    journal: str
    """Where the journal is, as its store names it."""
    checkpoints: list[Checkpoint]
    changes: list[Change]
    decisions: list[Decision] = field(default_factory=list)
    """Calls a person approved or refused, and calls the registry denied (never changes)."""
    hidden_undone: int = 0
    hidden_failed: int = 0
    sessions: list[Session] = field(default_factory=list)
    """Every session that wrote the journal: the host and process each change came from."""
    show_sessions: bool = False
    """Say on every change which host and session it came from, and list the sessions."""
    late: dict[int, LatePolicy] = field(default_factory=dict)
    """Open changes journaled as `unknown` whose tool has a policy in the registry now, by id
    (compensator/proxy/late.py); only with --config."""

    def origin(self, session: str | None) -> str:
        """`HOST session-id-prefix` of a session, for the FROM column."""
        found = {s.id: s for s in self.sessions}.get(session or "")
        if found is None:
            return "-" if session is None else session[:8]
        return f"{found.host} {found.id[:8]}"


# -- selection ----------------------------------------------------------------------------


def select(
    journal: JournalStore,
    *,
    checkpoint_id: int | None,
    everything: bool,
    agent: str | None = None,
    show_sessions: bool = False,
) -> Listing:
    """Open changes that did something (all changes with `everything`), after a checkpoint
    when one is given, of one agent when one is given; the checkpoints taken from that one on."""
    floor = journal.checkpoint(checkpoint_id) if checkpoint_id is not None else None
    if checkpoint_id is not None and floor is None:
        raise CompensatorError(no_such_checkpoint(journal, checkpoint_id))
    after = 0 if floor is None else floor.last_change_id
    changes = [c for c in journal.all_changes() if c.id > after and agent in (None, c.agent)]
    checkpoints = [cp for cp in journal.checkpoints(agent) if floor is None or cp.id >= floor.id]
    decisions = journal.decisions(floor, agent=agent)
    sessions = journal.sessions()
    # Changes from more than one host: where each came from matters, so say it unasked.
    hosts = {s.host for s in sessions if s.id in {c.session for c in changes}}
    origins: dict[str, Any] = {
        "sessions": sessions,
        "show_sessions": show_sessions or len(hosts) > 1,
    }
    if everything:
        return Listing(
            journal=journal.location,
            checkpoints=checkpoints,
            changes=changes,
            decisions=decisions,
            **origins,
        )
    undone = [c for c in changes if c.undone_at is not None]
    failed = [c for c in changes if c.undone_at is None and c.status == Status.ERROR]
    shown = [c for c in changes if c.undone_at is None and c.status != Status.ERROR]
    return Listing(
        journal=journal.location,
        checkpoints=checkpoints,
        changes=shown,
        decisions=decisions,
        hidden_undone=len(undone),
        hidden_failed=len(failed),
        **origins,
    )


Entry = Checkpoint | Change | Decision


def timeline(listing: Listing) -> list[Entry]:
    """Changes, checkpoints and decisions in one list, newest first: a checkpoint sits just
    above the last change made before it, a decision above the last change and checkpoint
    recorded before it."""

    def key(entry: Entry) -> tuple[int, int, int, int, int]:
        if isinstance(entry, Checkpoint):
            return (entry.last_change_id, 1, entry.id, 0, 0)
        if isinstance(entry, Decision):
            return (entry.last_change_id, 1, entry.last_checkpoint_id, 1, entry.id)
        return (entry.id, 0, 0, 0, 0)

    entries: list[Entry] = [*listing.changes, *listing.checkpoints, *listing.decisions]
    return sorted(entries, key=key, reverse=True)


# -- output -------------------------------------------------------------------------------


def status_text(change: Change) -> str:
    if change.undone_at is None:
        return change.status
    if change.undo_note == "compensated":
        return "compensated"
    if (change.undo_note or "").startswith("compensated with"):
        return "compensated (policy added later)"
    return f"{change.status}, undone"


def render_table_view(listing: Listing, *, width: int, style: Styler) -> str:
    lines = [f"compensator log: {listing.journal}", ""]
    if listing.changes or listing.checkpoints or listing.decisions:
        # Several agents' changes: a column says whose each one is.
        agents = {c.agent for c in listing.changes} | {d.agent for d in listing.decisions}
        several = len(agents) > 1
        entries = timeline(listing)
        rows = [_row(entry, style, width, several, listing.late) for entry in entries]
        columns = (*_COLUMNS[:3], _AGENT_COLUMN, *_COLUMNS[3:]) if several else _COLUMNS
        if listing.show_sessions:
            rows = [
                _with_origin(row, entry, listing) for row, entry in zip(rows, entries, strict=True)
            ]
            columns = (*columns[:3], _FROM_COLUMN, *columns[3:])
        lines.extend(render_table(columns, rows, width=width, style=style))
    else:
        lines.append("The journal holds no checkpoints and no changes yet.")
    if listing.show_sessions and listing.sessions:
        lines.extend(["", *_session_lines(listing.sessions)])
    footer = _hidden(listing)
    if footer:
        lines.extend(["", style(footer, "dim")])
    return "\n".join(lines)


def _row(
    entry: Entry, style: Styler, width: int, several: bool, late: dict[int, LatePolicy]
) -> Sequence[str | Cell] | Rule:
    if isinstance(entry, Decision):
        return _decision_row(entry, several)
    if isinstance(entry, Checkpoint):
        whose = f"by {agent_name(entry.agent)} " if several else ""
        title = f"── {checkpoint_title(entry)} {whose}"
        return Rule(text=title + "─" * max(width - len(title), 0), style="cyan")
    undone = entry.undone_at is not None
    status_style = "dim" if undone else _STATUS_STYLES.get(entry.status, "yellow")
    agent = [agent_name(entry.agent)] if several else []
    return [
        local_time(entry.created_at),
        "-" if entry.checkpoint_id is None else str(entry.checkpoint_id),
        str(entry.id),
        *agent,
        entry.tool,
        _classification(entry, late.get(entry.id)),
        Cell(text=status_text(entry), style=status_style),
        compact(entry.args),
    ]


def _with_origin(
    row: Sequence[str | Cell] | Rule, entry: Entry, listing: Listing
) -> Sequence[str | Cell] | Rule:
    """The row with the FROM column (host and session) after CHANGE."""
    if isinstance(row, Rule):
        return row
    return [*row[:3], listing.origin(entry.session), *row[3:]]


def _session_lines(sessions: list[Session]) -> list[str]:
    lines = ["sessions (oldest first):"]
    for session in sessions:
        ended = "running" if session.alive else f"ended {local_time(session.ended_at or '')}"
        if not session.alive and session.ended_at is None:
            ended = "gone (its process stopped without ending it)"
        scope = f", scope {session.scope}" if session.scope else ""
        lines.append(
            f"  {session.host} {session.id[:8]}  {agent_name(session.agent)}{scope}, "
            f"pid {session.pid}, started {local_time(session.started_at)}, {ended}"
        )
    return lines


def _decision_row(decision: Decision, several: bool) -> Sequence[str | Cell]:
    """A call asked about or refused: no change id, its answer where a change's status is."""
    text = ANSWER_TEXT.get(decision.answer, decision.answer)
    return [
        local_time(decision.created_at),
        "-",
        "-",
        *([agent_name(decision.agent)] if several else []),
        decision.tool,
        decision.classification,
        Cell(text=text, style="red" if decision.refused else "cyan"),
        compact(decision.args),
    ]


def _hidden(listing: Listing) -> str:
    parts = []
    if listing.hidden_undone:
        parts.append(plural(listing.hidden_undone, "undone change"))
    if listing.hidden_failed:
        parts.append(plural(listing.hidden_failed, "failed call"))
    if not parts:
        return ""
    return f"{' and '.join(parts)} not shown; --all shows them."


def render_json(listing: Listing) -> str:
    hosts = {session.id: session.host for session in listing.sessions}
    document = {
        "journal": str(listing.journal),
        "checkpoints": [
            {**cp.to_json(), "last_change_id": cp.last_change_id, "agent": cp.agent}
            for cp in listing.checkpoints
        ],
        "changes": [
            {
                **_change_json(change, listing.late.get(change.id)),
                "host": hosts.get(change.session or ""),
            }
            for change in listing.changes
        ],
        "decisions": [
            {**d.to_json(), "refused": d.refused, "session": d.session} for d in listing.decisions
        ],
        "hidden": {"undone": listing.hidden_undone, "failed": listing.hidden_failed},
        "sessions": [session.to_json() for session in listing.sessions],
    }
    return json.dumps(document, indent=2, ensure_ascii=False, default=str)


_JSON_EXTRAS = ("error", "completed_at", "undone_at", "undo_note", "session", "scope")
"""What `log --json` shows of a change beyond what `list_changes` does."""


def _change_json(change: Change, late: LatePolicy | None = None) -> dict[str, Any]:
    shown = {**change.to_json(), **{name: getattr(change, name) for name in _JSON_EXTRAS}}
    if late is not None:
        shown["policy_added_later"] = late.note  # as list_changes says it
    return shown


def _classification(change: Change, late: LatePolicy | None) -> str:
    """The CLASS cell: what the change was journaled as, and the policy its tool has now
    when that came later (`unknown→reversible`); undo uses it only when it is reversible."""
    if late is None:
        return change.classification
    return f"{change.classification}→{late.policy.classification.value}"


# -- command line -------------------------------------------------------------------------

LOG_EPILOG = """\
examples:
  compensator log --config compensators.yaml          # the journal `serve --config` writes
  compensator log --db ./journal.db --checkpoint 3     # only what came after checkpoint 3
  compensator log --db ./journal.db --all              # undone changes and failed calls too
  compensator log --db ./journal.db --json | jq '.changes[].tool'
  compensator log --db postgresql://me@db.internal/journal --sessions   # a team's journal
  compensator log --config compensators.yaml --verify  # has anyone rewritten the journal?

Changes are listed newest first with the checkpoints between them, and the calls a person
was asked to approve or the registry denied (CHANGE "-"; STATUS says "approved by the
person", "declined by the person", "denied by the registry", ...): a refused call changed
nothing and is never undone. When several agents
share the journal, an AGENT column says whose each change is (a restarted proxy continues its
agent); --agent NAME shows one agent's. When the changes came from more than one host, or
with --sessions, a FROM column gives the host and session of each, and the sessions are
listed below (host, agent, scope, process, when they ran). The journal is opened read-only:
it is safe while a proxy writes it, and a missing journal is an error (exit 1).

--verify checks the journal's hash chain instead: every write to a checkpoint, change,
decision or compensating step is a link holding the hash of what was written and of the link
before it. It says that the chain holds, with the number of links and the last one's hash
(exit 0), or names the first link or record that breaks it (exit 1): a record changed,
deleted or added since it was written, or a link changed, removed or added. With
$COMPENSATOR_JOURNAL_KEY set when the proxy wrote the journal, the hashes are HMACs and the
same key must be set to verify; without a key, someone who rewrites the whole chain goes
unnoticed. A journal cut back to an earlier point still holds, but ends at another hash:
keep the last line of an earlier --verify to compare.
"""


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        type=db_argument,
        default=None,
        help="the journal: a file, or a postgresql:// URL",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the registry `serve` runs with: use its journal ($COMPENSATOR_DB, else the "
        "file per config under $XDG_STATE_HOME/mcp-compensator); --db wins when both are given",
    )
    parser.add_argument(
        "--checkpoint", type=int, default=None, metavar="N", help="only changes after checkpoint N"
    )
    parser.add_argument(
        "--all", action="store_true", help="include undone changes and failed calls"
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON (checkpoints and changes, full args)"
    )
    add_agent_argument(parser, "only this agent's checkpoints and changes (default: every agent's)")
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="say which host and session each change came from, and list every session",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check the journal's hash chain: that no record was changed, deleted or added "
        "since it was written (exit 1 names the first that was)",
    )


def _print_verdict(verdict: Verdict, location: str, as_json: bool) -> int:
    """Say what `log --verify` found; exit 0 when the chain holds, else 1."""
    head = None if verdict.head is None else {"link": verdict.head[0], "hash": verdict.head[1]}
    if as_json:
        shown = {
            "journal": location,
            "holds": verdict.holds,
            "links": verdict.links,
            "keyed": verdict.keyed,
            "last": head,
            "problem": verdict.problem,
            "problems": verdict.problems,
        }
        print(json.dumps(shown, indent=2))
    elif verdict.holds:
        kind = "HMAC-SHA256, keyed" if verdict.keyed else "SHA-256, not keyed"
        last = "" if head is None else f"; the last is link {head['link']}, {head['hash']}"
        print(f"the journal's chain holds: {plural(verdict.links, 'link')} ({kind}){last}")
        print(f"journal: {location}")
    else:
        more = verdict.problems - 1
        also = f" ({plural(more, 'more problem')} after it)" if more else ""
        print(f"the journal's chain is broken: {verdict.problem}{also}")
        print(f"journal: {location}")
    return 0 if verdict.holds else 1


def _late_policies(config: Path, changes: Sequence[Change]) -> dict[int, LatePolicy]:
    """The open changes journaled as `unknown` whose tool has a policy in `config` now. A
    registry that does not load is said on stderr, and the listing goes on without them."""
    from ..proxy.late import late_policy  # here: `log --help` starts without the registry
    from ..registry import load_registry, registry_environment

    try:
        registry = load_registry(config, environ=registry_environment(starts_servers=False))
    except CompensatorError as exc:
        print(
            f"compensator log: the registry is not read ({exc}); policies added after a "
            "change are not shown",
            file=sys.stderr,
        )
        return {}
    found = {c.id: late_policy(c, registry) for c in changes if c.undone_at is None}
    return {change_id: late for change_id, late in found.items() if late is not None}


def run_log(args: argparse.Namespace) -> int:
    """Exit 0 with the listing; 1 when the journal or the checkpoint does not exist."""
    if args.db is None and args.config is None:
        print("compensator log: pass --db JOURNAL, or --config REGISTRY", file=sys.stderr)
        return 2
    from ..journal import open_journal  # here: `log --help` starts without the stores

    journal: JournalStore | None = None
    try:
        if args.db is None and not os.environ.get("COMPENSATOR_DB") and not args.config.is_file():
            # The journal's name is derived from the registry's path: a mistyped path would
            # only be reported as a journal that does not exist.
            raise CompensatorError(
                f"--config {args.config}: no such file; pass the registry `serve --config` "
                "was given, or the journal itself with --db"
            )
        journal = open_journal(journal_path(args.db, args.config), read_only=True)
        if args.verify:
            from ..journal.chain import journal_key

            return _print_verdict(journal.verify_chain(journal_key()), journal.location, args.json)
        listing = select(
            journal,
            checkpoint_id=args.checkpoint,
            everything=args.all,
            agent=args.agent,
            show_sessions=args.sessions,
        )
        if args.config is not None:
            listing = replace(listing, late=_late_policies(args.config, listing.changes))
    except CompensatorError as exc:
        print(f"compensator log: {exc}", file=sys.stderr)
        return 1
    finally:
        if journal is not None:
            journal.close()
    if args.json:
        print(render_json(listing))
    else:
        print(
            render_table_view(listing, width=terminal_width(), style=Styler.for_stream(sys.stdout))
        )
    return 0
