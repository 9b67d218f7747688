"""The `compensator` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .proxy import add_serve_arguments, run_serve

__all__ = ["main"]

_EPILOG = """\
examples:
  compensator serve --config compensators.yaml
  compensator serve --config compensators.yaml --db ./journal.db

Point your MCP client at `compensator serve` instead of at the servers themselves.
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
