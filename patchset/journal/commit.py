"""A crash-safe commit of several files under one root: the files staged, the journal, the renames.

The protocol and why each step is where it is are described in ``patchset.journal``; this module
is its writing side (``Change``, ``Journal``). What undoes or finishes a commit that did not
complete is ``patchset.journal.recovery``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.errors import EnvironmentFailure
from patchset.journal.crash import signals_deferred, step
from patchset.journal.files import exists, remove_flat, write_file
from patchset.journal.recovery import Recoverable
from patchset.journal.seal import installation_key
from patchset.journal.txndir import JOURNAL


@dataclass
class Change:
    """The new state of one path (relative to the root, real path: no symlinks in it)."""

    path: str
    data: bytes | None  # None: delete the file
    mode: int | None = None  # permission bits for the new file (None: 0o644); stat.S_IFLNK: a symlink to ``data``
    sha256: str | None = None  # of ``data``, when the caller already has it (else computed when staged)


@dataclass
class Journal(Recoverable):
    """The commit of files under ``root`` through its transaction directory ``txn`` (the fields
    are ``Recoverable``'s): ``prepare`` (lock held), then ``commit_prepared``."""

    # -- the commit -------------------------------------------------------------------------
    def prepare(self, changes: list[Change]) -> dict[str, Any]:
        """Step 1 (lock held): staged files and backups. Returns the journal to write. On failure
        (or Ctrl-C) the staging area is dropped and the files are untouched."""
        try:
            installation_key(create=True)  # a state directory we cannot write fails before anything is staged
            return self._prepare(changes)
        except BaseException:
            self.recover_locked("auto")
            self.finish()
            raise

    def _prepare(self, changes: list[Change]) -> dict[str, Any]:
        root, txn = Path(os.path.realpath(self.root)), self.txn
        (txn / "new").mkdir()
        (txn / "old").mkdir()
        entries = []
        created_dirs: list[str] = []
        removed_dirs: list[str] = []
        staged: list[tuple[Path, bytes, int]] = []
        deleted = {ch.path for ch in changes if ch.data is None}
        for n, ch in enumerate(changes):
            target = self._at(ch.path)
            entry: dict[str, Any] = {"path": ch.path, "new": None, "old": None, "old_mode": None, "new_mode": None}
            if ch.data is not None:
                mode = 0o644 if ch.mode is None else ch.mode
                staged.append((txn / "new" / str(n), ch.data, mode))
                entry["new"] = str(n)
                entry["new_mode"] = mode
                entry["sha256"] = ch.sha256 or hashlib.sha256(ch.data).hexdigest()
                parent = target.parent
                missing: list[str] = []
                # a parent that is missing, or a file this commit deletes, becomes a directory
                while not parent.is_dir() and (not exists(parent) or str(parent.relative_to(root)) in deleted):
                    missing.append(str(parent.relative_to(root)))
                    parent = parent.parent
                for d in reversed(missing):
                    if d not in created_dirs:
                        created_dirs.append(d)
                if target.is_dir() and not target.is_symlink():
                    # a directory this commit empties becomes a file: remove it, deepest first
                    for dirpath, _dirs, _names in os.walk(target, topdown=False):
                        rel = str(Path(dirpath).relative_to(root))
                        if rel not in removed_dirs:
                            removed_dirs.append(rel)
            if exists(target) and not (target.is_dir() and not target.is_symlink()):
                st = target.lstat()
                entry["old_mode"] = st.st_mode & 0o7777
                backup = txn / "old" / str(n)
                try:
                    os.link(target, backup, follow_symlinks=False)
                except OSError:
                    import shutil  # a file system without hard links: rare, so loaded only then

                    shutil.copy2(target, backup, follow_symlinks=False)
                    self._sync(backup)
                entry["old"] = str(n)
            entries.append(entry)
        if not self.durable or len(staged) <= 1:
            for args in staged:
                write_file(*args, durable=self.durable)
                step()
        else:
            # write + fsync the staged files concurrently: the file system commits the fsyncs
            # together, several times faster than one after another
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(8, len(staged))) as pool:
                for fut in [pool.submit(write_file, *args) for args in staged]:
                    fut.result()
                    step()
        self._sync(txn / "new", directory=True)
        self._sync(txn / "old", directory=True)
        return {"version": 1, "entries": entries, "created_dirs": created_dirs, "removed_dirs": removed_dirs}

    def write_journal(self, journal: dict[str, Any]) -> None:
        """Step 2: from the moment the journal exists, the transaction rolls forward. It carries
        this installation's seal, so recovery knows it is ours."""
        tmp = self.txn / (JOURNAL + ".tmp")
        write_file(tmp, json.dumps(self.seal(journal)).encode(), 0o644, self.durable)
        os.replace(tmp, self.txn / JOURNAL)
        self._sync(self.txn, directory=True)
        step()

    def _drop_unjournaled(self) -> None:
        """The journal could not be written: nothing outside the staging area has changed, so
        the staged files go. If a journal did land and cannot be removed, it is kept whole (with
        everything it needs to roll forward) and the error says so."""
        try:
            (self.txn / JOURNAL).unlink(missing_ok=True)
        except OSError as exc:
            raise EnvironmentFailure(
                f"{self.root}: the transaction journal was written but the commit failed: {exc.strerror}",
                hint=f"nothing else changed yet; run `{self.back_cmd}` to drop it, then run the command again",
            ) from None
        try:
            (self.txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
        except OSError:
            pass
        for sub in ("new", "old"):
            remove_flat(self.txn / sub)
        try:
            self.txn.rmdir()
        except OSError:
            pass

    def commit_prepared(self, journal: dict[str, Any], before_finish: Callable[[], None] | None = None) -> None:
        """Steps 2-4 (lock held, signals deferred): the journal, the renames, ``before_finish``
        (every file in place, the old ones still kept: raising rolls back), the cleanup."""
        with signals_deferred():
            try:
                self.write_journal(journal)
            except OSError as exc:  # e.g. ENOSPC: the files were never touched
                self._drop_unjournaled()
                raise EnvironmentFailure(
                    f"{self.root}: cannot write the transaction journal: {exc.strerror or exc}",
                    hint="the files were not touched and the staged copies were removed: nothing changed; "
                    "free space or fix permissions and run the command again",
                ) from None
            try:
                self.roll_forward(journal)
            except OSError as exc:
                self.recover_locked("back")
                self.finish()
                raise EnvironmentFailure(
                    f"{self.root}: writing the new files failed: {exc}",
                    hint="the files were rolled back to their old state",
                ) from None
            if before_finish is not None:
                try:
                    before_finish()
                except BaseException:
                    self.recover_locked("back")
                    self.finish()
                    raise
            self.finish()
