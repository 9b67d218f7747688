"""examples/registries/git.yaml against the real mcp-server-git (from PyPI), checked with git."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from compensator.errors import ExpressionError
from compensator.registry import load_registry

from .conftest import REGISTRIES, use_third_party_servers
from .test_plugin import caught_undoing, run_quick

REGISTRY = REGISTRIES / "git.yaml"
BINARY = "git/bin/mcp-server-git"

# git_add's second inverse step: add again what was staged before the call.
READD_STEP = "      - tool: git_add\n        args:\n          repo_path:"


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_third_party_servers(monkeypatch, BINARY)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def repo_state(repo: Path) -> dict[str, str]:
    """What undo must restore, read by plain git: the branches and tags with their commits,
    HEAD (symbolic or detached), the index entries, the status and the work tree's files."""
    files = sorted(p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": git(repo, "rev-parse", "--symbolic-full-name", "HEAD")
        + git(repo, "rev-parse", "HEAD"),
        "index": git(repo, "ls-files", "--stage"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "files": "".join(f"{p.relative_to(repo)}: {p.read_text()!r}\n" for p in files),
    }


def without_readd(folder: Path) -> Path:
    """The registry with git_add's re-add step removed: undo unstages what was staged before."""
    text = REGISTRY.read_text()
    start = text.index(READD_STEP, text.index("\n  git_add:\n"))
    end = text.index("    test:\n", start)
    path = folder / "git_no_readd.yaml"
    path.write_text(text[:start] + text[end:])
    return path


@pytest.mark.thorough
def test_git_registry_passes(pytester: pytest.Pytester, servers: Path):
    result = run_quick(pytester, REGISTRY, "--compensator-examples", "5")
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    assert "left out: git_commit (irreversible)" in out
    assert "left out: git_create_branch (irreversible)" in out
    assert "roundtrip[git_checkout]" not in out  # no failure named it


@pytest.mark.thorough
def test_git_registry_without_readd_fails_naming_the_tool(pytester: pytest.Pytester, servers):
    config = without_readd(pytester.path)
    out = caught_undoing(pytester, config, "git_add")
    assert "tools undone: git_add" in out


@pytest.mark.anyio
async def test_undo_restores_branch_head_index_and_work_tree(proxy, servers, workdir: Path):
    repo = workdir / "repo"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        # The server's wrapper made the sample repository on start-up.
        before = repo_state(repo)
        assert "refs/heads/feature" in before["refs"] and "refs/tags/v1" in before["refs"]
        assert before["head"].startswith("refs/heads/main\n")
        assert before["status"] == " M a.txt\n D d.txt\nA  s.txt\n?? n.txt\n"

        checkpoint = await client.checkpoint()
        await client.call_ok("git_add", {"repo_path": ".", "files": ["a.txt", "n.txt"]})
        await client.call_ok("git_checkout", {"repo_path": ".", "branch_name": "feature"})
        await client.call_ok("git_reset", {"repo_path": "."})
        await client.call_ok("git_add", {"repo_path": ".", "files": ["."]})
        await client.call_ok("git_checkout", {"repo_path": ".", "branch_name": "v1"})
        middle = repo_state(repo)
        assert middle["head"].startswith("HEAD\n")  # detached at v1
        assert middle["status"] == "M  a.txt\nD  d.txt\nA  n.txt\nA  s.txt\n"

        report = await client.undo_to(checkpoint)

        assert report["skipped"] == []
        assert len(report["undone"]) == 5
        assert repo_state(repo) == before


@pytest.mark.anyio
async def test_commit_and_new_branch_stay_and_are_reported(proxy, servers, workdir: Path):
    repo = workdir / "repo"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        main_before = git(repo, "rev-parse", "main").strip()
        checkpoint = await client.checkpoint()
        await client.call_ok("git_create_branch", {"repo_path": ".", "branch_name": "topic"})
        await client.call_ok("git_add", {"repo_path": ".", "files": ["a.txt"]})
        committed = await client.call_ok("git_commit", {"repo_path": ".", "message": "agent's"})
        assert committed.startswith("Changes committed successfully with hash")

        report = await client.undo_to(checkpoint)

        skipped = {change["tool"]: change["reason"] for change in report["skipped"]}
        assert sorted(skipped) == ["git_commit", "git_create_branch"]
        assert all("irreversible" in reason for reason in skipped.values())
        assert [change["tool"] for change in report["undone"]] == ["git_add"]
    # Honestly left: the commit on main (its parent the old head) and the branch.
    assert git(repo, "rev-parse", "main~1").strip() == main_before
    assert git(repo, "rev-parse", "topic").strip() == main_before
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    # Undoing git_add reset the index to the new HEAD, which holds what was staged.
    assert git(repo, "status", "--porcelain=v1") == " D d.txt\n?? n.txt\n"  # s.txt committed


@pytest.mark.anyio
async def test_a_partly_staged_file_is_refused_not_restored_wrongly(proxy, servers, workdir: Path):
    repo = workdir / "repo"
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        await client.call_ok("git_add", {"repo_path": ".", "files": ["a.txt"]})
        (repo / "a.txt").write_text("edited after staging\n")  # someone else, by hand
        staged = git(repo, "ls-files", "--stage", "a.txt")
        checkpoint = await client.checkpoint()
        await client.call_ok("git_reset", {"repo_path": "."})
        unstaged = git(repo, "ls-files", "--stage", "a.txt")
        assert unstaged != staged

        report = await client.undo_to(checkpoint)

        [skipped] = report["skipped"]
        assert skipped["tool"] == "git_reset"
        assert "also had unstaged changes" in skipped["reason"]
        # Nothing was staged in its place: the index is as the reset left it.
        assert git(repo, "ls-files", "--stage", "a.txt") == unstaged


# -- git_add and git_reset refuse what their undo would get wrong (through the proxy) -------


@pytest.mark.anyio
@pytest.mark.parametrize("call", [("git_reset", {}), ("git_add", {"files": ["a.txt"]})])
async def test_a_staged_deletion_of_a_file_still_there_is_refused(
    proxy, servers, workdir: Path, call: tuple[str, dict[str, list[str]]]
):
    repo = workdir / "repo"
    tool, args = call
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        git(repo, "rm", "-q", "--cached", "b.txt")  # by hand: untracked, the file stays
        assert git(repo, "status", "--porcelain=v1").count("b.txt") == 2  # "D " and "??"
        checkpoint = await client.checkpoint()
        await client.call_ok(tool, {"repo_path": ".", **args})
        after = repo_state(repo)

        report = await client.undo_to(checkpoint)

        assert report["undone"] == []
        [skipped] = report["skipped"]
        assert skipped["tool"] == tool
        assert "staged as deleted was still in the work tree" in skipped["reason"]
        # Nothing was staged in its place (b.txt's contents above all): all as the call left it.
        assert repo_state(repo) == after


def start_merge_conflict(repo: Path) -> None:
    """By hand: a clean main that changed b.txt, merging feature, which changed it too."""
    g = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    (repo / "b.txt").write_text("b on main\n")
    git(repo, *g, "commit", "-qam", "main's b")
    done = subprocess.run(
        ["git", "-C", str(repo), *g, "merge", "-q", "feature"], capture_output=True
    )
    assert done.returncode == 1  # the conflict
    assert git(repo, "ls-files", "--unmerged", "b.txt").count("b.txt") == 3  # stages 1, 2, 3


@pytest.mark.anyio
@pytest.mark.parametrize("call", [("git_reset", {}), ("git_add", {"files": ["b.txt"]})])
async def test_a_call_during_a_merge_with_unmerged_paths_is_refused(
    proxy, servers, workdir: Path, call: tuple[str, dict[str, list[str]]]
):
    repo = workdir / "repo"
    tool, args = call
    async with proxy(REGISTRY, env={"COMPENSATOR_WORKDIR": str(workdir)}) as client:
        start_merge_conflict(repo)
        checkpoint = await client.checkpoint()
        await client.call_ok(tool, {"repo_path": ".", **args})
        assert git(repo, "ls-files", "--unmerged") == ""  # the call dropped the conflict
        after = repo_state(repo)

        report = await client.undo_to(checkpoint)

        assert report["undone"] == []
        [skipped] = report["skipped"]
        assert skipped["tool"] == tool
        assert "unmerged paths" in skipped["reason"]
        assert repo_state(repo) == after  # no claim of success, and nothing done


# -- the registry's expressions on git status text read by plain git -----------------------

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]


