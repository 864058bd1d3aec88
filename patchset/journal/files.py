"""The file-system steps of a commit: a staged file written, a staging directory removed,
directories fsynced.

Kept apart from the protocol (``patchset.journal``) so that the commit and its recovery read as
steps, not as system calls. Nothing here follows a symbolic link it did not make.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from patchset.atomic import fsync_path


def write_file(path: Path, data: bytes, mode: int, durable: bool = True) -> None:
    """Create ``path`` (it must not exist) with ``data`` and ``mode`` (fsynced when ``durable``)."""
    if mode == stat.S_IFLNK:  # a symbolic link: ``data`` is its target
        os.symlink(os.fsdecode(data), path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def exists(path: Path) -> bool:
    """Anything at ``path`` (a dangling symlink too); a parent that is a file counts as nothing."""
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def remove_flat(d: Path) -> None:
    """Remove a staging directory (``new/``, ``old/``: files and symlinks only, no subdirectories).
    A link in its place is not followed (and not removed)."""
    if not is_dir(d):
        return
    try:
        entries = list(os.scandir(d))
    except OSError:
        return
    for e in entries:
        try:
            os.unlink(e.path)
        except OSError:
            pass
    try:
        d.rmdir()
    except OSError:
        pass


def fsync_dirs(dirs: set[Path]) -> None:
    if len(dirs) <= 1:
        for d in dirs:
            fsync_path(d, directory=True)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(dirs))) as pool:
        list(pool.map(lambda d: fsync_path(d, directory=True), dirs))
