"""The lock of a transaction directory, and an interrupted commit finished or undone.

A kill -9 can stop a commit at any step (``patchset.journal``): this is what the next run does
with what it left. Leftovers without a journal are dropped (nothing outside the staging area had
changed); a complete journal is rolled forward, or back on request or when a staged file is
damaged. Every step is skipped when already done, so recovery may itself be interrupted and run
again. The commit (``patchset.journal.commit``) uses the same moves when it fails half-way.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from patchset.atomic import fsync_path
from patchset.errors import EnvironmentFailure
from patchset.journal.crash import step
from patchset.journal.files import exists, fsync_dirs, is_dir, remove_flat
from patchset.journal.txndir import JOURNAL, TxnDir

Direction = Literal["auto", "forward", "back"]


@dataclass
class Recoverable(TxnDir):
    """A transaction directory that can be locked and recovered. ``busy`` is the message when
    another process holds it (``EnvironmentFailure``)."""

    busy: str = "another patchset process is committing here"
    back_cmd: str = "patchset recover --back"  # what undoes it, named when a staged file is damaged
    durable: bool = True  # fsync every step (power loss); a kill needs none
    _fd: int = field(default=-1, repr=False)

    def _sync(self, path: Path, directory: bool = False) -> None:
        if self.durable:
            fsync_path(path, directory=directory)

    # -- the lock ---------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the exclusive flock of the transaction directory (created if missing)."""
        self._check_path()
        try:
            self.txn.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.txn, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise EnvironmentFailure(
                f"{self.txn}: cannot create the transaction directory: {exc.strerror}",
                hint=f"is {self.root} writable?",
            ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._fd)
            self._fd = -1
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise EnvironmentFailure(f"{self.root}: {self.busy}", hint="wait for it to finish") from None
            raise

    def unlock(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @contextmanager
    def locked(self) -> Iterator[Recoverable]:
        self.lock()
        try:
            yield self
        finally:
            self.unlock()

    # -- moving the files -------------------------------------------------------------------
    def roll_forward(self, journal: dict[str, Any]) -> None:
        """Deletions first, then emptied directories out, new directories in, new files renamed in.
        Every step is skipped when already done, so a second run after a crash finishes the first."""
        txn = self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in entries:
            if e["new"] is None:
                target = self._at(e["path"])
                if exists(target) and not is_dir(target):
                    touched.add(target.parent)
                    target.unlink()
                    step()
        for d in journal.get("removed_dirs", []):
            at = self._at(d)
            if is_dir(at):
                at.rmdir()
                touched.add(at.parent)
        for d in journal.get("created_dirs", []):
            at = self._at(d)
            if not is_dir(at):
                at.mkdir()
                touched.add(at.parent)
        for e in entries:
            if e["new"] is not None:
                staged = txn / "new" / e["new"]
                if exists(staged):  # a staged symlink may dangle until it is in place
                    target = self._at(e["path"])
                    touched.add(target.parent)
                    os.replace(staged, target)
                    step()
        if self.durable:
            fsync_dirs(touched)

    def roll_back(self, journal: dict[str, Any]) -> None:
        """The roll-forward undone in reverse order: new files out, created directories out, removed
        directories back, old files back. Idempotent like the roll-forward."""
        txn = self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in reversed(entries):
            if e["new"] is not None and e["old"] is None:
                target = self._at(e["path"])
                if exists(target) and not is_dir(target):
                    target.unlink()
                    touched.add(target.parent)
        for d in reversed(journal.get("created_dirs", [])):
            at = self._at(d)
            try:
                at.rmdir()
                touched.add(at.parent)
            except OSError:
                pass
        for d in reversed(journal.get("removed_dirs", [])):
            at = self._at(d)
            if not is_dir(at):
                at.mkdir()
                touched.add(at.parent)
        for e in reversed(entries):
            if e["old"] is not None:
                backup = txn / "old" / e["old"]
                if backup.exists() or backup.is_symlink():
                    target = self._at(e["path"])
                    touched.add(target.parent)
                    os.replace(backup, target)
                    if not target.is_symlink() and e["old_mode"] is not None:
                        os.chmod(target, e["old_mode"])
        fsync_dirs({d for d in touched if d.exists()})

    def finish(self) -> None:
        """Step 4: the journal deleted (recovery no longer needed), the staging area removed."""
        txn = self.txn
        journal = txn / JOURNAL
        if journal.exists():
            journal.unlink()
            self._sync(txn, directory=True)
            step()
        for sub in ("new", "old"):
            remove_flat(txn / sub)
        (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
        try:
            txn.rmdir()
        except OSError:
            pass
        self._sync(txn.parent, directory=True)

    # -- recovery ---------------------------------------------------------------------------
    def recover_locked(self, direction: Direction) -> str | None:
        """Finish or undo what an interrupted commit left (the lock is held). What this
        installation did not write is refused (``ForeignJournal``) and left as it is."""
        txn = self.txn
        state, data = self._inspect()
        if state == "none":
            return None
        if data is None:
            # crash before the journal was complete: nothing outside the staging area changed
            for sub in ("new", "old"):
                remove_flat(txn / sub)
            (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
            return "discarded"
        for e in data["entries"]:  # every path on disk before anything moves (and again at each use)
            self._at(e["path"])
        for d in data.get("created_dirs", []) + data.get("removed_dirs", []):
            self._at(d)
        try:
            damaged = self.damaged_staged(data) if direction != "back" else []
            if direction == "back" or (damaged and direction == "auto"):
                self.roll_back(data)
                done = "rolled back" + (
                    f" (staged {', '.join(damaged)} damaged, e.g. by a power cut)" if damaged else ""
                )
            elif damaged:
                raise EnvironmentFailure(
                    f"{self.root}: the staged new content of {', '.join(damaged)} is damaged "
                    "(a power cut before it reached the disk?)",
                    hint=f"roll back instead: `{self.back_cmd}`, then run the command again",
                )
            else:
                self.roll_forward(data)
                done = "rolled forward"
        except OSError as exc:
            raise EnvironmentFailure(
                f"{self.root}: recovering the interrupted commit failed: {exc}",
                hint="the journal is kept (recovery can be run again); fix the cause, then run the command again",
            ) from None
        (txn / JOURNAL).unlink()
        fsync_path(txn, directory=True)
        for sub in ("new", "old"):
            remove_flat(txn / sub)
        (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
        return done

    def damaged_staged(self, journal: dict[str, Any]) -> list[str]:
        """Paths whose staged file no longer holds what the journal recorded (a power cut between
        a non-durable write and its reaching the disk). A staged file already renamed is not checked."""
        bad = []
        for e in journal["entries"]:
            if e.get("new") is None or not e.get("sha256"):
                continue
            staged = self.txn / "new" / e["new"]
            if staged.is_symlink() or not staged.is_file():
                continue
            if hashlib.sha256(staged.read_bytes()).hexdigest() != e["sha256"]:
                bad.append(e["path"])
        return bad

    def recover(self, direction: Direction = "auto") -> str | None:
        """Finish or undo an interrupted commit. Returns ``None`` (nothing to do), ``"discarded"``
        (crash before the journal was complete: files untouched), ``"rolled forward"`` or
        ``"rolled back"``. ``auto`` rolls a complete journal forward; ``back`` undoes it.
        Raises ``ForeignJournal`` for a transaction directory this installation did not write."""
        if not self.pending():
            return None
        with self.locked():
            done = self.recover_locked(direction)
            try:
                self.txn.rmdir()
            except OSError:
                pass
        return done
