"""Reliability findings of issue #16, one test per finding: each failed before its fix.

Real trees, real processes (``multiprocessing`` / ``subprocess``) and real GNU patch where a
behaviour is copied from it. The heavy tiers (hundreds of kill points, many concurrent runs)
are in ``tests/test_reliability_stress.py`` behind the ``stress`` marker.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from patchset import locking
from patchset.commands import inspection
from patchset.engine import txn
from patchset.engine.hunks import apply_file
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.errors import EnvironmentFailure, PatchFormatError, UnsafePathError
from patchset.journal.commit import Change
from patchset.journal.txndir import JOURNAL
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.upstream.archives import unpack
from tests.support import smallfs
from tests.support.child import cli_argv, run_cli
from tests.support.diffgen import unified_diff
from tests.support.rebase_state import seal_committing, seal_stopped
from tests.support.repo import git_bytes
from tests.support.trees import snapshot

NUMS = b"".join(b"%d\n" % i for i in range(1, 21))

MISORDERED = b"""--- a/f
+++ b/f
@@ -9,3 +9,3 @@
 9
-10
+TEN
 11
@@ -1,3 +1,3 @@
 1
-2
+TWO
 3
"""


def _gnu(old: bytes, patch: bytes, tmp: Path) -> subprocess.CompletedProcess:
    (tmp / "f").write_bytes(old)
    return subprocess.run(
        ["patch", "-p1", "-F0", "--dry-run", "-s"], input=patch, cwd=tmp, capture_output=True, timeout=30
    )


# --------------------------------------------------------------------------- 4: misordered hunks


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_misordered_hunks_are_refused_like_gnu_patch(tmp_path: Path) -> None:
    gnu = _gnu(NUMS, MISORDERED, tmp_path)
    assert gnu.returncode == 1 and b"misordered hunks" in gnu.stdout + gnu.stderr
    out = apply_file(NUMS, parse_patch(MISORDERED)[0])
    assert not out.ok
    assert [h.status for h in out.hunks] == ["clean", "failed"]
    assert "misordered" in out.hunks[1].describe()


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_overlapping_hunks_are_refused_like_gnu_patch(tmp_path: Path) -> None:
    # both hunks change line 5: GNU patch refuses the second one
    patch = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+FIVE\n 6\n@@ -4,3 +4,3 @@\n 4\n-5\n+V\n 6\n"
    gnu = _gnu(NUMS, patch, tmp_path)
    assert gnu.returncode == 1 and b"misordered hunks" in gnu.stdout + gnu.stderr
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert not out.ok and out.hunks[1].status == "failed" and out.hunks[1].misordered


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_hunks_sharing_only_context_still_apply_like_gnu_patch(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+FIVE\n 6\n@@ -5,3 +5,3 @@\n 5\n-6\n+SIX\n 7\n"
    assert _gnu(NUMS, patch, tmp_path).returncode == 0
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert out.ok and out.new == NUMS.replace(b"5\n6\n", b"FIVE\nSIX\n", 1)


# --------------------------------------------------------------------------- 5: hunk numbers


@pytest.mark.parametrize("start", ["10000000", "1000000000000"])
def test_far_hunk_numbers_fail_fast(start: str) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -%s,3 +%s,3 @@\n 9\n-10\n+TEN\n 11\n" % (start.encode(), start.encode())
    t0 = time.perf_counter()
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert time.perf_counter() - t0 < 1.0
    # GNU patch finds the hunk anywhere in the file whatever its number: so does the engine
    assert out.ok and out.new == NUMS.replace(b"10\n", b"TEN\n")


def test_absurd_hunk_numbers_are_a_located_error() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -99999999999999999999,3 +99999999999999999999,3 @@\n 9\n-10\n+TEN\n 11\n"
    t0 = time.perf_counter()
    with pytest.raises(PatchFormatError) as exc:
        parse_patch(patch, source="p.patch")
    assert time.perf_counter() - t0 < 1.0
    assert "p.patch:3" in exc.value.render() and "too large" in exc.value.render()


# --------------------------------------------------------------------------- ledgers and trees

LEDGER_HEAD = """\
schema = 1
[targets.t]
upstream = "https://example.invalid/t.git"
github = "example/t"
"""

FILE_F = b"".join(b"line %d\n" % i for i in range(1, 41))


def edit_line(data: bytes, n: int, new: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    lines[n - 1] = new
    return b"".join(lines)


def make_ledger(where: Path, patches: dict[str, bytes]) -> Path:
    """A ledger directory with one target ``t`` and ``patches`` (id -> body) imported in order."""
    where.mkdir(parents=True)
    (where / "patches.toml").write_text(LEDGER_HEAD)
    src = where / "incoming"
    src.mkdir()
    paths = []
    for pid, body in patches.items():
        (src / f"{pid}.patch").write_bytes(body)
        paths.append(src / f"{pid}.patch")
    if paths:
        r = subprocess.run(cli_argv("-C", where, "import", *paths), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    return where


def make_tree(where: Path, files: dict[str, bytes] | None = None) -> Path:
    files = files or {"f.txt": FILE_F}
    for rel, data in files.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_bytes(data)
    return where


# --------------------------------------------------------------------------- 1: the tree lock


def test_apply_waits_for_the_tree_lock_and_reads_after_it(tmp_path: Path) -> None:
    """Another patchset holds the tree: apply waits, then patches the tree as it is *then*."""
    led = make_ledger(tmp_path / "led", {"a": unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")})
    tree = make_tree(tmp_path / "tree")
    with locking.tree_lock(tree):
        proc = subprocess.Popen(
            cli_argv("-C", led, "apply", "--tree", tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        line = proc.stderr.readline().decode()  # type: ignore[union-attr]
        assert "another patchset is working on the tree" in line and "waiting" in line
        # meanwhile the other process changes the same file (another patch, far from line 3)
        (tree / "f.txt").write_bytes(edit_line(FILE_F, 35, b"B\n"))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert (tree / "f.txt").read_bytes() == edit_line(edit_line(FILE_F, 35, b"B\n"), 3, b"A\n")


def test_apply_gives_up_after_the_lock_timeout_with_exit_2(tmp_path: Path) -> None:
    led = make_ledger(tmp_path / "led", {"a": unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")})
    tree = make_tree(tmp_path / "tree")
    env = dict(os.environ, PATCHSET_LOCK_TIMEOUT="0.5")
    with locking.tree_lock(tree):
        r = subprocess.run(cli_argv("-C", led, "apply", "--tree", tree), capture_output=True, text=True, env=env)
    assert r.returncode == 2
    assert "still working on the tree" in r.stderr and "nothing was changed" in r.stderr
    assert (tree / "f.txt").read_bytes() == FILE_F


# --------------------------------------------------------------------------- 2: the ledger lock


def test_concurrent_imports_lose_nothing(tmp_path: Path) -> None:
    led = make_ledger(tmp_path / "led", {})
    n = 10
    procs = []
    for i in range(n):
        body = unified_diff(FILE_F, edit_line(FILE_F, i + 1, b"P%d\n" % i), "f.txt")
        p = tmp_path / f"p{i:02d}.patch"
        p.write_bytes(body)
        procs.append(subprocess.Popen(cli_argv("-C", led, "import", p), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    codes = [pr.wait(timeout=120) for pr in procs]
    assert codes == [0] * n
    ledger = load_ledger(led / "patches.toml")
    assert sorted(p.id for p in ledger.patches) == [f"p{i:02d}" for i in range(n)]
    assert sorted(ledger.lock.bodies) == [f"p{i:02d}" for i in range(n)]
    assert [w for w in inspection.validate(ledger).warnings if "no test declared" not in w] == []  # no "extra body"


def test_ledger_edit_waits_for_the_ledger_lock(tmp_path: Path) -> None:
    led = make_ledger(tmp_path / "led", {})
    p = tmp_path / "x.patch"
    p.write_bytes(unified_diff(FILE_F, edit_line(FILE_F, 1, b"X\n"), "f.txt"))
    env = dict(os.environ, PATCHSET_LOCK_TIMEOUT="0.5")
    with locking.ledger_lock(led / "patches.toml"):
        r = subprocess.run(cli_argv("-C", led, "import", p), capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "another patchset is working on the ledger" in r.stderr
    assert load_ledger(led / "patches.toml").patches == []


# --------------------------------------------------------------------------- 8: files the lock does not list


def test_a_patched_file_the_lock_does_not_list_is_a_finding(tmp_path: Path) -> None:
    g = b"g1\ng2\ng3\n"
    led = make_ledger(tmp_path / "led", {"a": unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")})
    first = make_tree(tmp_path / "t1", {"f.txt": FILE_F, "g.txt": g})
    r = subprocess.run(cli_argv("-C", led, "apply", "--tree", first, "--update-lock"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # a second patch writes g.txt; the lock (recorded above) does not list it
    (led / "incoming" / "b.patch").write_bytes(unified_diff(g, b"g1\nG\ng3\n", "g.txt"))
    r = subprocess.run(cli_argv("-C", led, "import", led / "incoming" / "b.patch"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tree = make_tree(tmp_path / "t2", {"f.txt": FILE_F, "g.txt": g})
    r = subprocess.run(cli_argv("-C", led, "apply", "--tree", tree, "--json"), capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "mismatch" and rep["mismatched"] == ["g.txt"]
    assert "not in the lock" in rep["message"] and "every patched file matches" not in rep["message"]
    assert (tree / "g.txt").read_bytes() == g and (tree / "f.txt").read_bytes() == FILE_F


# --------------------------------------------------------------------------- 11: --update-lock on a full disk


@pytest.mark.parametrize("trouble", ["full", "read-only"])
def test_update_lock_on_a_full_or_read_only_ledger_dir_leaves_the_tree_alone(tmp_path: Path, trouble: str) -> None:
    body = unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")
    with smallfs.tmpfs(tmp_path / "fs", size="2m") as fs:
        led = make_ledger(fs / "led", {"a": body})
        tree = make_tree(tmp_path / "tree")
        lock_before = (led / "patches.lock").read_bytes()
        if trouble == "full":
            smallfs.fill(fs)
        else:
            smallfs.remount_readonly(fs)
        r = subprocess.run(
            cli_argv("-C", led, "apply", "--tree", tree, "--update-lock"), capture_output=True, text=True
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        assert (tree / "f.txt").read_bytes() == FILE_F, "the tree was patched but the lock was not written"
        assert not (tree / ".patchset-txn").exists()
        assert (led / "patches.lock").read_bytes() == lock_before
        assert sorted(p.name for p in led.iterdir() if p.name.startswith(".")) == []


# --------------------------------------------------------------------------- 3: files becoming directories


def _series(*bodies: bytes) -> list[SeriesItem]:
    return [SeriesItem(f"p{i}", b) for i, b in enumerate(bodies, 1)]


def _create(rel: str, data: bytes) -> bytes:
    return unified_diff(None, data, rel)


def _delete(rel: str, data: bytes) -> bytes:
    return unified_diff(data, None, rel)


def test_a_file_and_a_directory_of_the_same_name_fail_in_the_dry_run_too(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", {"src/x.txt": b"x\n"})
    items = _series(
        unified_diff(b"x\n", b"x2\n", "src/x.txt") + _create("d", b"a file named d\n"), _create("d/x", b"inside d\n")
    )
    before = snapshot(tree)
    dry = apply_series(tree, items, dry_run=True)
    real = apply_series(tree, items)
    assert (dry.ok, dry.failed_patch) == (real.ok, real.failed_patch) == (False, "p2")
    assert "d is a file" in real.patches[1].describe()
    assert snapshot(tree) == before


def test_a_deleted_file_becomes_a_directory(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", {"d": b"old file d\n"})
    items = _series(_delete("d", b"old file d\n"), _create("d/x", b"inside d\n"))
    assert apply_series(tree, items, dry_run=True).ok
    res = apply_series(tree, items)
    assert res.ok and res.committed
    assert snapshot(tree) == {"d": ("dir", b"", 0o755), "d/x": ("file", b"inside d\n", 0o644)}


def test_an_emptied_directory_becomes_a_file(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", {"d/x": b"inside d\n", "d/sub/y": b"y\n"})
    items = _series(_delete("d/x", b"inside d\n") + _delete("d/sub/y", b"y\n"), _create("d", b"now a file\n"))
    assert apply_series(tree, items, dry_run=True).ok
    assert apply_series(tree, items).ok
    assert snapshot(tree) == {"d": ("file", b"now a file\n", 0o644)}


def test_a_directory_with_other_files_does_not_become_a_file(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", {"d/x": b"inside d\n", "d/keep": b"k\n"})
    items = _series(_delete("d/x", b"inside d\n"), _create("d", b"now a file\n"))
    before = snapshot(tree)
    dry, real = apply_series(tree, items, dry_run=True), apply_series(tree, items)
    assert (dry.ok, real.ok) == (False, False) and "d is a directory" in real.patches[1].describe()
    assert snapshot(tree) == before


def test_file_to_directory_commit_failing_late_is_rolled_back(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", {"d": b"old file d\n", "blocker": b"a file\n", "a.txt": b"a\n"})
    before = snapshot(tree)
    changes = [
        Change("a.txt", b"new a\n"),
        Change("d", None),
        Change("d/x", b"inside d\n"),
        Change("blocker/y", b"cannot be written: blocker is a file\n"),
    ]
    with pytest.raises(EnvironmentFailure) as exc:
        txn.commit(tree, changes)
    assert "rolled back" in exc.value.render()
    assert snapshot(tree) == before and not (tree / txn.TXN_DIR).exists()


# --------------------------------------------------------------------------- 12: hostile or odd ledgers

ONE_PATCH = LEDGER_HEAD + '\n[[patch]]\nid = "a"\ntarget = "t"\ntitle = "a"\norigin = "ours"\n'


def _cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(cli_argv(*args), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("ledger", "lock", "needle"),
    [
        (ONE_PATCH, "schema = 1\nbodies = 5\n", "patches.lock:2"),
        (ONE_PATCH, "schema = 1\n[targets.t]\nfiles = 3\n", "patches.lock:3"),
        (ONE_PATCH.replace('id = "a"', 'id = ""'), None, "patches.toml:7"),
        (LEDGER_HEAD + "strip = -3\n", None, "patches.toml:5"),
        (ONE_PATCH + "[patch.source]\nstrip = -1\n", None, "patches.toml:12"),
        ("\ufeff" + ONE_PATCH, None, "byte-order mark"),
        (ONE_PATCH + "x = " + "[" * 2000 + "]" * 2000 + "\n", None, "patches.toml:11"),
    ],
    ids=["bodies-int", "files-int", "empty-id", "negative-strip", "negative-source-strip", "bom", "deep"],
)
def test_bad_ledgers_are_located_errors(tmp_path: Path, ledger: str, lock: str | None, needle: str) -> None:
    (tmp_path / "patches.toml").write_text(ledger, encoding="utf-8")
    if lock is not None:
        (tmp_path / "patches.lock").write_text(lock)
    for cmd in (["validate"], ["list"], ["apply", "--dry-run", "--tree", tmp_path]):
        r = _cli("-C", tmp_path, *cmd)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert needle in r.stderr, (cmd, r.stderr)


@pytest.mark.parametrize("bad", [".GIT/config", "sub/.Git/hooks/pre-commit", ".PATCHSET-TXN/journal.json"])
def test_git_metadata_is_refused_whatever_its_case(tmp_path: Path, bad: str) -> None:
    tree = make_tree(tmp_path / "t")
    with pytest.raises(UnsafePathError):
        apply_series(tree, [SeriesItem("p", _create(bad, b"x\n"))])


def test_deleting_a_missing_file_is_not_already_applied(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t")
    res = apply_series(tree, [SeriesItem("p", _delete("gone.txt", b"was here\n"))])
    assert res.patches[0].status == "failed"
    assert "does not exist" in res.patches[0].files[0].message


def test_validate_and_apply_mention_an_interrupted_rebase(tmp_path: Path) -> None:
    led = make_ledger(tmp_path / "led", {"a": unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")})
    tree = make_tree(tmp_path / "tree")
    state = led / ".patchset" / "rebase"
    seal_committing(led)  # this installation's own state (a cloned one is reported as foreign)
    r = _cli("-C", led, "validate", "--json")
    assert r.returncode == 1 and "rebase was interrupted" in json.loads(r.stdout)["problems"][0]
    r = _cli("-C", led, "apply", "--tree", tree)
    assert r.returncode == 2 and "rebase was interrupted" in r.stderr
    assert (tree / "f.txt").read_bytes() == FILE_F
    (state / "commit.json").unlink()
    seal_stopped(led, onto="v2", stopped_at="a")
    r = _cli("-C", led, "validate", "--json")
    assert "rebase onto v2 is in progress" in json.loads(r.stdout)["warnings"][0]
    r = _cli("-C", led, "apply", "--dry-run", "--tree", tree)
    assert r.returncode == 0 and "rebase onto v2 is in progress" in r.stdout + r.stderr


# --------------------------------------------------------------------------- 6: interrupted applies are visible


def _many_files_ledger(tmp_path: Path, n: int) -> tuple[Path, Path, dict[str, bytes]]:
    files = {f"pkg/m{i:03d}.py": b"".join(b"v%d = %d\n" % (k, k) for k in range(8)) for i in range(n)}
    body = b"".join(unified_diff(d, d.replace(b"v3 = 3", b"v3 = 33"), rel) for rel, d in files.items())
    led = make_ledger(tmp_path / "led", {"many": body})
    tree = make_tree(tmp_path / "tree", files)
    return led, tree, files


def test_a_killed_apply_is_reported_by_validate_and_dry_run_then_recovered(tmp_path: Path) -> None:
    led, tree, files = _many_files_ledger(tmp_path, 6)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="9")  # 6 staged files, the journal, 2 renames
    r = subprocess.run(cli_argv("-C", led, "apply", "--tree", tree), capture_output=True, text=True, env=env)
    assert r.returncode == -signal.SIGKILL
    mixed = snapshot(tree)
    assert (tree / txn.TXN_DIR / JOURNAL).exists()
    r = _cli("-C", led, "validate", "--json")
    problems = json.loads(r.stdout)["problems"]
    assert r.returncode == 1 and len(problems) == 1
    assert "was interrupted" in problems[0] and f"patchset recover --tree {tree}" in problems[0]
    r = _cli("-C", led, "apply", "--dry-run", "--tree", tree)
    assert r.returncode == 2 and "interrupted" in r.stderr and "patchset recover --tree" in r.stderr
    assert snapshot(tree) == mixed, "a dry run wrote to the tree"
    r = _cli("-C", led, "recover")
    assert r.returncode == 0 and f"{tree}: rolled forward" in r.stdout
    assert not (tree / txn.TXN_DIR).exists()
    assert all(b"v3 = 33" in (tree / rel).read_bytes() for rel in files)
    assert _cli("-C", led, "validate").returncode == 0
    assert "nothing to recover" in _cli("-C", led, "recover", "--tree", tree).stdout


def test_recover_back_restores_the_old_tree(tmp_path: Path) -> None:
    led, tree, _files = _many_files_ledger(tmp_path, 4)
    before = snapshot(tree)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="6")
    r = subprocess.run(cli_argv("-C", led, "apply", "--tree", tree), capture_output=True, text=True, env=env)
    assert r.returncode == -signal.SIGKILL
    r = _cli("-C", led, "recover", "--tree", tree, "--back", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"tree": str(tree), "done": "rolled back"}]
    assert snapshot(tree) == before


@pytest.mark.parametrize("step", [5, 9, 14])  # while staging, right after the journal, mid-renames
def test_ctrl_c_never_leaves_a_mixed_tree(tmp_path: Path, step: int) -> None:
    led, tree, files = _many_files_ledger(tmp_path, 8)
    before = snapshot(tree)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER=str(step), PATCHSET_TEST_CRASH_SIGNAL="INT")
    r = run_cli("-C", led, "apply", "--tree", tree, env=env)  # SIGINT at its default even in a background job
    assert r.returncode == 130 and "interrupted" in r.stderr
    now = snapshot(tree)
    changed = sum(b"v3 = 33" in (tree / rel).read_bytes() for rel in files)
    assert changed in (0, len(files)), f"Ctrl-C at step {step} left {changed}/{len(files)} files new"
    assert not (tree / txn.TXN_DIR).exists()
    if step < 9:
        assert now == before


# --------------------------------------------------------------------------- 7: hostile archives


def _tar(path: Path, members: list[tuple[str, str, str]]) -> Path:
    """A real .tar.gz written by ``tarfile``: (name, kind, link-or-data) in the given order."""
    with tarfile.open(path, "w:gz") as tf:
        for name, kind, extra in members:
            ti = tarfile.TarInfo(name)
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, extra
                tf.addfile(ti)
            else:
                ti.size = len(extra)
                tf.addfile(ti, io.BytesIO(extra.encode()))
    return path


CHAIN = [
    ("pkg-1.0", "dir", ""),
    ("pkg-1.0/sub", "dir", ""),
    ("pkg-1.0/a.txt", "file", "a\n"),
    ("pkg-1.0/evil", "sym", "sub/l2/.."),
    ("pkg-1.0/sub/l2", "sym", ".."),
]


@pytest.mark.parametrize(
    "members",
    [
        CHAIN,
        [CHAIN[0], CHAIN[1], CHAIN[2], CHAIN[4], CHAIN[3]],  # the other order
        [*CHAIN[:3], ("pkg-1.0/sub/l3", "sym", "../../x")],
        [*CHAIN[:3], ("pkg-1.0/l", "sym", "sub"), ("pkg-1.0/sub/up", "sym", ".."), ("pkg-1.0/m", "sym", "l/up/..")],
    ],
    ids=["chain", "chain-reversed", "plain-escape", "three-links"],
)
def test_symlink_chains_cannot_leave_the_unpacked_tree(tmp_path: Path, members: list) -> None:
    archive = _tar(tmp_path / "evil.tar.gz", members)
    dest = tmp_path / "out" / "tree"
    with pytest.raises(UnsafePathError):
        unpack(archive, dest)
    assert not dest.exists() and list((tmp_path / "out").iterdir()) == []


# --------------------------------------------------------------------------- 9: bodies never written through a link


def test_import_refuses_a_symlinked_series_directory(tmp_path: Path) -> None:
    led = make_ledger(tmp_path / "led", {})
    outside = tmp_path / "outside"
    outside.mkdir()
    (led / "patchset" / "series").mkdir(parents=True)
    (led / "patchset" / "series" / "t").symlink_to(outside)
    p = tmp_path / "x.patch"
    p.write_bytes(unified_diff(FILE_F, edit_line(FILE_F, 1, b"X\n"), "f.txt"))
    before = (led / "patches.toml").read_bytes()
    r = _cli("-C", led, "import", p)
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert list(outside.iterdir()) == [] and (led / "patches.toml").read_bytes() == before


# --------------------------------------------------------------------------- 10: git symlinks and submodules


def _git_diff(tmp: Path, build) -> bytes:
    """``git diff --cached`` of what ``build(repo)`` stages on top of one commit holding a.txt."""
    repo = tmp / f"g{len(list(tmp.glob('g*')))}"
    repo.mkdir()
    git_bytes(repo, "init", "-q")
    (repo / "a.txt").write_bytes(b"a\n")
    (repo / "b.txt").write_bytes(b"b\n")
    git_bytes(repo, "add", "-A")
    git_bytes(repo, "commit", "-qm", "base")
    build(repo)
    return git_bytes(repo, "diff", "--cached", "HEAD")


def test_git_symlinks_are_written_as_symlinks(tmp_path: Path) -> None:
    def add_link(repo: Path) -> None:
        (repo / "link").symlink_to("a.txt")
        git_bytes(repo, "add", "-A")

    def retarget(repo: Path) -> None:
        add_link(repo)
        git_bytes(repo, "commit", "-qm", "link")
        (repo / "link").unlink()
        (repo / "link").symlink_to("b.txt")
        git_bytes(repo, "add", "-A")

    create = _git_diff(tmp_path, add_link)
    assert b"new file mode 120000" in create
    retargeted = _git_diff(tmp_path, retarget)
    tree = make_tree(tmp_path / "t", {"a.txt": b"a\n", "b.txt": b"b\n"})
    res = apply_series(tree, [SeriesItem("link", create)])
    assert res.ok, res.patches[0].describe()
    assert (tree / "link").is_symlink() and os.readlink(tree / "link") == "a.txt"
    # a later patch retargets the link (git writes the change as a one-line hunk)
    tree2 = make_tree(tmp_path / "t2", {"a.txt": b"a\n", "b.txt": b"b\n"})
    (tree2 / "link").symlink_to("a.txt")
    res = apply_series(tree2, [SeriesItem("retarget", retargeted)])
    assert res.ok, res.patches[0].describe()
    assert os.readlink(tree2 / "link") == "b.txt" and (tree2 / "a.txt").read_bytes() == b"a\n"


def test_a_symlink_leaving_the_tree_is_refused(tmp_path: Path) -> None:
    def add_link(repo: Path) -> None:
        (repo / "link").symlink_to("../../etc/passwd")
        git_bytes(repo, "add", "-A")

    tree = make_tree(tmp_path / "t", {"a.txt": b"a\n"})
    with pytest.raises(UnsafePathError, match="outside the tree") as exc:  # hostile data: exit 2
        apply_series(tree, [SeriesItem("link", _git_diff(tmp_path, add_link))])
    assert exc.value.exit_code == 2
    assert not (tree / "link").is_symlink()


def test_submodules_are_refused(tmp_path: Path) -> None:
    def add_gitlink(repo: Path) -> None:
        git_bytes(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/sub")

    body = _git_diff(tmp_path, add_gitlink)
    assert b"new file mode 160000" in body and b"Subproject commit" in body
    tree = make_tree(tmp_path / "t", {"a.txt": b"a\n"})
    res = apply_series(tree, [SeriesItem("sub", body)])
    assert not res.ok and "submodule" in res.patches[0].describe()
    assert not (tree / "vendor").exists()


# --------------------------------------------------------------------------- status names what was interrupted


def _status(led: Path) -> subprocess.CompletedProcess:
    return _cli("-C", led, "status", "--offline", "--json")


def test_status_reports_an_interrupted_apply_and_rebase_like_validate_without_writing(tmp_path: Path) -> None:
    led, tree, _files = _many_files_ledger(tmp_path, 6)
    r = _status(led)
    assert r.returncode == 0 and json.loads(r.stdout)["interrupted"] == []
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="9")  # 6 staged files, the journal, 2 renames
    r = subprocess.run(cli_argv("-C", led, "apply", "--tree", tree), capture_output=True, text=True, env=env)
    assert r.returncode == -signal.SIGKILL
    mixed, ledger_dir = snapshot(tree), snapshot(led)
    r = _status(led)
    got = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr
    assert [(i["kind"], i["where"], i["problem"]) for i in got["interrupted"]] == [("apply", str(tree), True)]
    # the same finding, word for word, as validate's (one function finds both)
    assert [i["message"] for i in got["interrupted"]] == json.loads(_cli("-C", led, "validate", "--json").stdout)[
        "problems"
    ]
    text = _cli("-C", led, "status", "--offline")
    assert text.returncode == 1 and "interrupted:" in text.stdout and f"patchset recover --tree {tree}" in text.stdout
    md = _cli("-C", led, "status", "--offline", "--markdown")
    assert "**interrupted:**" in md.stdout
    assert snapshot(tree) == mixed and snapshot(led) == ledger_dir, "status wrote something"
    assert _cli("-C", led, "recover").returncode == 0
    # a rebase killed while writing the new series: a problem; stopped at a conflict: a note, exit 0
    state = led / ".patchset" / "rebase"
    seal_committing(led)
    r = _status(led)
    assert r.returncode == 1
    assert [(i["kind"], i["problem"]) for i in json.loads(r.stdout)["interrupted"]] == [("rebase", True)]
    assert "rebase --continue" in json.loads(r.stdout)["interrupted"][0]["message"]
    (state / "commit.json").unlink()
    seal_stopped(led, onto="v2", stopped_at="a")
    r = _status(led)
    found = json.loads(r.stdout)["interrupted"]
    assert r.returncode == 0 and [(i["kind"], i["problem"]) for i in found] == [("rebase", False)]
    assert "rebase onto v2 is in progress" in found[0]["message"]
    assert "note:" in _cli("-C", led, "status", "--offline").stdout


# --------------------------------------------------------------------------- ledger edits are journaled


def _import_two(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A ledger with one patch, and two more patch files to import (2 bodies + ledger + lock: 4 files,
    so the journaled write has steps 1-4 staging, 5 the journal, 6-9 the renames, 10 the clean-up)."""
    led = make_ledger(tmp_path / "led", {"a": unified_diff(FILE_F, edit_line(FILE_F, 3, b"A\n"), "f.txt")})
    new = []
    for i, line in ((2, 10), (3, 20)):
        p = tmp_path / f"p{i}.patch"
        p.write_bytes(unified_diff(FILE_F, edit_line(FILE_F, line, b"P%d\n" % i), "f.txt"))
        new.append(p)
    return led, new


