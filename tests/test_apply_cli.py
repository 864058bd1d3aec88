"""`patchset apply` end to end: plain trees, installed layout via the path map, git checkouts,
the lock's byte check, idempotence, partial trees, and the quickstart on real vLLM 0.30.0."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT, git, new_repo

LEDGER = """\
schema = 1
[targets.fi]
upstream = "https://example.invalid/fi.git"
github = "example/fi"
layout = "installed"
[targets.fi.path_map]
"include/" = "fi/data/include/"
"""

FILES = {
    "include/mla.cuh": "int tile = 64;\nint x = 1;\n",
    "fi/core.py": "CAP = (9, 10)\n\n\ndef ok(c):\n    return c in CAP\n",
}


def diff(tmp: Path, rel: str, old: str, new: str) -> str:
    """A unified diff of one file, as `diff -u` writes it (difflib), with a/ and b/ prefixes."""
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(lines)


@pytest.fixture
def fi(tmp_path: Path, run) -> tuple[Path, Path]:
    """A two-patch ledger for an installed-layout target, and a site-packages-like tree."""
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(
        LEDGER
        + """
[[patch]]
id = "fi-01-cap12"
target = "fi"
title = "allow capability 12"
origin = "port"

[[patch]]
id = "fi-02-tile"
target = "fi"
title = "clamp the tile"
origin = "port"
"""
    )
    src = tmp_path / "src"
    src.mkdir()
    p1 = diff(src, "fi/core.py", FILES["fi/core.py"], FILES["fi/core.py"].replace("(9, 10)", "(9, 10, 12)"))
    p2 = diff(src, "include/mla.cuh", FILES["include/mla.cuh"], "int tile = min(64, 32);\nint x = 1;\n")
    (src / "fi-01-cap12.patch").write_text(p1)
    (src / "fi-02-tile.patch").write_text(p2)
    assert run("import", src / "fi-01-cap12.patch", src / "fi-02-tile.patch", cwd=led).code == 0
    tree = tmp_path / "site-packages"
    (tree / "fi/data/include").mkdir(parents=True)
    (tree / "fi/data/include/mla.cuh").write_text(FILES["include/mla.cuh"])
    (tree / "fi/core.py").write_text(FILES["fi/core.py"])
    return led, tree


def test_installed_layout_lock_and_idempotence(run, fi, digest, tmp_path: Path) -> None:
    led, tree = fi
    pristine = tmp_path / "pristine"
    shutil.copytree(tree, pristine)
    r = run("apply", "--json", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0, r
    data = json.loads(r.stdout)["targets"][0]
    assert data["outcome"] == "applied"
    assert (tree / "fi/data/include/mla.cuh").read_text() == "int tile = min(64, 32);\nint x = 1;\n"
    lock = (led / "patches.lock").read_text()
    assert '"include/mla.cuh"' in lock  # the lock speaks the source layout
    # EXPECTED.sha256 export matches what sha256sum says of the tree, in the source layout
    assert run("export", "--format", "expected", tmp_path / "exp", cwd=led).code == 0
    exp = (tmp_path / "exp/EXPECTED.sha256").read_text()
    assert "fi/data/include/mla.cuh" in exp  # an installed target's list speaks the tree's layout
    check = subprocess.run(
        ["sha256sum", "-c", str(tmp_path / "exp/EXPECTED.sha256")], cwd=tree, capture_output=True, text=True
    )
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout + check.stderr
    # and it imports back into the same lock entries
    lock_before = (led / "patches.lock").read_text()
    assert run("import", "--target", "fi", tmp_path / "exp/EXPECTED.sha256", cwd=led).code == 0
    assert (led / "patches.lock").read_text() == lock_before
    # a second run changes nothing and says so
    before = digest(tree)
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 0 and json.loads(r.stdout)["targets"][0]["outcome"] == "already"
    assert digest(tree) == before
    # a fresh pristine tree now verifies against the lock
    r = run("apply", "--json", "--tree", pristine, cwd=led)
    assert r.code == 0 and "matches the lock" in json.loads(r.stdout)["targets"][0]["message"]


def test_the_apply_note_leaves_no_directory_it_made_and_keeps_what_was_there(run, fi, tmp_path: Path) -> None:
    """The note beside the ledger (.patchset/applying/) goes once the apply is done: the
    directories it made go with it, and a directory that was there before stays, with its files."""
    led, tree = fi
    other = tmp_path / "other"
    shutil.copytree(tree, other)
    had_state = (led / ".patchset").exists()
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert not (led / ".patchset/applying").exists()
    assert (led / ".patchset").exists() == had_state
    (led / ".patchset/applying").mkdir(parents=True, exist_ok=True)
    (led / ".patchset/applying/mine.txt").write_text("not patchset's\n")
    r = run("apply", "--tree", other, cwd=led)
    assert r.code == 0, r
    assert sorted(p.name for p in (led / ".patchset/applying").iterdir()) == ["mine.txt"]


def test_lock_mismatch_writes_nothing(run, fi, digest) -> None:
    led, tree = fi
    assert run("apply", "--tree", tree, "--update-lock", "--dry-run", cwd=led).code == 0
    # record a lock, then change the base so the result differs
    r = run("apply", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0
    shutil.rmtree(tree / "fi")
    (tree / "fi/data/include").mkdir(parents=True)
    (tree / "fi/data/include/mla.cuh").write_text(FILES["include/mla.cuh"])
    (tree / "fi/core.py").write_text(FILES["fi/core.py"] + "# drifted\n")
    before = digest(tree)
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 1
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "mismatch" and rep["mismatched"] == ["fi/core.py"], json.dumps(rep, indent=1)[:3000]
    assert digest(tree) == before


def test_partial_tree_named_and_left_alone(run, fi, digest) -> None:
    led, tree = fi
    (tree / "fi/data/include/mla.cuh").write_text("int tile = min(64, 32);\nint x = 1;\n")  # patch 2 only
    before = digest(tree)
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 1
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "partial"
    assert "carries patches 2, not 1" in rep["message"]
    assert digest(tree) == before
    # asked to, it applies only the missing patch, and the result is the full series
    r = run("apply", "--json", "--tree", tree, "--skip-applied", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "applied" and "applying only the 1 missing patch" in rep["message"]
    assert [p["patch_id"] for p in rep["result"]["patches"]] == ["fi-01-cap12"]
    assert (tree / "fi/core.py").read_text().startswith("CAP = (9, 10, 12)")


def test_failed_hunk_reports_nearest_region(run, fi, digest) -> None:
    led, tree = fi
    (tree / "fi/core.py").write_text("CAP = (9, 11)\n\n\ndef ok(c):\n    return c in CAP\n")
    before = digest(tree)
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 1
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "failed"
    first = rep["result"]["patches"][0]
    assert first["status"] == "failed"
    hunk = first["files"][0]["hunks"][0]
    assert hunk["status"] == "failed" and hunk["nearest"]["line"] == 1
    assert digest(tree) == before


def test_missing_body_and_unsafe_path(run, fi, tmp_path: Path) -> None:
    led, tree = fi
    (led / "patchset/series/fi/fi-02-tile.patch").unlink()
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 2 and "body not imported" in r.stderr and "fi-02-tile" in r.stderr
    evil = tmp_path / "evil.patch"
    evil.write_text("--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")
    led2 = tmp_path / "led2"
    led2.mkdir()
    (led2 / "patches.toml").write_text(LEDGER)
    assert run("import", evil, cwd=led2).code == 0
    r = run("apply", "--tree", tree, cwd=led2)
    assert r.code == 2 and "escapes the tree" in r.stderr


REPO_LEDGER = """\
schema = 1
[targets.demo]
upstream = "u"
github = "o/demo"

