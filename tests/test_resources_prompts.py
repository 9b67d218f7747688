"""Resources, resource templates, prompts, completion and subscriptions through the real proxy.

Every test compares what a client sees through the proxy with what the same client sees when
it talks to the downstream server directly: tests/servers/catalog_server.py (two instances,
`alpha` and `beta`, that list the same `catalog://` URIs, to exercise collisions and routing)
and @modelcontextprotocol/server-everything.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from compensator.wire import sdk as _sdk
from pytest_compensator.client import ProxyClient, proxy_parameters

from .conftest import SERVERS, third_party_servers

pytestmark = pytest.mark.anyio

CATALOG_SERVER = SERVERS / "catalog_server.py"
EVERYTHING = "npm/node_modules/@modelcontextprotocol/server-everything"

TWO_CATALOGS = """
servers:
  alpha:
    command: "@PYTHON@"
    args: ["@CATALOG@", "--label", "alpha"]
  beta:
    command: "@PYTHON@"
    args: ["@CATALOG@", "--label", "beta"]
tools:
  alpha__seen: {classification: read}
  beta__seen: {classification: read}
"""

WAIT = 10.0
"""Seconds to wait for a forwarded notification before the test fails."""


class Connection:
    """A client session plus the notifications it received."""

    def __init__(self, session: ClientSession, notes: list[Any], arrived: list[anyio.Event]):
        self.session = session
        self.notes = notes
        self._arrived = arrived

    async def notification(self, method: str, uri: str | None) -> None:
        """Wait until `method` about `uri` has arrived (fails after WAIT seconds)."""
        with anyio.fail_after(WAIT):
            while not any(_method_uri(n) == (method, uri) for n in self.notes):
                event = anyio.Event()
                self._arrived.append(event)
                await event.wait()


def _method_uri(note: Any) -> tuple[str, str | None]:
    note = getattr(note, "root", note)  # 1.x wraps notifications in ServerNotification
    params = getattr(note, "params", None)
    uri = getattr(params, "uri", None)
    return str(getattr(note, "method", "")), None if uri is None else str(uri)


@asynccontextmanager
async def connect(params: StdioServerParameters, log: Path) -> AsyncIterator[Connection]:
    notes: list[Any] = []
    arrived: list[anyio.Event] = []

    async def handler(message: Any) -> None:
        if not isinstance(message, Exception):
            notes.append(message)
            while arrived:
                arrived.pop().set()

    with log.open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=handler) as session,
        ):
            connection = Connection(session, notes, arrived)
            connection.initialized = await session.initialize()  # type: ignore[attr-defined]
            yield connection


def catalog_params(label: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(CATALOG_SERVER), "--label", label]
    )


def everything_params() -> StdioServerParameters:
    root = third_party_servers(EVERYTHING, node=True)
    script = root / EVERYTHING / "dist" / "index.js"
    return StdioServerParameters(command="node", args=[str(script), "stdio"])


@pytest.fixture
def catalogs(write_registry) -> Path:
    path: Path = write_registry(TWO_CATALOGS.replace("@CATALOG@", str(CATALOG_SERVER)))
    return path


def wire(model: Any) -> dict[str, Any]:
    return _sdk.to_wire(model)


async def all_pages(session: ClientSession, kind: str) -> tuple[list[dict[str, Any]], int]:
    """Every item of a list (`resources`, `resource_templates`, `prompts`) as wire dicts, and
    how many pages it took."""
    items: list[Any] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = await _sdk.list_page(session, kind, cursor)
        pages += 1
        items.extend(page)
        if not cursor:
            return [wire(item) for item in items], pages


async def read(session: ClientSession, uri: str) -> list[dict[str, Any]]:
    result = await session.read_resource(uri)  # type: ignore[arg-type]
    return [wire(content) for content in result.contents]


async def get_prompt(
    session: ClientSession, name: str, arguments: dict[str, str] | None = None
) -> dict[str, Any]:
    return wire(await session.get_prompt(name, arguments))


async def complete(
    session: ClientSession,
    ref: dict[str, Any],
    argument: dict[str, str],
    context: dict[str, str] | None = None,
) -> list[str]:
    if ref["type"] == "ref/prompt":
        reference: Any = types.PromptReference.model_validate(ref)
    else:
        reference = types.ResourceTemplateReference.model_validate(ref)
    result = await session.complete(reference, argument, context_arguments=context)
    return list(result.completion.values)


async def subscribe(session: ClientSession, uri: str) -> None:
    """`resources/subscribe` sent as such (2.x's `subscribe_resource` warns it is deprecated)."""
    await _sdk.send_wire_request(
        session, "resources/subscribe", {"uri": uri}, types.SubscribeRequest, types.EmptyResult
    )


async def unsubscribe(session: ClientSession, uri: str) -> None:
    await _sdk.send_wire_request(
        session, "resources/unsubscribe", {"uri": uri}, types.UnsubscribeRequest, types.EmptyResult
    )


async def seen(client: ProxyClient, server: str) -> list[dict[str, Any]]:
    value = await client.call_ok(f"{server}__seen")
    assert isinstance(value, list)
    return value


def exposed_as(server: str, items: list[dict[str, Any]], key: str, taken: set[str]) -> list[dict]:
    """`items` of `server` as the proxy lists them after `taken` (earlier servers' values)."""
    return [
        {**item, key: f"compensator://{server}/{item[key]}"} if item[key] in taken else item
        for item in items
    ]


async def direct_catalog(label: str, log: Path) -> dict[str, Any]:
    async with connect(catalog_params(label), log) as direct:
        resources, resource_pages = await all_pages(direct.session, "resources")
        templates, template_pages = await all_pages(direct.session, "resource_templates")
        prompts, prompt_pages = await all_pages(direct.session, "prompts")
        contents = {r["uri"]: await read(direct.session, r["uri"]) for r in resources}
        greeting = await get_prompt(direct.session, "greet", {"name": "Zoe", "style": "loudly"})
        summary = await get_prompt(direct.session, "summarize", {"text": "t"})
        plain = await get_prompt(direct.session, "plain")
    # The test server paginates: the proxy has to follow the cursors to list everything.
    assert (resource_pages, template_pages, prompt_pages) == (3, 2, 2)
    return {
        "resources": resources,
        "templates": templates,
        "prompts": prompts,
        "contents": contents,
        "prompt_results": {"greet": greeting, "summarize": summary, "plain": plain},
    }


# -- the Python test server, twice -------------------------------------------------------


async def test_lists_are_the_downstream_lists_merged(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    alpha = await direct_catalog("alpha", log)
    beta = await direct_catalog("beta", log)
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        capabilities = wire(proxied.initialized.capabilities)  # type: ignore[attr-defined]
        first_page = await session.list_resources()
        resources, resource_pages = await all_pages(session, "resources")
        templates, _ = await all_pages(session, "resource_templates")
        prompts, _ = await all_pages(session, "prompts")
        client = ProxyClient(session)
        asked = [r for r in await seen(client, "beta") if r["method"] == "resources/list"]

    assert capabilities["resources"] == {"subscribe": True, "listChanged": True}
    assert capabilities["prompts"] == {"listChanged": True}  # beta's, though alpha's is false
    assert "completions" in capabilities
    # The proxy serves the merged list in one page, having followed the downstream cursors.
    assert resource_pages == 1 and _sdk.next_cursor(first_page) is None
    assert [r["params"].get("cursor") for r in asked] == [None, "3", "6"]

    alpha_uris = {r["uri"] for r in alpha["resources"]}
    expected = alpha["resources"] + exposed_as("beta", beta["resources"], "uri", alpha_uris)
    assert resources == expected
    assert len(resources) == 16
    assert {"catalog://beta/only", "beta://notes/readme"} <= {r["uri"] for r in resources}
    assert "compensator://beta/catalog://doc/1" in {r["uri"] for r in resources}

    alpha_templates = {t["uriTemplate"] for t in alpha["templates"]}
    beta_templates = exposed_as("beta", beta["templates"], "uriTemplate", alpha_templates)
    assert templates == alpha["templates"] + beta_templates
    assert "compensator://beta/catalog://item/{id}" in {t["uriTemplate"] for t in templates}

    def renamed(server: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**p, "name": f"{server}__{p['name']}"} for p in items]

    assert prompts == renamed("alpha", alpha["prompts"]) + renamed("beta", beta["prompts"])
    assert prompts[0]["arguments"] == alpha["prompts"][0]["arguments"]


async def test_reads_route_by_uri_template_and_scheme_and_are_not_journaled(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    alpha = await direct_catalog("alpha", log)
    beta = await direct_catalog("beta", log)
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        checkpoint = await client.checkpoint("before reads")
        listed = [r["uri"] for r in (await all_pages(session, "resources"))[0]]
        through = {uri: await read(session, uri) for uri in listed}
        routed = {
            uri: (await read(session, uri))[0]["text"]
            for uri in [
                "catalog://item/9",  # alpha's template (alpha is first in the registry)
                "compensator://beta/catalog://item/9",  # beta's, under its exposed form
                "beta://notes/todo",  # beta's own template
                "beta://elsewhere/x",  # no listing or template: the only server of the scheme
                "alpha://elsewhere/y",
                "catalog://beta/search?q=z",  # beta's template with a query
            ]
        }
        with pytest.raises(_sdk.SDKError) as unknown:
            await read(session, "nowhere://x")
        with pytest.raises(_sdk.SDKError) as ambiguous:
            await read(session, "catalog://nothing/here")
        with pytest.raises(_sdk.SDKError) as downstream_error:
            await read(session, "compensator://beta/catalog://nothing/here")
        beta_seen = await seen(client, "beta")
        beta_reads = [r["params"]["uri"] for r in beta_seen if r["method"] == "resources/read"]
        changes = await client.list_changes(checkpoint)

    for uri in alpha["contents"]:
        assert through[uri] == alpha["contents"][uri], uri
    for uri, contents in beta["contents"].items():
        exposed = uri if uri not in alpha["contents"] else f"compensator://beta/{uri}"
        # Contents of a renamed resource carry the URI the client asked for; nothing else moves.
        assert through[exposed] == [{**c, "uri": exposed} for c in contents], uri
    blob = through["compensator://beta/catalog://blob/1"][0]
    assert blob["blob"] == alpha["contents"]["catalog://blob/1"][0]["blob"]
    assert routed == {
        "catalog://item/9": "item 9 of alpha",
        "compensator://beta/catalog://item/9": "item 9 of beta",
        "beta://notes/todo": "note notes/todo of beta",
        "beta://elsewhere/x": "note elsewhere/x of beta",
        "alpha://elsewhere/y": "note elsewhere/y of alpha",
        "catalog://beta/search?q=z": "search q=z of beta",
    }
    # beta received its own URIs, never the proxy's compensator:// form.
    assert "catalog://item/9" in beta_reads and "catalog://doc/1" in beta_reads
    assert not [uri for uri in beta_reads if uri.startswith("compensator://")]

    code, message, _ = _sdk.error_data(unknown.value)
    assert code == -32002 and "nowhere://x" in message and "'nowhere'" in message
    code, message, _ = _sdk.error_data(ambiguous.value)
    assert code == -32002 and "several servers (alpha, beta)" in message
    code, message, _ = _sdk.error_data(downstream_error.value)
    assert code == -32002 and message.startswith("server 'beta': beta: not found")
    # Reads change nothing, so nothing was journaled.
    assert changes == []


async def test_prompts_and_completion_route_to_the_owning_server(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    alpha = await direct_catalog("alpha", log)
    beta = await direct_catalog("beta", log)
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        checkpoint = await client.checkpoint()
        results = {
            server: {
                "greet": await get_prompt(
                    session, f"{server}__greet", {"name": "Zoe", "style": "loudly"}
                ),
                "summarize": await get_prompt(session, f"{server}__summarize", {"text": "t"}),
                "plain": await get_prompt(session, f"{server}__plain"),
            }
            for server in ("alpha", "beta")
        }
        prompt = {"type": "ref/prompt", "name": "alpha__greet"}
        completions = {
            "alpha name": await complete(session, prompt, {"name": "name", "value": "a"}),
            "beta name": await complete(
                session, {**prompt, "name": "beta__greet"}, {"name": "name", "value": ""}
            ),
            "beta style": await complete(
                session,
                {**prompt, "name": "beta__greet"},
                {"name": "style", "value": ""},
                {"name": "Zoe"},
            ),
            "alpha template": await complete(
                session,
                {"type": "ref/resource", "uri": "catalog://item/{id}"},
                {"name": "id", "value": ""},
            ),
            "beta template": await complete(
                session,
                {"type": "ref/resource", "uri": "compensator://beta/catalog://item/{id}"},
                {"name": "id", "value": ""},
            ),
        }
        with pytest.raises(_sdk.SDKError) as unknown:
            await get_prompt(session, "greet", {"name": "x"})
        beta_seen = await seen(client, "beta")
        changes = await client.list_changes(checkpoint)

    assert results["alpha"] == alpha["prompt_results"]
    assert results["beta"] == beta["prompt_results"]
    assert results["beta"]["greet"]["messages"][0]["content"]["text"] == "[beta] greet Zoe loudly"
    assert results["alpha"]["summarize"]["messages"][1]["content"]["type"] == "resource"
    assert completions == {
        "alpha name": ["alpha-ann"],
        "beta name": ["beta-ann", "beta-bob", "beta-cy"],
        "beta style": ["beta: warm for Zoe"],
        "alpha template": ["alpha-1", "alpha-2", "alpha-3"],
        "beta template": ["beta-1", "beta-2", "beta-3"],
    }
    # beta got its own names: the prefix and the compensator:// form were taken off.
    gets = [r["params"]["name"] for r in beta_seen if r["method"] == "prompts/get"]
    assert gets == ["greet", "summarize", "plain"]
    refs = [r["params"]["ref"] for r in beta_seen if r["method"] == "completion/complete"]
    assert refs == [
        {"type": "ref/prompt", "name": "greet"},
        {"type": "ref/prompt", "name": "greet"},
        {"type": "ref/resource", "uri": "catalog://item/{id}"},
    ]
    styled = [r["params"] for r in beta_seen if r["method"] == "completion/complete"][1]
    assert styled["context"] == {"arguments": {"name": "Zoe"}}
    code, message, _ = _sdk.error_data(unknown.value)
    assert code == -32602 and "'greet'" in message and "alpha__greet" in message
    assert changes == []


async def test_subscriptions_reach_the_owning_server_and_updates_come_back(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        await subscribe(session, "compensator://beta/catalog://doc/1")
        await subscribe(session, "catalog://doc/2")
        await subscribe(session, "beta://notes/x")
        assert await client.call_ok("beta__touch", {"uri": "catalog://doc/1"}) == "notified"
        await proxied.notification(
            "notifications/resources/updated", "compensator://beta/catalog://doc/1"
        )
        assert await client.call_ok("alpha__touch", {"uri": "catalog://doc/2"}) == "notified"
        await proxied.notification("notifications/resources/updated", "catalog://doc/2")
        assert await client.call_ok("beta__touch", {"uri": "beta://notes/x"}) == "notified"
        await proxied.notification("notifications/resources/updated", "beta://notes/x")
        # alpha was not subscribed to its doc/1: the subscription went to beta alone.
        assert await client.call_ok("alpha__touch", {"uri": "catalog://doc/1"}) == "not subscribed"
        await unsubscribe(session, "compensator://beta/catalog://doc/1")
        after = await client.call_ok("beta__touch", {"uri": "catalog://doc/1"})
        beta_seen = await seen(client, "beta")
    assert after == "not subscribed"
    subscriptions = [
        (r["method"], r["params"]["uri"]) for r in beta_seen if "subscribe" in r["method"]
    ]
    assert subscriptions == [
        ("resources/subscribe", "catalog://doc/1"),
        ("resources/subscribe", "beta://notes/x"),
        ("resources/unsubscribe", "catalog://doc/1"),
    ]
    updated = [_method_uri(n) for n in proxied.notes]
    assert updated.count(("notifications/resources/updated", "catalog://doc/1")) == 0
    # Each update is forwarded once, not once per notification path in the proxy.
    assert updated.count(("notifications/resources/updated", "catalog://doc/2")) == 1
    assert updated.count(("notifications/resources/updated", "beta://notes/x")) == 1


async def test_subscriptions_are_renewed_when_the_server_restarts(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        await subscribe(session, "beta://notes/x")
        crashed = await client.call("beta__crash")
        assert crashed.is_error and "exited" in crashed.text
        # This call restarts beta, which is subscribed again before the call reaches it.
        assert await client.call_ok("beta__touch", {"uri": "beta://notes/x"}) == "notified"
        await proxied.notification("notifications/resources/updated", "beta://notes/x")
        beta_seen = await seen(client, "beta")
    subscriptions = [
        (r["method"], r["params"]["uri"]) for r in beta_seen if "subscribe" in r["method"]
    ]
    assert subscriptions == [("resources/subscribe", "beta://notes/x")]  # the new process's


async def test_list_changed_refreshes_the_routes(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        before = [r["uri"] for r in (await all_pages(session, "resources"))[0]]
        assert await client.call_ok("beta__add_resource", {"uri": "catalog://new/1"}) == "added"
        await proxied.notification("notifications/resources/list_changed", None)
        after = [r["uri"] for r in (await all_pages(session, "resources"))[0]]
        # Only beta lists it now, so a read goes to beta (the scheme alone is ambiguous).
        contents = await read(session, "catalog://new/1")
    assert "catalog://new/1" not in before
    assert after == [*before, "catalog://new/1"]
    assert contents[0]["text"] == "new 1 of beta"


async def test_prompts_list_changed_refreshes_the_prompts(catalogs, tmp_path):
    log = tmp_path / "stderr.log"
    async with connect(proxy_parameters(catalogs, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        before = [p["name"] for p in (await all_pages(session, "prompts"))[0]]
        assert await client.call_ok("beta__add_prompt", {"name": "fresh"}) == "added"
        await proxied.notification("notifications/prompts/list_changed", None)
        after = [p["name"] for p in (await all_pages(session, "prompts"))[0]]
        fresh = await get_prompt(session, "beta__fresh")
    assert "beta__fresh" not in before
    assert after == [*before, "beta__fresh"]
    assert fresh["messages"][0]["content"]["text"] == "[beta] fresh"


async def test_failed_lists_leave_the_tools_and_missing_completions_answer_empty(
    write_registry, tmp_path
):
    config = write_registry(
        f"""
        servers:
          alpha:
            command: "@PYTHON@"
            args: ["{CATALOG_SERVER}", "--label", "alpha"]
            prefix: al
          gamma:
            command: "@PYTHON@"
            args: ["{CATALOG_SERVER}", "--label", "gamma", "--broken-lists", "--no-completions"]
        tools:
          gamma__seen: {{classification: read}}
        """
    )
    log = tmp_path / "stderr.log"
    alpha = await direct_catalog("alpha", log)
    async with connect(proxy_parameters(config, tmp_path / "journal.db"), log) as proxied:
        session = proxied.session
        client = ProxyClient(session)
        tools = {tool.name for tool in await client.list_tools()}
        resources, _ = await all_pages(session, "resources")
        templates, _ = await all_pages(session, "resource_templates")
        prompts, _ = await all_pages(session, "prompts")
        values = await complete(
            session,
            {"type": "ref/resource", "uri": "gamma://notes/{name}"},
            {"name": "name", "value": ""},
        )
        gamma_seen = await seen(client, "gamma")
        greeting = await get_prompt(session, "al__greet", {"name": "Zoe", "style": "loudly"})
    assert {"gamma__touch", "gamma__seen", "al__touch"} <= tools
    assert resources == alpha["resources"]
    # Prompts take the server's `prefix:`, like its tools.
    assert [p["name"] for p in prompts] == ["al__greet", "al__summarize", "al__plain"]
    assert greeting == alpha["prompt_results"]["greet"]
    assert "gamma://notes/{name}" in {t["uriTemplate"] for t in templates}
    assert values == []
    assert "completion/complete" not in {r["method"] for r in gamma_seen}
    text = log.read_text()
    assert "server 'gamma': listing its resources failed" in text
    assert "server 'gamma': listing its prompts failed" in text


# -- server-everything ----------------------------------------------------------------------

EVERYTHING_REGISTRY = """
servers:
  everything:
    command: node
    args: ["@SCRIPT@", "stdio"]
"""


async def test_server_everything_through_the_proxy(write_registry, tmp_path):
    params = everything_params()
    config = write_registry(EVERYTHING_REGISTRY.replace("@SCRIPT@", params.args[0]))
    log = tmp_path / "stderr.log"
    static = "demo://resource/static/document/features.md"
    async with connect(params, log) as direct:
        d = direct.session
        d_caps = wire(direct.initialized.capabilities)  # type: ignore[attr-defined]
        d_resources, _ = await all_pages(d, "resources")
        d_templates, _ = await all_pages(d, "resource_templates")
        d_prompts, _ = await all_pages(d, "prompts")
        d_contents = {r["uri"]: await read(d, r["uri"]) for r in d_resources}
        d_simple = await get_prompt(d, "simple-prompt")
        d_args = await get_prompt(d, "args-prompt", {"city": "Oslo", "state": "Viken"})

    async with connect(proxy_parameters(config, tmp_path / "journal.db"), log) as proxied:
        p = proxied.session
        client = ProxyClient(p)
        p_caps = wire(proxied.initialized.capabilities)  # type: ignore[attr-defined]
        checkpoint = await client.checkpoint()
        p_resources, _ = await all_pages(p, "resources")
        p_templates, _ = await all_pages(p, "resource_templates")
        p_prompts, _ = await all_pages(p, "prompts")
        p_contents = {r["uri"]: await read(p, r["uri"]) for r in p_resources}
        p_simple = await get_prompt(p, "everything__simple-prompt")
        p_args = await get_prompt(p, "everything__args-prompt", {"city": "Oslo", "state": "Viken"})
        dynamic = await read(p, "demo://resource/dynamic/text/3")
        prompt = {"type": "ref/prompt", "name": "everything__completable-prompt"}
        departments = await complete(p, prompt, {"name": "department", "value": "Sa"})
        people = await complete(p, prompt, {"name": "name", "value": ""}, {"department": "Sales"})
        template = {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"}
        ids = await complete(p, template, {"name": "resourceId", "value": "42"})
        changes = await client.list_changes(checkpoint)
        # A resource link in a tool result stays readable through the proxy.
        links = await client.call("everything__get-resource-links", {"count": 2})
        linked = [b for b in _sdk.result_parts(links.raw)[1] if b.get("type") == "resource_link"]
        link_contents = [await read(p, block["uri"]) for block in linked]
        # Subscribe, then let the server send its simulated update (it sends one at once).
        await subscribe(p, static)
        await client.call_ok("everything__toggle-subscriber-updates")
        await proxied.notification("notifications/resources/updated", static)
        await client.call_ok("everything__toggle-subscriber-updates")  # stop them again
        await unsubscribe(p, static)

    assert d_caps["resources"]["subscribe"] is True
    assert p_caps["resources"] == {
        "subscribe": d_caps["resources"]["subscribe"],
        "listChanged": d_caps["resources"]["listChanged"],
    }
    assert p_caps["prompts"] == d_caps["prompts"]
    assert ("completions" in p_caps) == ("completions" in d_caps)
    assert p_resources == d_resources and len(p_resources) == 7
    assert p_templates == d_templates and len(p_templates) == 2
    assert p_prompts == [{**x, "name": f"everything__{x['name']}"} for x in d_prompts]
    assert p_contents == d_contents
    assert (p_simple, p_args) == (d_simple, d_args)
    assert dynamic[0]["uri"] == "demo://resource/dynamic/text/3"
    assert dynamic[0]["text"].startswith("Resource 3: This is a plaintext resource")
    assert departments == ["Sales"]
    assert people == ["David", "Eve", "Frank"]
    assert ids == ["42"]
    assert len(linked) == 2 and all(contents and contents[0]["uri"] for contents in link_contents)
    assert [c[0]["uri"] for c in link_contents] == [b["uri"] for b in linked]
    assert changes == []
