"""A downstream MCP server, on raw stdio (no SDK: the same under both SDK lines), with
resources, resource templates, prompts, completion and subscriptions, all paginated.

`--label NAME` marks everything it returns, so a test can tell which instance answered; two
instances list the same `catalog://...` URIs and template (a collision), and each has URIs and a
template of its own scheme `NAME://`. Resources come in pages of 3, templates and prompts in
pages of 2.

Tools: `touch` (`uri`) sends `notifications/resources/updated` for `uri` when it is subscribed;
`add_resource` (`uri`) lists one more resource and sends `notifications/resources/list_changed`;
`add_prompt` (`name`) does the same for a prompt, with `notifications/prompts/list_changed`;
`crash` exits the process at once (the proxy restarts it on the next call); `seen`
(read-only) returns every request this process received, as {"method", "params"}.

`--broken-lists` answers resources/list and prompts/list with an error; `--no-completions`
leaves the `completions` capability out (and answers completion requests with an error).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

RESOURCE_PAGE, TEMPLATE_PAGE, PROMPT_PAGE = 3, 2, 2
NAMES = ["ann", "bob", "cy"]
BLOB = bytes(range(256))


def catalog(label: str) -> dict[str, list[dict[str, Any]]]:
    docs = [
        {
            "uri": f"catalog://doc/{i}",
            "name": f"doc{i}",
            "title": f"Document {i}",
            "mimeType": "text/plain",
            "annotations": {"audience": ["user"], "priority": i / 10},
        }
        for i in range(1, 6)
    ]
    return {
        "resources": [
            *docs,
            {"uri": f"catalog://{label}/only", "name": "only", "mimeType": "text/plain"},
            {"uri": f"{label}://notes/readme", "name": "readme", "description": "own scheme"},
            {"uri": "catalog://blob/1", "name": "blob", "mimeType": "application/octet-stream"},
        ],
        "resourceTemplates": [
            {"uriTemplate": "catalog://item/{id}", "name": "item", "mimeType": "text/plain"},
            {"uriTemplate": f"{label}://notes/{{name}}", "name": "note"},
            {"uriTemplate": f"catalog://{label}/search{{?q}}", "name": "search"},
        ],
        "prompts": [
            {
                "name": "greet",
                "title": "Greeting",
                "description": "Greets someone.",
                "arguments": [
                    {"name": "name", "description": "who", "required": True},
                    {"name": "style", "description": "how"},
                ],
            },
            {"name": "summarize", "arguments": [{"name": "text", "required": True}]},
            {"name": "plain"},
        ],
    }


class Server:
    def __init__(self, label: str, broken_lists: bool = False, completions: bool = True) -> None:
        self.label = label
        self.broken_lists = broken_lists
        self.completions = completions
        self.catalog = catalog(label)
        self.subscribed: set[str] = set()
        self.seen: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()

    def page(self, key: str, size: int, params: dict[str, Any]) -> dict[str, Any]:
        start = int(params.get("cursor") or 0)
        items = self.catalog[key]
        result: dict[str, Any] = {key: items[start : start + size]}
        if start + size < len(items):
            result["nextCursor"] = str(start + size)
        return result

    def read(self, uri: str) -> dict[str, Any]:
        label = self.label
        if uri == "catalog://blob/1":
            blob = base64.b64encode(BLOB).decode()
            return {"uri": uri, "mimeType": "application/octet-stream", "blob": blob}
        known = {r["uri"] for r in self.catalog["resources"]}
        if uri.startswith("catalog://item/"):
            text = f"item {uri.rsplit('/', 1)[1]} of {label}"
        elif uri.startswith(f"catalog://{label}/search"):
            text = f"search {uri.partition('?')[2]} of {label}"
        elif uri.startswith(f"{label}://"):
            text = f"note {uri[len(label) + 3 :]} of {label}"
        elif uri in known:
            text = f"{uri.rsplit('/', 2)[-2]} {uri.rsplit('/', 1)[1]} of {label}"
        else:
            raise LookupError(uri)
        return {"uri": uri, "mimeType": "text/plain", "text": text}

    def prompt(self, name: str, arguments: dict[str, str]) -> dict[str, Any]:
        label = self.label
        if name == "greet":
            style = arguments.get("style", "plainly")
            text = f"[{label}] greet {arguments['name']} {style}"
            return {"description": "a greeting", "messages": [_user(text)]}
        if name == "summarize":
            embedded = {"type": "resource", "resource": self.read("catalog://doc/1")}
            return {
                "messages": [
                    _user(f"[{label}] summarize: {arguments['text']}"),
                    {"role": "assistant", "content": embedded},
                ]
            }
        if name == "plain" or any(p["name"] == name for p in self.catalog["prompts"]):
            return {"messages": [_user(f"[{label}] {name}")]}
        raise LookupError(name)

    def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        ref, argument = params["ref"], params["argument"]
        value = argument.get("value", "")
        context = (params.get("context") or {}).get("arguments") or {}
        if ref.get("type") == "ref/prompt" and ref.get("name") == "greet":
            if argument["name"] == "style":
                values = [f"{self.label}: {s} for {context.get('name', '?')}" for s in ("warm",)]
            else:
                values = [f"{self.label}-{n}" for n in NAMES if n.startswith(value)]
        elif ref.get("type") == "ref/resource" and ref.get("uri") == "catalog://item/{id}":
            values = [f"{self.label}-{k}" for k in (1, 2, 3)]
        else:
            values = []
        return {"completion": {"values": values, "total": len(values), "hasMore": False}}

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if name == "touch":
            uri = str(arguments.get("uri"))
            if uri in self.subscribed:
                self.send({"method": "notifications/resources/updated", "params": {"uri": uri}})
                return _text("notified")
            return _text("not subscribed")
        if name == "add_resource":
            uri = str(arguments.get("uri"))
            self.catalog["resources"].append({"uri": uri, "name": "added"})
            self.send({"method": "notifications/resources/list_changed"})
            return _text("added")
        if name == "add_prompt":
            self.catalog["prompts"].append({"name": str(arguments.get("name"))})
            self.send({"method": "notifications/prompts/list_changed"})
            return _text("added")
        if name == "crash":
            sys.exit(3)
        if name == "seen":
            return _text(json.dumps(self.seen))
        return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}

    def handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            capabilities = {
                "tools": {},
                "resources": {"subscribe": True, "listChanged": True},
                # Only beta says it announces prompt list changes (the proxy merges the flag).
                "prompts": {"listChanged": self.label == "beta"},
            }
            if self.completions:
                capabilities["completions"] = {}
            return {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": capabilities,
                "serverInfo": {"name": f"catalog-{self.label}", "version": "1"},
            }
        if method == "tools/list":
            return {"tools": TOOLS}
        if method == "tools/call":
            return self.call_tool(params["name"], params.get("arguments") or {})
        if self.broken_lists and method in ("resources/list", "prompts/list"):
            raise RuntimeError(f"{method} is broken on purpose")
        if not self.completions and method == "completion/complete":
            raise NotImplementedError(method)
        if method == "resources/list":
            return self.page("resources", RESOURCE_PAGE, params)
        if method == "resources/templates/list":
            return self.page("resourceTemplates", TEMPLATE_PAGE, params)
        if method == "resources/read":
            return {"contents": [self.read(params["uri"])]}
        if method == "resources/subscribe":
            self.subscribed.add(params["uri"])
            return {}
        if method == "resources/unsubscribe":
            self.subscribed.discard(params["uri"])
            return {}
        if method == "prompts/list":
            return self.page("prompts", PROMPT_PAGE, params)
        if method == "prompts/get":
            return self.prompt(params["name"], params.get("arguments") or {})
        if method == "completion/complete":
            return self.complete(params)
        if method == "ping":
            return {}
        raise NotImplementedError(method)

    def serve(self) -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            message = json.loads(line)
            method, ident = message.get("method"), message.get("id")
            if ident is None or method is None:
                continue  # a notification or a reply: nothing to answer
            params = message.get("params") or {}
            if method not in ("initialize", "tools/list", "ping"):
                self.seen.append({"method": method, "params": params})
            try:
                self.send({"id": ident, "result": self.handle(method, params)})
            except LookupError as exc:
                error = {"code": -32002, "message": f"{self.label}: not found: {exc}"}
                self.send({"id": ident, "error": error})
            except RuntimeError as exc:
                self.send({"id": ident, "error": {"code": -32603, "message": str(exc)}})
            except NotImplementedError as exc:
                error = {"code": -32601, "message": f"method not found: {exc}"}
                self.send({"id": ident, "error": error})


TOOLS = [
    {
        "name": "touch",
        "description": "Send resources/updated for a subscribed URI.",
        "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}},
    },
    {
        "name": "add_resource",
        "description": "List one more resource and say so.",
        "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}},
    },
    {
        "name": "add_prompt",
        "description": "List one more prompt and say so.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
    {
        "name": "crash",
        "description": "Exit at once, without answering.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "seen",
        "description": "The requests this server received.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "text", "text": text}}


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="alpha")
    parser.add_argument("--broken-lists", action="store_true")
    parser.add_argument("--no-completions", action="store_true")
    args = parser.parse_args()
    Server(args.label, args.broken_lists, not args.no_completions).serve()


if __name__ == "__main__":
    main()
