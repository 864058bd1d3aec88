"""A crash-safe multi-file commit under one directory: staged files, a journal, renames.

Both places where patchset changes several files that must change together use it: an apply's
build tree (``patchset.engine.txn``, transaction directory ``<tree>/.patchset-txn``) and a ledger
edit (``patchset.ledger.store``: ``patches.toml``, ``patches.lock`` and the body files, transaction
directory ``<ledger dir>/.patchset/ledger-txn``). One format, one recovery.

Protocol, all inside the transaction directory (same file system as the files, so every rename is
atomic):

1. ``new/<n>``: every new file content written, given its final mode (and its sha256 in the
   journal); ``old/<n>``: a hard link to (or copy of) every file that will be replaced or deleted.
2. ``journal.json``: written to a temporary name, renamed: from now on the transaction is
   *complete* and will be rolled forward. Before it exists nothing outside the transaction
   directory has changed, and recovery only deletes the leftovers.
3. Renames ``new/<n>`` -> path (and unlinks for deletions), in journal order.
4. The journal is deleted (the commit point has passed; recovery is no longer needed) and the
   transaction directory removed.

Durability: a kill -9 or Ctrl-C needs no fsync (the kernel keeps every write and rename of a
dead process). Power loss does: with ``durable`` every staged file, the journal and every touched
directory is fsynced at its step, as a database would (ledger edits always; a tree commit with
``apply --durable`` / ``PATCHSET_FSYNC=1``). Without it a power cut can lose the last commit,
never install a torn file: recovery checks each staged file against the sha256 the journal
recorded and rolls back when one is damaged.

Recovery is idempotent: rolling forward renames what is still staged; rolling back (on request,
``direction="back"``) puts the ``old/<n>`` links back and removes created files and directories.
A ``flock`` on the transaction directory keeps two processes from committing at once.

Testing hook: ``PATCHSET_TEST_CRASH_AFTER=k`` makes the process signal itself at the k-th step
(each staged file, the journal, each rename, the cleanup; steps of every journal of the process
are counted together), ``PATCHSET_TEST_CRASH_SIGNAL`` names the signal (``KILL`` by default,
``INT`` for a Ctrl-C). Read only from the environment; nothing happens when unset.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from patchset.atomic import fsync_path
from patchset.errors import EnvironmentFailure
from patchset.records import record

JOURNAL = "journal.json"
Direction = Literal["auto", "forward", "back"]


@record
class Change:
    """The new state of one path (relative to the root, real path: no symlinks in it)."""

    path: str
    data: bytes | None  # None: delete the file
    mode: int | None = None  # permission bits for the new file (None: 0o644); stat.S_IFLNK: a symlink to ``data``
    sha256: str | None = None  # of ``data``, when the caller already has it (else computed when staged)


_steps = 0


def step() -> None:
    """Crash-test hook: count commit steps and signal ourselves at the configured one."""
    global _steps
    target = os.environ.get("PATCHSET_TEST_CRASH_AFTER")
    if not target:
        return
    _steps += 1
    if _steps == int(target):
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("PATCHSET_TEST_CRASH_SIGNAL", "KILL")))


_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C (and TERM/HUP) while the files are between old and new: the signal is delivered
    once every file is in place, so an interrupted commit leaves the new state, not a mixed one.
    (SIGKILL cannot be held: the journal and recovery cover it.) Nests."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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


def _exists(path: Path) -> bool:
    """Anything at ``path`` (a dangling symlink too); a parent that is a file counts as nothing."""
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _remove_flat(d: Path) -> None:
    """Remove a staging directory (``new/``, ``old/``: files and symlinks only, no subdirectories)."""
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


def _fsync_dirs(dirs: set[Path]) -> None:
    if len(dirs) <= 1:
        for d in dirs:
            fsync_path(d, directory=True)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(dirs))) as pool:
        list(pool.map(lambda d: fsync_path(d, directory=True), dirs))


@record
class Journal:
    """The transaction directory ``txn`` of the files under ``root``. ``busy`` is the message when
    another process holds it (``EnvironmentFailure``)."""

    root: Path
    txn: Path
    busy: str = "another patchset process is committing here"
    back_cmd: str = "patchset recover --back"  # what undoes it, named when a staged file is damaged
    durable: bool = True  # fsync every step (power loss); a kill needs none
    _fd: int = field(default=-1, repr=False)

    def _sync(self, path: Path, directory: bool = False) -> None:
        if self.durable:
            fsync_path(path, directory=directory)

    # -- what is there (reads only) ---------------------------------------------------------
    def pending(self) -> bool:
        """Is there an interrupted transaction (leftovers of any kind)?"""
        return self.txn.exists()

    def complete(self) -> bool:
        """Was it interrupted after its journal was written (files may be half old, half new)?"""
        return (self.txn / JOURNAL).exists()

    def describe(self) -> str:
        """What an interrupted transaction left, in words."""
        name = self.txn.relative_to(self.root) if self.txn.is_relative_to(self.root) else self.txn
        if self.complete():
            return f"{name}/{JOURNAL} is complete: some files may be new, some old; recovery finishes it"
        return f"{name} holds leftovers without a journal: the files themselves are the old ones; recovery removes them"

    # -- the lock ---------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the exclusive flock of the transaction directory (created if missing)."""
        try:
            self.txn.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.txn, os.O_RDONLY | os.O_DIRECTORY)
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
    def locked(self) -> Iterator[Journal]:
        self.lock()
        try:
            yield self
        finally:
            self.unlock()

    # -- the commit -------------------------------------------------------------------------
    def prepare(self, changes: list[Change]) -> dict[str, Any]:
        """Step 1 (lock held): staged files and backups. Returns the journal to write. On failure
        (or Ctrl-C) the staging area is dropped and the files are untouched."""
        try:
            return self._prepare(changes)
        except BaseException:
            self.recover_locked("auto")
            self.finish()
            raise

    def _prepare(self, changes: list[Change]) -> dict[str, Any]:
        root, txn = self.root, self.txn
        (txn / "new").mkdir()
        (txn / "old").mkdir()
        entries = []
        created_dirs: list[str] = []
        removed_dirs: list[str] = []
        staged: list[tuple[Path, bytes, int]] = []
        deleted = {ch.path for ch in changes if ch.data is None}
        for n, ch in enumerate(changes):
            target = root / ch.path
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
                while not parent.is_dir() and (not _exists(parent) or str(parent.relative_to(root)) in deleted):
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
            if _exists(target) and not (target.is_dir() and not target.is_symlink()):
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
        """Step 2: from the moment the journal exists, the transaction rolls forward."""
        tmp = self.txn / (JOURNAL + ".tmp")
        write_file(tmp, json.dumps(journal).encode(), 0o644, self.durable)
        os.replace(tmp, self.txn / JOURNAL)
        self._sync(self.txn, directory=True)
        step()

    def roll_forward(self, journal: dict[str, Any]) -> None:
        """Deletions first, then emptied directories out, new directories in, new files renamed in.
        Every step is skipped when already done, so a second run after a crash finishes the first."""
        root, txn = self.root, self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in entries:
            target = root / e["path"]
            if e["new"] is None and _exists(target) and not _is_dir(target):
                touched.add(target.parent)
                target.unlink()
                step()
        for d in journal.get("removed_dirs", []):
            if _is_dir(root / d):
                (root / d).rmdir()
                touched.add((root / d).parent)
        for d in journal.get("created_dirs", []):
            if not _is_dir(root / d):
                (root / d).mkdir()
                touched.add((root / d).parent)
        for e in entries:
            target = root / e["path"]
            if e["new"] is not None:
                staged = txn / "new" / e["new"]
                if _exists(staged):  # a staged symlink may dangle until it is in place
                    touched.add(target.parent)
                    os.replace(staged, target)
                    step()
        if self.durable:
            _fsync_dirs(touched)

    def roll_back(self, journal: dict[str, Any]) -> None:
        """The roll-forward undone in reverse order: new files out, created directories out, removed
        directories back, old files back. Idempotent like the roll-forward."""
        root, txn = self.root, self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in reversed(entries):
            target = root / e["path"]
            if e["new"] is not None and e["old"] is None and _exists(target) and not _is_dir(target):
                target.unlink()
                touched.add(target.parent)
        for d in reversed(journal.get("created_dirs", [])):
            try:
                (root / d).rmdir()
                touched.add((root / d).parent)
            except OSError:
                pass
        for d in reversed(journal.get("removed_dirs", [])):
            if not _is_dir(root / d):
                (root / d).mkdir()
                touched.add((root / d).parent)
        for e in reversed(entries):
            target = root / e["path"]
            if e["old"] is not None:
                backup = txn / "old" / e["old"]
                if backup.exists() or backup.is_symlink():
                    touched.add(target.parent)
                    os.replace(backup, target)
                    if not target.is_symlink():
                        os.chmod(target, e["old_mode"])
        _fsync_dirs({d for d in touched if d.exists()})

    def finish(self) -> None:
        """Step 4: the journal deleted (recovery no longer needed), the staging area removed."""
        txn = self.txn
        journal = txn / JOURNAL
        if journal.exists():
            journal.unlink()
            self._sync(txn, directory=True)
            step()
        for sub in ("new", "old"):
            _remove_flat(txn / sub)
        (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
        try:
            txn.rmdir()
        except OSError:
            pass
        self._sync(txn.parent, directory=True)

    def recover_locked(self, direction: Direction) -> str | None:
        """Finish or undo what an interrupted commit left (the lock is held)."""
        txn = self.txn
        journal = txn / JOURNAL
        leftovers = any(txn.iterdir()) if txn.exists() else False
        if not journal.exists():
            if leftovers:
                # crash before the journal was complete: nothing outside the staging area changed
                for sub in ("new", "old"):
                    _remove_flat(txn / sub)
                (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
                return "discarded"
            return None
        try:
            data = json.loads(journal.read_text())
            data["entries"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EnvironmentFailure(
                f"{journal}: unreadable transaction journal: {exc}",
                hint="inspect it by hand; the old files are in old/",
            ) from None
        damaged = self.damaged_staged(data) if direction != "back" else []
        if direction == "back" or (damaged and direction == "auto"):
            self.roll_back(data)
            done = "rolled back" + (f" (staged {', '.join(damaged)} damaged, e.g. by a power cut)" if damaged else "")
        elif damaged:
            raise EnvironmentFailure(
                f"{self.root}: the staged new content of {', '.join(damaged)} is damaged "
                "(a power cut before it reached the disk?)",
                hint=f"roll back instead: `{self.back_cmd}`, then run the command again",
            )
        else:
            self.roll_forward(data)
            done = "rolled forward"
        journal.unlink()
        fsync_path(txn, directory=True)
        for sub in ("new", "old"):
            _remove_flat(txn / sub)
        return done

    def damaged_staged(self, journal: dict[str, Any]) -> list[str]:
        """Paths whose staged file no longer holds what the journal recorded (a power cut between
        a non-durable write and its reaching the disk). A staged file already renamed is not checked."""
        bad = []
        for e in journal["entries"]:
            staged = self.txn / "new" / str(e.get("new"))
            if e.get("new") is None or not e.get("sha256") or staged.is_symlink() or not staged.is_file():
                continue
            if hashlib.sha256(staged.read_bytes()).hexdigest() != e["sha256"]:
                bad.append(e["path"])
        return bad

    def recover(self, direction: Direction = "auto") -> str | None:
        """Finish or undo an interrupted commit. Returns ``None`` (nothing to do), ``"discarded"``
        (crash before the journal was complete: files untouched), ``"rolled forward"`` or
        ``"rolled back"``. ``auto`` rolls a complete journal forward; ``back`` undoes it."""
        if not self.txn.exists():
            return None
        with self.locked():
            done = self.recover_locked(direction)
            try:
                self.txn.rmdir()
            except OSError:
                pass
        return done

    def commit_prepared(self, journal: dict[str, Any], before_finish: Callable[[], None] | None = None) -> None:
        """Steps 2-4 (lock held, signals deferred): the journal, the renames, ``before_finish``
        (every file in place, the old ones still kept: raising rolls back), the cleanup."""
        with signals_deferred():
            self.write_journal(journal)
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
