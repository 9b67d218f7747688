"""A downstream MCP server, written by hand on raw stdio, that mixes garbage into its stdout.

It answers initialize, tools/list and tools/call itself (no SDK, so it behaves the same under
both SDK lines), and around its answers writes lines that are not MCP: plain text, invalid
JSON, JSON that is not JSON-RPC, responses to ids never sent, and bytes that are not UTF-8.

Tools: `echo` (garbage before and after the answer), `binary` (a non-UTF-8 line first),
`stray` (answers to unknown ids first), `huge_text` (`megabytes` of text in one block),
`many_blocks` (`count` text blocks), `never` (only garbage and stray answers, no real one),
`argv` (its command-line arguments as a JSON list, to show they arrive untouched), `refuse`
(a JSON-RPC error instead of a result, as a server does when a handler raises past its SDK).

Two tools misbehave on `tools/list` instead: `go_quiet` announces
`notifications/tools/list_changed` and then leaves every `tools/list` unanswered; its own
answer comes once the first such `tools/list` has arrived, so the caller knows a re-list is
hanging. `grow` ends the silence, adds a tool `grown` and announces the change again.
"""

from __future__ import annotations

import json
import sys
from typing import Any

OUT = sys.stdout.buffer

TEXT_GARBAGE = [
    b"this line is not JSON at all\n",
    b"{not json either\n",
    b'{"valid": "json", "but": "not JSON-RPC"}\n',
    b"[1, 2, 3]\n",
    b'"a lone string"\n',
    b"null\n",
    b"\n",
    b"   \n",
    b'{"jsonrpc": "2.0"}\n',
    b'{"jsonrpc": "2.0", "method": "notifications/made_up", "params": {"x": 1}}\n',
    b'{"jsonrpc": "1.0", "id": 1, "result": {}}\n',
]
STRAY_ANSWERS = [
    b'{"jsonrpc": "2.0", "id": 987654321, "result": {"content": []}}\n',
    b'{"jsonrpc": "2.0", "id": "no-such-request", "error": {"code": -1, "message": "stray"}}\n',
    b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}\n',
]
BINARY = b"\xff\xfe\x00\x80 not utf-8 \xc3\x28\n"

_NUMBER = {"type": "number"}
TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "binary", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "stray", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "huge_text", "inputSchema": {"type": "object", "properties": {"megabytes": _NUMBER}}},
    {"name": "many_blocks", "inputSchema": {"type": "object", "properties": {"count": _NUMBER}}},
    {"name": "never", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "argv", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "refuse", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "go_quiet", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "grow", "inputSchema": {"type": "object", "properties": {}}},
]
GROWN = {"name": "grown", "inputSchema": {"type": "object", "properties": {}}}
LIST_CHANGED = b'{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}\n'

quiet: dict[str, Any] = {"on": False, "caller": None}
"""While "on", tools/list goes unanswered; "caller" is the go_quiet call waiting for one."""


def write(*lines: bytes) -> None:
    for line in lines:
        OUT.write(line)
    OUT.flush()


def answer(request_id: Any, result: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def call(request_id: Any, name: str, args: dict[str, Any]) -> None:
    if name == "echo":
        write(*TEXT_GARBAGE, answer(request_id, text_result(str(args.get("text", "")))))
        write(*TEXT_GARBAGE)
    elif name == "binary":
        write(BINARY, answer(request_id, text_result("after binary")))
    elif name == "stray":
        write(*STRAY_ANSWERS, answer(request_id, text_result("after stray answers")))
    elif name == "huge_text":
        size = int(float(args.get("megabytes", 20)) * 1024 * 1024)
        write(answer(request_id, text_result("x" * size)))
    elif name == "many_blocks":
        count = int(args.get("count", 100_000))
        blocks = [{"type": "text", "text": str(i)} for i in range(count)]
        write(answer(request_id, {"content": blocks}))
    elif name == "argv":
        write(answer(request_id, text_result(json.dumps(sys.argv[1:]))))
    elif name == "refuse":
        error = {"code": -32603, "message": "refused after starting"}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")
    elif name == "never":
        write(*TEXT_GARBAGE, *STRAY_ANSWERS)
    elif name == "go_quiet":
        quiet.update(on=True, caller=request_id)
        write(LIST_CHANGED)
    elif name == "grow":
        quiet.update(on=False)
        if GROWN not in TOOLS:
            TOOLS.append(GROWN)
        write(answer(request_id, text_result("grown")), LIST_CHANGED)
    elif name == "grown":
        write(answer(request_id, text_result("I am grown")))
    else:
        error = {"code": -32602, "message": f"unknown tool {name}"}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if request_id is None:
        return  # a notification: initialized, cancelled
    if method == "initialize":
        write(*TEXT_GARBAGE, *STRAY_ANSWERS)  # garbage before the first answer, too
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "noisy", "version": "0"},
        }
        write(answer(request_id, result))
    elif method == "tools/list" and quiet["on"]:
        caller, quiet["caller"] = quiet["caller"], None
        if caller is not None:
            write(answer(caller, text_result("a tools/list is left unanswered")))
    elif method == "tools/list":
        write(answer(request_id, {"tools": TOOLS}), *TEXT_GARBAGE)
    elif method == "tools/call":
        call(request_id, params.get("name", ""), params.get("arguments") or {})
    elif method == "ping":
        write(answer(request_id, {}))
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")


def main() -> None:
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            handle(message)


if __name__ == "__main__":
    main()
