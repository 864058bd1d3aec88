"""Durability of a tree commit (``engine.txn``) and the one-pass apply (issue 13, item 5).

A kill or Ctrl-C needs no fsync; a power cut does. By default a commit does not fsync (as
``git checkout`` and GNU ``patch``), so recovery must never install a staged file that did not
reach the disk: the journal records each staged file's sha256 and recovery rolls back when one
is damaged. ``--durable`` / ``PATCHSET_FSYNC=1`` fsyncs every step.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchset import locking
from patchset.commands import apply as apply_mod
from patchset.commands.apply.target import ApplyRun, TreeArg
from patchset.engine import tree as tree_mod
from patchset.engine import txn
from patchset.journal.commit import Change
from patchset.journal.txndir import JOURNAL
from patchset.ledger.store import load_ledger
from tests.support.diffgen import unified_diff
from tests.support.trees import snapshot

FILES = {f"pkg/m{i}.py": b"".join(b"v%d = %d\n" % (k, k) for k in range(12)) for i in range(4)}


def _tree_and_series(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    for rel, data in FILES.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    series = tmp_path / "series"
    series.mkdir()
    body = b"".join(unified_diff(d, d.replace(b"v2 = 2", b"v2 = 22"), rel) for rel, d in FILES.items())
    (series / "01-change.patch").write_bytes(body)
    return tree, series


def _killed_after_the_journal(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A real apply SIGKILLed right after its journal landed (4 staged files, then the journal)."""
    tree, series = _tree_and_series(tmp_path)
    before = snapshot(tree)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER=str(len(FILES) + 1))
    r = subprocess.run([sys.executable, "-m", "tests.support.helpers_crash", str(tree), str(series)], env=env)
    assert r.returncode == -signal.SIGKILL
    assert (tree / txn.TXN_DIR / JOURNAL).exists()
    return tree, before


def test_a_staged_file_damaged_by_a_power_cut_is_rolled_back_not_installed(tmp_path: Path) -> None:
    tree, before = _killed_after_the_journal(tmp_path)
    staged = sorted((tree / txn.TXN_DIR / "new").iterdir())
    staged[1].write_bytes(b"")  # what a power cut leaves of a write that never reached the disk
    done = txn.recover(tree)
    assert done is not None and done.startswith("rolled back") and "damaged" in done
    assert snapshot(tree) == before
    assert not (tree / txn.TXN_DIR).exists()


def test_an_intact_journal_still_rolls_forward(tmp_path: Path) -> None:
    tree, _before = _killed_after_the_journal(tmp_path)
    assert txn.recover(tree) == "rolled forward"
    assert all(b"v2 = 22" in (tree / rel).read_bytes() for rel in FILES)


def test_forward_recovery_refuses_damaged_staged_files(tmp_path: Path) -> None:
    from patchset.errors import EnvironmentFailure

    tree, before = _killed_after_the_journal(tmp_path)
    next(iter(sorted((tree / txn.TXN_DIR / "new").iterdir()))).write_bytes(b"torn")
    with pytest.raises(EnvironmentFailure, match="damaged"):
        txn.recover(tree, "forward")
    assert txn.recover(tree, "back") == "rolled back"
    assert snapshot(tree) == before


@pytest.mark.parametrize(("durable", "env", "fsyncs"), [(None, "", False), (True, "", True), (None, "1", True)])
def test_fsync_only_when_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable, env, fsyncs) -> None:
    tree, _series = _tree_and_series(tmp_path)
    monkeypatch.setenv(txn.FSYNC_ENV, env)
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    txn.commit(tree, [Change(rel, b"new\n") for rel in FILES], durable=durable)
    assert all((tree / rel).read_bytes() == b"new\n" for rel in FILES)
    assert bool(calls) is fsyncs
    if fsyncs:  # every staged file, the journal and the touched directories
        assert len(calls) >= len(FILES) + 2


def test_apply_reads_and_applies_the_series_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run) -> None:
    """One engine pass: applied in memory, checked against the lock, committed (no trial run)."""
    tree, series = _tree_and_series(tmp_path)
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\n')
    assert run("import", series / "01-change.patch", cwd=led).code == 0
    locked = tmp_path / "locked"
    import shutil

    shutil.copytree(tree, locked)
    assert run("apply", "--tree", locked, "--update-lock", cwd=led).code == 0
    ledger = load_ledger(led / "patches.toml")
    calls: list[bool] = []
    real = tree_mod.TreePass.apply

    def counting(self, *a, **kw):
        calls.append(self.dry_run)
        return real(self, *a, **kw)

    monkeypatch.setattr(tree_mod.TreePass, "apply", counting)
    reports = apply_mod.run(ApplyRun(ledger), {"t": TreeArg("tree", tree)})
    assert [r.outcome for r in reports] == ["applied"] and calls == [False]
    assert all(b"v2 = 22" in (tree / rel).read_bytes() for rel in FILES)
    # a result that does not match the lock is refused in that same pass, before any write
    (tree / "pkg/m0.py").write_bytes(FILES["pkg/m0.py"].replace(b"v10 = 10", b"v10 = 1010"))
    for rel in list(FILES)[1:]:
        (tree / rel).write_bytes(FILES[rel])
    before = snapshot(tree)
    calls.clear()
    reports = apply_mod.run(ApplyRun(ledger), {"t": TreeArg("tree", tree)})
    assert [r.outcome for r in reports] == ["mismatch"] and calls == [False]
    assert snapshot(tree) == before


