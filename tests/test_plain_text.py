"""`plain_text: true`: a tool that answers in plain text has its result taken as the text as
sent. Read as JSON, the value "1.50" of tests/servers/textkv_server.py would be 1.5, and a
restore written from that snapshot would not put back what was there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compensator.errors import RegistryError
from compensator.registry import load_registry

from .conftest import SERVERS
from .test_plugin import run_quick

pytestmark = pytest.mark.anyio

SERVER = SERVERS / "textkv_server.py"
VALUES = ["1.50", "1.5", "true", " 7", "[1,  2]", "x"]


def registry(folder: Path, *, plain_text: bool = True) -> Path:
    flag = "\n    plain_text: true" if plain_text else ""
    path = folder / ("plain.yaml" if plain_text else "parsed.yaml")
    path.write_text(
        f"""\
servers:
  kv:
    command: "${{COMPENSATOR_PYTHON}}"
    args: ["{SERVER}"]
    env: {{TEXTKV_FILE: "${{COMPENSATOR_WORKDIR}}/kv.json"}}

state:
  - tool: kv__dump
    select: store

tools:
  kv__dump: {{classification: read}}
  kv__get:
    classification: read{flag}
  kv__delete: {{classification: irreversible}}
  kv__put:
    classification: compensable
    snapshot_tool: kv__get
    snapshot_args: {{key: "{{args.key}}"}}
    inverse:
      - tool: kv__put
        args: {{key: "{{args.key}}", value: "{{snapshot}}"}}
        when: "!snapshot_error"
      - tool: kv__delete
        args: {{key: "{{args.key}}"}}
        when: "snapshot_error"
    test:
      schema:
        type: object
        properties:
          key: {{enum: [a, b]}}
          value: {{enum: {json.dumps(VALUES)}}}
        required: [key, value]
""",
        encoding="utf-8",
    )
    return path


def store(workdir: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads((workdir / "kv.json").read_text())
    return data


async def test_undo_puts_back_the_exact_text(proxy, tmp_path: Path):
    env = {"COMPENSATOR_WORKDIR": str(tmp_path)}
    async with proxy(registry(tmp_path), env=env) as client:
        for value in VALUES:
            await client.call_ok("kv__put", {"key": "a", "value": value})
            assert (await client.call("kv__get", {"key": "a"})).text == value
            checkpoint = await client.checkpoint()
            await client.call_ok("kv__put", {"key": "a", "value": "changed"})
            await client.call_ok("kv__put", {"key": "b", "value": "new"})
            report = await client.undo_to(checkpoint)
            assert report["skipped"] == [], value
            assert store(tmp_path) == {"a": value}


async def test_read_as_json_the_same_snapshot_cannot_be_put_back(proxy, tmp_path: Path):
    env = {"COMPENSATOR_WORKDIR": str(tmp_path)}
    async with proxy(registry(tmp_path, plain_text=False), env=env) as client:
        await client.call_ok("kv__put", {"key": "a", "value": "1.50"})
        assert (await client.call("kv__get", {"key": "a"})).text == "1.50"
        checkpoint = await client.checkpoint()
        await client.call_ok("kv__put", {"key": "a", "value": "changed"})
        report = await client.undo_to(checkpoint)
    # The restore sends the number 1.5 where the tool takes a string: it fails, and says so.
    assert [change["tool"] for change in report["skipped"]] == ["kv__put"]
    assert store(tmp_path) == {"a": "changed"}


@pytest.mark.thorough
def test_the_plugin_proves_the_plain_text_registry_and_fails_the_parsed_one(
    pytester: pytest.Pytester,
):
    quick = ("-k", "roundtrip", "--compensator-examples", "10")
    plain = run_quick(pytester, registry(pytester.path), *quick)
    plain.assert_outcomes(passed=1)
    parsed = run_quick(pytester, registry(pytester.path, plain_text=False), *quick)
    parsed.assert_outcomes(failed=1)
    assert "undo skipped change" in parsed.stdout.str()


def test_plain_text_must_be_true_or_false(tmp_path: Path):
    path = registry(tmp_path)
    path.write_text(path.read_text().replace("plain_text: true", "plain_text: yes please"))
    with pytest.raises(RegistryError) as error:
        load_registry(path, {"COMPENSATOR_PYTHON": "python3", "COMPENSATOR_WORKDIR": "/w"})
    assert f"{path}:" in str(error.value) and "tools.kv__get.plain_text" in str(error.value)