[[patch]]
id = "p1"
target = "demo"
title = "Change a"
origin = "upstream"
[patch.upstream]
prs = ["o/demo#7"]

[[patch]]
id = "p2"
target = "demo"
title = "Change b"
origin = "ours"
"""


@pytest.fixture
def repo_led(run, tmp_path: Path) -> tuple[Path, Path]:
    """A two-patch ledger and a git checkout of the files it patches."""
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(REPO_LEDGER)
    repo = tmp_path / "repo"
    new_repo(repo, {"a.txt": "a\n", "b.txt": "b\n"})
    src = tmp_path / "src"
    src.mkdir()
    (src / "p1.patch").write_text(diff(src, "a.txt", "a\n", "A\n"))
    (src / "p2.patch").write_text(diff(src, "b.txt", "b\n", "B\n"))
    assert run("import", src / "p1.patch", src / "p2.patch", cwd=led).code == 0
    return led, repo


def test_repo_commits_with_trailers(run, repo_led: tuple[Path, Path]) -> None:
    led, repo = repo_led
    r = run("apply", "--repo", repo, cwd=led)
    assert r.code == 0, r
    log = git(
        repo,
        "log",
        "--format=%s|%(trailers:key=Patch-Id,valueonly,separator=)|%(trailers:key=Upstream-PR,valueonly,separator=)",
        "-2",
    )
    assert log.splitlines() == ["Change b|p2|", "Change a|p1|o/demo#7"]
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "patchset/demo"
    # a dirty checkout is refused
    (repo / "a.txt").write_text("dirty\n")
    r = run("apply", "--repo", repo, "--branch", "other", cwd=led)
    assert r.code == 2 and "uncommitted changes" in r.stderr


def test_repo_twice_says_it_already_carries_the_series(run, repo_led: tuple[Path, Path]) -> None:
    """Issue 24: ``--repo`` run again is idempotent as ``--tree`` is (exit 0, the same words)."""
    led, repo = repo_led
    start = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    assert run("apply", "--repo", repo, cwd=led).code == 0
    heads = git(repo, "show-ref")
    for where in ("on the branch", "back on the start branch"):
        r = run("apply", "--repo", repo, cwd=led)
        assert r.code == 0, (where, r)
        assert "already carries the whole series" in r.stdout and "patchset/demo" in r.stdout, (where, r)
        r = run("apply", "--repo", repo, "--json", cwd=led)
        assert r.code == 0 and json.loads(r.stdout)["targets"][0]["outcome"] == "already", (where, r)
        said = json.loads(r.stdout)["targets"][0]["message"]
        assert git(repo, "show-ref") == heads, where  # no commit, no branch
        git(repo, "checkout", "-q", start)
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == start
    assert (repo / "a.txt").read_text() == "a\n"  # the checked-out tree was not touched
    tree = led / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("A\n")
    (tree / "b.txt").write_text("B\n")
    r = run("apply", "--tree", tree, "--json", cwd=led)  # the words --tree uses
    assert r.code == 0, r
    assert said == "branch patchset/demo: " + json.loads(r.stdout)["targets"][0]["message"]
    # with a lock: the branch's files are checked against it, as a tree's are
    assert run("apply", "--repo", repo, "--branch", "locked", "--update-lock", cwd=led).code == 0
    git(repo, "checkout", "-q", start)
    r = run("apply", "--repo", repo, "--branch", "locked", cwd=led)
    assert r.code == 0 and "already carries the series (every file matches the lock)" in r.stdout, r


def test_repo_branch_with_something_else_is_refused_with_what_to_do(
    run, repo_led: tuple[Path, Path], tmp_path: Path
) -> None:
    led, repo = repo_led
    start = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "patchset/demo")  # a branch of that name, carrying nothing
    (repo / "c.txt").write_text("c\n")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-q", "-m", "unrelated")
    git(repo, "checkout", "-q", "-")
    before = git(repo, "show-ref")
    r = run("apply", "--repo", repo, cwd=led)
    assert r.code == 2, r
    assert "branch 'patchset/demo' already exists" in r.stderr and "does not carry" in r.stderr, r
    assert "--branch NAME" in r.stderr and "branch -D patchset/demo" in r.stderr, r
    assert git(repo, "show-ref") == before
    # a branch carrying part of the series, or an older version of a patch, is not the series either
    git(repo, "branch", "-q", "-f", "patchset/demo", start)
    assert run("apply", "--repo", repo, "--branch", "x", cwd=led).code == 0
    git(repo, "checkout", "-q", "-")
    git(repo, "branch", "-q", "-f", "patchset/demo", "x~1")
    r = run("apply", "--repo", repo, cwd=led)
    assert r.code == 2 and "p1" in r.stderr and "p2" in r.stderr, r
    src = tmp_path / "src"
    (src / "p2.patch").write_text(diff(src, "b.txt", "b\n", "B2\n"))
    assert run("import", src / "p2.patch", cwd=led).code == 0
    r = run("apply", "--repo", repo, "--branch", "x", cwd=led)
    assert r.code == 2 and "does not carry" in r.stderr, r


@pytest.mark.network
def test_quickstart_from_index(run, tmp_path: Path) -> None:
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    ex = tmp_path / "example"
    shutil.copytree(REPO_ROOT / "examples/spark-sm12x", ex)
    into = tmp_path / "vllm-patched"
    r = run("apply", "--json", "--from-index", "vllm==0.30.0", "--into", into, cwd=ex)
    assert r.code == 0, r
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "applied" and "every patched file matches the lock" in rep["message"]
    assert [p["status"] for p in rep["result"]["patches"]] == ["applied"] * 5
    assert (
        "sm12x_sparse.insert(0, AttentionBackendEnum.FLASHINFER_MLA_SPARSE_SM90)"
        in (into / "vllm/platforms/cuda.py").read_text()
    )
    assert (into / "vllm/platforms/sm12x.py").is_file()
    # --into must be new: a second run into the same dir is refused without touching it
    r = run("apply", "--from-index", "vllm==0.30.0", "--into", into, cwd=ex)
    assert r.code == 2 and "not empty" in r.stderr


BACKPORTED = ["vllm/platforms/cuda.py", "vllm/v1/core/block_pool.py", "vllm/v1/core/kv_cache_manager.py"]


@pytest.mark.network
def test_real_upstream_backport_applies_like_gnu_patch(run, tmp_path: Path) -> None:
    """Real upstream changes carried as backports: the 0.30.0 -> 0.31.0 diff of three vLLM files,
    applied to 0.30.0 by `patchset apply`, gives 0.31.0's bytes — and the same bytes as GNU patch."""
    from patchset.upstream.history import ReleaseHistory
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    hist = ReleaseHistory.for_project("vllm")
    old, new = hist.resolve("vllm==0.30.0"), hist.resolve("vllm==0.31.0")
    tree, gnu = tmp_path / "tree", tmp_path / "gnu"
    body = ""
    for rel in BACKPORTED:
        a, b = hist.read_blob(old, rel), hist.read_blob(new, rel)
        assert a and b and a != b, rel
        for root in (tree, gnu):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(a)
        body += diff(tmp_path, rel, a.decode(), b.decode())
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n[targets.vllm]\nupstream = "u"\ngithub = "vllm-project/vllm"\n')
    (tmp_path / "backport-0.31.0-core.patch").write_text(body)
    assert run("import", tmp_path / "backport-0.31.0-core.patch", cwd=led).code == 0
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 0, r
    subprocess.run(
        ["patch", "-s", "-p1", "-F0", "--forward", "-i", str(tmp_path / "backport-0.31.0-core.patch")],
        cwd=gnu,
        check=True,
    )
    for rel in BACKPORTED:
        assert (tree / rel).read_bytes() == hist.read_blob(new, rel)
        assert (tree / rel).read_bytes() == (gnu / rel).read_bytes()
    # applied again, it is recognised as already carried and nothing changes
    r = run("apply", "--json", "--tree", tree, cwd=led)
    assert r.code == 0 and json.loads(r.stdout)["targets"][0]["outcome"] == "already"


