"""The proxy's stdio wire: event-loop pipes when the client gives pipes, the SDK's own
transport otherwise (here, a regular file on stdin)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import EXAMPLES

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def command(tmp_path: Path) -> list[str]:
    config = str(EXAMPLES / "compensators.yaml")
    return [
        sys.executable,
        "-m",
        "compensator.proxy",
        "--config",
        config,
        "--db",
        str(tmp_path / "j.db"),
    ]


def env(tmp_path: Path) -> dict[str, str]:
    return {"COMPENSATOR_WORKDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}


def send(stream, message: dict) -> None:  # type: ignore[no-untyped-def]
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def test_requests_on_a_pipe_are_answered_and_the_proxy_exits_at_eof(tmp_path: Path):
    with (tmp_path / "stderr.log").open("wb") as log:
        proxy = subprocess.Popen(
            command(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=env(tmp_path),
        )  # fmt: skip
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        send(proxy.stdin, INITIALIZE)
        first = json.loads(proxy.stdout.readline())
        send(proxy.stdin, INITIALIZED)
        send(proxy.stdin, LIST)
        second = json.loads(proxy.stdout.readline())
    finally:
        proxy.stdin.close()
        rest = proxy.stdout.read()
        proxy.stdout.close()
        proxy.wait(timeout=30)
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"]
    assert second["id"] == 2
    names = {tool["name"] for tool in second["result"]["tools"]}
    assert {"tasks__add_task", "undo_to"} <= names
    assert rest == b"", rest
    assert proxy.returncode == 0, (tmp_path / "stderr.log").read_text()


def test_a_regular_file_on_stdin_falls_back_to_the_sdk_transport(tmp_path: Path):
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(json.dumps(INITIALIZE).encode() + b"\n")
    with requests.open("rb") as stdin:
        done = subprocess.run(
            command(tmp_path), stdin=stdin, capture_output=True, timeout=60,
            env=env(tmp_path), check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout.decode().splitlines()[0])
    assert answer["id"] == 1 and "serverInfo" in answer["result"]
