"""apply_series / detect_state / recover on real directory trees, including SIGKILL mid-commit."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.engine import txn
from patchset.engine.detect import detect_state
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series, recover
from patchset.errors import ApplyFailed, EnvironmentFailure, PatchFormatError, UnsafePathError
from patchset.journal.commit import Change
from patchset.journal.txndir import JOURNAL
from patchset.ledger.lock import sha256_bytes as sha256
from tests.support.diffgen import unified_diff
from tests.support.repo import git_bytes
from tests.support.trees import snapshot

HERE = Path(__file__).resolve().parent


def git_patch(
    tmp: Path, before: dict[str, bytes], after: dict[str, bytes], modes: dict[str, int] | None = None
) -> bytes:
    """A real ``git diff`` (renames, modes, creations, deletions) between two small trees."""
    repo = tmp / f"g{len(list(tmp.glob('g*')))}"
    repo.mkdir()

    def g(*args: str) -> bytes:
        return git_bytes(repo, *args)

    g("init", "-q")
    for rel, data in before.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    g("add", "-A")
    g("commit", "-qm", "before", "--allow-empty")
    for rel in before:
        (repo / rel).unlink()
    for rel, data in after.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
        if modes and rel in modes:
            os.chmod(repo / rel, modes[rel])
    g("add", "-A")
    return g("diff", "--cached", "-M", "HEAD")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "vllm" / "v1").mkdir(parents=True)
    (root / "vllm" / "v1" / "core.py").write_bytes(b"".join(b"line %d\n" % i for i in range(1, 41)))
    (root / "vllm" / "cuda.py").write_bytes(b"import os\r\nA = 1\r\nB = 2\r\n")
    (root / "vllm" / "old_name.py").write_bytes(b"x = 1\ny = 2\n")
    (root / "setup.py").write_bytes(b"print('setup')\n")
    os.chmod(root / "setup.py", 0o644)
    return root


def core(i_changes: dict[int, bytes]) -> bytes:
    lines = [b"line %d\n" % i for i in range(1, 41)]
    for i, new in i_changes.items():
        lines[i - 1] = new
    return b"".join(lines)


def series(tmp: Path) -> list[SeriesItem]:
    base = {
        "vllm/v1/core.py": core({}),
        "vllm/cuda.py": b"import os\r\nA = 1\r\nB = 2\r\n",
        "vllm/old_name.py": b"x = 1\ny = 2\n",
        "setup.py": b"print('setup')\n",
    }
    s1 = dict(base)
    s1["vllm/v1/core.py"] = core({5: b"line 5 patched\n"})
    s1["vllm/cuda.py"] = b"import os\r\nA = 10\r\nB = 2\r\n"
    p1 = git_patch(tmp, base, s1)
    s2 = dict(s1)
    s2["vllm/v1/core.py"] = core({5: b"line 5 patched\n", 30: b"line 30 patched\n"})
    s2["vllm/new_dir/added.py"] = b"# new file\n"
    s2["vllm/new_name.py"] = s2.pop("vllm/old_name.py").replace(b"y = 2", b"y = 3")
    p2 = git_patch(tmp, s1, s2, modes={"setup.py": 0o755})
    s3 = dict(s2)
    del s3["setup.py"]
    s3["vllm/v1/core.py"] = s2["vllm/v1/core.py"].replace(b"line 20\n", b"line 20\nline 20b\n")
    p3 = git_patch(tmp, s2, s3)
    return [SeriesItem("0001-cuda", p1), SeriesItem("0002-layout", p2), SeriesItem("0003-drop", p3)]


# --------------------------------------------------------------------------- applying


def test_series_applies_in_order_with_results_and_hashes(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    seen = []
    res = apply_series(tree, items, progress=lambda pid, i, n: seen.append((pid, i, n)))
    assert res.ok and res.committed and res.failed_patch is None
    assert seen == [("0001-cuda", 1, 3), ("0002-layout", 2, 3), ("0003-drop", 3, 3)]
    core_now = (tree / "vllm/v1/core.py").read_bytes()
    assert b"line 5 patched\n" in core_now and b"line 30 patched\n" in core_now
    assert b"line 20\nline 20b\n" in core_now
    assert (tree / "vllm/cuda.py").read_bytes() == b"import os\r\nA = 10\r\nB = 2\r\n"
    assert (tree / "vllm/new_dir/added.py").read_bytes() == b"# new file\n"
    assert not (tree / "vllm/old_name.py").exists()
    assert (tree / "vllm/new_name.py").read_bytes() == b"x = 1\ny = 3\n"
    assert not (tree / "setup.py").exists()
    assert not (tree / txn.TXN_DIR).exists()
    # hashes of every touched file, None for removed ones
    assert res.files["vllm/v1/core.py"] == sha256(core_now)
    assert res.files["vllm/old_name.py"] is None and res.files["setup.py"] is None
    assert res.files["vllm/new_name.py"] == sha256(b"x = 1\ny = 3\n")
    # per patch / file / hunk detail, JSON-serialisable
    data = json.loads(json.dumps(res.to_json()))
    p2 = data["patches"][1]
    assert p2["status"] == "applied"
    ops = {f["path"]: f["op"] for f in p2["files"]}
    assert ops["vllm/new_name.py"] == "rename" and ops["vllm/new_dir/added.py"] == "create"
    assert ops["setup.py"] == "modify"  # mode change only
    core2 = next(f for f in p2["files"] if f["path"] == "vllm/v1/core.py")
    assert core2["hunks"][0]["status"] == "clean"
    assert core2["sha256"] == sha256(core({5: b"line 5 patched\n", 30: b"line 30 patched\n"}))


def test_mode_change_is_applied(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)[:2]
    assert apply_series(tree, items).ok
    assert stat.S_IMODE((tree / "setup.py").stat().st_mode) == 0o755


def test_offsets_are_reported(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)[:1]
    body = tree / "vllm/v1/core.py"
    body.write_bytes(b"inserted 1\ninserted 2\n" + body.read_bytes())
    res = apply_series(tree, items)
    assert res.ok
    f = next(f for f in res.patches[0].files if f.path == "vllm/v1/core.py")
    assert [(h.status, h.offset) for h in f.hunks] == [("offset", 2)]


def test_failure_writes_nothing_and_names_the_hunk(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    body = tree / "vllm/v1/core.py"
    # drift under patch 2's second hunk (line 30) only: patches 1 applies, 2 fails
    body.write_bytes(body.read_bytes().replace(b"line 31\n", b"line 31 drifted\n"))
    before = snapshot(tree)
    res = apply_series(tree, items)
    assert not res.ok and not res.committed and res.failed_patch == "0002-layout"
    assert [p.status for p in res.patches] == ["applied", "failed", "not_reached"]
    assert snapshot(tree) == before
    f = next(f for f in res.patches[1].files if f.path == "vllm/v1/core.py")
    assert [h.status for h in f.hunks] == ["failed"]
    near = f.hunks[0].nearest
    assert near is not None and near.line == 27 and 0.5 < near.similarity < 1
    with pytest.raises(ApplyFailed) as exc:
        res.raise_for_failure()
    assert "0002-layout" in exc.value.render() and "hunk #1 FAILED" in exc.value.render()
    assert exc.value.exit_code == 1


def test_dry_run_writes_nothing(tree: Path, tmp_path: Path) -> None:
    before = snapshot(tree)
    res = apply_series(tree, series(tmp_path), dry_run=True)
    assert res.ok and not res.committed and res.dry_run
    assert snapshot(tree) == before
    assert res.files["vllm/new_name.py"] == sha256(b"x = 1\ny = 3\n")


def test_second_apply_is_refused_as_already_applied(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    assert apply_series(tree, items).ok
    after = snapshot(tree)
    res = apply_series(tree, items)
    assert not res.ok and res.patches[0].status == "already_applied"
    assert snapshot(tree) == after
    with pytest.raises(ApplyFailed, match="already"):
        res.raise_for_failure()


def test_path_for_maps_source_layout_to_installed_layout(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "flashinfer" / "data" / "include").mkdir(parents=True)
    (root / "flashinfer/data/include/attn.cuh").write_bytes(b"int a;\nint b;\n")
    body = unified_diff(b"int a;\nint b;\n", b"int a;\nint c;\n", "include/attn.cuh")

    def installed(p: str) -> str:
        return "flashinfer/data/" + p

    res = apply_series(root, [SeriesItem("fi-1", body)], path_for=installed)
    assert res.ok
    assert (root / "flashinfer/data/include/attn.cuh").read_bytes() == b"int a;\nint c;\n"
    assert list(res.files) == ["flashinfer/data/include/attn.cuh"]
    items = [SeriesItem("fi-1", body)]
    st = detect_state(root, items, path_for=installed)
    assert st.all_applied
    lock = {"include/attn.cuh": res.files["flashinfer/data/include/attn.cuh"]}
    st = detect_state(root, items, lock, path_for=installed)  # keys in the patches' layout
    assert st.matches_expected is True


def test_strip_level(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/m.py").write_bytes(b"a\n")
    body = unified_diff(b"a\n", b"b\n", "x/pkg/m.py")  # a/x/pkg/m.py: needs -p2
    assert apply_series(root, [SeriesItem("p", body, strip=2)]).ok
    assert (root / "pkg/m.py").read_bytes() == b"b\n"


# --------------------------------------------------------------------------- safety


@pytest.mark.parametrize(
    "bad",
    ["../outside.txt", "a/../../outside.txt", "/etc/passwd", ".git/hooks/pre-commit", ".patchset-txn/journal.json"],
)
def test_paths_escaping_the_tree_are_refused_before_any_write(tree: Path, bad: str) -> None:
    good = unified_diff(b"print('setup')\n", b"print('changed')\n", "setup.py")
    evil = b"--- a/" + bad.lstrip("/").encode() + b"\n+++ b/" + bad.lstrip("/").encode() + b"\n@@ -0,0 +1 @@\n+owned\n"
    if bad.startswith("/"):
        evil = b"--- /dev/null\n+++ " + bad.encode() + b"\n@@ -0,0 +1 @@\n+owned\n"
    before = snapshot(tree)
    with pytest.raises(UnsafePathError) as exc:
        # an absolute name survives only with -p0
        apply_series(tree, [SeriesItem("good", good), SeriesItem("evil", evil, strip=0 if bad.startswith("/") else 1)])
    assert "evil" in str(exc.value) and exc.value.exit_code == 2
    assert snapshot(tree) == before
    assert not (tree.parent / "outside.txt").exists()


def test_path_for_result_is_checked_too(tree: Path) -> None:
    good = unified_diff(b"print('setup')\n", b"print('changed')\n", "setup.py")
    with pytest.raises(UnsafePathError, match=re.escape("mapped to '../setup.py'")):
        apply_series(tree, [SeriesItem("p", good)], path_for=lambda p: "../" + p)


def test_symlink_pointing_outside_is_refused(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_bytes(b"a\n")
    os.symlink(outside, tree / "vllm" / "escape")
    body = unified_diff(b"a\n", b"b\n", "vllm/escape/x.py")
    with pytest.raises(UnsafePathError, match="symlink"):
        apply_series(tree, [SeriesItem("p", body)])
    assert (outside / "x.py").read_bytes() == b"a\n"


def test_symlink_inside_the_tree_is_followed_to_the_real_file(tree: Path) -> None:
    os.symlink("v1", tree / "vllm" / "alias")
    before = (tree / "vllm/v1/core.py").read_bytes()
    body = unified_diff(before, before.replace(b"line 3\n", b"line three\n"), "vllm/alias/core.py")
    res = apply_series(tree, [SeriesItem("p", body)])
    assert res.ok and list(res.files) == ["vllm/v1/core.py"]
    assert (tree / "vllm" / "alias").is_symlink()
    assert b"line three" in (tree / "vllm/v1/core.py").read_bytes()


def test_malformed_patch_names_patch_and_line(tree: Path) -> None:
    body = b"Subject: x\n\n--- a/setup.py\n+++ b/setup.py\n@@ -1,3 +1,3 @@\n print('setup')\n"
    with pytest.raises(PatchFormatError) as exc:
        apply_series(tree, [SeriesItem("0007-bad", body)])
    assert "0007-bad:" in str(exc.value) and exc.value.exit_code == 2


# --------------------------------------------------------------------------- detect_state


def test_detect_state_prefix_applied(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    st = detect_state(tree, items)
    assert [p.state for p in st.patches] == ["not_applied"] * 3
    assert st.summary() == "the tree carries none of the series"
    assert apply_series(tree, items[:2]).ok
    st = detect_state(tree, items)
    assert [p.state for p in st.patches] == ["applied", "applied", "not_applied"]
    assert st.summary() == "the tree carries patches 1-2, not 3"
    assert apply_series(tree, items[2:]).ok
    st = detect_state(tree, items)
    assert st.all_applied and st.summary() == "the tree already carries the whole series"
    res_hashes = {"vllm/v1/core.py": sha256((tree / "vllm/v1/core.py").read_bytes())}
    st = detect_state(tree, items, expected=res_hashes)
    assert st.matches_expected is True and "matches the lock" in st.summary()
    st = detect_state(tree, items, expected={"vllm/v1/core.py": "0" * 64})
    assert st.matches_expected is False and st.all_applied


def test_detect_state_unknown_on_conflict(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    (tree / "vllm/cuda.py").write_bytes(b"import os\r\nA = 99\r\nB = 2\r\n")
    st = detect_state(tree, items)
    assert st.patches[0].state == "unknown" and "vllm/cuda.py" in st.patches[0].reason
    assert json.loads(json.dumps(st.to_json()))["patches"][0]["state"] == "unknown"


# --------------------------------------------------------------------------- crash safety


def _run_helper(root: Path, series_dir: Path | None, crash_after: int | None) -> int:
    """Apply the series (or, with ``series_dir=None``, recover) in a child process that
    SIGKILLs itself at commit step ``crash_after``."""
    env = {k: v for k, v in os.environ.items() if k != "PATCHSET_TEST_CRASH_AFTER"}
    if crash_after is not None:
        env["PATCHSET_TEST_CRASH_AFTER"] = str(crash_after)
    args = [str(root), str(series_dir)] if series_dir else ["--recover", str(root)]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.helpers_crash", *args],
        env=env,
        cwd=HERE.parent,
        capture_output=True,
        timeout=60,
    )
    return proc.returncode


def test_sigkill_at_every_commit_step_leaves_old_or_new_tree(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    for it in items:
        (series_dir / f"{it.patch_id}.patch").write_bytes(it.body)
    pristine = tmp_path / "pristine"
    shutil.copytree(tree, pristine, symlinks=True)
    old = snapshot(pristine)
    assert _run_helper(tree, series_dir, None) == 0
    new = snapshot(tree)
    assert new != old
    seen: dict[str, int] = {}
    k = 0
    finished = False
    while not finished:
        k += 1
        assert k < 200, "the commit never finished without a kill"
        for direction in ("auto", "back"):
            shutil.rmtree(tree)
            shutil.copytree(pristine, tree, symlinks=True)
            rc = _run_helper(tree, series_dir, k)
            if rc == 0:  # k is past the last step: the commit ran to its end
                finished = True
                break
            assert rc == -signal.SIGKILL, f"step {k}: exit {rc}"
            done = recover(tree, direction)
            now = snapshot(tree)
            state = "old" if now == old else "new" if now == new else "neither"
            assert state != "neither", f"step {k} ({direction}): tree is neither old nor new"
            if done == "rolled back":
                assert state == "old", f"step {k}: rollback did not restore the old tree"
            if done == "rolled forward":
                assert state == "new", f"step {k}: roll-forward did not give the new tree"
            seen[f"{direction}:{done}:{state}"] = seen.get(f"{direction}:{done}:{state}", 0) + 1
            assert not (tree / txn.TXN_DIR).exists()
            if direction == "auto":
                # after recovery a normal run gets to the new tree (or finds it applied)
                rc2 = _run_helper(tree, series_dir, None)
                assert snapshot(tree) == new and rc2 in (0, 3)
    # 4 staged files, the journal, 6 renames/unlinks, the journal's removal
    assert k > 10, k
    # every regime happened: killed before the journal (old tree), after it (rolled forward
    # or back from the same kill point), after the commit point (new tree, nothing to do)
    assert seen.get("auto:discarded:old", 0) > 0, seen
    assert seen.get("auto:rolled forward:new", 0) > 0, seen
    assert seen.get("back:rolled back:old", 0) > 0, seen


def test_sigkill_during_recovery_is_recovered_again(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    for it in items:
        (series_dir / f"{it.patch_id}.patch").write_bytes(it.body)
    pristine = tmp_path / "pristine"
    shutil.copytree(tree, pristine, symlinks=True)
    assert _run_helper(tree, series_dir, None) == 0
    new = snapshot(tree)
    # find the kill point right after the journal: every rename is still to do
    k = 0
    while True:
        k += 1
        shutil.rmtree(tree)
        shutil.copytree(pristine, tree, symlinks=True)
        assert _run_helper(tree, series_dir, k) == -signal.SIGKILL
        if (tree / txn.TXN_DIR / JOURNAL).exists():
            break
    crashed = tmp_path / "crashed"
    shutil.copytree(tree, crashed, symlinks=True)
    j = 0
    while True:
        j += 1
        shutil.rmtree(tree)
        shutil.copytree(crashed, tree, symlinks=True)
        rc = _run_helper(tree, None, j)  # recovery itself killed at its j-th step
        recover(tree)
        assert snapshot(tree) == new, f"recovery killed at step {j}"
        if rc == 0:
            break
        assert rc == -signal.SIGKILL
    assert j > 3


def test_next_apply_recovers_an_interrupted_commit(tree: Path, tmp_path: Path) -> None:
    items = series(tmp_path)[:1]
    series_dir = tmp_path / "s1"
    series_dir.mkdir()
    (series_dir / "a.patch").write_bytes(items[0].body)
    # step 3 = after the journal (2 staged files, journal): rolled forward on the next run
    assert _run_helper(tree, series_dir, 3) == -signal.SIGKILL
    assert (tree / txn.TXN_DIR / JOURNAL).exists()
    with pytest.raises(EnvironmentFailure, match="interrupted"):
        apply_series(tree, items, dry_run=True)
    res = apply_series(tree, items)
    assert res.recovered == "rolled forward"
    assert res.patches[0].status == "already_applied"
    assert (tree / "vllm/cuda.py").read_bytes() == b"import os\r\nA = 10\r\nB = 2\r\n"


def test_concurrent_commit_is_refused(tree: Path) -> None:
    import fcntl

    (tree / txn.TXN_DIR).mkdir()
    fd = os.open(tree / txn.TXN_DIR, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        body = unified_diff(b"print('setup')\n", b"print('x')\n", "setup.py")
        with pytest.raises(EnvironmentFailure, match="another patchset process"):
            apply_series(tree, [SeriesItem("p", body)])
    finally:
        os.close(fd)
    assert (tree / "setup.py").read_bytes() == b"print('setup')\n"


def test_io_error_during_renames_rolls_back(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "a.txt").write_bytes(b"old a\n")
    (root / "blocker").write_bytes(b"a file where a directory is needed\n")
    before = snapshot(root)
    with pytest.raises(EnvironmentFailure) as exc:
        txn.commit(root, [Change("a.txt", b"new a\n"), Change("blocker/x.txt", b"x\n")])
    assert "rolled back" in exc.value.render() and "blocker" in exc.value.render()
    assert snapshot(root) == before  # a.txt was replaced, then put back; no txn dir left


def test_copy_patch_already_applied(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    src = b"".join(b"src %d\n" % i for i in range(20))
    (root / "src.py").write_bytes(src)
    body = git_patch(tmp_path, {"src.py": src}, {"src.py": src, "copy.py": src + b"more\n"})
    assert b"copy from src.py" in body or b"new file mode" in body
    assert apply_series(root, [SeriesItem("c", body)]).ok
    again = apply_series(root, [SeriesItem("c", body)])
    assert again.patches[0].status == "already_applied"


def test_plain_diff_with_two_names_patches_the_existing_file(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "src").mkdir(parents=True)
    (root / "src/x.c").write_bytes(b"int a;\n")
    body = b"--- src/x.c.orig\n+++ src/x.c\n@@ -1 +1 @@\n-int a;\n+int b;\n"
    res = apply_series(root, [SeriesItem("p", body, strip=0)])
    assert res.ok and (root / "src/x.c").read_bytes() == b"int b;\n"
    assert not (root / "src/x.c.orig").exists()


@pytest.mark.network
def test_real_vllm_tree_series_and_drift(tmp_path: Path) -> None:
    """The benchmark's 20 patches on real vLLM: all apply to 0.30.0 (same bytes as a GNU
    patch loop); on 0.31.0 the series fails and the tree is untouched, with the failing
    hunk's nearest region reported."""
    import importlib.util

    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    spec = importlib.util.spec_from_file_location("bench_apply", HERE.parent / "bench" / "apply.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src = bench.vllm_tree("0.30.0")
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    patches = bench.write_series(src, series_dir)
    items = [SeriesItem(p.stem, p.read_bytes()) for p in patches]
    rels = sorted({r for p in patches for r in bench.files_touched(p.read_bytes())})
    ours, gnu = tmp_path / "ours", tmp_path / "gnu"
    bench.fresh_copy(src, rels, ours)
    bench.fresh_copy(src, rels, gnu)
    res = apply_series(ours, items)
    assert res.ok and all(p.status == "applied" for p in res.patches)
    for p in patches:
        subprocess.run(
            ["patch", "-p1", "-F0", "--forward", "-s", "-i", str(p)], cwd=gnu, check=True, stdin=subprocess.DEVNULL
        )
    assert snapshot(ours) == snapshot(gnu)
    assert res.files == {r: sha256((ours / r).read_bytes()) for r in rels}
    assert detect_state(ours, items).all_applied

    newer = bench.vllm_tree("0.31.0")
    drifted = tmp_path / "drifted"
    bench.fresh_copy(newer, [r for r in rels if (newer / r).exists()], drifted)
    before = snapshot(drifted)
    res = apply_series(drifted, items)
    assert not res.ok and snapshot(drifted) == before
    bad = next(p for p in res.patches if p.status == "failed")
    failed = [h for f in bad.files for h in f.hunks if h.status == "failed"]
    assert failed and all(h.nearest is None or 0 < h.nearest.similarity < 1 for h in failed)
    state = detect_state(drifted, items)
    assert not any(p.state == "applied" for p in state.patches)
