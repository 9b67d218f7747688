"""The `compensator` command line: one module per subcommand, and the table that lists them.

A subcommand is a module here with `add_<name>_arguments(parser)`, `run_<name>(args) -> exit
code` and, when it has examples, `<NAME>_EPILOG`, plus one `_Command` entry below. Only the
module of the subcommand being run is imported (the others are named in `--help` from the
table alone), so `--version`, `--help` and `log` start without importing the MCP SDK.
`common.py` and `terminal.py` hold what several subcommands share. This is the top layer: it
may import every other part of the package.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from .. import __version__

__all__ = ["main"]

_EPILOG = """\
examples:
  compensator init
  compensator wire --config compensators.yaml
  compensator serve --config compensators.yaml
  compensator serve --config compensators.yaml --db ./journal.db
  compensator serve --config compensators.yaml --http 127.0.0.1:8765
  compensator serve --config compensators.yaml --http 0.0.0.0:8765 --token-env MY_TOKEN
  compensator check --config compensators.yaml
  compensator check --config compensators.yaml --json
  compensator infer --config compensators.yaml
  compensator log --config compensators.yaml
  compensator undo --config compensators.yaml --to 3 --dry-run
  compensator redo --config compensators.yaml --to 3 --dry-run
  compensator gc --config compensators.yaml --older-than 30d --dry-run
  compensator explain --config compensators.yaml tasks__delete_task

Point your MCP client at `compensator serve` instead of at the servers themselves
(with --http, at http://127.0.0.1:8765/mcp; every client shares one journal session;
with --token-env, clients send the header `Authorization: Bearer <the token>`).
Run `compensator check` after editing a registry: it starts the servers and compares
the registry with the tools they really offer. `log`, `undo` and `explain` do from a
terminal what the meta tools do for an agent.
"""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the arguments of only the subcommand `argv` names (all, for None)."""
    chosen = _chosen(argv)
    parser = argparse.ArgumentParser(
        prog="compensator",
        description="Ctrl+Z for AI agents: an MCP proxy that journals tool calls and undoes them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _COMMANDS:
        module = command.module() if chosen in (None, command.name) else None
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=getattr(module, f"{command.name.upper()}_EPILOG", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if module is not None:
            getattr(module, f"add_{command.name}_arguments")(sub)
            sub.set_defaults(run=getattr(module, f"run_{command.name}"))
    return parser


def _chosen(argv: Sequence[str] | None) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the top-level
    parser has no option that takes a value); "" for none or an unknown one."""
    if argv is None:
        return None
    names = {command.name for command in _COMMANDS}
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else ""
    return ""


@dataclass(frozen=True, kw_only=True)
class _Command:
    name: str
    help: str
    description: str
    home: str = ""
    """The module it lives in, when not the one named after it (`unwire` is in wire.py)."""

    def module(self) -> ModuleType:
        """The subcommand's module, imported now."""
        return importlib.import_module(f".{self.home or self.name}", __name__)


_COMMANDS = (
    _Command(
        name="init",
        help="write a registry for the MCP servers your clients already start",
        description="Find the MCP servers configured for Claude Code, Claude Desktop, VS Code "
        "and Cursor (or in --from FILE), start them, list their tools, and write a registry: "
        "the shipped policies for servers this project knows, `read` for tools annotated "
        "readOnlyHint, and every other tool commented out, so that it stays `unknown`.",
    ),
    _Command(
        name="wire",
        help="make your MCP clients start the proxy instead of the registry's servers",
        description="Rewrite each client configuration that starts a server of the registry: "
        "those servers give way to one `compensator` entry that serves the registry. Shows "
        "a diff and asks first; keeps a backup that `compensator unwire` restores.",
    ),
    _Command(
        name="unwire",
        home="wire",
        help="give your MCP clients their own server lists back (undoes `wire`)",
        description="Put back the server lists `compensator wire` replaced, from its backups, "
        "keeping what else changed in those files since. Shows a diff and asks first.",
    ),
    _Command(
        name="serve",
        help="serve the proxy over stdio (what an MCP client launches), or HTTP with --http",
        description="Start the downstream servers of a registry and serve them over stdio, "
        "or over streamable HTTP at http://HOST:PORT/mcp with --http, journaling every "
        "mutating call.",
    ),
    _Command(
        name="check",
        help="lint a registry against the tools its servers really offer",
        description="Load a registry, start its servers, list their tools, and report tools "
        "the registry names that no server offers, arguments that do not fit a tool's "
        "inputSchema, unregistered tools that may mutate, `read` tools annotated destructive, "
        "and names over 64 characters. Exits 1 when any finding is an error.",
    ),
    _Command(
        name="infer",
        help="find undo policies by experiment and add those the plugin's checks prove",
        description="For every tool a registry has no entry for, propose policies (read, an "
        "opposite tool as inverse, a snapshot read plus a write that puts it back), run the "
        "pytest plugin's round trips for each on the real servers, and add the first that "
        "passes to the registry with its evidence. Tools nothing passes for stay unclassified, "
        "written as comments with what was tried and the failing calls. Needs the `pytest` "
        "extra.",
    ),
    _Command(
        name="log",
        help="list a journal's checkpoints and changes, newest first",
        description="List the checkpoints and the changes of a journal, newest first: time, "
        "checkpoint, change id, tool, classification, status and arguments. Shows open "
        "changes unless --all is given.",
    ),
    _Command(
        name="undo",
        help="undo every change after a checkpoint (shows the plan, then asks)",
        description="Show what undoing to a checkpoint would do, ask, then start the "
        "registry's servers and compensate each change, newest first, reporting each one.",
    ),
    _Command(
        name="redo",
        help="replay what an undo took back (shows the plan, then asks)",
        description="Show which changes an undo took back would be replayed, and which are "
        "refused and why, ask, then start the registry's servers and replay them as new "
        "journaled changes, oldest first.",
    ),
    _Command(
        name="gc",
        help="drop what a journal holds from before a moment, keeping what undo still needs",
        description="Drop the checkpoints, changes, compensating steps and decisions made "
        "longer ago than --older-than, except changes that are not settled and what a kept "
        "checkpoint's undo needs; the hash chain stays verifiable.",
    ),
    _Command(
        name="explain",
        help="explain what undo would and would not do after a tool",
        description="Print what the explain_blast_radius meta tool answers for a tool: its "
        "classification, snapshot and compensating calls, and what undo cannot restore.",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
