"""`compensator serve` (and `python -m compensator.proxy`): load the registry, start the
servers, and serve the proxy to one client over stdio or to many over streamable HTTP.

Start-up is ordered for speed: the servers' processes start first (compensator/processes.py),
then the proxy and the MCP SDK are imported (compensator/cli/serving.py), which takes about
half a second of CPU that the servers' own start-up overlaps on another core. This module
therefore imports neither.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from ..errors import CompensatorError
from ..journal import default_journal_path
from ..names import CLIENT_NAME, MAX_NAME_LENGTH
from ..processes import Started, stop_on_sigterm
from ..registry import load_registry, registry_environment
from ..wire.http_serve import TOKEN_VARIABLE, HttpError, exposure, listen, read_token
from .common import Refused, ServeOptions, add_registry_arguments, refuse
from .terminal import log_to_stderr

__all__ = ["add_serve_arguments", "main", "run_serve", "serve"]


async def serve(config: Path, db: str | Path, options: ServeOptions) -> None:
    """Load the registry, start its stdio servers' processes, import the proxy while they
    start, and serve (`serving.serve` says how). When it cannot start, it says why to the
    client too (`refuse`)."""
    try:
        _refuse_missing_folder(db, config)
        registry = load_registry(config, environ=registry_environment())
    except CompensatorError as exc:
        await refuse(exc, options)
    started = Started()
    try:
        await started.start(registry.servers.values())
        # Imported here, on purpose: the servers start while the SDK is being imported.
        from .serving import serve as serve_proxy

        await serve_proxy(registry, db, started, options)
    finally:
        with anyio.CancelScope(shield=True):
            await started.stop()


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_registry_arguments(
        parser,
        db_help="the journal: a SQLite file, or a postgresql://USER:PASSWORD@HOST:PORT/DB URL "
        "that proxies on many machines can share (needs mcp-compensator[postgres]). Default: "
        "$COMPENSATOR_DB, else a file per config under $XDG_STATE_HOME/mcp-compensator, i.e. "
        "~/.local/state/mcp-compensator",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,  # before choices are checked, so `debug` is as good as `DEBUG`
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR (logs go to stderr; default INFO)",
    )
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="sync every journal commit to disk (SQLite synchronous=FULL), so that even a power "
        "cut loses no journaled call; costs about 1 ms per mutating call. Without it, a "
        "crashed or killed proxy still loses nothing. On PostgreSQL: synchronous_commit=on, "
        "which is the server's default anyway",
    )
    parser.add_argument(
        "--journal-scope",
        metavar="NAME",
        default=os.environ.get("COMPENSATOR_JOURNAL_SCOPE") or None,
        help="join the shared scope NAME: checkpoints, list_changes and undo_to then cover the "
        "changes of every agent that joined it (on any machine sharing the journal), not only "
        "this agent's. Off by default: an agent undoes only its own changes. Default: "
        "$COMPENSATOR_JOURNAL_SCOPE",
    )
    parser.add_argument(
        "--agent",
        metavar="NAME",
        default=os.environ.get("COMPENSATOR_AGENT") or None,
        help="the agent this proxy works for: checkpoints, list_changes and undo_to cover only "
        "this agent's changes. Default: $COMPENSATOR_AGENT, else the agent of the last proxy on "
        "this journal that has ended (a restarted proxy carries on), else a new one. Name it "
        "when several agents take turns on one journal",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        default=None,
        help="serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio, to any "
        "number of clients, which share one journal session (checkpoints and undo_to cover "
        "every client's changes). HOST defaults to 127.0.0.1. A non-loopback address (e.g. "
        "0.0.0.0) needs a token (--token-env) or --insecure",
    )
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        default=None,
        help="with --http: require every request to carry `Authorization: Bearer TOKEN`, "
        "TOKEN being the value of the environment variable VAR (the token itself never goes "
        "on the command line, where other users can read it); others get 401. Default: "
        f"${TOKEN_VARIABLE} when it is set, else no token. An unset or empty VAR is an error",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="with --http on a non-loopback address: serve without a token (with a warning) "
        "instead of refusing to start; anyone who can reach the port can then call every "
        "tool and undo_to",
    )
    parser.add_argument(
        "--client-name",
        default=CLIENT_NAME,
        help="the name your MCP client knows the proxy by, for the start-up warning about tool "
        f"names over {MAX_NAME_LENGTH} characters as mcp__<name>__server__tool (default "
        f"{CLIENT_NAME})",
    )


def run_serve(args: argparse.Namespace) -> int:
    log_to_stderr(str(args.log_level).upper())
    http = None
    token_env = getattr(args, "token_env", None)
    insecure = getattr(args, "insecure", False)
    if getattr(args, "http", None) is None and (token_env is not None or insecure):
        option = "--token-env" if token_env is not None else "--insecure"
        print(f"compensator: {option} applies only with --http HOST:PORT", file=sys.stderr)
        return 2
    if getattr(args, "http", None) is not None:
        # Before anything starts: a bad value, a missing token or a refused address fail at once.
        try:
            token = read_token(token_env, os.environ)
            http = listen(args.http)
            if token is not None:
                http.token, http.token_source = token
            warning = exposure(http, insecure)
        except HttpError as exc:
            if http is not None:
                http.close()
            print(f"compensator: {exc}", file=sys.stderr)
            return exc.exit_code
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
    options = ServeOptions(
        fsync=args.fsync,
        http=http,
        client_name=getattr(args, "client_name", CLIENT_NAME),
        agent=getattr(args, "agent", None),
        scope=getattr(args, "journal_scope", None),
    )
    if http is None:
        stop_on_sigterm()  # what ends a stdio proxy: the servers go first (processes.py)
    try:
        db = args.db if args.db is not None else default_journal_path(args.config)
        anyio.run(serve, args.config, db, options)
    except Refused:
        return 2  # said already, where the person looks
    except CompensatorError as exc:
        print(f"compensator: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if http is not None:
            http.close()
    return 0


def _refuse_missing_folder(db: str | Path, config: Path) -> None:
    """A --db file whose folder does not exist is a typo more often than a wish: creating
    the folders would journal to a place nobody looks at. The default journal's folder
    (under $XDG_STATE_HOME) is made as it is without --db."""
    from ..journal.store import journal_address  # here: `--help` starts without the stores

    address = journal_address(str(db))
    if not isinstance(address, Path) or address.parent.is_dir():
        return
    if address.absolute() != Path(default_journal_path(config)).absolute():
        raise CompensatorError(
            f"--db {db}: the folder {address.parent} does not exist. Create it first "
            f"(mkdir -p {address.parent}) or pass a path in a folder that exists"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compensator.proxy", description="Serve the compensator proxy over stdio."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
