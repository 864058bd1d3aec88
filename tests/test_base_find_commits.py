"""``patchset base find --upstream CLONE`` (issue 33, What 4): the commits of an upstream clone a
series applies to, newest first, probed by first-parent order rather than one by one. The clone is
a real git repository whose commits carry real vLLM files (0.30.0's, then 0.31.0's, then an edit
at the patch's own lines); GNU ``patch --dry-run -F0`` on every commit is the oracle."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import commit_files, git, release_history

pytestmark = pytest.mark.network

KV = "vllm/v1/core/kv_cache_utils.py"  # changes between every release (real-sources.md)


def _spot(lines: list[str]) -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith("def ") and i > len(lines) // 3)


def _patch_on(data: bytes) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    k = _spot(lines)
    new = [*lines[:k], "# spark: a downstream note\n", *lines[k:]]
    return (
        f"diff --git a/{KV} b/{KV}\n".encode()
        + "".join(difflib.unified_diff(lines, new, f"a/{KV}", f"b/{KV}")).encode()
    )


def _clone(root: Path, v30: bytes, v31: bytes) -> list[str]:
    """Commits oldest first: 8 on 0.30.0's file, 12 on 0.31.0's, 5 with the patch's spot rewritten."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    lines = v31.decode().splitlines(keepends=True)
    k = _spot(lines)
    moved = "".join([*lines[: k - 1], "# upstream rewrote this spot\n", *lines[k + 1 :]]).encode()
    shas = []
    for i, data in enumerate([v30] * 8 + [v31] * 12 + [moved] * 5):
        shas.append(commit_files(root, f"commit {i}", {KV: data, "README.md": f"# vLLM, commit {i}\n"}))
    return shas


def test_base_find_over_a_clone_names_the_commits_the_series_fits_as_gnu_patch_does(run, tmp_path: Path) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    history = release_history("vllm", ["0.30.0", "0.31.0"])
    v30, v31 = (history.read_blob(history.resolve(f"vllm=={v}"), KV) for v in ("0.30.0", "0.31.0"))
    clone = tmp_path / "vllm"
    shas = _clone(clone, v30, v31)
    body = _patch_on(v31)
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    (tmp_path / "kv.patch").write_bytes(body)
    assert run("import", tmp_path / "kv.patch", cwd=led).code == 0
    oracle = []
    for sha in shas:  # GNU patch on every commit's file
        tree = tmp_path / f"t-{sha[:8]}"
        (tree / KV).parent.mkdir(parents=True)
        (tree / KV).write_bytes(git(clone, "show", f"{sha}:{KV}").encode())
        gnu = subprocess.run(["patch", "--dry-run", "-F0", "-p1", "-d", str(tree)], input=body, capture_output=True)
        oracle.append(gnu.returncode == 0)
    want = [sha for sha, ok in zip(shas, oracle, strict=True) if ok][::-1]
    assert shas[8] in want and shas[-1] not in want  # the fixture has a run and an edge
    r = run("base", "find", "--upstream", clone, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["kind"] == "commits" and rep["fits"] == want and rep["newest"] == want[0], rep
    assert len(rep["checked"]) < len(shas), rep["checked"]  # probed by order, not one by one
    for sha, fits in rep["checked"].items():
        assert oracle[shas.index(sha)] == fits, sha
    r = run("base", "find", "--upstream", clone, "--since", shas[10], "--json", cwd=led)
    assert json.loads(r.stdout)["fits"] == [s for s in want if shas.index(s) >= 10]
    r = run("base", "find", "--upstream", clone, cwd=led)
    assert r.code == 0 and f"--base {want[0]}" in r.stdout and f"{len(want)} commit(s)" in r.stdout, r
    r = run("base", "find", "--upstream", clone, "--since", "no-such-ref", cwd=led)
    assert r.code == 2 and "--since 'no-such-ref': not a commit" in r.stderr, r
    r = run("base", "find", "--upstream", tmp_path / "led", cwd=led)
    assert r.code == 2 and "not a git repository" in r.stderr, r
