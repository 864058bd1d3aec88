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

Ownership: a tree, an archive or a cloned ledger may carry a transaction directory of its own.
A journal is replayed only when it bears this installation's seal: an HMAC-SHA256, under a
random key kept in the user's state directory (``$PATCHSET_STATE``, else
``$XDG_STATE_HOME/patchset``, else ``~/.local/state/patchset``: ``journal.key``, created once),
of the journal's content and of which kind of transaction directory it is in. The seal is in
the journal itself, so it lands with the journal's one atomic rename and a kill -9 at any step
leaves nothing to reconcile; a copy of a tree an apply was killed in recovers like the original.
Anything else is :class:`~patchset.errors.ForeignJournal` (exit 2): reported with what it names,
never replayed, never cleaned up (the user removes it by hand). Leftovers without a journal are
removed only when they have exactly the shape patchset stages (real ``new/`` and ``old/``
directories of numbered files). Every path a journal names, ours included, is confined under the
root (``patchset.confine``) when it is used. The same seal (``seal_of``/``has_seal``) guards every
other state patchset records and trusts again later (``patchset.sealed``: a rebase in progress,
its backups, the gate's state).

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
import re
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from patchset.atomic import fsync_path
from patchset.confine import check_relative, confine
from patchset.errors import EnvironmentFailure, ForeignJournal, UnsafePathError

JOURNAL = "journal.json"
Direction = Literal["auto", "forward", "back"]

STATE_ENV = "PATCHSET_STATE"  # the directory that holds this installation's journal key
KEY_NAME = "journal.key"
MAX_JOURNAL = 256 << 20  # bytes; ours take ~200 a file, so a larger one is not ours
_STAGED = re.compile(r"[0-9]{1,12}")  # the names of staged files: new/<n>, old/<n>
_KNOWN = frozenset({"new", "old", JOURNAL, JOURNAL + ".tmp"})  # what a transaction directory may hold


# --------------------------------------------------------------------------- ownership


def state_dir() -> Path:
    """Where this installation keeps its journal key: ``$PATCHSET_STATE``, else
    ``$XDG_STATE_HOME/patchset``, else ``~/.local/state/patchset``."""
    raw = os.environ.get(STATE_ENV, "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state") / "patchset"


_keys: dict[str, bytes] = {}


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` (64 hex digits), or None when missing, unreadable or damaged."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        raw = os.read(fd, 256) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    text = raw.strip()
    return bytes.fromhex(text.decode()) if re.fullmatch(rb"[0-9a-f]{64}", text) else None


_key_lock = threading.Lock()


def installation_key(create: bool) -> bytes | None:
    """This installation's journal key (``create``: made on first use, durably); None when there is
    none yet (then no journal found anywhere is ours)."""
    path = state_dir() / KEY_NAME
    with _key_lock:  # threads of one process (verify --jobs) make the key once, not over each other
        key = _keys.get(str(path)) or _read_key(path)
        if key is None and create:
            key = _create_key(path)
        if key is not None:
            _keys[str(path)] = key
    return key


def _create_key(path: Path) -> bytes:
    if os.path.lexists(path):  # never replaced: a damaged key is the user's to look at
        raise EnvironmentFailure(
            f"{path}: patchset's journal key is damaged (not 64 hex digits)",
            hint="remove it and run the command again (journals it sealed will then be reported, not replayed)",
        )
    import secrets

    tmp = path.parent / f".{KEY_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.unlink(missing_ok=True)
        write_file(tmp, secrets.token_hex(32).encode() + b"\n", 0o600)
        try:
            os.link(tmp, path)  # published whole or not at all; a concurrent first run keeps its own
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(path.parent, directory=True)
    except OSError as exc:
        raise EnvironmentFailure(
            f"{path}: cannot create patchset's journal key: {exc.strerror or exc}",
            hint=f"patchset seals every journal it writes with it: set ${STATE_ENV} to a writable directory",
        ) from None
    key = _read_key(path)
    if key is None:
        raise EnvironmentFailure(f"{path}: patchset's journal key is unreadable", hint=f"check {path.parent}")
    return key


def _mac(key: bytes, kind: str, body: dict[str, Any]) -> str:
    import hmac

    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, b"patchset journal 1\0" + kind.encode() + b"\0" + text.encode(), hashlib.sha256).hexdigest()


_SEAL = re.compile(r"[0-9a-f]{64}")


def seal_of(kind: str, body: dict[str, Any]) -> str:
    """This installation's seal of ``body`` as state of ``kind`` (the key is made on first use):
    what a journal carries as ``owner``, and every other state patchset records and trusts again
    later (``patchset.sealed``). ``kind`` says what the state is, so one kind is never taken for
    another."""
    key = installation_key(create=True)
    assert key is not None
    return _mac(key, kind, body)


def has_seal(kind: str, body: dict[str, Any], owner: object) -> bool:
    """Whether ``owner`` is this installation's seal of ``body`` as ``kind``: False when there is
    no key yet, and for anything that is not 64 hex digits (``hmac.compare_digest`` raises
    TypeError for a non-ASCII string). Raises RecursionError for a body nested too deep to hash."""
    import hmac

    if not isinstance(owner, str) or not _SEAL.fullmatch(owner):
        return False
    key = installation_key(create=False)
    return key is not None and hmac.compare_digest(owner, _mac(key, kind, body))


def shown_value(value: object) -> str:
    """A value from recorded state as it may be printed: quoted, control characters escaped, bounded."""
    if isinstance(value, str):
        return repr(value[:200] + ("..." if len(value) > 200 else ""))
    return f"<{type(value).__name__}>"


_shown = shown_value


def _names(data: object, limit: int = 6) -> list[str]:
    """What a (possibly hostile) journal names, for the message: its first paths, sanitised."""
    found: list[object] = []
    if isinstance(data, dict):
        entries = data.get("entries")
        for e in entries if isinstance(entries, list) else []:
            found.append(e.get("path") if isinstance(e, dict) else e)
        for key in ("created_dirs", "removed_dirs"):
            more = data.get(key)
            found.extend(more if isinstance(more, list) else [])
    shown = [_shown(v) for v in found[:limit]]
    if len(found) > limit:
        shown.append(f"and {len(found) - limit} more")
    return shown


def _entry_ok(e: dict[str, Any]) -> bool:
    """One journal entry has the shape ``_prepare`` writes (its path is checked separately)."""
    staged = all(e.get(k) is None or (isinstance(e[k], str) and _STAGED.fullmatch(e[k])) for k in ("new", "old"))
    old_mode, new_mode = e.get("old_mode"), e.get("new_mode")
    modes = (old_mode is None or (type(old_mode) is int and 0 <= old_mode <= 0o7777)) and (
        new_mode is None or (type(new_mode) is int and (0 <= new_mode <= 0o7777 or new_mode == stat.S_IFLNK))
    )
    return isinstance(e.get("path"), str) and staged and modes and isinstance(e.get("sha256"), (str, type(None)))


@dataclass
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
    """Remove a staging directory (``new/``, ``old/``: files and symlinks only, no subdirectories).
    A link in its place is not followed (and not removed)."""
    if not _is_dir(d):
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


def _fsync_dirs(dirs: set[Path]) -> None:
    if len(dirs) <= 1:
        for d in dirs:
            fsync_path(d, directory=True)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(dirs))) as pool:
        list(pool.map(lambda d: fsync_path(d, directory=True), dirs))


@dataclass
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

    @property
    def kind(self) -> str:
        """Which transaction directory this is (``.patchset-txn``, ``.patchset/ledger-txn``): sealed
        into every journal, so one kind's journal is never replayed as the other's."""
        try:
            return self.txn.relative_to(self.root).as_posix()
        except ValueError:
            return self.txn.name

    # -- ownership --------------------------------------------------------------------------
    def seal(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with this installation's seal (``owner``): what ``write_journal`` writes."""
        return {**body, "owner": seal_of(self.kind, body)}

    def _foreign(self, why: str, names: list[str] | None = None) -> ForeignJournal:
        where = str(self.txn) if str(self.txn).isprintable() else repr(str(self.txn))
        message = f"{where}: a transaction directory not written by this installation ({why})"
        if names:
            message += "; its journal names " + ", ".join(names)
        return ForeignJournal(
            message + "; it was left alone, nothing was changed",
            hint=f"it came with the tree, the archive or the repository, or from another user: check what it "
            f"names, then remove {where} by hand and run the command again",
        )

    def _check_path(self) -> None:
        """The transaction directory and every directory between it and the root are real
        directories (or missing): a link there would make the staging area somewhere else."""
        at = self.root
        for part in Path(self.kind).parts:
            at = at / part
            try:
                st = at.lstat()
            except FileNotFoundError:
                return
            except OSError as exc:
                raise self._foreign(f"{part} cannot be read: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                raise self._foreign(f"{part} is a symbolic link, which patchset never makes")
            if not stat.S_ISDIR(st.st_mode):
                raise self._foreign(f"{part} is not a directory")

    def _check_layout(self) -> set[str]:
        """The names in the transaction directory, refused (``ForeignJournal``) unless they are
        what patchset writes there: ``new/`` and ``old/`` (real directories of numbered files or
        links), the journal and its temporary name (regular files)."""
        self._check_path()
        try:
            names = set(os.listdir(self.txn))
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise self._foreign(f"it cannot be read: {exc.strerror}") from None
        odd = sorted(names - _KNOWN)
        if odd:
            shown = ", ".join(_shown(n) for n in odd[:5])
            raise self._foreign(f"it holds {shown}, which patchset never writes there")
        for name in names:
            mode = (self.txn / name).lstat().st_mode
            if name in ("new", "old"):
                if not stat.S_ISDIR(mode):
                    raise self._foreign(f"{name} is not a directory")
                for e in os.scandir(self.txn / name):
                    if not _STAGED.fullmatch(e.name) or not (e.is_symlink() or e.is_file(follow_symlinks=False)):
                        raise self._foreign(f"{name}/ holds {_shown(e.name)}, which patchset never stages")
            elif not stat.S_ISREG(mode):
                raise self._foreign(f"{name} is not a regular file")
        return names

    def _read(self) -> dict[str, Any]:
        """The journal, if this installation sealed it for this kind of directory, its paths
        checked (``UnsafePathError``); otherwise ``ForeignJournal``. Reads only."""
        path = self.txn / JOURNAL
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise self._foreign(f"{JOURNAL} cannot be read: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JOURNAL:
                raise self._foreign(f"{JOURNAL} is not a regular file of at most {MAX_JOURNAL >> 20} MiB")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        try:
            data = json.loads(b"".join(chunks))
        except (ValueError, RecursionError):
            raise self._foreign(f"{JOURNAL} is not readable JSON: damaged, or not patchset's") from None
        if not isinstance(data, dict):
            raise self._foreign(f"{JOURNAL} is not a journal")
        owner = data.get("owner")
        body = {k: v for k, v in data.items() if k != "owner"}
        if not isinstance(owner, str):
            raise self._foreign(f"{JOURNAL} carries no seal of this installation", _names(data))
        try:
            ours = has_seal(self.kind, body, owner)
        except RecursionError:
            ours = False
        if not ours:
            raise self._foreign(f"{JOURNAL} does not carry this installation's seal", _names(data))
        self._validate(body)
        return body

    def _validate(self, body: dict[str, Any]) -> None:
        """The shape of a journal and every path in it (textually: ``confine`` checks them on disk
        when they are used). Even a journal we sealed is checked: a bug must not escape the root."""
        entries, dirs = body.get("entries"), [body.get("created_dirs", []), body.get("removed_dirs", [])]
        paths: list[object] = []
        ok = body.get("version") == 1 and isinstance(entries, list) and all(isinstance(d, list) for d in dirs)
        if ok and isinstance(entries, list):
            for e in entries:
                if not (isinstance(e, dict) and _entry_ok(e)):
                    ok = False
                    break
                paths.append(e["path"])
            for d in dirs:
                paths.extend(d if isinstance(d, list) else [])
        if not ok:
            raise EnvironmentFailure(
                f"{self.txn / JOURNAL}: malformed transaction journal; it was left alone",
                hint=f"check it, then remove {self.txn} by hand (the old files are in old/)",
            )
        what = f"journal {self.kind}/{JOURNAL}"
        try:
            for name in paths:
                check_relative(name if isinstance(name, str) else "", what=what)
        except UnsafePathError as exc:
            raise UnsafePathError(
                f"{self.txn}: {exc.message}; the journal was left alone, nothing was changed",
                hint=f"check it, then remove {self.txn} by hand",
            ) from None

    def _at(self, rel: str) -> Path:
        """Where a path from a journal is, confined under the root (checked at each use: the
        commit itself changes the tree)."""
        return confine(self.root, rel, what=f"journal {self.kind}/{JOURNAL}")

    def _inspect(self) -> tuple[str, dict[str, Any] | None]:
        """What is in the transaction directory: ``("none", None)`` (nothing), ``("leftovers",
        None)`` (staged files without a journal) or ``("complete", journal)``. Raises
        ``ForeignJournal`` (or ``UnsafePathError``) for anything this installation did not write."""
        if not os.path.lexists(self.txn):
            self._check_path()
            return "none", None
        names = self._check_layout()
        if JOURNAL in names:
            return "complete", self._read()
        return ("leftovers" if names else "none"), None

    def foreign(self) -> ForeignJournal | None:
        """The error for a pending transaction directory this installation did not write, or
        None (nothing pending, or ours). Reads only."""
        if not self.pending():
            return None
        try:
            self._inspect()
        except ForeignJournal as exc:
            return exc
        except (UnsafePathError, EnvironmentFailure) as exc:  # sealed by us, yet unusable
            return ForeignJournal(exc.message, hint=exc.hint)
        return None

    # -- what is there (reads only) ---------------------------------------------------------
    def pending(self) -> bool:
        """Is there an interrupted transaction (leftovers of any kind, or anything in their place)?"""
        return os.path.lexists(self.txn)

    def complete(self) -> bool:
        """Was it interrupted after its journal was written (files may be half old, half new)?"""
        return os.path.lexists(self.txn / JOURNAL)

    def describe(self) -> str:
        """What an interrupted transaction left, in words."""
        name = self.kind if self.txn.is_relative_to(self.root) else self.txn
        bad = self.foreign()
        if bad is not None:
            return bad.message
        if self.complete():
            return f"{name}/{JOURNAL} is complete: some files may be new, some old; recovery finishes it"
        return f"{name} holds leftovers without a journal: the files themselves are the old ones; recovery removes them"

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
        """Step 2: from the moment the journal exists, the transaction rolls forward. It carries
        this installation's seal, so recovery knows it is ours."""
        tmp = self.txn / (JOURNAL + ".tmp")
        write_file(tmp, json.dumps(self.seal(journal)).encode(), 0o644, self.durable)
        os.replace(tmp, self.txn / JOURNAL)
        self._sync(self.txn, directory=True)
        step()

    def roll_forward(self, journal: dict[str, Any]) -> None:
        """Deletions first, then emptied directories out, new directories in, new files renamed in.
        Every step is skipped when already done, so a second run after a crash finishes the first."""
        txn = self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in entries:
            if e["new"] is None:
                target = self._at(e["path"])
                if _exists(target) and not _is_dir(target):
                    touched.add(target.parent)
                    target.unlink()
                    step()
        for d in journal.get("removed_dirs", []):
            at = self._at(d)
            if _is_dir(at):
                at.rmdir()
                touched.add(at.parent)
        for d in journal.get("created_dirs", []):
            at = self._at(d)
            if not _is_dir(at):
                at.mkdir()
                touched.add(at.parent)
        for e in entries:
            if e["new"] is not None:
                staged = txn / "new" / e["new"]
                if _exists(staged):  # a staged symlink may dangle until it is in place
                    target = self._at(e["path"])
                    touched.add(target.parent)
                    os.replace(staged, target)
                    step()
        if self.durable:
            _fsync_dirs(touched)

    def roll_back(self, journal: dict[str, Any]) -> None:
        """The roll-forward undone in reverse order: new files out, created directories out, removed
        directories back, old files back. Idempotent like the roll-forward."""
        txn = self.txn
        entries = journal["entries"]
        touched: set[Path] = set()
        for e in reversed(entries):
            if e["new"] is not None and e["old"] is None:
                target = self._at(e["path"])
                if _exists(target) and not _is_dir(target):
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
            if not _is_dir(at):
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
        """Finish or undo what an interrupted commit left (the lock is held). What this
        installation did not write is refused (``ForeignJournal``) and left as it is."""
        txn = self.txn
        state, data = self._inspect()
        if state == "none":
            return None
        if data is None:
            # crash before the journal was complete: nothing outside the staging area changed
            for sub in ("new", "old"):
                _remove_flat(txn / sub)
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
            _remove_flat(txn / sub)
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
            _remove_flat(self.txn / sub)
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