def _ledger_files(led: Path) -> dict[str, tuple[str, bytes | str, int]]:
    return {k: v for k, v in snapshot(led).items() if not k.startswith((".patchset", "incoming"))}


def _reference(tmp_path: Path, led: Path, args: list[Path]) -> dict:
    """The ledger after the same import without a kill."""
    ref = tmp_path / "reference"
    shutil.copytree(led, ref, symlinks=True)
    assert _cli("-C", ref, "import", *args).returncode == 0
    return _ledger_files(ref)


def test_a_ledger_edit_killed_between_its_renames_is_reported_then_recovered(tmp_path: Path) -> None:
    led, new = _import_two(tmp_path)
    old = _ledger_files(led)
    want = _reference(tmp_path, led, new)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="7")  # two bodies renamed, ledger and lock not yet
    r = subprocess.run(cli_argv("-C", led, "import", *new), capture_output=True, text=True, env=env)
    assert r.returncode == -signal.SIGKILL
    mixed = snapshot(led)
    assert _ledger_files(led) not in (old, want)
    assert (led / ".patchset" / "ledger-txn" / "journal.json").exists()
    v = _cli("-C", led, "validate", "--json")
    assert v.returncode == 1 and "ledger edit was interrupted" in json.loads(v.stdout)["problems"][0]
    s = _status(led)
    assert s.returncode == 1
    assert [(i["kind"], i["problem"]) for i in json.loads(s.stdout)["interrupted"]] == [("ledger-edit", True)]
    tree = make_tree(tmp_path / "tree")
    a = _cli("-C", led, "apply", "--dry-run", "--tree", tree)
    assert a.returncode == 2 and "ledger edit was interrupted" in a.stderr and "patchset recover" in a.stderr
    assert snapshot(led) == mixed, "a read-only command wrote"
    back = tmp_path / "back"
    shutil.copytree(led, back, symlinks=True)
    r = _cli("-C", back, "recover", "--back", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"ledger": str(back / "patches.toml"), "done": "rolled back"}]
    assert _ledger_files(back) == old and not (back / ".patchset").exists()
    r = _cli("-C", led, "recover")
    assert r.returncode == 0 and "rolled forward" in r.stdout
    assert _ledger_files(led) == want and not (led / ".patchset").exists()
    assert _cli("-C", led, "validate").returncode == 0