@pytest.fixture
def plain_repo(tmp_path: Path) -> Path:
    """A repository with one commit of a.txt, d.txt and old.txt (no proxy, no server)."""
    repo = tmp_path / "plain"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    for name in ("a.txt", "d.txt", "old.txt"):
        (repo / name).write_text(f"{name}\n")
    git(repo, "add", "-A")
    git(repo, *IDENTITY, "commit", "-qm", "first")
    return repo


def snapshot_of(repo: Path, *config: str) -> str:
    """What the server's git_status answers: its heading, then `git status` (GitPython
    drops the last newline)."""
    flags = [arg for item in config for arg in ("-c", item)]
    return "Repository status:\n" + git(repo, *flags, "status").rstrip("\n")


def undo_plan(tool: str, snapshot: str, result: str = "done") -> list[tuple[str, Any]]:
    """The inverse calls the registry builds for `tool`, as the proxy evaluates them; a
    refusal raises ExpressionError with its reason."""
    policy = load_registry(REGISTRY, {"COMPENSATOR_WORKDIR": "/w", "COMPENSATOR_SERVERS": "/s"})
    context = {"args": {"repo_path": "."}, "result": result, "snapshot": snapshot}
    return [
        (step.tool, step.args.render(context))
        for step in policy.tools[tool].inverse
        if step.when is None or step.when.truthy(context)
    ]


