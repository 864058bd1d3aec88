"""A transaction directory as found on disk: its layout, its journal, and whether it is ours.

Everything here reads only. A tree, an archive or a cloned ledger may carry a transaction
directory of its own, so what is found is checked before anything acts on it: the directory
holds only what patchset stages there, the journal bears this installation's seal
(``patchset.journal.seal``), and every path it names stays under the root. What fails is
:class:`~patchset.errors.ForeignJournal`, reported with what it names and left alone.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.confine import check_relative, confine
from patchset.errors import EnvironmentFailure, ForeignJournal, UnsafePathError
from patchset.journal.seal import has_seal, seal_of, shown_value

JOURNAL = "journal.json"
MAX_JOURNAL = 256 << 20  # bytes; ours take ~200 a file, so a larger one is not ours
_STAGED = re.compile(r"[0-9]{1,12}")  # the names of staged files: new/<n>, old/<n>
_KNOWN = frozenset({"new", "old", JOURNAL, JOURNAL + ".tmp"})  # what a transaction directory may hold
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
    """One journal entry has the shape ``Journal.prepare`` writes (its path is checked separately)."""
    staged = all(e.get(k) is None or (isinstance(e[k], str) and _STAGED.fullmatch(e[k])) for k in ("new", "old"))
    old_mode, new_mode = e.get("old_mode"), e.get("new_mode")
    modes = (old_mode is None or (type(old_mode) is int and 0 <= old_mode <= 0o7777)) and (
        new_mode is None or (type(new_mode) is int and (0 <= new_mode <= 0o7777 or new_mode == stat.S_IFLNK))
    )
    return isinstance(e.get("path"), str) and staged and modes and isinstance(e.get("sha256"), (str, type(None)))


@dataclass
class TxnDir:
    """The transaction directory ``txn`` of the files under ``root``, as found (reads only)."""

    root: Path
    txn: Path

    @property
    def kind(self) -> str:
        """Which transaction directory this is (``.patchset-txn``, ``.patchset/ledger-txn``): sealed
        into every journal, so one kind's journal is never replayed as the other's."""
        try:
            return self.txn.relative_to(self.root).as_posix()
        except ValueError:
            return self.txn.name

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