def test_the_next_ledger_edit_finishes_an_interrupted_one(tmp_path: Path) -> None:
    led, new = _import_two(tmp_path)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="8")  # ledger renamed, lock not yet
    r = subprocess.run(cli_argv("-C", led, "import", *new), capture_output=True, text=True, env=env)
    assert r.returncode == -signal.SIGKILL
    third = tmp_path / "p4.patch"
    third.write_bytes(unified_diff(FILE_F, edit_line(FILE_F, 30, b"P4\n"), "f.txt"))
    assert _cli("-C", led, "import", third).returncode == 0
    ledger = load_ledger(led / "patches.toml")
    assert [p.id for p in ledger.patches] == ["a", "p2", "p3", "p4"]
    assert sorted(ledger.lock.bodies) == ["a", "p2", "p3", "p4"]
    assert _cli("-C", led, "validate").returncode == 0 and not (led / ".patchset").exists()


@pytest.mark.parametrize("step", [3, 5, 7, 9])  # staging, the journal, mid-renames, last rename
def test_ctrl_c_during_a_ledger_edit_leaves_old_or_new(tmp_path: Path, step: int) -> None:
    led, new = _import_two(tmp_path)
    old = _ledger_files(led)
    want = _reference(tmp_path, led, new)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER=str(step), PATCHSET_TEST_CRASH_SIGNAL="INT")
    r = run_cli("-C", led, "import", *new, env=env)
    assert r.returncode == 130, r.stderr
    now = _ledger_files(led)
    assert now == (old if step < 5 else want), f"Ctrl-C at step {step}"
    assert not (led / ".patchset").exists()
