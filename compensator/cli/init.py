"""`compensator init`: find the MCP servers a user's clients already start, start them, list
their tools, and write a registry proposing how each tool is classified
(compensator/clients/proposal.py)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from ..clients import (
    ClientServer,
    Collected,
    Proposal,
    Source,
    collect,
    propose,
    replace_atomically,
)
from ..clients.proposal import secret_values, variables
from ..errors import CompensatorError
from ..limits import STARTUP_TIMEOUT
from ..names import exposed_name
from ..registry import ServerSpec, load_registry, parse_registry, registry_environment
from ..wire import DownstreamPool, sdk
from .common import add_client_arguments, client_sources, plural
from .terminal import add_startup_timeout, log_to_stderr

__all__ = ["INIT_EPILOG", "add_init_arguments", "run_init"]

INIT_EPILOG = """\
examples:
  compensator init                                  # this project's and this user's clients
  compensator init --from ~/.cursor/mcp.json -o cursor.yaml
  compensator init --force                          # replace compensators.yaml
  compensator init --infer                          # then prove policies for the rest
  compensator init --no-builtin --infer             # prove every tool, shipped ones too

Then run `compensator check --config compensators.yaml` and `pytest --compensator-config
compensators.yaml`, and `compensator wire --config compensators.yaml` to point the clients at
the proxy. docs/init.md has the details.
"""


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    add_client_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("compensators.yaml"),
        metavar="REGISTRY",
        help="where to write the registry (default: compensators.yaml)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace REGISTRY when it exists already"
    )
    parser.add_argument(
        "--infer",
        action="store_true",
        help="then run `compensator infer` on the tools of servers with no shipped registry "
        "(needs the pytest extra; docs/infer.md)",
    )
    parser.add_argument(
        "--no-builtin",
        action="store_true",
        help="leave out the policies and probes of the shipped registries "
        "(compensator/registries/): every tool starts unknown, and --infer proves from scratch",
    )
    parser.add_argument(
        "--examples",
        type=int,
        metavar="N",
        help="with --infer: examples per candidate (infer's default: 100); fewer is quicker "
        "and proves less surely",
    )
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start and list its tools")


def run_init(args: argparse.Namespace) -> int:
    """Exit 0 once the registry is written (servers that failed to start are in it, commented
    out), 1 when nothing could be written."""
    log_to_stderr()
    output: Path = args.output.absolute()
    try:
        if output.exists() and not args.force:
            raise CompensatorError(
                f"{output} exists already; pass --force to replace it, or -o to write elsewhere"
            )
        sources = client_sources(args.from_file, args.project)
        collected = collect(sources)
        if not collected.servers:
            raise CompensatorError(f"no servers in {_places(sources)}")
        proposal = anyio.run(
            _propose,
            collected,
            output,
            args.project.absolute(),
            args.startup_timeout,
            not args.no_builtin,
        )
        replace_atomically(output, proposal.text.encode("utf-8"))
    except CompensatorError as exc:
        print(f"compensator init: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(_summary(proposal, collected, output, sources))
    if args.infer:
        return _infer(proposal, output, examples=args.examples)
    return 0


def _infer(proposal: Proposal, output: Path, *, examples: int | None = None) -> int:
    """`compensator infer` on the unknown tools of the servers init had no policies for."""
    from .infer import infer_registry, summary_text

    try:
        registry = load_registry(output, registry_environment())
        only = {
            exposed_name(registry.servers[r.name].exposed_prefix, tool)
            for r in proposal.reports
            if r.shipped is None and r.failure is None and r.name in registry.servers
            for tool in r.unknown
        }
        if not only:
            print("\ninfer: every server has shipped policies or no unknown tool; nothing to do")
            return 0
        report = infer_registry(output, only=only, examples=examples)
    except CompensatorError as exc:
        print(f"compensator init --infer: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compensator init --infer: interrupted; infer wrote nothing", file=sys.stderr)
        return 130
    if report.proposed_state:
        print(
            f"\ninfer: {output} has no `state:` section, so nothing could be proven yet. It "
            "now proposes one: review it, then run\n"
            f"  compensator infer --config {_shell(output)}"
        )
        return 0
    proven = sum(o.status == "proven" for o in report.outcomes.values())
    print("\n" + summary_text(report))
    print(f"\ninfer: {proven} of {len(only)} unknown tools proven and written to {output}")
    return 0


def _places(sources: list[Source]) -> str:
    return ", ".join(dict.fromkeys(source.where for source in sources))


async def _propose(
    collected: Collected, output: Path, project: Path, startup_timeout: float, builtin: bool
) -> Proposal:
    """Start every server, list its tools, and propose the registry."""
    names = variables(collected.servers)
    environ = registry_environment(_values(collected.servers, names))
    specs: dict[str, ServerSpec] = {}
    failures: dict[str, str] = {}
    for name, server in collected.servers.items():
        try:
            specs[name] = _spec(name, server, output, project, environ, names)
        except CompensatorError as exc:
            failures[name] = str(exc)
    tools: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    async with DownstreamPool(specs.values(), startup_timeout=startup_timeout) as pool:
        failures.update(pool.failures)
        for routed in pool.routes.values():
            tools[routed.server].append(sdk.tool_to_wire(routed.original))
    header = _HEADER if builtin else f"{_HEADER}\n{_NO_BUILTIN}"
    proposal = propose(
        collected.servers,
        tools,
        failures,
        project=project,
        home=Path.home(),
        header=header,
        builtin=builtin,
    )
    try:
        parse_registry(proposal.text, output, environ)
    except CompensatorError as exc:  # a bug here, not the user's: say so, keep their files
        raise CompensatorError(
            f"the proposed registry does not load ({exc}); please report it"
        ) from exc
    return proposal


def _spec(
    name: str,
    server: ClientServer,
    output: Path,
    project: Path,
    environ: Mapping[str, str],
    names: Mapping[str, Mapping[str, str]],
) -> ServerSpec:
    """How to start one server: its part of the proposal (with the `${VAR}` names of the
    whole), loaded as the proxy would load it."""
    single = propose(
        {name: server}, {}, {}, project=project, home=Path.home(), header="", names=names
    )
    return parse_registry(single.text, output, environ).servers[name]


def _values(
    servers: Mapping[str, ClientServer], names: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The values the proposal's `${VAR}` references stand for, from the clients' files."""
    values: dict[str, str] = {}
    for name, server in servers.items():
        for key, value in secret_values(server).items():
            if key not in names[name]:
                continue  # a data path: written out in the registry, no variable
            # Claude Code expands ${VAR} in these values itself; the other clients do not.
            expand = server.source.client == "claude-code"
            values[names[name][key]] = _expanded(value) if expand else value
    return values


