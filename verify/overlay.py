"""Cheap build trees for ``patchset verify``: hard-linked overlays of one pristine base.

``verify`` needs many copies of an 8,000-file tree (with the series, without each patch). An
overlay's files are hard links to the base's (~0.2 s for vLLM); applying the series replaces only
the touched files, by rename. The hazard: a test that rewrites an existing file in place writes
through to the base and every overlay. ``Snapshot`` records (inode, size, mtime) of every base
file and ``changed()`` names what a run altered, so that run is an error and a damaged cached base
is thrown away; a user's ``--tree`` is never linked to (``private_copy``).
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from patchset.errors import EnvironmentFailure

# Directories never copied into a private base: repository metadata and patchset's own journal.
SKIP_DIRS = frozenset({".git", ".patchset-txn"})
_LINK_FALLBACK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP}


@dataclass
class OverlayStats:
    """How an overlay was built: files linked, files copied (hard links refused), symlinks made."""

    linked: int = 0
    copied: int = 0
    symlinks: int = 0


def _walk(src: Path, dst: Path, *, link: bool, skip: frozenset[str], stats: OverlayStats) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copymode(src, dst)
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        s, d = Path(entry.path), dst / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(s), d)
            stats.symlinks += 1
        elif entry.is_dir(follow_symlinks=False):
            if entry.name in skip:
                continue
            _walk(s, d, link=link, skip=skip, stats=stats)
        elif entry.is_file(follow_symlinks=False):
            if link:
                try:
                    os.link(s, d)
                    stats.linked += 1
                    continue
                except OSError as exc:
                    if exc.errno not in _LINK_FALLBACK:
                        raise
            shutil.copy2(s, d)
            stats.copied += 1
        # sockets, fifos and devices are not part of a build tree: left out


def make_overlay(base: Path, dest: Path) -> OverlayStats:
    """A tree at ``dest`` (must not exist) whose files are hard links to ``base``'s.

    Falls back to copying file by file where the file system refuses a link (another device).
    """
    if dest.exists():
        raise EnvironmentFailure(f"overlay {dest} already exists", hint="remove it or use a new work directory")
    stats = OverlayStats()
    try:
        _walk(base, dest, link=True, skip=frozenset({".patchset-txn"}), stats=stats)
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise EnvironmentFailure(
            f"cannot build a tree at {dest} from {base}: {exc.strerror or exc}",
            hint="check free disk space and permissions of the patchset cache",
        ) from None
    return stats


def drop_stale_bytecode(tree: Path, files: dict[str, str | None] | list[str]) -> list[Path]:
    """Unlink the ``__pycache__`` entries of the patched ``.py`` files of an overlay; return them.

    The base is byte-compiled once and its ``.pyc`` files are hard-linked into every overlay. Python
    trusts a ``.pyc`` whose recorded source size and mtime (whole seconds) match: a patch that keeps a
    file's size and lands within the same second as the base's copy (``0.001`` -> ``0.004``) would run
    the unpatched bytecode. Unlinking the overlay's link leaves the base's file alone."""
    removed = []
    for rel in files:
        if not rel.endswith(".py"):
            continue
        src = tree / rel
        cache = src.parent / "__pycache__"
        if not cache.is_dir():
            continue
        for pyc in cache.glob(f"{src.stem}.*.pyc"):
            try:
                pyc.unlink()
                removed.append(pyc)
            except OSError:
                pass
    return removed


def private_copy(src: Path, dest: Path) -> OverlayStats:
    """A full copy of ``src`` (without ``.git``): the base verify links its overlays to."""
    if not src.is_dir():
        raise EnvironmentFailure(f"{src}: not a directory")
    stats = OverlayStats()
    try:
        _walk(src, dest, link=False, skip=SKIP_DIRS, stats=stats)
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise EnvironmentFailure(
            f"cannot copy {src} to {dest}: {exc.strerror or exc}", hint="check free disk space in the patchset cache"
        ) from None
    return stats


@dataclass
class Snapshot:
    """(inode, size, mtime_ns) of every regular file under a base tree, to detect writes through links."""

    root: Path
    files: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @classmethod
    def take(cls, root: Path) -> Snapshot:
        snap = cls(root)
        base = str(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            rel_dir = os.path.relpath(dirpath, base)
            for name in filenames:
                seen = _identity(os.path.join(dirpath, name))
                if seen is not None:
                    snap.files[name if rel_dir == "." else f"{rel_dir}/{name}"] = seen
        return snap

    def changed(self) -> list[str]:
        """Files of the base that are no longer what the snapshot saw (sorted)."""
        return sorted(rel for rel, seen in self.files.items() if _identity(self.root / rel) != seen)


def _identity(path: str | Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime_ns) of a file, None when it is gone."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def remove_tree(path: Path) -> None:
    """Remove a work tree; a failure to remove is not worth failing a verify run."""
    shutil.rmtree(path, ignore_errors=True)
