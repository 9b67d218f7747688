"""`compensator wire` and `compensator unwire`: point a user's MCP clients at the proxy for
a registry's servers, and back (the file edits are compensator/clients/wiring.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from ..clients import (
    SETTINGS,
    Collected,
    Source,
    backup_of,
    collect,
    diff,
    prefixed,
    replace_atomically,
    secret_values,
    still_wired,
    unwired,
    variables,
    wired,
    with_turn_hook,
    without_turn_hook,
)
from ..errors import CompensatorError
from ..journal import default_journal_path
from ..registry import referenced
from .common import add_client_arguments, client_sources
from .terminal import confirm, log_to_stderr

__all__ = [
    "UNWIRE_EPILOG",
    "WIRE_EPILOG",
    "add_unwire_arguments",
    "add_wire_arguments",
    "proxy_entry",
    "run_unwire",
    "run_wire",
]

WIRE_EPILOG = """\
examples:
  compensator wire --config compensators.yaml --dry-run    # only show the diff
  compensator wire --config compensators.yaml              # show it, ask, then write
  compensator wire --config compensators.yaml --from .vscode/mcp.json --yes

Each file changed is first copied to FILE.compensator-backup; `compensator unwire` puts the
server lists back from it.

--hooks also adds a UserPromptSubmit hook to the project's .claude/settings.json: Claude Code
then calls the proxy's `checkpoint` with each prompt, and `compensator undo --turns N` undoes
the last N turns. `unwire` takes it out again.
"""

UNWIRE_EPILOG = """\
examples:
  compensator unwire --dry-run
  compensator unwire --yes
"""


def add_wire_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=Path("compensators.yaml"),
        help="the registry the proxy will serve (default: compensators.yaml, as init writes it)",
    )
    add_client_arguments(parser)
    parser.add_argument(
        "--hooks",
        action="store_true",
        help=f"also add a Claude Code hook to the project's {SETTINGS} that takes a "
        "checkpoint with each prompt, for `compensator undo --turns N` (asked when a Claude "
        "Code configuration is wired from a terminal)",
    )
    _add_answers(parser)


def add_unwire_arguments(parser: argparse.ArgumentParser) -> None:
    add_client_arguments(parser)
    _add_answers(parser)


def _add_answers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", action="store_true", help="write without asking")
    parser.add_argument("--dry-run", action="store_true", help="only show the diff; change nothing")


def run_wire(args: argparse.Namespace) -> int:
    log_to_stderr()
    try:
        config = args.config.absolute()
        taken, referenced = _registry_servers(config)
        sources = client_sources(args.from_file, args.project)
        for path in _by_file(sources):
            if backup_of(path).exists():
                raise CompensatorError(
                    f"{path} is wired already (its backup {backup_of(path)} exists): run "
                    "`compensator unwire` first"
                )
        changes: Changes = dict(_wiring(sources, collect(sources), taken, config, referenced))
        if not changes:
            raise CompensatorError(
                f"no client configuration here starts a server of {config} "
                f"({', '.join(sorted(taken))}): nothing to wire"
            )
        if _wants_hooks(args, sources, changes):
            changes.update(_hooked(args.project / SETTINGS))
    except (CompensatorError, OSError, UnicodeDecodeError) as exc:
        print(f"compensator wire: {exc}", file=sys.stderr)
        return 1
    journal = default_journal_path(config)
    if not isinstance(journal, Path):
        # A URL stays out of the client's file (it may hold a password, the file may be under
        # version control): the person exports it where the client starts.
        print(
            "note: the proxy journals to $COMPENSATOR_DB (a PostgreSQL URL) only where it is "
            "set: export it where your client starts, or the proxy journals to a file",
            file=sys.stderr,
        )
    written = _apply(changes, args, "wire", before=_keep_backup)
    if written == 0 and not args.dry_run and isinstance(journal, Path):
        # `serve` refuses a --db whose folder is missing (a typo, most often): this one is not.
        journal.parent.mkdir(parents=True, exist_ok=True)
    return written


def run_unwire(args: argparse.Namespace) -> int:
    log_to_stderr()
    try:
        sources = client_sources(args.from_file, args.project)
        changes: Changes = {}
        for path, listed in _by_file(sources).items():
            backup = backup_of(path)
            if not backup.exists():
                continue
            old = path.read_bytes()
            new = unwired(old.decode("utf-8"), backup.read_bytes().decode("utf-8"), listed)
            if new.encode("utf-8") != old:
                changes[path] = (old, new.encode("utf-8"))
        changes.update(_unhooked(args.project / SETTINGS))  # last: the server lists come first
        if not changes:
            # A backup with nothing here to restore (another project wired ~/.claude.json)
            # is kept: it may hold the only copy of that project's servers.
            raise CompensatorError(
                "no server list read here has the proxy's entry and a backup from "
                "`compensator wire`: nothing to unwire"
            )
    except (CompensatorError, OSError, UnicodeDecodeError) as exc:
        print(f"compensator unwire: {exc}", file=sys.stderr)
        return 1
    return _apply(changes, args, "unwire", after=_drop_backup)


Changes = dict[Path, tuple[bytes, "bytes | None"]]
"""Each file to change: its bytes now (empty when there is none) and after (None: removed)."""


def _wants_hooks(args: argparse.Namespace, sources: list[Source], changes: Changes) -> bool:
    """--hooks, or asked when a Claude Code configuration is wired from a terminal."""
    if args.hooks:
        return True
    claude = any(s.client == "claude-code" and s.path in changes for s in sources)
    if not claude or args.yes or args.dry_run or not sys.stdin.isatty():
        return False
    return confirm(
        f"Also add a Claude Code hook to {args.project / SETTINGS} that takes a checkpoint "
        "with each prompt (for `compensator undo --turns N`)?"
    )


def _hooked(path: Path) -> Changes:
    """The settings file with the turn hook added, unless it has it already. A backup from
    an earlier `wire --hooks` beside a file without the hook (taken out by hand) is the
    person's to keep or drop: wire stops rather than write over it."""
    old = _bytes_of(path)
    new = with_turn_hook(old.decode("utf-8"), path).encode("utf-8")
    if new == old:
        return {}
    if backup_of(path).exists():
        raise CompensatorError(
            f"{path} has no turn hook, but the backup {backup_of(path)} from an earlier "
            "`compensator wire --hooks` is still there (was the hook taken out by hand?): "
            "look at it, delete it, and run wire again"
        )
    return {path: (old, new)}


