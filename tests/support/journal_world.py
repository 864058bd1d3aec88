"""Build trees whose commit is killed at a chosen step, for the recovery tests.

The commit is a real ``patchset.engine.txn.commit`` of a change set that takes every path the
journal knows (a file modified with a new mode, files deleted, a file that becomes a directory, a
directory that becomes a file, directories created, symbolic links made, replaced and removed),
run in a forked child that the crash-test hook (``PATCHSET_TEST_CRASH_AFTER``) SIGKILLs at step
``k``. The old and new trees are laid out by hand from the same description, so what recovery
gives is compared with what the change set says, not with what the code under test produced.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from patchset.engine import txn
from patchset.journal.commit import Change
from patchset.journal.txndir import JOURNAL
from tests.support.trees import snapshot

CRASH_ENV = "PATCHSET_TEST_CRASH_AFTER"

# the old tree: path -> (content or link target, mode; None: a symbolic link)
OLD: dict[str, tuple[bytes, int | None]] = {
    "keep.txt": (b"kept, never named by the commit\n", 0o644),
    "mod.py": (b"value = 1\n", 0o640),
    "gone.txt": (b"deleted by the commit\n", 0o644),
    "a": (b"a file that becomes a directory\n", 0o644),
    "d/x.txt": (b"the only file of a directory that becomes a file\n", 0o644),
    "ln-old": (b"nowhere", None),  # a dangling link, replaced by a file
    "ln-gone": (b"keep.txt", None),  # a link to a kept file, deleted
}
# the new tree, written by the commit
NEW: dict[str, tuple[bytes, int | None]] = {
    "keep.txt": OLD["keep.txt"],
    "mod.py": (b"value = 2\n", 0o755),
    "a/b.txt": (b"in the directory that was a file\n", 0o644),
    "d": (b"the file that was a directory\n", 0o600),
    "ln-old": (b"a file where a dangling link was\n", 0o644),
    "deep/er/new.txt": (b"in two new directories\n", 0o644),
    "deep/er/up": (b"../../keep.txt", None),  # resolves from the staging area (.patchset-txn/new/) too
    "rel-link": (b"mod.py", None),
}


def lay_out(root: Path, files: Mapping[str, tuple[bytes, int | None]]) -> Path:
    """Write ``files`` under a fresh ``root``."""
    root.mkdir(parents=True)
    for rel, (data, mode) in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if mode is None:
            os.symlink(os.fsdecode(data), p)
        else:
            p.write_bytes(data)
            os.chmod(p, mode)
    return root


def changes() -> list[Change]:
    """The change set from ``OLD`` to ``NEW``."""
    out = [Change(rel, None) for rel in ("gone.txt", "a", "d/x.txt", "ln-gone")]
    for rel, (data, mode) in NEW.items():
        if rel in OLD and OLD[rel] == (data, mode):
            continue
        out.append(Change(rel, data, stat.S_IFLNK if mode is None else mode))
    return out


def in_child(work: Callable[[], object], crash_after: int | None) -> int:
    """Run ``work`` in a forked child, SIGKILLed by the crash-test hook at its step ``crash_after``.
    Returns the child's wait status as ``subprocess`` does (``-9``: killed, 0: it finished)."""
    assert CRASH_ENV not in os.environ, "the test process itself must not count crash steps"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            if crash_after is not None:
                os.environ[CRASH_ENV] = str(crash_after)
            work()
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


@dataclass
class Interrupted:
    """A tree whose commit was killed at ``step``: its root, and whether the journal had landed."""

    root: Path
    step: int
    journal: bool  # the journal was written: the files may be half old, half new
    renamed: bool  # some file outside the staging area had already changed


@dataclass
class World:
    """Old and new trees and commits killed at every step, all under ``base`` (a tmp_path)."""

    base: Path

    @property
    def origin(self) -> Path:
        """Where every commit runs (each interrupted tree is then moved aside)."""
        return self.base / "tree"

    @cached_property
    def old(self) -> dict:
        """The snapshot of the old tree, laid out by hand."""
        return snapshot(lay_out(self.base / "expected-old", OLD))

    @cached_property
    def new(self) -> dict:
        """The snapshot of the new tree, laid out by hand."""
        return snapshot(lay_out(self.base / "expected-new", NEW))

    def killed_at(self, k: int) -> Interrupted | None:
        """The old tree with its commit killed at step ``k`` (moved to ``base/k<k>``); None when
        the commit finished before step ``k``."""
        root = self.origin
        if root.exists():
            shutil.rmtree(root)
        lay_out(root, OLD)
        before = snapshot(root)
        status = in_child(lambda: txn.commit(root, changes(), durable=False), k)
        if status == 0:
            shutil.rmtree(root)
            return None
        assert status == -signal.SIGKILL, f"the commit killed at step {k} ended with {status}"
        journal = (root / txn.TXN_DIR / JOURNAL).exists()
        changed = outside_txn(root) != before
        return Interrupted(root.rename(self.base / f"k{k}"), k, journal, changed)

    def every_kill(self) -> list[Interrupted]:
        """The commit killed at each of its steps, in order."""
        found = []
        k = 1
        while (one := self.killed_at(k)) is not None:
            found.append(one)
            k += 1
        return found


def copy_tree(src: Path, dst: Path) -> Path:
    """A copy of an interrupted tree (links kept as links), to recover it more than one way."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def outside_txn(root: Path) -> dict:
    """The snapshot of a tree without its transaction directory."""
    return {k: v for k, v in snapshot(root).items() if not k.startswith(txn.TXN_DIR)}
