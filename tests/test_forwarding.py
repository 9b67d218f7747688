"""Forwarding fidelity and start-up faults, through the real proxy and real servers."""

from __future__ import annotations

import pytest

from compensator.wire import sdk as _sdk

pytestmark = pytest.mark.anyio

FIDELITY = """
servers:
  fid:
    command: "@PYTHON@"
    args: ["@FIDELITY_SERVER@"]
{extra}
"""


def fidelity_registry(write_registry, extra: str = "") -> object:
    return write_registry(FIDELITY.replace("{extra}", extra))


async def test_tool_metadata_passes_through_untouched(proxy, write_registry):
    config = fidelity_registry(write_registry)
    async with proxy(config) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    # Seven tools in pages of two: pagination was followed downstream.
    assert {n for n in tools if n.startswith("fid__")} == {
        "fid__shaped",
        "fid__echo",
        "fid__fail",
        "fid__peek",
        "fid__vendor",
        "fid__bump",
        "fid__set_count",
    }
    wire = _sdk.tool_to_wire(tools["fid__shaped"])
    assert wire["title"] == "A Shaped Tool"
    assert wire["description"].startswith("Returns structured content")
    assert wire["inputSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert wire["outputSchema"]["required"] == ["count"]
    assert wire["annotations"] == {
        "title": "Shaped",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert wire["_meta"] == {"example.com/owner": "tests", "nested": {"k": [1, 2]}}


async def test_result_violating_output_schema_is_passed_back_raw(proxy, write_registry):
    config = fidelity_registry(write_registry)
    async with proxy(config) as client:
        reply = await client.call("fid__shaped", {"n": 1})
        failed = await client.call("fid__fail", {})
        echoed = await client.call("fid__echo", {"a": [1, {"b": None}]})
    structured, _, is_error = _sdk.result_parts(reply.raw)
    assert not is_error
    assert structured == {"count": "not a number", "extra": True}
    assert failed.is_error and failed.text == "this tool always fails"
    assert echoed.value == {"a": [1, {"b": None}]}


async def test_fields_no_mcp_revision_defines_reach_the_client(proxy, write_registry):
    """A result goes to the client as the server sent it, unknown fields and all, both when the
    call is read-only and when it is journaled (then its parsed value is journaled too)."""
    from tests.servers.fidelity_server import VENDOR_RESULT

    extra = """
tools:
  fid__vendor:
    classification: irreversible
    approve: false
"""
    config = fidelity_registry(write_registry, extra)
    async with proxy(config) as client:
        cp = await client.checkpoint()
        journaled = await client.call("fid__vendor", {})
        [change] = await client.list_changes(cp)
    # Every field as sent; a line may add its own (1.x writes its default `isError: false`).
    assert {key: journaled.raw.get(key) for key in VENDOR_RESULT} == VENDOR_RESULT
    assert change["status"] == "ok" and change["tool"] == "fid__vendor"
    read_only = "tools:\n  fid__vendor:\n    classification: read\n"
    async with proxy(fidelity_registry(write_registry, read_only)) as client:
        read = await client.call("fid__vendor", {})
    assert {key: read.raw.get(key) for key in VENDOR_RESULT} == VENDOR_RESULT


async def test_unregistered_tools_are_unknown_and_refused(proxy, write_registry):
    config = fidelity_registry(write_registry)
    async with proxy(config) as client:
        cp = await client.checkpoint()
        await client.call_ok("fid__bump", {"by": 2})
        await client.call_ok("fid__peek")  # read-only hint, but not trusted by default
        changes = await client.list_changes(cp)
        assert [(c["tool"], c["classification"]) for c in changes] == [
            ("fid__peek", "unknown"),
            ("fid__bump", "unknown"),
        ]
        report = await client.undo_to(cp)
        assert report["undone"] == []
        assert all(s["reason"].startswith("unknown") for s in report["skipped"])
        assert (await client.call_ok("fid__peek"))["count"] == 2  # nothing was undone
        explained = await client.call_ok("explain_blast_radius", {"tool": "fid__shaped"})
        assert explained["classification"] == "unknown"
        assert "destructive" in explained["explanation"]


async def test_trust_read_only_hint_makes_annotated_reads_unjournaled(proxy, write_registry):
    config = fidelity_registry(write_registry, "defaults: {trust_read_only_hint: true}")
    async with proxy(config) as client:
        cp = await client.checkpoint()
        await client.call_ok("fid__peek")
        await client.call_ok("fid__bump")
        assert [c["tool"] for c in await client.list_changes(cp)] == ["fid__bump"]


async def test_server_that_fails_to_start_is_left_out(proxy, write_registry, proxy_log):
    config = write_registry(
        """
        servers:
          fid:
            command: "@PYTHON@"
            args: ["@FIDELITY_SERVER@"]
          missing:
            command: "@TMP@/no-such-binary"
          crashing:
            command: "@PYTHON@"
            args: ["-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
        """
    )
    async with proxy(config) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert "fid__echo" in names
        assert not any(n.startswith(("missing__", "crashing__")) for n in names)
        assert (await client.call_ok("fid__echo", {"ok": 1})) == {"ok": 1}
        reply = await client.call("crashing__anything", {})
        assert reply.is_error and "failed to start" in reply.text
        # The client hides stderr; the instructions it shows say which servers are missing.
        assert "Server 'missing' failed to start" in (client.instructions or "")
        assert "Server 'crashing' failed to start" in (client.instructions or "")
        assert "'fid' failed" not in (client.instructions or "")
    log = proxy_log()
    assert "'missing' failed to start" in log
    assert "'crashing' failed to start" in log


async def test_conditions_that_cannot_be_evaluated_err_on_the_safe_side(proxy, write_registry):
    extra = """
tools:
  fid__bump:
    classification: reversible
    mutating_when: "length(args.items) > `0`"      # length(null) fails at run time
    error_when: "length(result.missing) > `0`"
    inverse_tool: fid__bump
    inverse_args: {by: -1}
"""
    config = fidelity_registry(write_registry, extra)
    async with proxy(config) as client:
        cp = await client.checkpoint()
        await client.call_ok("fid__bump", {"by": 1})
        [change] = await client.list_changes(cp)
        assert change["status"] == "ok"  # journaled (mutating), and counted as done
        assert (await client.undo_to(cp))["skipped"] == []
        assert (await client.call_ok("fid__peek"))["count"] == 0


async def test_ping_is_answered_by_the_proxy(proxy, write_registry):
    config = fidelity_registry(write_registry)
    async with proxy(config) as client:
        await client.session.send_ping()
        # still serving afterwards
        assert await client.call_ok("fid__echo", {"a": 1}) == {"a": 1}