def _unhooked(path: Path) -> Changes:
    """The settings file with the turn hook taken out, where `wire --hooks` put it."""
    backup = backup_of(path)
    if not backup.exists():
        return {}
    if not path.exists():
        # Gone since (deleted by hand): nothing to take the hook out of, nothing to make.
        print(f"note: {path} is gone; its backup {backup} is left for you to look at")
        return {}
    old = path.read_bytes()
    new = without_turn_hook(old.decode("utf-8"), backup.read_bytes(), path)
    if new == old:
        print(f"note: {path} has no turn hook to take out; its backup {backup} is left for you")
        return {}
    return {path: (old, new)}


def _registry_servers(config: Path) -> tuple[set[str], set[str]]:
    """The server names of a registry, and the `${NAME}`s its servers read (read as plain
    YAML: they need not be set)."""
    if not config.is_file():
        raise CompensatorError(
            f"--config {config}: no such file. Write one with `compensator init` (it writes "
            "compensators.yaml here), or name yours with --config"
        )
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CompensatorError(f"{config}: cannot read the registry: {why}") from exc
    servers = data.get("servers") if isinstance(data, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise CompensatorError(f"{config}: no servers: in it; is it a registry?")
    return set(servers), referenced(json.dumps(servers))


def _by_file(sources: Iterable[Source]) -> dict[Path, list[Source]]:
    files: dict[Path, list[Source]] = {}
    for source in sources:
        files.setdefault(source.path, []).append(source)
    return files


def _wiring(
    sources: list[Source],
    collected: Collected,
    taken: set[str],
    config: Path,
    referenced: set[str],
) -> dict[Path, tuple[bytes, bytes]]:
    """Each file to change: its bytes now and after wiring. A client's value goes to the
    proxy when it is a secret `init` made a `${VAR}` of, or when the registry reads it under
    its own name or SERVER_NAME (a registry an older `init` wrote, or one written by hand)."""
    names = {
        name: {**_by_reference(server, name, referenced), **found}
        for name, found in variables(collected.servers).items()
        for server in [collected.servers[name]]
    }
    needed = {
        var for name, server_vars in names.items() if name in taken for var in server_vars.values()
    }
    changes = {}
    for path, listed in _by_file(sources).items():
        old = path.read_bytes()
        text = old.decode("utf-8")
        for source in listed:
            moved = [
                client_name
                for (where, client_name), name in collected.names.items()
                if where == source and name in taken
            ]
            if not moved:
                continue
            env: dict[str, str] = {}
            for client_name in moved:
                name = collected.names[(source, client_name)]
                server = collected.servers[name]
                for key, value in secret_values(server).items():
                    if key in names[name]:  # a data path is written out in the registry
                        env[names[name][key]] = value
            text = wired(text, source, moved, proxy_entry(config, env))
            _warn_missing(source, needed - set(env))
        if text != old.decode("utf-8"):
            changes[path] = (old, text.encode("utf-8"))
    return changes


def _by_reference(server: Any, name: str, referenced: set[str]) -> dict[str, str]:
    """The server's env and header keys the registry reads as `${KEY}` or `${SERVER_KEY}`."""
    found = {}
    for key in {**server.env, **server.headers}:
        for variable in (key, prefixed(name, key)):
            if variable in referenced:
                found[key] = variable
                break
    return found


def _warn_missing(source: Source, missing: set[str]) -> None:
    """The proxy serves the whole registry, so it needs every server's values; a list passes
    only its own servers' (copying a token from one client's file into another's, maybe a
    project file under version control, is not wire's to decide)."""
    if missing:
        print(
            f"note: the proxy started from {source.where} also needs {', '.join(sorted(missing))}"
            " (set in another client's configuration): export them where that client starts",
            file=sys.stderr,
        )


def proxy_entry(config: Path, env: dict[str, str]) -> dict[str, Any]:
    """The server entry that starts the proxy: this interpreter (so the client need not find
    `compensator` on its PATH) serving `config`, with the values the registry's ${VAR} need.

    The journal is named with --db, as this process finds it: a client starts the proxy with
    few of the person's variables (the MCP SDK passes HOME, PATH and a handful more), so
    without it a proxy would journal under ~/.local/state while `compensator undo` in the
    person's shell, with XDG_STATE_HOME set, looks elsewhere and finds no journal."""
    args = ["-m", "compensator", "serve", "--config", str(config)]
    journal = default_journal_path(config)
    if isinstance(journal, Path):
        args += ["--db", str(journal.absolute())]  # the client starts it in another folder
    entry: dict[str, Any] = {"command": sys.executable, "args": args}
    if env:
        entry["env"] = dict(sorted(env.items()))
    return entry


def _apply(
    changes: Changes,
    args: argparse.Namespace,
    verb: str,
    *,
    before: Callable[[Path, bytes, bytes | None], None] | None = None,
    after: Callable[[Path, bytes, bytes | None], None] | None = None,
) -> int:
    """Show each file's diff, ask, and write; `before` runs before a file is written (wire
    keeps its backup) and `after` once it is (unwire drops the backup then, never sooner)."""
    for path, (old, new) in changes.items():
        print(diff(path, old.decode("utf-8"), (new or b"").decode("utf-8")), end="")
    if args.dry_run:
        print("Dry run: nothing was changed.")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"compensator {verb}: stdin is not a terminal, so nobody can confirm. Pass "
                "--yes to write without asking (or --dry-run to only see the diff).",
                file=sys.stderr,
            )
            return 2
        if not confirm(f"\nWrite {len(changes)} file(s)?"):
            print("Nothing was changed.")
            return 1
    for path, (old, new) in changes.items():
        if _bytes_of(path) != old:
            print(f"compensator {verb}: {path} changed meanwhile; left alone", file=sys.stderr)
            return 1
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # .claude/ for the hook
            if before is not None:
                before(path, old, new)
            if new is None:
                path.unlink()  # a file wire made, with nothing else in it
            else:
                replace_atomically(path, new)
            if after is not None:
                after(path, old, new)
        except OSError as exc:
            print(f"compensator {verb}: {path}: {exc}; it is left as it was", file=sys.stderr)
            return 1
        print(f"{verb}: {path}")
    return 0


def _bytes_of(path: Path) -> bytes:
    """A file's bytes; none for a file that is not there (a settings file wire makes)."""
    return path.read_bytes() if path.exists() else b""


def _keep_backup(path: Path, old: bytes, new: bytes | None) -> None:
    """The file's bytes before wire; an empty backup: there was no such file."""
    replace_atomically(backup_of(path), old)


def _drop_backup(path: Path, old: bytes, new: bytes | None) -> None:
    """Once no list in the file has the proxy's entry; while another project's list in
    ~/.claude.json still has it, the backup is its way back."""
    if new is not None and path.name != SETTINGS.name and still_wired(new.decode("utf-8")):
        print(
            f"note: {backup_of(path)} is kept: another server list in {path} still starts "
            "the proxy (run `compensator unwire` where it was wired)",
            file=sys.stderr,
        )
        return
    backup_of(path).unlink()
