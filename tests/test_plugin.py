"""The pytest plugin, run the way a registry author runs it: pytest in a fresh folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .broken import UNDO_FAILED, VARIANTS, Variant, cut, write_example
from .conftest import EXAMPLES

REGISTRY = EXAMPLES / "compensators.yaml"
# Seeds are fixed so these runs are deterministic; tests/... and benchmarks/teeth.py measure
# how often other seeds catch the same mistakes.
SEED = "7"


NO_SHRINK = """
from hypothesis import Phase, settings
settings.register_profile("no-shrink", phases=[Phase.explicit, Phase.generate, Phase.target])
"""


def run_quick(pytester: pytest.Pytester, config: Path, *args: str) -> pytest.RunResult:
    """Run a registry's tests with a Hypothesis profile that stops at the first failure:
    shrinking a sequence that needs a deep pre-state replays it hundreds of times, minutes
    the suite cannot spend."""
    pytester.makeconftest(NO_SHRINK)
    options = ("--hypothesis-profile", "no-shrink", "--compensator-config", str(config))
    return run(pytester, *options, *args)


def caught_undoing(pytester: pytest.Pytester, config: Path, tool: str) -> str:
    """Run `tool`'s round trip under a registry whose undo of it is broken; assert that the
    plugin fails it for not restoring the state, and return the output."""
    result = run_quick(pytester, config, "-k", f"roundtrip and {tool}")
    assert result.ret == 1
    out = result.stdout.str()
    assert f"roundtrip[{tool}]" in out
    assert "did not restore the state at the checkpoint" in out
    return out


def broken_variant(folder: Path, registry: Path, old: str, new: str) -> Path:
    """A copy of `registry` in `folder` with `old`, which it holds exactly once, made `new`."""
    text = registry.read_text()
    assert text.count(old) == 1, f"{registry} holds {old!r} {text.count(old)} times"
    path = folder / f"{registry.stem}_broken.yaml"
    path.write_text(text.replace(old, new))
    return path


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--compensator-seed", SEED, *args
    )


def test_example_registry_passes_with_coverage_and_json_report(pytester: pytest.Pytester):
    report = pytester.path / "coverage.json"
    result = run(
        pytester,
        "--compensator-config",
        str(REGISTRY),
        "--compensator-examples",
        "5",
        "--compensator-report",
        str(report),
    )
    result.assert_outcomes(passed=12)
    out = result.stdout.str()
    assert (
        f"compensator: registry {REGISTRY}, seed {SEED} (from --compensator-seed), examples 5, "
        "steps 20, min verified 5"
    ) in out
    assert "compensators.yaml::roundtrip[tasks__delete_task] PASSED" not in out  # -q default
    assert "compensator undo coverage" in out
    assert "left out: tasks__purge_completed (irreversible)" in out
    assert "left out: tasks__restore_tasks (unknown: not in the registry)" in out
    assert "left out: tasks__get_task" not in out  # reads are called, and checked
    data = json.loads(report.read_text())
    delete = data["tools"]["tasks__delete_task"]
    assert delete["calls"] > 0 and delete["verified"] == delete["undone"] > 0
    # Its round trip's examples, and those where a delete worked (a task was there to delete).
    assert delete["examples"] >= 5 and 0 < delete["met"] <= delete["examples"]
    row = re.search(r"^tasks__delete_task .* (\d+)/(\d+)$", out, re.M)
    assert row is not None and (int(row[1]), int(row[2])) == (delete["met"], delete["examples"])
    assert re.search(r"^tasks__list_tasks .* read +0 +-$", out, re.M)  # a read has no round trip
    assert data["reads"] == [
        "tasks__get_task",
        "tasks__get_task_tree",
        "tasks__list_labels",
        "tasks__list_tasks",
    ]
    assert all(data["tools"][read]["calls"] > 0 for read in data["reads"])
    # Fresh state came from the registry's reset: calls, not a new proxy per example (how
    # fast that is, is benchmarks/verification.py's business).
    assert data["fresh_state"] == "the registry's reset: calls"
    assert data["reset_seconds_per_example"] > 0


@pytest.mark.thorough
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_broken_registry_is_caught_and_names_the_tool(pytester: pytest.Pytester, variant: Variant):
    config = variant.write(pytester.path)
    result = run_quick(pytester, config, "-x", "-k", variant.selection)
    assert result.ret == 1
    out = result.stdout.str()
    assert variant.says in out
    assert "Calls (" in out
    assert "proxy and server stderr" in out
    if UNDO_FAILED in out:  # caught by an undo (a broken error_when may be caught either way)
        assert f"roundtrip[{variant.tool}]" in out
        assert variant.tool in out.split("tools undone:")[1]
        assert "Journal entries since the checkpoint:" in out
    else:
        assert "State diff (expected = before the call, observed = after it):" in out


@pytest.mark.thorough
def test_failure_shows_calls_and_state_diff(pytester: pytest.Pytester):
    [variant] = [v for v in VARIANTS if v.name == "wrong_inverse_tool"]
    config = variant.write(pytester.path)
    result = run(pytester, "--compensator-config", str(config), "-k", "tasks__complete_task")
    out = result.stdout.str()
    assert "tasks__complete_task(id=" in out
    assert "State diff (expected = at the checkpoint, observed = after undo_to):" in out
    assert '-      "status": "open"' in out and '+      "status": "done"' in out


@pytest.mark.thorough
def test_state_machine_is_skipped_once_a_round_trip_failed(pytester: pytest.Pytester):
    [variant] = [v for v in VARIANTS if v.name == "wrong_inverse_tool"]
    config = variant.write(pytester.path)
    result = run(
        pytester, "-rs", "--compensator-config", str(config), "-k", "tasks__complete_task or state"
    )
    result.assert_outcomes(failed=1, skipped=1)
    assert "round trips failed for tasks__complete_task: fix those first" in result.stdout.str()


@pytest.mark.thorough
def test_state_machine_catches_a_broken_registry(pytester: pytest.Pytester):
    [variant] = [v for v in VARIANTS if v.name == "wrong_inverse_tool"]
    config = variant.write(pytester.path)
    result = run_quick(pytester, config, "-k", "state_machine")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "tools undone: tasks__complete_task" in out
    assert "state.checkpoint_call_undo_tasks__complete_task(" in out or "state.call_" in out


def test_registry_without_state_says_what_to_add(pytester: pytest.Pytester):
    config = write_example(
        pytester.path, "nostate", lambda t: cut(t, "state:\n", "# Lets the pytest plugin")
    )
    result = run(pytester, "--compensator-config", str(config), "-k", "add_task")
    assert result.ret == 1
    assert "has no `state:` section, so undo cannot be checked" in result.stdout.str()


def test_registry_mistake_is_a_located_collection_error(pytester: pytest.Pytester):
    config = pytester.path / "typo.yaml"
    config.write_text("servers:\n  s: {command: x}\ntools:\n  s__t: {clasification: read}\n")
    result = run(pytester, "--compensator-config", str(config))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stderr.str()
    assert "Traceback" not in out
    assert "typo.yaml:4: tools.s__t.clasification: unknown key" in out
    assert "Did you mean 'classification'?" in out


def test_missing_tool_fails_the_load_check(pytester: pytest.Pytester):
    rename = lambda t: t.replace("tasks__get_task_tree", "tasks__get_task_forest")  # noqa: E731
    config = write_example(pytester.path, "missing", rename)
    result = run(pytester, "--compensator-config", str(config), "-k", "load")
    result.assert_outcomes(failed=1)
    assert "tasks__get_task_forest: no server offers it" in result.stdout.str()


@pytest.mark.parametrize("folder", [".", "build"], ids=["walked", "not-walked"])
def test_the_registry_is_collected_once_beside_other_tests(pytester: pytest.Pytester, folder):
    """Beside the tests pytest finds, wherever the registry lies: in a folder pytest walks,
    or in one it skips (build/ is among its norecursedirs)."""
    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    (pytester.path / folder).mkdir(exist_ok=True)
    config = write_example(pytester.path / folder, "reg")
    result = run(pytester, "--co", "-q", "--compensator-config", str(config))
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids[0].endswith("reg.yaml::load") and ids[-1].endswith("test_other.py::test_other")
    assert len(ids) == len(set(ids)) == 13  # load, 10 round trips, the machine, test_other


def test_ini_key_works_and_xdist_merges_coverage(pytester: pytest.Pytester):
    pytester.makeini(f"[pytest]\ncompensator_config = {REGISTRY}\ncompensator_examples = 3\n")
    result = run(pytester, "-n", "2", "-k", "load or add_label or delete_task")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "compensator undo coverage" in out
    assert "tasks__add_label" in out.split("compensator undo coverage")[1]


def test_fixtures_work_in_pytest_asyncio_strict_mode(pytester: pytest.Pytester):
    pytester.makeini(f"[pytest]\nasyncio_mode = strict\ncompensator_config = {REGISTRY}\n")
    pytester.makepyfile(
        f"""
        import pytest

        def test_sync_client(compensator_client):
            before = compensator_client.observe_state()
            cp = compensator_client.checkpoint()
            compensator_client.call_ok("tasks__add_task", {{"title": "x"}})
            assert [c["tool"] for c in compensator_client.list_changes(cp)] == ["tasks__add_task"]
            assert compensator_client.undo_to(cp)["skipped"] == []
            assert compensator_client.observe_state() == before

        @pytest.mark.asyncio
        async def test_async_factory(compensator_proxy):
            async with compensator_proxy({str(REGISTRY)!r}) as client:
                cp = await client.checkpoint()
                await client.call_ok("tasks__add_label", {{"name": "l"}})
                assert (await client.observe_state())["tasks__list_labels"] == ["l"]
                await client.undo_to(cp)
                assert (await client.observe_state())["tasks__list_labels"] == []
        """
    )
    result = run(
        pytester,
        "-k",
        "test_sync_client or test_async_factory",
        "test_fixtures_work_in_pytest_asyncio_strict_mode.py",
    )
    result.assert_outcomes(passed=2)


def test_plugin_import_is_lazy():
    probe = (
        "import sys, pytest_compensator.plugin; "
        "print(sorted(m for m in ('hypothesis', 'mcp', 'anyio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.thorough
def test_without_reset_examples_get_fresh_state_by_undo(
    pytester: pytest.Pytester,
):
    def no_reset(text: str) -> str:
        return cut(text, "# Lets the pytest plugin", "tools:\n")

    config = write_example(pytester.path, "noreset", no_reset)
    report = pytester.path / "coverage.json"
    options = ("--compensator-examples", "5", "--compensator-report", str(report))
    result = run(pytester, "--compensator-config", str(config), *options, "-k", "add_label")
    result.assert_outcomes(passed=1)
    data = json.loads(report.read_text())
    # One proxy serves every example: each starts by undoing the one before.
    assert data["fresh_state"] == (
        "undo to the example's first checkpoint 5 times, a new proxy and servers once"
    )

    # A broken inverse is caught all the same (not shrunk: replays on rewound servers are
    # what sends a run back to restarts, which costs a minute and is not the point here).
    [variant] = [v for v in VARIANTS if v.name == "wrong_inverse_tool"]
    broken = write_example(pytester.path, "broken_noreset", lambda t: no_reset(variant.edit(t)))
    result = run_quick(pytester, broken, "-k", "roundtrip and tasks__complete_task")
    result.assert_outcomes(failed=1)
    assert "did not restore the state at the checkpoint" in result.stdout.str()


@pytest.mark.thorough
def test_a_tool_whose_calls_never_succeed_fails_as_never_verified(pytester: pytest.Pytester):
    def bogus_status(text: str) -> str:
        return text.replace("status: {enum: [open, done, bogus]}", "status: {enum: [bogus]}")

    config = write_example(pytester.path, "never", bogus_status)
    result = run(
        pytester, "--compensator-config", str(config), "--compensator-examples", "5",
        "-k", "roundtrip and set_status",
    )  # fmt: skip
    # 5 examples ask for one verified undo (the default 5, at most one per five examples).
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "tasks__set_status never verified: 0 of its undos restored the state, at least 1" in out
    assert "Most common errors of its failed calls:" in out
    assert "status must be 'open' or 'done', not 'bogus'" in out

    # The threshold is a setting: at 0 the same run passes.
    result = run(
        pytester, "--compensator-config", str(config), "--compensator-examples", "5",
        "--compensator-min-verified", "0", "-k", "roundtrip and set_status",
    )  # fmt: skip
    result.assert_outcomes(passed=1)


@pytest.mark.thorough
def test_hypothesis_seed_seeds_the_generated_tests(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--co", "--hypothesis-seed", "4242",
        "--compensator-config", str(REGISTRY),
    )  # fmt: skip
    assert "seed 4242 (from --hypothesis-seed)" in result.stdout.str()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--co", "--hypothesis-seed", "4242",
        "--compensator-seed", "5", "--compensator-config", str(REGISTRY),
    )  # fmt: skip
    assert "seed 5 (from --compensator-seed)" in result.stdout.str()
