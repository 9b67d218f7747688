"""The `compensator` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .check import add_check_arguments, run_check
from .proxy import add_serve_arguments, run_serve

__all__ = ["main"]

_EPILOG = """\
examples:
  compensator serve --config compensators.yaml
  compensator serve --config compensators.yaml --db ./journal.db
  compensator check --config compensators.yaml
  compensator check --config compensators.yaml --json

Point your MCP client at `compensator serve` instead of at the servers themselves.
Run `compensator check` after editing a registry: it starts the servers and compares
the registry with the tools they really offer.
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
    serve = commands.add_parser(
        "serve",
        help="serve the proxy over stdio (what an MCP client launches)",
        description="Start the downstream servers of a registry and serve them over stdio, "
        "journaling every mutating call.",
    )
    add_serve_arguments(serve)
    serve.set_defaults(run=run_serve)
    check = commands.add_parser(
        "check",
        help="lint a registry against the tools its servers really offer",
        description="Load a registry, start its servers, list their tools, and report tools "
        "the registry names that no server offers, arguments that do not fit a tool's "
        "inputSchema, unregistered tools that may mutate, `read` tools annotated destructive, "
        "and names over 64 characters. Exits 1 when any finding is an error.",
    )
    add_check_arguments(check)
    check.set_defaults(run=run_check)
    return parser


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
