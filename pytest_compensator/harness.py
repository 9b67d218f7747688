"""The harness: real proxy subprocesses driven synchronously, fresh state for every example."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp.types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal

from compensator.journal import StepStatus, open_journal
from compensator.registry import Registry, load_registry, registry_environment
from compensator.wire import sdk

from .client import ProxyClient, ToolCallFailed, ToolReply, error_when_matched, launch_proxy

__all__ = ["Driver", "Harness", "ResetTimings", "example_environment"]

LOG_TAIL_LINES = 40


def example_environment(workdir: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a registry sees under the plugin: what `serve` would see, `env`, and
    COMPENSATOR_WORKDIR, the folder of this example's fresh state."""
    return registry_environment({**(env or {}), "COMPENSATOR_WORKDIR": str(workdir)})


@dataclass
class ResetTimings:
    """How long it took to give examples fresh state, for the report."""

    restarts: list[float] = field(default_factory=list)
    resets: list[float] = field(default_factory=list)
    rewinds: list[float] = field(default_factory=list)
    rewinds_failed: int = 0  # rewinds that did not reach the fresh state: a restart followed
    stopped_rewinding: bool = False  # replays differed after rewinds: restarts only since

    def per_example(self) -> float | None:
        samples = self.resets or [*self.rewinds, *self.restarts[1:]] or self.restarts
        return sorted(samples)[len(samples) // 2] if samples else None

    def how(self) -> str:
        """How examples got fresh state, in words, for the summary."""
        if self.resets:
            return "the registry's reset: calls"
        if not self.rewinds and not self.rewinds_failed:
            return "a new proxy and servers"
        how = (
            f"undo to the example's first checkpoint {_times(len(self.rewinds))}, "
            f"a new proxy and servers {_times(len(self.restarts))}"
        )
        if self.stopped_rewinding:
            how += (
                "; calls behaved differently after such an undo than on new servers (state "
                "the probes do not show, such as id counters), so later examples restarted"
            )
        return how


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


class Driver:
    """One running proxy, called synchronously through the harness's event loop thread."""

    def __init__(
        self, portal: BlockingPortal, client: ProxyClient, db: Path, log: Path, workdir: Path
    ) -> None:
        self._portal = portal
        self.client = client
        self.db = db
        self.log = log
        self.workdir = workdir

    def call(self, tool: str, args: Mapping[str, Any] | None = None) -> ToolReply:
        return self._portal.call(self.client.call, tool, dict(args or {}))

    def call_ok(self, tool: str, args: Mapping[str, Any] | None = None) -> Any:
        return self._portal.call(self.client.call_ok, tool, dict(args or {}))

    def checkpoint(self, label: str | None = None) -> int:
        return self._portal.call(self.client.checkpoint, label)

    def undo_to(self, checkpoint_id: int) -> dict[str, Any]:
        return self._portal.call(self.client.undo_to, checkpoint_id)

    def observe(self) -> dict[str, Any]:
        return self._portal.call(self.client.observe_state)

    observe_state = observe

    def list_changes(self, checkpoint_id: int | None = None) -> list[dict[str, Any]]:
        return self._portal.call(self.client.list_changes, checkpoint_id)

    def list_tools(self) -> list[types.Tool]:
        return self._portal.call(self.client.list_tools)

    def journal_since(self, checkpoint_id: int) -> list[str]:
        """Every change after a checkpoint with its compensations, as readable lines."""
        journal = open_journal(self.db, read_only=True)
        try:
            checkpoint = journal.checkpoint(checkpoint_id)
            floor = checkpoint.last_change_id if checkpoint else 0
            lines = []
            for change in reversed(journal.all_changes()):
                if change.id <= floor:
                    continue
                undone = f", undone ({change.undo_note})" if change.undone_at else ""
                lines.append(
                    f"change {change.id}: {change.tool} {change.classification} "
                    f"status={change.status}{undone} args={change.args}"
                    + (f" error={change.error!r}" if change.error else "")
                )
                for comp in journal.compensations(change.id):
                    error = f" error={comp.error!r}" if comp.error else ""
                    lines.append(f"    compensation: {comp.tool} {comp.args} {comp.status}{error}")
            return lines
        finally:
            journal.close()

    def compensations_since(self, checkpoint_id: int) -> list[tuple[str, str, Any]]:
        """(tool of the change, compensating tool, its args) for every compensating call
        that succeeded for a change after the checkpoint, the oldest change first."""
        journal = open_journal(self.db, read_only=True)
        try:
            checkpoint = journal.checkpoint(checkpoint_id)
            floor = checkpoint.last_change_id if checkpoint else 0
            made: list[tuple[str, str, Any]] = []
            for change in reversed(journal.all_changes()):
                if change.id > floor and change.undone_at:
                    made += [
                        (change.tool, comp.tool, comp.args)
                        for comp in journal.compensations(change.id)
                        if comp.status == StepStatus.OK
                    ]
            return made
        finally:
            journal.close()

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-LOG_TAIL_LINES:])