@pytest.mark.network
def test_flashinfer_example_wheel_and_sdist_layouts(run, tmp_path: Path) -> None:
    """The FlashInfer example on the real 0.6.18.post1 release: the wheel (installed layout, headers
    under flashinfer/data/include/) and the sdist (source layout) get the same patched bytes, both
    checked against one lock, and the exported EXPECTED.sha256 passes `sha256sum -c` in the wheel tree."""
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    ex = tmp_path / "example"
    shutil.copytree(REPO_ROOT / "examples/flashinfer-sm12x", ex)
    inst, src = tmp_path / "installed", tmp_path / "source"
    r = run("apply", "--json", "--from-index", "flashinfer-python==0.6.18.post1", "--into", inst, cwd=ex)
    assert r.code == 0 and "matches the lock" in json.loads(r.stdout)["targets"][0]["message"], r
    r = run(
        "apply",
        "--json",
        "--from-index",
        "flashinfer-python==0.6.18.post1",
        "--layout",
        "source",
        "--into",
        src,
        cwd=ex,
    )
    assert r.code == 0 and "matches the lock" in json.loads(r.stdout)["targets"][0]["message"], r
    header = "include/flashinfer/attention/mla.cuh"
    assert (inst / "flashinfer/data" / header).read_bytes() == (src / header).read_bytes()
    assert b"FLASHINFER_MLA_TILE_KV(64)" in (src / header).read_bytes()
    assert run("export", "--format", "expected", tmp_path / "exp", cwd=ex).code == 0
    check = subprocess.run(
        ["sha256sum", "-c", str(tmp_path / "exp/EXPECTED.sha256")], cwd=inst, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