def replay(repo: Path, plan: list[tuple[str, Any]]) -> None:
    """Run the plan with plain git, as the server would."""
    for tool, args in plan:
        if tool == "git_reset":
            git(repo, "reset", "-q")
        else:
            assert tool == "git_add"
            git(repo, "add", "--", *args["files"])


def refusal(tool: str, snapshot: str) -> str:
    with pytest.raises(ExpressionError) as info:
        undo_plan(tool, snapshot)
    return str(info.value)


def test_a_staged_rename_is_staged_again_with_both_paths(plain_repo: Path):
    repo = plain_repo
    git(repo, "mv", "old.txt", "new.txt")
    (repo / "a.txt").write_text("a, changed\n")
    git(repo, "add", "a.txt")
    snapshot = snapshot_of(repo)
    assert "\trenamed:    old.txt -> new.txt" in snapshot.splitlines()
    staged = git(repo, "ls-files", "--stage")
    git(repo, "reset", "-q")  # the call

    plan = undo_plan("git_reset", snapshot)

    assert plan == [("git_add", {"repo_path": ".", "files": ["old.txt", "new.txt", "a.txt"]})]
    replay(repo, plan)
    assert git(repo, "ls-files", "--stage") == staged


def test_an_arrow_in_a_name_is_split_only_on_rename_lines(plain_repo: Path):
    repo = plain_repo
    (repo / "x -> y").write_text("x\n")
    git(repo, "add", "x -> y")
    snapshot = snapshot_of(repo)
    assert "\tnew file:   x -> y" in snapshot.splitlines()  # long format does not quote it
    staged = git(repo, "ls-files", "--stage")
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")  # the call

    plan = undo_plan("git_add", snapshot)

    assert plan == [
        ("git_reset", {"repo_path": "."}),
        ("git_add", {"repo_path": ".", "files": ["x -> y"]}),
    ]
    replay(repo, plan)
    assert git(repo, "ls-files", "--stage") == staged


def test_a_rename_with_an_arrow_in_a_name_is_refused(plain_repo: Path):
    git(plain_repo, "mv", "old.txt", "o -> n.txt")
    snapshot = snapshot_of(plain_repo)
    assert "\trenamed:    old.txt -> o -> n.txt" in snapshot.splitlines()
    for tool in ("git_add", "git_reset"):
        assert 'has " -> " in a file name' in refusal(tool, snapshot)


