"""Crash-safe multi-file commit into a directory tree: a journal, staged files, renames.

``commit(root, changes)`` replaces many files so that a crash or SIGKILL at any instant leaves
either the old tree or the new tree once ``recover(root)`` has run (``apply_series`` runs it
first thing). Protocol, all inside ``<root>/.patchset-txn/`` (same file system as the tree, so
every rename is atomic):

1. ``new/<n>``: every new file content written, given its final mode (and its sha256 in the
   journal);
   ``old/<n>``: a hard link to (or copy of) every file that will be replaced or deleted.
2. ``journal.json``: written to a temporary name, renamed: from now on the
   transaction is *complete* and will be rolled forward. Before it exists nothing in the tree
   has changed, and recovery only deletes the leftovers (the "incomplete journal" case).
3. Renames ``new/<n>`` -> path (and unlinks for deletions), in journal order.
4. The journal is deleted (the commit point has passed; recovery is no longer needed) and the
   transaction directory removed.

Durability: a kill -9 or Ctrl-C needs no fsync (the kernel keeps every write and rename of a
dead process). Power loss does: with ``durable=True`` (``apply --durable``, ``PATCHSET_FSYNC=1``)
every staged file, the journal and every touched directory is fsynced at its step, as a
database would. Without it (the default, like ``git checkout`` and GNU ``patch``, which fsync no
work-tree file) a power cut can lose the last apply, never install a torn file: recovery checks
each staged file against the sha256 the journal recorded and rolls back when one is damaged.

Recovery is idempotent: rolling forward renames what is still staged; rolling back (on request,
``direction="back"``) puts the ``old/<n>`` links back and removes created files and directories.
A ``flock`` on the transaction directory keeps two processes from committing at once.

Testing hook: ``PATCHSET_TEST_CRASH_AFTER=k`` makes the process SIGKILL itself at the k-th
step (each staged file, the journal, each rename, the cleanup), so tests can kill a real commit
at every point. It is read only from the environment and does nothing when unset.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from patchset.atomic import fsync_path
from patchset.errors import EnvironmentFailure

TXN_DIR = ".patchset-txn"
JOURNAL = "journal.json"
Direction = Literal["auto", "forward", "back"]
FSYNC_ENV = "PATCHSET_FSYNC"  # "1": every commit is durable against power loss (``apply --durable``)


def durable_default() -> bool:
    """Whether a commit fsyncs when its caller does not say: ``$PATCHSET_FSYNC`` set and not 0."""
    return os.environ.get(FSYNC_ENV, "") not in ("", "0")


def _sync(path: Path, durable: bool, directory: bool = False) -> None:
    if durable:
        fsync_path(path, directory=directory)


@dataclass
class Change:
    """The new state of one path (relative to the root, real path: no symlinks in it)."""

    path: str
    data: bytes | None  # None: delete the file
    mode: int | None = None  # permission bits for the new file (None: 0o644); stat.S_IFLNK: a symlink to ``data``


_steps = 0


def _step() -> None:
    """Crash-test hook: count commit steps and signal ourselves at the configured one
    (``PATCHSET_TEST_CRASH_SIGNAL``: ``KILL`` by default, ``INT`` for a Ctrl-C)."""
    global _steps
    target = os.environ.get("PATCHSET_TEST_CRASH_AFTER")
    if not target:
        return
    _steps += 1
    if _steps == int(target):
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("PATCHSET_TEST_CRASH_SIGNAL", "KILL")))


_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C (and TERM/HUP) while the tree is between old and new: the signal is delivered
    once every file is in place, so an interrupted apply leaves the new tree, not a mixed one.
    (SIGKILL cannot be held: the journal and ``recover`` cover it.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_file(path: Path, data: bytes, mode: int, durable: bool = True) -> None:
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


class _Lock:
    """Exclusive flock on the transaction directory (created if missing)."""

    def __init__(self, root: Path) -> None:
        self.dir = root / TXN_DIR
        self.fd = -1

    def __enter__(self) -> _Lock:
        try:
            self.dir.mkdir(exist_ok=True)
            self.fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise EnvironmentFailure(
                f"{self.dir}: cannot create the transaction directory: {exc.strerror}", hint="is the tree writable?"
            ) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise EnvironmentFailure(
                    f"{self.dir.parent}: another patchset process is applying to this tree",
                    hint="wait for it to finish",
                ) from None
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def pending(root: Path) -> bool:
    """Is there an interrupted transaction (leftovers of any kind) under ``root``?"""
    return (root / TXN_DIR).exists()


def describe_pending(root: Path) -> str:
    """What an interrupted transaction under ``root`` left, in words (reads only)."""
    txn = root / TXN_DIR
    if (txn / JOURNAL).exists():
        return f"{TXN_DIR}/{JOURNAL} is complete: some files may be new, some old; recovery finishes it"
    return (
        f"{TXN_DIR} holds leftovers without a journal: the tree itself is the old or the new one; "
        "recovery only removes them"
    )


def commit(
    root: Path,
    changes: list[Change],
    before_finish: Callable[[], None] | None = None,
    durable: bool | None = None,
) -> None:
    """Apply ``changes`` to the tree under ``root`` all-or-nothing, crash-safe.

    ``before_finish`` runs once every file is in place but while the old files are still kept
    (``apply --update-lock`` writes the lock there): if it raises, the tree is rolled back.
    ``durable`` (default: ``durable_default()``) fsyncs every step against power loss.
    """
    root = Path(root)
    durable = durable_default() if durable is None else durable
    if not changes:
        if before_finish is not None:
            before_finish()
        return
    with _Lock(root) as lock:
        _recover_locked(root, "auto")
        txn = lock.dir
        try:
            journal = _prepare(root, txn, changes, durable)
        except BaseException as exc:
            # nothing in the tree has changed yet (no journal): drop the staging area
            _recover_locked(root, "auto")
            _finish(root, txn)
            if not isinstance(exc, OSError):
                raise  # Ctrl-C while staging: the tree is the old one
            raise EnvironmentFailure(
                f"{root}: cannot stage the new files: {exc}",
                hint="check free space and permissions; the tree is unchanged",
            ) from None
        with _signals_deferred():
            _commit_staged(root, txn, journal, before_finish, durable)


def _commit_staged(
    root: Path, txn: Path, journal: dict[str, Any], before_finish: Callable[[], None] | None, durable: bool
) -> None:
    """Steps 2-4 (signals deferred): the journal, the renames, ``before_finish``, the cleanup."""
    _write_journal(txn, journal, durable)
    try:
        _roll_forward(root, txn, journal, durable)
    except OSError as exc:
        _recover_locked(root, "back")
        _finish(root, txn)
        raise EnvironmentFailure(
            f"{root}: writing the new files failed: {exc}", hint="the tree was rolled back to its old state"
        ) from None
    if before_finish is not None:
        try:
            before_finish()
        except BaseException as exc:
            _recover_locked(root, "back")
            _finish(root, txn)
            if isinstance(exc, OSError):
                raise EnvironmentFailure(
                    f"{root}: the tree was patched but {exc.filename or 'the lock'} could not be written: "
                    f"{exc.strerror or exc}",
                    hint="the tree was rolled back to its old state; free space or fix permissions and re-run",
                ) from None
            raise
    _finish(root, txn, durable)


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


def _prepare(root: Path, txn: Path, changes: list[Change], durable: bool) -> dict[str, Any]:
    """Steps 1-2: staged files, backups, the journal (returned)."""
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
            entry["sha256"] = hashlib.sha256(ch.data).hexdigest()
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
                _sync(backup, durable)
            entry["old"] = str(n)
        entries.append(entry)
    if durable and len(staged) > 1:
        # write + fsync the staged files concurrently: the file system commits the fsyncs
        # together, several times faster than one after another
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, len(staged))) as pool:
            for fut in [pool.submit(_write_file, *args) for args in staged]:
                fut.result()
                _step()
    else:
        for args in staged:
            _write_file(*args, durable=durable)
            _step()
    _sync(txn / "new", durable, directory=True)
    _sync(txn / "old", durable, directory=True)
    return {"version": 1, "entries": entries, "created_dirs": created_dirs, "removed_dirs": removed_dirs}


def _write_journal(txn: Path, journal: dict[str, Any], durable: bool) -> None:
    """Step 2: from the moment the journal exists, the transaction rolls forward."""
    tmp = txn / (JOURNAL + ".tmp")
    _write_file(tmp, json.dumps(journal).encode(), 0o644, durable)
    os.replace(tmp, txn / JOURNAL)
    _sync(txn, durable, directory=True)
    _step()


def _roll_forward(root: Path, txn: Path, journal: dict[str, Any], durable: bool = True) -> None:
    """Deletions first, then emptied directories out, new directories in, new files renamed in.
    Every step is skipped when already done, so a second run after a crash finishes the first."""
    entries = journal["entries"]
    touched: set[Path] = set()
    for e in entries:
        target = root / e["path"]
        if e["new"] is None and _exists(target) and not _is_dir(target):
            touched.add(target.parent)
            target.unlink()
            _step()
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
                _step()
    if durable:
        _fsync_dirs(touched)


def _fsync_dirs(dirs: set[Path]) -> None:
    if len(dirs) <= 1:
        for d in dirs:
            fsync_path(d, directory=True)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(dirs))) as pool:
        list(pool.map(lambda d: fsync_path(d, directory=True), dirs))


def _roll_back(root: Path, txn: Path, journal: dict[str, Any]) -> None:
    """The roll-forward undone in reverse order: new files out, created directories out, removed
    directories back, old files back. Idempotent like the roll-forward."""
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


def _finish(root: Path, txn: Path, durable: bool = True) -> None:
    journal = txn / JOURNAL
    if journal.exists():
        journal.unlink()
        _sync(txn, durable, directory=True)
        _step()
    for sub in ("new", "old"):
        _remove_flat(txn / sub)
    (txn / (JOURNAL + ".tmp")).unlink(missing_ok=True)
    try:
        txn.rmdir()
    except OSError:
        pass
    _sync(root, durable, directory=True)


def _recover_locked(root: Path, direction: Direction) -> str | None:
    txn = root / TXN_DIR
    journal = txn / JOURNAL
    leftovers = any(txn.iterdir()) if txn.exists() else False
    if not journal.exists():
        if leftovers:
            # crash before the journal was complete: the tree was never touched
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
            f"{journal}: unreadable transaction journal: {exc}", hint="inspect it by hand; the old files are in old/"
        ) from None
    damaged = _damaged_staged(txn, data) if direction != "back" else []
    if direction == "back" or (damaged and direction == "auto"):
        _roll_back(root, txn, data)
        done = "rolled back" + (f" (staged {', '.join(damaged)} damaged, e.g. by a power cut)" if damaged else "")
    elif damaged:
        raise EnvironmentFailure(
            f"{root}: the staged new content of {', '.join(damaged)} is damaged (a power cut before it reached the disk?)",
            hint=f"roll back instead: `patchset recover --tree {root} --back`, then apply again",
        )
    else:
        _roll_forward(root, txn, data)
        done = "rolled forward"
    journal.unlink()
    fsync_path(txn, directory=True)
    for sub in ("new", "old"):
        _remove_flat(txn / sub)
    return done


def _damaged_staged(txn: Path, journal: dict[str, Any]) -> list[str]:
    """Paths whose staged file no longer holds what the journal recorded (a power cut between a
    non-durable write and its reaching the disk). A staged file already renamed is not checked."""
    bad = []
    for e in journal["entries"]:
        staged = txn / "new" / str(e.get("new"))
        if e.get("new") is None or not e.get("sha256") or staged.is_symlink() or not staged.is_file():
            continue
        if hashlib.sha256(staged.read_bytes()).hexdigest() != e["sha256"]:
            bad.append(e["path"])
    return bad


def recover(root: Path, direction: Direction = "auto") -> str | None:
    """Finish or undo an interrupted commit under ``root``.

    Returns ``None`` (nothing to do), ``"discarded"`` (crash before the journal was complete:
    tree untouched), ``"rolled forward"`` or ``"rolled back"``. ``auto`` rolls a complete
    journal forward; ``back`` undoes it from the saved old files.
    """
    root = Path(root)
    if not (root / TXN_DIR).exists():
        return None
    with _Lock(root) as lock:
        done = _recover_locked(root, direction)
        try:
            lock.dir.rmdir()
        except OSError:
            pass
    return done
