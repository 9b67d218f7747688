"""The `compensator` command line: one module per subcommand, and the table that lists them.

A subcommand is a module here with `add_<name>_arguments(parser)` and `run_<name>(args) ->
exit code`, plus one `_Command` entry below. `common.py` and `terminal.py` hold what several
subcommands share. This is the top layer: it may import every other part of the package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import __version__
from .check import add_check_arguments, run_check
from .explain import EXPLAIN_EPILOG, add_explain_arguments, run_explain
from .init import INIT_EPILOG, add_init_arguments, run_init
from .log import LOG_EPILOG, add_log_arguments, run_log
from .serve import add_serve_arguments, run_serve
from .undo import UNDO_EPILOG, add_undo_arguments, run_undo
from .wire import (
    UNWIRE_EPILOG,
    WIRE_EPILOG,
    add_unwire_arguments,
    add_wire_arguments,
    run_unwire,
    run_wire,
)

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
  compensator log --config compensators.yaml
  compensator undo --config compensators.yaml --to 3 --dry-run
  compensator explain --config compensators.yaml tasks__delete_task

Point your MCP client at `compensator serve` instead of at the servers themselves
(with --http, at http://127.0.0.1:8765/mcp; every client shares one journal session;
with --token-env, clients send the header `Authorization: Bearer <the token>`).
Run `compensator check` after editing a registry: it starts the servers and compares
the registry with the tools they really offer. `log`, `undo` and `explain` do from a
terminal what the meta tools do for an agent.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compensator",
        description="Ctrl+Z for AI agents: an MCP proxy that journals tool calls and undoes them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


@dataclass(frozen=True, kw_only=True)
class _Command:
    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    epilog: str | None = None


_COMMANDS = (
    _Command(
        name="init",
        help="write a registry for the MCP servers your clients already start",
        description="Find the MCP servers configured for Claude Code, Claude Desktop, VS Code "
        "and Cursor (or in --from FILE), start them, list their tools, and write a registry: "
        "the shipped policies for servers this project knows, `read` for tools annotated "
        "readOnlyHint, and every other tool commented out, so that it stays `unknown`.",
        add_arguments=add_init_arguments,
        run=run_init,
        epilog=INIT_EPILOG,
    ),
    _Command(
        name="wire",
        help="make your MCP clients start the proxy instead of the registry's servers",
        description="Rewrite each client configuration that starts a server of the registry: "
        "those servers give way to one `compensator` entry that serves the registry. Shows "
        "a diff and asks first; keeps a backup that `compensator unwire` restores.",
        add_arguments=add_wire_arguments,
        run=run_wire,
        epilog=WIRE_EPILOG,
    ),
    _Command(
        name="unwire",
        help="give your MCP clients their own server lists back (undoes `wire`)",
        description="Put back the server lists `compensator wire` replaced, from its backups, "
        "keeping what else changed in those files since. Shows a diff and asks first.",
        add_arguments=add_unwire_arguments,
        run=run_unwire,
        epilog=UNWIRE_EPILOG,
    ),
    _Command(
        name="serve",
        help="serve the proxy over stdio (what an MCP client launches), or HTTP with --http",
        description="Start the downstream servers of a registry and serve them over stdio, "
        "or over streamable HTTP at http://HOST:PORT/mcp with --http, journaling every "
        "mutating call.",
        add_arguments=add_serve_arguments,
        run=run_serve,
    ),
    _Command(
        name="check",
        help="lint a registry against the tools its servers really offer",
        description="Load a registry, start its servers, list their tools, and report tools "
        "the registry names that no server offers, arguments that do not fit a tool's "
        "inputSchema, unregistered tools that may mutate, `read` tools annotated destructive, "
        "and names over 64 characters. Exits 1 when any finding is an error.",
        add_arguments=add_check_arguments,
        run=run_check,
    ),
    _Command(
        name="log",
        help="list a journal's checkpoints and changes, newest first",
        description="List the checkpoints and the changes of a journal, newest first: time, "
        "checkpoint, change id, tool, classification, status and arguments. Shows open "
        "changes unless --all is given.",
        add_arguments=add_log_arguments,
        run=run_log,
        epilog=LOG_EPILOG,
    ),
    _Command(
        name="undo",
        help="undo every change after a checkpoint (shows the plan, then asks)",
        description="Show what undoing to a checkpoint would do, ask, then start the "
        "registry's servers and compensate each change, newest first, reporting each one.",
        add_arguments=add_undo_arguments,
        run=run_undo,
        epilog=UNDO_EPILOG,
    ),
    _Command(
        name="explain",
        help="explain what undo would and would not do after a tool",
        description="Print what the explain_blast_radius meta tool answers for a tool: its "
        "classification, snapshot and compensating calls, and what undo cannot restore.",
        add_arguments=add_explain_arguments,
        run=run_explain,
        epilog=EXPLAIN_EPILOG,
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