class Harness:
    """Starts proxies for one registry and hands out drivers whose downstream state is fresh.

    With a `reset:` section the registry says how to empty its servers, and one proxy serves
    every example. Without one, one proxy serves examples too: each example starts with a
    checkpoint, and the next one first undoes to it and observes the state. Only when that
    state is the one observed on the fresh servers is the proxy used again; otherwise (a
    broken inverse, a skipped change, a dead server) the next example gets a new empty
    COMPENSATOR_WORKDIR and a new proxy (and so new servers).
    """

    def __init__(
        self,
        config: Path,
        *,
        base_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        journal_beside: bool = False,
        on_example: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.on_example = on_example  # told of every example, for a running count
        self.env = dict(env or {})
        self.journal_beside = journal_beside
        # A folder made here is removed on close: its journals hold snapshots of whatever the
        # servers returned. A folder the caller gave stays theirs.
        self._owns_base_dir = base_dir is None
        if base_dir is None:
            base_dir = Path(tempfile.mkdtemp(prefix="compensator-"))
        self.base_dir = base_dir
        self.registry: Registry = load_registry(config, example_environment(self.base_dir, env))
        self.timings = ResetTimings()
        self._stack = contextlib.ExitStack()
        self._portal = self._stack.enter_context(start_blocking_portal())
        self._shared: Driver | None = None
        self._shared_stack: contextlib.ExitStack | None = None
        self._fresh: dict[str, Any] | None = None  # the state the shared proxy started with
        self._start_checkpoint: int | None = None  # taken at the start of the last example
        self._count = 0
        self.tools: dict[str, types.Tool] = {}
        self.last_driver: Driver | None = None

    # -- life cycle ---------------------------------------------------------------------

    def close(self) -> None:
        self.drop_shared()
        self._stack.close()
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, stack: contextlib.ExitStack) -> Driver:
        self._count += 1
        workdir = self.base_dir / f"example-{self._count}"
        workdir.mkdir(parents=True)
        # `compensator infer` keeps it beside the workdir: a filesystem server serves that
        # folder, and infer's random paths must not overwrite the journal. The plugin keeps
        # it inside, as it always has (moving it changes what the probes of a server like
        # that show, and so every seeded run of such a registry).
        db = self.base_dir / f"journal-{self._count}.db"
        if not self.journal_beside:
            db = workdir / "journal.db"
        log_path = self.base_dir / f"proxy-{self._count}.log"
        log = stack.enter_context(log_path.open("w"))
        env = example_environment(workdir, self.env)
        registry = load_registry(self.config, env)
        launcher = launch_proxy(self.config, db, env=env, stderr=log, registry=registry)
        client = stack.enter_context(self._portal.wrap_async_context_manager(launcher))
        driver = Driver(self._portal, client, db, log_path, workdir)
        if not self.tools:
            self.tools = {tool.name: tool for tool in driver.list_tools()}
        self.last_driver = driver
        return driver

    def start(self) -> Driver:
        """A long-lived driver (used by the load check); stopped with the harness."""
        return self._start(self._stack)

    @contextlib.contextmanager
    def example(self) -> Iterator[Driver]:
        """A driver whose downstream state is fresh, for one example."""
        if self.on_example is not None:
            self.on_example()
        if self.registry.reset:
            yield self._reset_shared()
        elif self.rewinding:
            yield self._rewound_shared()
        else:
            began = time.perf_counter()
            stack = contextlib.ExitStack()
            try:
                driver = self._start(stack)
                self.timings.restarts.append(time.perf_counter() - began)
                yield driver
            finally:
                stack.close()  # not with the test's exception: see drop_shared

    @property
    def rewinding(self) -> bool:
        """Whether examples get fresh state by undoing the one before (no `reset:`, and no
        sign yet that the servers behave differently after that undo than when new)."""
        return not self.registry.reset and not self.timings.stopped_rewinding

    def stop_rewinding(self) -> None:
        """From now on every example gets a new proxy and servers: undo restored what the
        probes show, but not everything calls depend on (ids a counter hands out, say)."""
        self.timings.stopped_rewinding = True
        self.drop_shared()

    def _start_shared(self) -> Driver:
        self.drop_shared()
        began = time.perf_counter()
        self._shared_stack = contextlib.ExitStack()
        self._shared = self._start(self._shared_stack)
        self.timings.restarts.append(time.perf_counter() - began)
        return self._shared

    def drop_shared(self) -> None:
        """Stop the shared proxy; the next example starts a new one."""
        if self._shared_stack is not None:
            # Closed outside the test's exception: Hypothesis' control exceptions must not be
            # thrown into the proxy's async context, which would take the portal down.
            self._shared_stack.close()
        self._shared = self._shared_stack = None
        self._fresh = self._start_checkpoint = None

    def _rewound_shared(self) -> Driver:
        driver = self._shared
        if driver is not None and self._start_checkpoint is not None:
            began = time.perf_counter()
            if self._rewind(driver, self._start_checkpoint):
                self.timings.rewinds.append(time.perf_counter() - began)
            else:
                self.timings.rewinds_failed += 1
                driver = None
        if driver is None:
            driver = self._start_shared()
            self._fresh = driver.observe()
        self._start_checkpoint = driver.checkpoint("example start")
        self.last_driver = driver
        return driver

    def _rewind(self, driver: Driver, checkpoint: int) -> bool:
        """Undo everything since the example's first checkpoint; True when the state is
        then the fresh one and nothing was skipped."""
        try:
            report = driver.undo_to(checkpoint)
            return not report["skipped"] and driver.observe() == self._fresh
        except Exception:  # a dead proxy or server, a failed probe: start afresh instead
            return False

    def _reset_shared(self) -> Driver:
        if self._shared is None:
            self._start_shared()
        assert self._shared is not None
        began = time.perf_counter()
        for call in self.registry.reset:
            args = call.args.render({})
            try:
                value = self._shared.call_ok(call.tool, args)
            except ToolCallFailed as exc:
                raise ToolCallFailed(f"reset call in {self.config} failed: {exc}") from None
            if error_when_matched(self.registry, call.tool, args, value):
                # A server that reports errors in its text (SQL servers do) would otherwise
                # leave every example on a state nobody meant, and the run could still pass.
                raise ToolCallFailed(
                    f"reset call in {self.config} failed: {call.tool}({args}) answered "
                    f"{_clipped(value)}, which the tool's error_when counts as a failure"
                )
        self.timings.resets.append(time.perf_counter() - began)
        self.last_driver = self._shared
        return self._shared

    def offered_tools(self) -> dict[str, types.Tool]:
        """The proxy's tools, starting a proxy once if none has run yet."""
        if not self.tools:
            with self.example():
                pass
        return self.tools

    def input_schema(self, tool: str) -> dict[str, Any]:
        wire = sdk.tool_to_wire(self.tools[tool])
        schema: dict[str, Any] = wire.get("inputSchema") or {"type": "object"}
        return schema


def _clipped(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")