def test_one_pass_takes_the_tree_lock_and_looks_for_an_interrupted_apply_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run
) -> None:
    """A tree that carries the first of two patches, with --skip-applied: the pass applies, finds
    what the tree carries, applies the rest; the tree lock and the interrupted-apply check happen
    once for all three (they ran in two layers before: 3 locks and 3 checks for this pass)."""
    tree, _ = _tree_and_series(tmp_path)
    series = tmp_path / "two"
    series.mkdir()
    for n, rel in enumerate(("pkg/m0.py", "pkg/m1.py"), 1):
        new = FILES[rel].replace(b"v2 = 2", b"v2 = 22")
        (series / f"0{n}-change.patch").write_bytes(unified_diff(FILES[rel], new, rel))
    (tree / "pkg/m0.py").write_bytes(FILES["pkg/m0.py"].replace(b"v2 = 2", b"v2 = 22"))  # carries 01
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\n')
    assert run("import", series, cwd=led).code == 0
    locks: list[Path] = []
    checks: list[Path] = []
    real_lock, real_pending = locking.tree_lock, txn.pending

    def lock(root: Path):
        locks.append(Path(root))
        return real_lock(root)

    def pending(root: Path) -> bool:
        checks.append(Path(root))
        return real_pending(root)

    monkeypatch.setattr(locking, "tree_lock", lock)
    monkeypatch.setattr(txn, "pending", pending)
    [report] = apply_mod.run(
        ApplyRun(load_ledger(led / "patches.toml"), skip_applied=True), {"t": TreeArg("tree", tree)}
    )
    assert report.outcome == "applied" and "applying only the 1 missing patch" in report.message, report.message
    assert (tree / "pkg/m1.py").read_bytes() == FILES["pkg/m1.py"].replace(b"v2 = 2", b"v2 = 22")
    assert locks == [tree] and checks == [tree]


def test_a_full_disk_while_journalling_says_nothing_changed_and_leaves_nothing_staged(tmp_path: Path, run) -> None:
    """ENOSPC on the journal itself (every staged file fitted): the tree was never touched. Before
    the fix the message said "the tree was patched ... rolled back" and ~1.5 MB stayed staged in
    ``.patchset-txn``. The free space is set to the staged file's size plus 0, 1, 2 pages, so one
    run fails on the journal and the others fail while staging or succeed."""
    from tests.support import smallfs

    big = b"".join(b"line %d\n" % i for i in range(140000))
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\n')
    (tmp_path / "p.patch").write_bytes(unified_diff(big, big.replace(b"line 1\n", b"LINE 1\n", 1), "big.txt"))
    assert run("import", tmp_path / "p.patch", cwd=led).code == 0
    journal_failures = 0
    with smallfs.tmpfs(tmp_path / "fs", size="4m") as fs:
        for spare in range(-1, 3):
            tree = fs / "tree"
            if tree.exists():
                shutil.rmtree(tree)
            tree.mkdir()
            (tree / "big.txt").write_bytes(big)
            before = snapshot(tree)
            fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
            pages = -(-len(big) // 4096) + spare
            os.truncate(fs / "filler", max(0, os.path.getsize(fs / "filler") - pages * 4096))
            r = run("apply", "--tree", tree, cwd=led)
            (fs / "filler").unlink()
            if r.code == 0:
                assert (tree / "big.txt").read_bytes() != big and not (tree / txn.TXN_DIR).exists()
                continue
            assert r.code == 2 and "Traceback" not in r.stderr, r
            assert "was patched" not in r.stderr and "rolled back" not in r.stderr, r.stderr
            assert snapshot(tree) == before, f"spare {spare}: the tree changed or staged files were left"
            if "cannot write the transaction journal" in r.stderr:
                journal_failures += 1
                assert "nothing changed" in r.stderr and "not touched" in r.stderr, r.stderr
    assert journal_failures == 1, "no run failed on the journal itself: the free space was not where intended"
