"""Atomic writes: a file is either the old bytes or the new bytes, never half of either; a directory
is either absent (or empty) or complete.

Every write patchset makes to a user's files (ledger, lock, patch bodies) goes through here.
``write_many`` stages every file first and renames them into place only when all are staged,
so a validation error never leaves a half-written set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def fsync_path(path: Path, directory: bool = False) -> None:
    """Flush a file, or (``directory``) a directory's entries, to disk so that a write or rename
    survives a crash. Best effort: a path that cannot be opened or a file system that cannot
    fsync is not an error (the data is still written, only not forced out)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_serial = 0


def _create_beside(path: Path) -> tuple[int, str]:
    """A new, exclusive ``.NAME.<pid>.<n>.tmp`` beside ``path`` (what ``tempfile.mkstemp`` does,
    without loading tempfile and random on every command that writes one small file)."""
    global _serial
    while True:
        _serial += 1
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{_serial}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), tmp
        except FileExistsError:
            continue


def stage(path: Path, data: bytes, mode: int | None = None, durable: bool = True) -> Path:
    """Write ``data`` to a temporary file beside ``path`` (same filesystem) and return it
    (``durable``: fsynced, so that the rename that publishes it survives a power cut)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if mode is None and path.exists():
            mode = path.stat().st_mode & 0o7777
        os.chmod(tmp, mode if mode is not None else 0o644)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_bytes(path: Path, data: bytes, mode: int | None = None, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (``durable``: and survive a power cut)."""
    os.replace(stage(path, data, mode, durable), path)
    if durable:
        fsync_path(path.parent, directory=True)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


@dataclass
class Staged:
    """Files written to temporary names beside their targets, not yet renamed into place."""

    files: dict[Path, bytes | None]
    temps: list[tuple[Path, Path]]

    def publish(self) -> None:
        """Rename every staged file into place (and delete the ``None`` ones)."""
        for tmp, path in self.temps:
            os.replace(tmp, path)
        self.temps = []
        for path, data in self.files.items():
            if data is None:
                Path(path).unlink(missing_ok=True)
        for parent in {p.parent for p in self.files}:
            fsync_path(parent, directory=True)

    def discard(self) -> None:
        for tmp, _ in self.temps:
            tmp.unlink(missing_ok=True)
        self.temps = []


def stage_many(files: Mapping[Path, bytes | None]) -> Staged:
    """Stage every file (``None``: to be deleted); on any failure nothing is left behind."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            if data is not None:
                staged.append((stage(path, data), path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    return Staged(dict(files), staged)


def write_many(files: Mapping[Path, bytes | None]) -> None:
    """Stage every file, then rename all into place. ``None`` deletes the file.

    If staging fails nothing is replaced. The renames themselves are individually atomic;
    callers that need all-or-nothing across a crash keep a journal (see ``patchset.engine.txn``).
    """
    stage_many(files).publish()


def _new_stage(dest: Path) -> Path:
    """A new empty ``.NAME.<pid>.<n>.stage`` directory beside ``dest``, made with the mode a plain
    ``mkdir`` gives (0777 less the umask): it becomes ``dest`` itself, which must not end up private
    (``tempfile.mkdtemp`` makes 0700 directories)."""
    global _serial
    while True:
        _serial += 1
        stage = dest.parent / f".{dest.name}.{os.getpid()}.{_serial}.stage"
        try:
            os.mkdir(stage, 0o777)
            return stage
        except FileExistsError:
            continue


@contextmanager
def publish_dir(dest: Path, *, ready: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Build a directory beside ``dest`` and rename it into place when the block ends without error.

    Yields an empty staging directory on ``dest``'s file system. On success it replaces ``dest``
    when ``dest`` is absent or an empty directory; if another process published ``dest`` first
    and ``ready(dest)`` says it is complete, the stage is dropped and theirs is kept. On any error
    (and after a kill, on the next run: stages are dot-named) nothing is left under ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    import shutil

    stage = _new_stage(dest)
    try:
        yield stage
        if dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir()):
            dest.rmdir()
        try:
            os.replace(stage, dest)
        except OSError:
            if ready is None or not ready(dest):
                raise
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
