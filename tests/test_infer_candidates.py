"""What `compensator infer` proposes, from names, schemas and sample results (pure logic; the
proofs on real servers are in test_infer.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from compensator.cli import infer as infer_cli
from pytest_compensator import settings
from pytest_compensator.infer import InferError, Outcome, Report, add_to_tools, verify_result
from pytest_compensator.infer.candidates import (
    Candidate,
    Samples,
    ToolInfo,
    compensable_candidates,
    looks_read,
    opposite_tools,
    reporting_failures,
    reversible_candidates,
    snapshot_tools,
    words,
)
from pytest_compensator.infer.filling import Source, fill
from pytest_compensator.infer.probes import probe_entries, rank_probe_tools
from pytest_compensator.infer.proof import Attempt
from pytest_compensator.infer.quarantine import quarantine_candidates
from pytest_compensator.infer.texts import absence, text_candidates
from pytest_compensator.infer.writing import add_to_state


def tool(name: str, required: dict[str, Any] | None = None, **optional: Any) -> ToolInfo:
    required = required or {}
    properties = {k: {"type": v} for k, v in required.items()}
    properties |= {k: {"type": v} for k, v in optional.items()}
    schema = {"type": "object", "properties": properties, "required": list(required)}
    return ToolInfo(name=f"s__{name}", prefix="s__", schema=schema)


def offered(*tools: ToolInfo) -> dict[str, ToolInfo]:
    return {t.name: t for t in tools}


def test_words_split_snake_camel_and_kebab_names():
    assert words("add_task") == words("addTask") == words("add-task") == ["add", "task"]
    assert words("getHTTPStatus") == ["get", "http", "status"]


def test_opposites_keep_the_object_and_swap_the_verb():
    add, delete, remove = tool("add_label"), tool("delete_label"), tool("remove_label")
    other = tool("remove_task")
    assert opposite_tools(add, offered(add, delete, remove, other)) == [remove, delete]
    complete, uncomplete = tool("complete_task"), tool("uncompleteTask")
    assert opposite_tools(complete, offered(complete, uncomplete)) == [uncomplete]
    assert opposite_tools(uncomplete, offered(complete, uncomplete)) == [complete]
    move = tool("move_file")
    assert opposite_tools(move, offered(move)) == [move]
    elsewhere = ToolInfo(name="t__remove_label", prefix="t__", schema={})
    assert opposite_tools(add, offered(add, elsewhere)) == []


def test_an_inverse_takes_the_id_the_result_gave_and_a_when_per_result_flag():
    add = tool("add_task", {"title": "string"})
    delete = tool("delete_task", {"id": "integer"})
    samples = Samples(args=[{"title": "a"}], results=[{"id": 4, "title": "a", "created": True}])
    found = reversible_candidates(add, offered(add, delete), samples)
    assert [c.entry for c in found] == [
        {
            "classification": "reversible",
            "inverse": [
                {"tool": "s__delete_task", "args": {"id": "{result.id}"}, "when": "result.created"}
            ],
        },
        {
            "classification": "reversible",
            "inverse_tool": "s__delete_task",
            "inverse_args": {"id": "{result.id}"},
        },
    ]


def test_a_move_is_undone_by_the_move_back():
    move = tool("move_file", {"source": "string", "destination": "string"})
    samples = Samples(args=[{"source": "a", "destination": "b"}], results=["Moved a to b"])
    (found,) = reversible_candidates(move, offered(move), samples)
    assert found.entry["inverse_args"] == {
        "source": "{args.destination}",
        "destination": "{args.source}",
    }


def test_no_candidate_when_a_required_argument_has_no_source():
    delete = tool("delete_task", {"id": "integer"})
    restore = tool("restore_task", {"id": "integer", "title": "string"})
    samples = Samples(args=[{"id": 1}], results=[{"deleted": [1]}])
    assert reversible_candidates(delete, offered(delete, restore), samples) == []


def test_types_must_fit_and_optional_fields_only_from_fields_every_sample_had():
    add = tool("add_thing", {"name": "string"})
    remove = tool("remove_thing", {"id": "integer"}, force="boolean")
    samples = Samples(
        args=[{"name": "a", "force": True}, {"name": "b"}], results=[{"id": "x"}, {"id": "y"}]
    )
    # `id` in the results is a string: it does not fit the integer argument.
    assert reversible_candidates(add, offered(add, remove), samples) == []
    samples.results = [{"id": 1}, {"id": 2}]
    (found,) = reversible_candidates(add, offered(add, remove), samples)
    assert found.entry["inverse_args"] == {"id": "{result.id}"}  # no force: one call lacked it


def test_snapshot_then_a_write_of_what_it_showed():
    complete = tool("complete_task", {"id": "integer"})
    get = tool("get_task", {"id": "integer"})
    listing = tool("list_tasks")
    set_status = tool("set_status", {"id": "integer", "status": "string"})
    assert snapshot_tools(complete, [get, listing]) == [(get, {"id": "id"})]
    samples = Samples(
        args=[{"id": 1}],
        results=[{"id": 1, "status": "done"}],
        snapshots={"s__get_task": [{"id": 1, "title": "a", "status": "open"}]},
    )
    found = compensable_candidates(
        complete, offered(complete, get, set_status), [get, listing], samples
    )
    # complete_task itself is not tried: it would take nothing but the id from the snapshot.
    assert [c.entry for c in found] == [
        {
            "classification": "compensable",
            "snapshot_tool": "s__get_task",
            "snapshot_args": {"id": "{args.id}"},
            "inverse_tool": "s__set_status",
            "inverse_args": {"id": "{snapshot.id}", "status": "{snapshot.status}"},
        }
    ]


def test_a_cascade_is_put_back_in_two_steps():
    delete = tool("delete_task", {"id": "integer"})
    tree = tool("get_task_tree", {"id": "integer"})
    restore = tool("restore_task", {"id": "integer", "title": "string"}, parent_id="integer")
    restore_many = ToolInfo(
        name="s__restore_tasks",
        prefix="s__",
        schema={
            "type": "object",
            "properties": {"tasks": {"type": "array", "items": {"type": "object"}}},
            "required": ["tasks"],
        },
    )
    task = {"id": 1, "title": "a", "parent_id": None}
    samples = Samples(
        args=[{"id": 1}],
        results=[{"deleted": [1, 2]}],
        snapshots={
            "s__get_task_tree": [
                {"task": task, "children": [{"id": 2, "title": "b", "parent_id": 1}]}
            ]
        },
    )
    found = compensable_candidates(
        delete, offered(delete, tree, restore, restore_many), [tree], samples
    )
    # Single steps first (the task alone, the subtasks alone), then both.
    assert [c.entry.get("inverse_tool") for c in found[:2]] == [
        "s__restore_task",
        "s__restore_tasks",
    ]
    assert [c.entry.get("inverse") for c in found[2:]] == [
        [
            {
                "tool": "s__restore_task",
                "args": {
                    "id": "{snapshot.task.id}",
                    "title": "{snapshot.task.title}",
                    "parent_id": "{snapshot.task.parent_id}",
                },
            },
            {
                "tool": "s__restore_tasks",
                "args": {"tasks": "{snapshot.children}"},
                "when": "length(snapshot.children) > `0`",
            },
        ]
    ]


def test_entries_go_to_the_end_of_the_tools_section_and_nothing_else_moves():
    text = "servers: {}\ntools:\n  a: {classification: read}\n\nstate:\n  - tool: a\n"
    added = add_to_tools(text, ["  b: {classification: read}"], path="r.yaml")
    assert added == (
        "servers: {}\ntools:\n  a: {classification: read}\n\n  b: {classification: read}\n"
        "\nstate:\n  - tool: a\n"
    )
    assert add_to_tools("servers: {}\n", ["  b: x"], path="r.yaml").endswith("\ntools:\n  b: x\n")
    assert add_to_tools("tools: {}\n", ["  b: x"], path="r.yaml") == "tools:\n  b: x\n"
    assert add_to_tools("tools: ~\r\n", ["  b: x"], path="r") == "tools:\r\n  b: x\r\n"
    with pytest.raises(InferError, match=r"r\.yaml: `tools:` is written in flow style"):
        add_to_tools("tools: {a: {classification: read}}\n", ["  b: x"], path="r.yaml")


def test_a_section_indented_by_four_keeps_its_comments_and_the_next_sections_own():
    text = (
        "tools:   # mine\n    a:\n        classification: read\n    # about a\n"
        "# the probes\nstate:\n  - tool: a\n"
    )
    added = add_to_tools(text, ["  b:", "    classification: read", "  # c"], path="r")
    assert added == (
        "tools:   # mine\n    a:\n        classification: read\n    # about a\n\n"
        "    b:\n      classification: read\n    # c\n# the probes\nstate:\n  - tool: a\n"
    )
    assert yaml.safe_load(added)["tools"] == {
        "a": {"classification": "read"},
        "b": {"classification": "read"},
    }


def test_only_proven_entries_are_written_and_server_text_cannot_break_the_file():
    report = Report(config=Path("r.yaml"), seed=9)
    entry = {"classification": "reversible", "inverse_tool": "s__del", "inverse_args": {}}
    candidate = Candidate(kind="reversible", entry=entry, summary="reversible: s__del()")
    failure = 'undo_to(3) did not restore\n\nCalls (after shrinking, ...):\n  s__add(n="\x07\x1b")'
    attempt = Attempt(
        candidate=candidate, outcome="failed", examples=4, verified=1, calls=9, seconds=1.0,
        failure=failure,
    )  # fmt: skip
    proven = Attempt(
        candidate=candidate, outcome="proven", examples=100, verified=40, calls=99, seconds=2.0
    )
    report.outcomes = {
        "s__add": Outcome("s__add", status="proven", entry=entry, attempts=[attempt, proven]),
        "s__drop": Outcome("s__drop", reason="nothing to try", attempts=[attempt]),
        "s__kept": Outcome("s__kept", status="kept"),
    }
    original = "servers: {}\ntools:\n  s__kept: {classification: read}\n"
    text = report.text(original, today="2026-12-05")
    written = yaml.safe_load(text)["tools"]
    assert written == {"s__kept": {"classification": "read"}, "s__add": entry}
    assert "# proven by compensator infer: 100 examples, 40 undos verified, seed 9" in text
    assert "# s__drop: unclassified (nothing to try)" in text
    assert '#     s__add(n="\\x07\\x1b")' in text  # escaped, or YAML would refuse the file
    verify_result(original, text, report.entries, path="r.yaml")
    with pytest.raises(InferError, match=r"would change tools\.s__kept"):
        verify_result(original, text.replace("s__kept: {classification: read}", ""), {}, path="r")


def test_the_cli_repeats_the_plugin_defaults_it_shows_in_help():
    assert (infer_cli.DEFAULT_STEPS, infer_cli.DEFAULT_MIN_VERIFIED) == (
        settings.DEFAULT_STEPS,
        settings.DEFAULT_MIN_VERIFIED,
    )


def test_a_tool_that_reports_failure_in_band_gets_an_error_when():
    set_status = tool("set_status", {"id": "integer", "status": "string"})
    get = tool("get_task", {"id": "integer"})
    samples = Samples(
        args=[{"id": 1, "status": "done"}, {"id": 1, "status": "x"}],
        results=[{"ok": True, "task": {"id": 1}}, {"ok": False, "error": "bad status"}],
        snapshots={"s__get_task": [{"id": 1, "status": "open"}] * 2},
    )
    found = compensable_candidates(set_status, offered(set_status, get), [get], samples)
    samples.calls = 2
    (first, *_) = reporting_failures(found, samples)
    assert first.entry["error_when"] == "result.ok == `false`"
    assert first.entry["inverse_tool"] == "s__set_status"
    assert "test" not in first.entry  # one of two sample calls worked: random args do
    samples.results = [{"ok": True}, {"ok": True}]  # never false: nothing to tell apart
    assert reporting_failures(found, samples) == found


def test_a_tool_whose_random_calls_mostly_fail_gets_the_ones_that_worked_as_examples():
    samples = Samples(
        args=[{"id": 1, "title": "a"}, {"id": 1, "title": "a"}, {"id": 2, "title": "b"}],
        results=[{"id": 1}, {"id": 1}, {"id": 2}],
        calls=9,
    )
    candidate = Candidate(kind="read", entry={"classification": "read"}, summary="read")
    (found,) = reporting_failures([candidate], samples)
    assert found.entry == {
        "classification": "read",
        "test": {"examples": [{"id": 1, "title": "a"}, {"id": 2, "title": "b"}]},
    }
    assert found.summary == "read (test.examples from 3 of 9 sample calls)"


def test_without_a_delete_tool_what_a_call_made_is_moved_into_the_trash():
    write = tool("write_file", {"path": "string", "content": "string"})
    read = tool("read_text_file", {"path": "string"})
    mkdir = tool("create_directory", {"path": "string"})
    move = tool("move_file", {"source": "string", "destination": "string"})
    servers = offered(write, read, mkdir, move)
    samples = Samples(
        args=[{"path": "a", "content": "1"}],
        results=["Successfully wrote to a"],
        snapshots={"s__read_text_file": [{"content": "0"}]},
        after={"s__read_text_file": [{"content": "1"}]},
    )
    (found,) = quarantine_candidates(write, servers, [read], samples)
    assert found.entry["snapshot_tool"] == "s__read_text_file"
    back, make, away = found.entry["inverse"]
    assert back == {
        "tool": "s__write_file",
        "args": {"path": "{args.path}", "content": "{snapshot.content}"},
        "when": "!snapshot_error",
    }
    assert make == {
        "tool": "s__create_directory",
        "args": {"path": ".trash"},
        "when": "snapshot_error",
    }
    assert away["args"] == {
        "source": "{args.path}",
        "destination": "{join('', ['.trash/', to_string(change.id), '-', "
        "regex(args.path, '[^/]+$')])}",
    }
    # The folder maker itself: nothing to write back, an existing folder was left alone. A
    # file reader fails on the folder the call made, so it would fail on one that existed
    # too, and undo would move that away: only a read that worked after the call qualifies.
    info = tool("get_file_info", {"path": "string"})
    made_samples = Samples(args=[{"path": "d"}], after={"s__get_file_info": [{"type": "d"}]})
    (made,) = quarantine_candidates(mkdir, servers, [read, info], made_samples)
    assert made.entry["snapshot_tool"] == "s__get_file_info"
    assert [step["tool"] for step in made.entry["inverse"]] == [
        "s__create_directory",
        "s__move_file",
    ]
    # Without a move tool, or with a delete tool, quarantine is not proposed.
    assert quarantine_candidates(write, offered(write, read, mkdir), [read], samples) == []
    delete = tool("delete_file", {"path": "string"})
    assert quarantine_candidates(write, {**servers, **offered(delete)}, [read], samples) == []


def test_a_tools_section_infer_cannot_extend_is_refused_by_the_loaders_rules():
    # A quoted key is not found as `tools:`: a second section would be a duplicate key,
    # which the registry loader refuses, so the check refuses it first.
    original = '"tools":\n  a: {classification: read}\n'
    trial = add_to_tools(original, ["  b: {classification: read}"], path="r")
    with pytest.raises(InferError, match="r: the result would not load"):
        verify_result(original, trial, {"b": {"classification": "read"}}, path="r", bug=False)


def memory_tools() -> dict[str, ToolInfo]:
    """server-memory's batch tools, with the array schemas it lists."""
    entity = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "entityType": {"type": "string"},
            "observations": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "entityType", "observations"],
    }
    deletion = {
        "type": "object",
        "properties": {
            "entityName": {"type": "string"},
            "observations": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["entityName", "observations"],
    }
    addition = {
        "type": "object",
        "properties": {
            "entityName": {"type": "string"},
            "contents": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["entityName", "contents"],
    }

    def batch(name: str, key: str, items: dict[str, Any]) -> ToolInfo:
        schema = {
            "type": "object",
            "properties": {key: {"type": "array", "items": items}},
            "required": [key],
        }
        return ToolInfo(name=f"m__{name}", prefix="m__", schema=schema)

    return offered(
        batch("create_entities", "entities", entity),
        batch("delete_entities", "entityNames", {"type": "string"}),
        batch("add_observations", "observations", addition),
        batch("delete_observations", "deletions", deletion),
    )


def test_a_batch_inverse_takes_the_created_objects_keys_through_a_projection():
    tools = memory_tools()
    created = {"name": "a", "entityType": "t", "observations": ["x"]}
    samples = Samples(args=[{"entities": [created]}], results=[{"entities": [created]}])
    found = reversible_candidates(tools["m__create_entities"], tools, samples)
    assert found, "create_entities/delete_entities are opposites (plural nouns)"
    first = found[0].entry
    assert first["inverse_tool"] == "m__delete_entities"
    assert first["inverse_args"] == {"entityNames": "{result.entities[*].name}"}


def test_nested_items_are_re_keyed_from_what_the_result_says_was_added():
    tools = memory_tools()
    added = [{"entityName": "a", "addedObservations": ["x"]}]
    samples = Samples(
        args=[{"observations": [{"entityName": "a", "contents": ["x"]}]}],
        results=[{"results": added}],
    )
    found = reversible_candidates(tools["m__add_observations"], tools, samples)
    assert found
    assert found[0].entry["inverse_args"] == {
        "deletions": "{result.results[*].{entityName: entityName, observations: addedObservations}}"
    }


def test_a_read_of_all_comes_before_other_reads_without_arguments():
    # redis-mcp-server: get_indexes and info came first by name, and neither shows a write.
    reads = [tool(n) for n in ("get_indexes", "info", "scan_keys", "scan_all_keys")]
    assert looks_read(tool("scan_all_keys"))
    ranked = [t.short for t in rank_probe_tools(reads)]
    assert ranked == ["scan_all_keys", "get_indexes", "info", "scan_keys"]
    graph = ToolInfo(name="m__read_graph", prefix="m__", schema={})
    assert rank_probe_tools([*reads, graph])[0] is graph  # a whole-state verb first still


def test_chosen_probes_join_the_state_section_or_make_one_before_tools():
    probe = {"tool": "m__read_graph", "select": "entities", "unordered": True}
    with_state = "servers: {}\nstate:\n  - tool: other\ntools:\n  a: {classification: read}\n"
    added = add_to_state(with_state, [probe], path="r.yaml")
    assert yaml.safe_load(added)["state"] == [{"tool": "other"}, probe]
    assert added.endswith("tools:\n  a: {classification: read}\n")
    without = "servers: {}\ntools:\n  a: {classification: read}\n"
    made = add_to_state(without, [probe], path="r.yaml")
    assert yaml.safe_load(made)["state"] == [probe]
    assert made.index("state:") < made.index("tools:")


def test_a_whole_state_restore_fills_a_list_field_by_shape_when_no_name_matches():
    # delete_observations is put back by add_observations, whose items take `entityName` and
    # `contents`; the graph's entities have `name` and `observations`: the noun matches the
    # first, and the only list of strings left is the second.
    tools = memory_tools()
    graph = ToolInfo(name="m__read_graph", prefix="m__", schema={"type": "object"}, read_only=True)
    tools[graph.name] = graph
    entity = {"name": "a", "entityType": "t", "observations": ["x", "y"]}
    deletion = [{"entityName": "a", "observations": ["x"]}]
    samples = Samples(args=[{"deletions": deletion}], results=[{"success": True}])
    samples.snapshots[graph.name] = [{"entities": [entity], "relations": []}]
    found = compensable_candidates(
        tools["m__delete_observations"], tools, [graph], samples, whole=[graph.name]
    )
    assert found, "nothing filled add_observations' contents"
    entry = found[0].entry
    assert entry["snapshot_tool"] == "m__read_graph"
    assert entry["inverse_tool"] == "m__add_observations"
    assert entry["inverse_args"] == {
        "observations": (
            "{first_by(snapshot.entities, &name)[*].{entityName: name, contents: observations}}"
        )
    }


def test_a_list_of_objects_is_never_passed_whole_where_strings_are_taken():
    tools = memory_tools()
    entities = Source(("snapshot", "entities"), ([{"name": "a", "entityType": "t"}],))
    assert fill(tools["m__delete_entities"], [entities]) == {
        "entityNames": "{snapshot.entities[*].name}"
    }


def test_an_inverse_with_debris_is_tried_with_each_maker_added_in_turn():
    # create_entities is undone by delete_entities on what it made, which also deletes the
    # relations naming it that were there before: they come back from the snapshot. Putting
    # observations back too would fail on entities that are gone, so that shape comes after.
    tools = memory_tools()
    relation = {
        "type": "object",
        "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
        "required": ["from", "to"],
    }
    relations = {
        "type": "object",
        "properties": {"relations": {"type": "array", "items": relation}},
        "required": ["relations"],
    }
    tools["m__create_relations"] = ToolInfo(
        name="m__create_relations", prefix="m__", schema=relations
    )
    graph = ToolInfo(name="m__read_graph", prefix="m__", schema={"type": "object"}, read_only=True)
    tools[graph.name] = graph
    made = {"name": "b", "entityType": "t", "observations": []}
    samples = Samples(args=[{"entities": [made]}], results=[{"entities": [made]}])
    old = {"name": "a", "entityType": "t", "observations": ["x"]}
    samples.snapshots[graph.name] = [{"entities": [old], "relations": [{"from": "a", "to": "b"}]}]
    found = compensable_candidates(
        tools["m__create_entities"], tools, [graph], samples, whole=[graph.name]
    )
    wanted = [
        {"tool": "m__delete_entities", "args": {"entityNames": "{result.entities[*].name}"}},
        {"tool": "m__create_relations", "args": {"relations": "{snapshot.relations}"}},
    ]
    steps = [c.entry.get("inverse", []) for c in found]
    assert wanted in steps, steps
    # Each maker alone, then all of them (observations onto the first entity of a name).
    assert steps.index(wanted) < len(steps) - 1
    assert steps[-1][:1] == wanted[:1] and len(steps[-1]) == 3
    assert "first_by(snapshot.entities, &name)" in str(steps[-1])


def test_first_by_only_for_the_key_that_names_the_item_itself():
    item = {
        "type": "object",
        "properties": {"parentId": {"type": "integer"}, "title": {"type": "string"}},
        "required": ["parentId", "title"],
    }
    schema = {
        "type": "object",
        "properties": {"restored": {"type": "array", "items": item}},
        "required": ["restored"],
    }
    restore = ToolInfo(name="s__restore_tasks", prefix="s__", schema=schema)
    tasks = Source(("snapshot", "tasks"), ([{"id": 1, "parent_id": 1, "title": "a"}],))
    # Keyed on parent_id, first_by would keep one task per parent and drop its siblings.
    assert fill(restore, [tasks]) == {
        "restored": "{snapshot.tasks[*].{parentId: parent_id, title: title}}"
    }


# -- servers that answer in text (texts.py) ----------------------------------------------------

KV_SET = tool("set", {"key": "string", "value": "string"})
KV_GET = tool("get", {"key": "string"})
KV_DELETE = ToolInfo(
    name="s__delete",
    prefix="s__",
    schema={
        "type": "object",
        "properties": {"key": {"anyOf": [{"type": "string"}, {"type": "array"}]}},
        "required": ["key"],
    },
)
KV = offered(KV_SET, KV_GET, KV_DELETE)
NOTHING = "join('', ['Key not found: ', to_string(args.key)])"


def text_samples(*reads: tuple[str, str]) -> Samples:
    """Sample calls of set whose get read `answer` for `key` (before the call)."""
    samples = Samples()
    for key, answer in reads:
        samples.args.append({"key": key, "value": "v"})
        samples.results.append("OK")
        samples.snapshots.setdefault(KV_GET.name, []).append(answer)
        samples.read_pairs.setdefault(KV_GET.name, []).append(({"key": key}, answer))
    return samples


def test_the_answer_for_nothing_is_the_wording_seen_around_two_different_arguments():
    pairs = [({"key": "a"}, "Key not found: a"), ({"key": "b"}, "Key not found: b")]
    found = absence(pairs, {"key": "key"})
    assert found is not None and found.describe() == "Key not found: <key>"
    assert found.expression() == NOTHING
    # one argument is not enough, and a value that is its key (generated data) is no sentence
    assert absence(pairs[:1], {"key": "key"}) is None
    assert absence([({"key": "a"}, "a"), ({"key": "b"}, "b")], {"key": "key"}) is None
    # a key inside the wording ("o" in "not") is not taken for the argument's place
    pairs = [({"key": "o"}, "Key not found: o"), ({"key": "n"}, "Key not found: n")]
    found = absence(pairs, {"key": "key"})
    assert found is not None and (found.prefix, found.suffix) == ("Key not found: ", "")
    quoted = absence([({"key": k}, f"no key '{k}'") for k in "xy"], {"key": "key"})
    assert quoted is not None and quoted.expression().startswith("join('', ['no key \\'', ")


def test_a_set_answered_in_text_is_put_back_or_taken_away_by_what_the_read_said():
    samples = text_samples(("a", "Key not found: a"), ("b", "Key not found: b"), ("a", "1.50"))
    snapshots = snapshot_tools(KV_SET, [KV_GET])
    candidates = text_candidates(KV_SET, KV, snapshots, samples)
    first = candidates[0]
    assert first.reread and first.text_read == "s__get" and first.entry["snapshot_tool"] == "s__get"
    assert first.entry["snapshot_args"] == {"key": "{args.key}"}
    (put_back, take_away) = first.entry["inverse"]
    assert put_back["tool"] == "s__set"
    assert put_back["args"] == {"key": "{args.key}", "value": "{snapshot}"}
    assert put_back["when"].endswith(f"snapshot != {NOTHING}")
    assert put_back["when"].startswith("(!snapshot_error || fail(")
    assert take_away == {
        "tool": "s__delete",
        "args": {"key": "{args.key}"},
        "when": put_back["when"].replace("!=", "=="),
    }
    assert [len(c.entry["inverse"]) for c in candidates] == [2, 1]
    assert "test" not in first.entry  # set's key is get's
    # without the sentence for nothing, the write alone
    bare = text_candidates(KV_SET, KV, snapshots, text_samples(("a", "1"), ("b", "2")))
    assert [c.entry.get("inverse_args") for c in bare] == [
        {"key": "{args.key}", "value": "{snapshot}"}
    ]
    # a read that answers in JSON is no text read
    objects = text_samples(("a", {"value": 1}), ("b", {"value": 2}))
    assert text_candidates(KV_SET, KV, snapshots, objects) == []


def test_text_inside_the_object_a_python_server_wraps_it_in_is_put_back_from_there():
    # redis-mcp-server (FastMCP): get returns a str, sent as {"result": "..."} structured.
    answers = ("Key a does not exist", "Key b does not exist", "1.50")
    samples = text_samples(*((k, {"result": a}) for k, a in zip("aba", answers, strict=True)))
    snapshots = snapshot_tools(KV_SET, [KV_GET])
    first = text_candidates(KV_SET, KV, snapshots, samples)[0]
    assert first.reread and first.text_read == ""  # JSON already keeps "1.50" as it is
    (put_back, take_away) = first.entry["inverse"]
    assert put_back["args"] == {"key": "{args.key}", "value": "{snapshot.result}"}
    nothing = "join('', ['Key ', to_string(args.key), ' does not exist'])"
    assert put_back["when"].endswith(f"snapshot.result != {nothing}")
    assert take_away["when"].endswith(f"snapshot.result == {nothing}")
    # objects with more than one field, or with no text, are not text answers
    mixed = text_samples(("a", {"result": "x", "ttl": 1}), ("b", {"result": "y", "ttl": 2}))
    assert text_candidates(KV_SET, KV, snapshots, mixed) == []
    lists = text_samples(("a", {"result": ["x"]}), ("b", {"result": ["y"]}))
    assert text_candidates(KV_SET, KV, snapshots, lists) == []
    # redis-mcp-server's lrange: a sentence for an empty list, else the list itself
    some = text_samples(("a", {"result": "List a is empty"}), ("b", {"result": ["y"]}))
    assert text_candidates(KV_SET, KV, snapshots, some) == []


def test_a_delete_is_tested_only_with_arguments_its_snapshot_read_takes():
    samples = Samples()
    for key in "ab":
        samples.args.append({"key": key})
        samples.results.append("Deleted")
        samples.snapshots.setdefault(KV_GET.name, []).append(f"value of {key}")
        samples.after.setdefault(KV_GET.name, []).append(f"Key not found: {key}")
        samples.read_pairs.setdefault(KV_GET.name, []).append(({"key": key}, "x"))
        samples.read_pairs[KV_GET.name].append(({"key": key}, f"Key not found: {key}"))
    candidates = text_candidates(KV_DELETE, KV, snapshot_tools(KV_DELETE, [KV_GET]), samples)
    (only,) = candidates  # put back when there was a value; set has no `value` to undo with
    step = only.entry["inverse"][0]
    assert step["tool"] == "s__set" and step["when"].endswith(f"snapshot != {NOTHING}")
    assert only.entry["test"]["schema"]["properties"]["key"] == {"type": "string"}
    assert "(tested with key as get takes it)" in only.summary
    # test.examples, when reporting_failures adds them, go next to the narrowed schema
    samples.calls = 10
    samples.args.append({"key": ["a", "b"]})  # a list of keys: no example of the narrowed test
    samples.results.append("Deleted 2")
    (reported,) = reporting_failures(candidates, samples)
    assert set(reported.entry["test"]) == {"schema", "examples"}
    assert reported.entry["test"]["examples"] == [{"key": "a"}, {"key": "b"}]
    assert reported.text_read == "s__get"
    # a read that takes as many types, or an untyped one, narrows nothing
    untyped = ToolInfo(name="s__get", prefix="s__", schema={"properties": {"key": {}}})
    (wide,) = text_candidates(KV_DELETE, KV, [(untyped, {"key": "key"})], samples)
    assert "test" not in wide.entry


def test_a_text_probe_is_compared_line_by_line_as_a_multiset():
    values = ["Found keys:\na\nb", "No keys found matching pattern"]
    assert probe_entries("s__list", values) == [
        {"tool": "s__list", "select": "regex_all(@, '(?m)^.+$')", "unordered": True}
    ]
    assert probe_entries("s__count", ["3 keys"]) == [{"tool": "s__count"}]