def _expanded(value: str) -> str:
    """`value` with Claude Code's references (`${VAR}`, `${VAR:-default}`) filled in from our
    environment; a `$` that starts neither (in a password) stays as it is, and so does a
    reference to a variable that is not set and has no default."""

    def fill(match: re.Match[str]) -> str:
        name, default = match[1], match[2]
        return os.environ.get(name, default if default is not None else match[0])

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", fill, value)


_HEADER = """\
Written by `compensator init` from the MCP servers your clients start. Read it before use:
- a tool with a policy below is journaled and undone as it says; policies for servers this
  project knows come from its shipped registries (compensator/registries/);
- a tool annotated readOnlyHint: true is `read`: forwarded, not journaled;
- every other tool is commented out, so it stays `unknown`: journaled, and undo refuses it.
  Classify it yourself (docs/writing-a-registry.md); init never guesses an inverse.
Values from the clients' env and headers that look secret (a name with KEY, TOKEN, SECRET,
PASS, AUTH, CREDENTIAL..., a token, a URL with credentials), and such URLs and the values of
options like --password or --api-key on a command line, are ${VAR} references here, so no
secret is written to this file: export them to run `compensator check`; `compensator
wire` passes them to the proxy from the clients' own configuration. Other values are written
as they are. Data paths (a database file, a data folder) are
written as ${COMPENSATOR_WORKDIR:-yours}: the proxy uses yours, while `pytest
--compensator-config` and `compensator infer` work in a temporary folder of their own. A
server given a redis:// URL starts through compensator.scratch, which gives those a scratch
Redis."""


_NO_BUILTIN = """\
Written with --no-builtin: no shipped policies or probes are used, even for servers that have
them; `compensator init --infer` proves every tool from scratch."""


def _summary(proposal: Proposal, collected: Collected, output: Path, sources: list[Any]) -> str:
    width = max(len("SERVER"), *(len(r.name) for r in proposal.reports)) + 2
    lines = [
        f"compensator init: wrote {output} with {plural(len(collected.servers), 'server')} "
        f"from {_places(sources)}",
        "",
        f"{'SERVER':<{width}}{'READ':>6}{'UNDOABLE':>10}{'IRREVERSIBLE':>14}{'UNKNOWN':>9}",
    ]
    for r in proposal.reports:
        if r.failure is not None:
            lines.append(f"{r.name:<{width}}  failed to start (commented out): {r.failure}")
            continue
        counts = (
            f"{len(r.read):>6}{len(r.undoable):>10}{len(r.irreversible):>14}{len(r.unknown):>9}"
        )
        note = f"   policies from {r.shipped}" if r.shipped else ""
        lines.append(f"{r.name:<{width}}{counts}{note}")
        if r.unsupported is not None:
            lines.append(f"{'':<{width}}  {r.unsupported}")
    unknown = sum(len(r.unknown) for r in proposal.reports)
    if unknown:
        lines += [
            "",
            f"{plural(unknown, 'tool')} left unknown: journaled, and undo refuses them. Classify "
            "them in the registry (docs/writing-a-registry.md).",
        ]
    names = variables(collected.servers)
    exports = sorted({var for server in names.values() for var in server.values()})
    if exports:
        lines += ["", "The registry reads these from the environment; export them first:"]
        lines.append("  " + " ".join(exports))
    config = _shell(output)
    lines += [
        "",
        "Next:",
        f"  compensator check --config {config}",
        f"  pytest --compensator-config {config}   # real calls: docs/init.md says on what",
        f"Then `compensator wire --config {config}` makes your clients start the proxy.",
    ]
    return "\n".join(lines)


def _shell(path: Path) -> str:
    try:
        shown = str(path.relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)