def test_a_short_format_status_is_refused(plain_repo: Path):
    (plain_repo / "a.txt").write_text("a, changed\n")
    git(plain_repo, "add", "a.txt")
    snapshot = snapshot_of(plain_repo, "status.short=true")
    assert snapshot == "Repository status:\nM  a.txt"
    for tool in ("git_add", "git_reset"):
        assert "not print its long format" in refusal(tool, snapshot)
    # status.branch with it prints "## main", no long-format line either.
    branch = snapshot_of(plain_repo, "status.short=true", "status.branch=true")
    assert "not print its long format" in refusal("git_add", branch)
    # The long format, detached or not, is parsed.
    assert undo_plan("git_reset", snapshot_of(plain_repo))
    git(plain_repo, "checkout", "-q", "--detach")
    assert "\nHEAD detached at " in snapshot_of(plain_repo)
    assert undo_plan("git_reset", snapshot_of(plain_repo))


def test_a_staged_deletion_is_refused_unless_the_file_is_gone(plain_repo: Path):
    repo = plain_repo
    git(repo, "rm", "-q", "d.txt")  # gone from the work tree too: undoable
    assert undo_plan("git_reset", snapshot_of(repo)) == [
        ("git_add", {"repo_path": ".", "files": ["d.txt"]})
    ]
    # Untracked files not listed: whether d.txt is back cannot be told.
    hidden = snapshot_of(repo, "status.showUntrackedFiles=no")
    assert "Untracked files not listed" in hidden
    assert "did not list untracked files" in refusal("git_reset", hidden)
    # Back in the work tree, in a folder: the folder alone is listed as untracked.
    (repo / "dir").mkdir()
    (repo / "dir" / "f.txt").write_text("f\n")
    git(repo, "add", "dir/f.txt")
    git(repo, *IDENTITY, "commit", "-qm", "dir")
    git(repo, "rm", "-q", "--cached", "dir/f.txt")
    snapshot = snapshot_of(repo)
    assert "\tdeleted:    dir/f.txt\n" in snapshot and snapshot.endswith("\n\tdir/")
    for tool in ("git_add", "git_reset"):
        assert "in a folder git status lists as untracked" in refusal(tool, snapshot)


def test_a_submodule_staged_and_moved_on_is_refused(plain_repo: Path, tmp_path: Path):
    sub = tmp_path / "sub"
    git(tmp_path, "init", "-q", "-b", "main", str(sub))
    git(sub, *IDENTITY, "commit", "-q", "--allow-empty", "-m", "s1")
    allow = ["-c", "protocol.file.allow=always"]
    git(plain_repo, *allow, "submodule", "add", "-q", str(sub), "sub")
    snapshot = snapshot_of(plain_repo)
    assert "\tnew file:   sub" in snapshot.splitlines()
    assert ("git_add", {"repo_path": ".", "files": [".gitmodules", "sub"]}) in undo_plan(
        "git_add", snapshot
    )
    git(plain_repo / "sub", *IDENTITY, "commit", "-q", "--allow-empty", "-m", "s2")
    moved = snapshot_of(plain_repo)
    assert "\tmodified:   sub (new commits)" in moved
    for tool in ("git_add", "git_reset"):
        assert "also had unstaged changes" in refusal(tool, moved)


def listing(staged: list[str], unstaged: list[str]) -> str:
    return (
        "Repository status:\nOn branch main\nChanges to be committed:\n"
        '  (use "git restore --staged <file>..." to unstage)\n'
        + "".join(f"\tmodified:   {name}\n" for name in staged)
        + "\nChanges not staged for commit:\n"
        '  (use "git add <file>..." to update what will be committed)\n'
        + "".join(f"\tmodified:   {name}\n" for name in unstaged)
    )


def test_many_staged_and_unstaged_paths_are_told_apart():
    """Thousands of paths (a backreference regex once took 11.8 s on these; the lists are
    now intersected, which this test exercises but does not time)."""
    staged = [f"dir/staged-{i}.txt" for i in range(3000)]
    unstaged = [f"dir/unstaged-{i}.txt" for i in range(3000)]
    plan = undo_plan("git_reset", listing(staged, unstaged))
    assert plan == [("git_add", {"repo_path": ".", "files": staged})]
    # The last staged path also unstaged: found all the same.
    assert "also had unstaged changes" in refusal("git_reset", listing(staged, [staged[-1]]))
