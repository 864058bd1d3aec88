"""``import --fork URL@SHA`` (issue 33, What 4) on real git repositories made of real vLLM 0.30.0
files from the package index: an upstream that moves on after the fork was made, a fork with
commits inside and outside the package. ``git merge-base`` and ``git show`` are the oracles: the
patches applied to the base give the fork's files at SHA, and upstream's later commit is not in
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.repo import commit_files, git, git_bytes, release_history, tree_digest
from tests.test_onboard_survey import _edit

pytestmark = pytest.mark.network

V30 = "vllm==0.30.0"
CUDA, KV, DEVICE, IFACE = (
    "vllm/platforms/cuda.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/config/device.py",
    "vllm/platforms/interface.py",
)


@pytest.fixture(scope="module")
def stock():
    history = release_history("vllm", ["0.30.0"])
    c30 = history.resolve(V30)
    return {p: history.read_blob(c30, p) for p in (CUDA, KV, DEVICE, IFACE)}


def _commit(repo: Path, files: dict[str, bytes], message: str) -> str:
    return commit_files(repo, message, files)


def _repos(root: Path, stock: dict[str, bytes]) -> tuple[Path, Path, str, str]:
    """upstream (0.30.0's files, then a later commit), and a fork made before that commit."""
    up = root / "upstream"
    up.mkdir(parents=True)
    git(up, "init", "-q", "-b", "main")
    forked_at = _commit(up, {**stock, "README.md": b"# vLLM\n"}, "vLLM 0.30.0 files")
    fork = root / "fork"
    git(root, "clone", "-q", str(up), str(fork))
    _commit(up, {IFACE: _edit(stock[IFACE], 5, b"upstream moved on")}, "upstream: a later change")
    _commit(
        fork,
        {
            CUDA: _edit(stock[CUDA], 3, b"sm_121: treat GB10 as a Blackwell part"),
            "tests/test_gb10.py": b"def test(): pass\n",
        },
        "platforms: GB10 is Blackwell",
    )
    _commit(fork, {"docs/spark.md": b"# Spark\n"}, "docs: Spark notes")
    sha = _commit(
        fork, {KV: _edit(stock[KV], 5, b"keep the prefix cache across block sizes")}, "kv: keep the prefix cache"
    )
    return up, fork, sha, forked_at


def test_a_fork_at_a_commit_imports_its_commits_above_the_merge_base(run, stock, tmp_path: Path) -> None:
    up, fork, sha, forked_at = _repos(tmp_path, stock)
    assert git(fork, "merge-base", sha, "origin/main").strip() == forked_at
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--fork", f"file://{fork}@{sha[:10]}", "--upstream", up, "--base", V30, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["merge_base"] == forked_at and rep["sha"] == sha, rep
    assert [c.split(" ", 1)[1] for c in rep["commits"]] == [
        "platforms: GB10 is Blackwell",
        "docs: Spark notes",
        "kv: keep the prefix cache",
    ]
    assert len(rep["added"]) == 2 and sorted(rep["outside"]) == ["docs/spark.md", "tests/test_gb10.py"], rep
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", V30, "--into", tree, cwd=led)
    assert r.code == 0, r
    for path in (CUDA, KV, IFACE):  # the fork's files at SHA; upstream's later IFACE change is not carried
        assert (tree / path).read_bytes() == git_bytes(fork, "show", f"{sha}:{path}"), path
    r = run("import", "--fork", f"{fork}@{sha}", "--upstream", up, cwd=led)  # again: nothing new
    assert r.code == 0 and "added 0" in r.stdout, r
    assert f"3 commit(s) above {forked_at[:12]}" in r.stdout and "docs/spark.md" in r.stdout


def test_bad_forks_are_refused_and_write_nothing(run, stock, tmp_path: Path) -> None:
    up, fork, sha, forked_at = _repos(tmp_path, stock)
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(led)
    cases = {
        f"{fork}": "not URL@SHA",
        f"{fork}@main": "not URL@SHA",
        f"{fork}@{'0' * 40}": "the fork has no commit",
        f"{tmp_path}/nowhere@{sha}": "the fork",
        f"{up}@{forked_at}": "the commit is upstream's own",
    }
    for value, said in cases.items():
        r = run("import", "--fork", value, "--upstream", up, cwd=led)
        assert r.code != 0 and said in r.stderr and "Traceback" not in r.stderr, (value, r)
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()
    git(unrelated, "init", "-q", "-b", "main")
    _commit(unrelated, {"x": b"x\n"}, "unrelated")
    r = run("import", "--fork", f"{fork}@{sha}", "--upstream", unrelated, cwd=led)
    assert r.code != 0 and "shares no history" in r.stderr, r
    r = run("import", "--fork", f"{fork}@{sha}", "--script", "x", cwd=led)
    assert r.code == 2 and "give one of --script, --fork" in r.stderr, r
    assert tree_digest(led) == before


def test_the_merge_base_becomes_the_base_of_a_target_without_one(run, stock, tmp_path: Path) -> None:
    """Without --base the series applies where the mails were made: the merge base, recorded when
    it is a commit of the target's own upstream — never a commit of another --upstream."""
    up, fork, sha, forked_at = _repos(tmp_path, stock)
    other = tmp_path / "led-other"
    other.mkdir()
    assert run("init", "--target", "vllm", cwd=other).code == 0
    r = run("import", "--fork", f"{fork}@{sha}", "--upstream", up, "--json", cwd=other)
    assert r.code == 0 and json.loads(r.stdout)["recorded_base"] == "", r  # the preset's upstream is GitHub's
    assert "base = " not in (other / "patches.toml").read_text().split("[targets.vllm]")[1].split("[")[0]
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    assert run("target", "add", "vllm", "--upstream", str(up), cwd=led).code == 0
    r = run("import", "--fork", f"{fork}@{sha}", "--json", cwd=led)
    assert r.code == 0, r
    assert json.loads(r.stdout)["recorded_base"] == forked_at, r
    assert f'base = "{forked_at}"' in (led / "patches.toml").read_text()
    r = run("validate", cwd=led)
    assert r.code == 0, r
