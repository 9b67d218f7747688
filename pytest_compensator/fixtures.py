"""The factory behind the `compensator_proxy` fixture."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from compensator.registry import load_registry

from .client import ProxyClient, launch_proxy
from .harness import example_environment

__all__ = ["proxy_factory"]


def proxy_factory(tmp_path: Path) -> Callable[..., AbstractAsyncContextManager[ProxyClient]]:
    counter = itertools.count(1)

    @asynccontextmanager
    async def launch(
        config: str | os.PathLike[str],
        *,
        db: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ProxyClient]:
        number = next(counter)
        workdir = tmp_path / f"compensator-{number}"
        workdir.mkdir(parents=True)
        full_env = example_environment(workdir, env)
        registry = load_registry(Path(config), full_env)
        journal = Path(db) if db is not None else workdir / "journal.db"
        with (tmp_path / f"compensator-{number}.log").open("w") as log:
            async with launch_proxy(
                config, journal, env=full_env, stderr=log, registry=registry
            ) as client:
                yield client

    return launch
