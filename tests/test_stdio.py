"""The proxy's stdio wire: event-loop pipes when the client gives pipes, the SDK's own
transport otherwise (here, a regular file on stdin)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compensator.wire.stdio import TooLong, top_level_members

from .conftest import EXAMPLES, SERVERS
from .faults import tally

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


def command(tmp_path: Path, config: Path = EXAMPLES / "compensators.yaml") -> list[str]:
    return [
        sys.executable,
        "-m",
        "compensator.proxy",
        "--config",
        str(config),
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


def test_a_line_over_the_limit_gets_an_error_and_the_proxy_serves_on(tmp_path: Path):
    # 64 MiB (compensator/wire/stdio.py LINE_LIMIT) plus a little, in one request and in one
    # notification (no id to answer: logged). Then a normal request must still be answered.
    title = "x" * (64 * 1024 * 1024 + 10)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "tasks__add_task", "arguments": {"title": title}}}  # fmt: skip
    notice = {"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": "t", "progress": 1, "message": title}}  # fmt: skip
    with (tmp_path / "stderr.log").open("wb") as log:
        proxy = subprocess.Popen(
            command(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=env(tmp_path),
        )  # fmt: skip
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        send(proxy.stdin, INITIALIZE)
        json.loads(proxy.stdout.readline())
        send(proxy.stdin, INITIALIZED)
        send(proxy.stdin, call)
        refused = json.loads(proxy.stdout.readline())
        send(proxy.stdin, notice)
        send(proxy.stdin, LIST)
        listed = json.loads(proxy.stdout.readline())
    finally:
        proxy.stdin.close()
        proxy.stdout.read()
        proxy.stdout.close()
        proxy.wait(timeout=30)
    stderr = (tmp_path / "stderr.log").read_text()
    assert refused["id"] == 7, refused
    assert refused["error"]["code"] == -32600
    assert "over the limit of 64 MiB" in refused["error"]["message"]
    assert listed["id"] == 2 and "tools" in listed["result"], listed
    assert "notifications/progress" in stderr and "over the limit of 64 MiB" in stderr, stderr
    assert proxy.returncode == 0, stderr
    tally("oversized client line", injected=2, survived=2)


def receive(stream, method: str) -> dict:  # type: ignore[no-untyped-def]
    """The next message with `method` (a request or notification) from the proxy."""
    while True:
        message = json.loads(stream.readline())
        if message.get("method") == method:
            return message


def test_a_client_answer_over_the_limit_fails_the_servers_request(tmp_path: Path):
    # The server's sampling request reaches the client, whose answer is too long: the server's
    # request fails with the reason (so its tool call ends), and the proxy serves on.
    config = tmp_path / "asker.yaml"
    asker = SERVERS / "asking_server.py"
    config.write_text(f"servers:\n  asker:\n    command: {sys.executable}\n    args: [{asker}]\n")
    initialize = json.loads(json.dumps(INITIALIZE))
    initialize["params"]["capabilities"] = {"sampling": {}}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "asker__ask_model", "arguments": {"prompt": "hi"}}}  # fmt: skip
    with (tmp_path / "stderr.log").open("wb") as log:
        proxy = subprocess.Popen(
            command(tmp_path, config), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, env=env(tmp_path),
        )  # fmt: skip
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        send(proxy.stdin, initialize)
        json.loads(proxy.stdout.readline())
        send(proxy.stdin, INITIALIZED)
        send(proxy.stdin, call)
        asked = receive(proxy.stdout, "sampling/createMessage")
        text = {"type": "text", "text": "y" * (64 * 1024 * 1024 + 10)}
        result = {"role": "assistant", "model": "m", "content": text}
        send(proxy.stdin, {"jsonrpc": "2.0", "id": asked["id"], "result": result})
        answered = json.loads(proxy.stdout.readline())
        send(proxy.stdin, LIST)
        listed = json.loads(proxy.stdout.readline())
    finally:
        proxy.stdin.close()
        proxy.stdout.read()
        proxy.stdout.close()
        proxy.wait(timeout=30)
    stderr = (tmp_path / "stderr.log").read_text()
    assert answered["id"] == 3, answered
    assert "over the limit of 64 MiB" in json.dumps(answered), answered
    assert listed["id"] == 2 and "tools" in listed["result"], listed
    assert proxy.returncode == 0, stderr


@pytest.mark.parametrize(
    ("head", "members", "keys"),
    [
        ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"a": "xx',
         {"jsonrpc": "2.0", "id": 7, "method": "tools/call"},
         ("jsonrpc", "id", "method", "params")),
        ('{"method": "m", "params": {"id": 5, "x": "yy', {"method": "m"}, ("method", "params")),
        ('{"jsonrpc":"2.0","id":"a\\"b","result":{"c', {"jsonrpc": "2.0", "id": 'a"b'},
         ("jsonrpc", "id", "result")),
        ('  [1, 2, 3', {}, ()),
        ('{"id": tru', {}, ("id",)),
        ('not json', {}, ()),
    ],
)  # fmt: skip
def test_the_head_of_a_long_line_says_what_it_was(
    head: str, members: dict, keys: tuple[str, ...]
) -> None:
    assert top_level_members(head) == (members, keys)


def test_only_a_request_with_an_id_is_answered() -> None:
    request = TooLong(size=9, members={"id": 1, "method": "m"}, keys=("id", "method"))
    answer = json.loads(request.refusal() or b"null")
    assert answer["id"] == 1 and answer["error"]["code"] == -32600
    notice = TooLong(size=9, members={"method": "m"}, keys=("method",))
    response = TooLong(size=9, members={"id": 4}, keys=("id", "result"))
    odd_id = TooLong(size=9, members={"id": True, "method": "m"}, keys=("id", "method"))
    assert notice.refusal() is None and response.refusal() is None and odd_id.refusal() is None
    assert response.is_response and not notice.is_response
