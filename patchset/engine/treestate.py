"""The tree as a series sees it in memory: files read lazily from disk, the series' changes overlaid.

A series is applied here first, whole, and written only when every patch applied
(``patchset.engine.tree``): so a dry run and a real run see the same tree, and what the commit
gets (``TreeState.changes``) is exactly what differs from the disk.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

from patchset.errors import EnvironmentFailure
from patchset.journal.commit import Change

SYMLINK = stat.S_IFLNK  # the "mode" of a symbolic link in memory and in a journal ``Change``: data is its target


class TreeState:
    """The tree as the series sees it in memory: lazily read files, overlaid changes.

    It also knows which paths are directories, so a series that makes ``d`` a file and then
    writes ``d/x`` fails in the dry run exactly as in the real run, and a file may replace a
    directory only once every file in it is deleted (the commit removes the emptied directory).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.disk: dict[str, tuple[bytes | None, int | None]] = {}
        self.now: dict[str, tuple[bytes | None, int | None]] = {}
        self.live: Counter[str] = Counter()  # directory -> present files under it in ``now``
        self.kinds: dict[str, str | None] = {}  # paths probed for file/dir clashes (not read)
        self.links: dict[str, str | None] = {}  # paths probed for links on disk (not read)

    def _load(self, rel: str) -> tuple[bytes | None, int | None]:
        if rel not in self.disk:
            path = self.root / rel
            try:
                st = path.lstat()  # a resolved path has no link in it, unless it is a git symlink's own path
            except (FileNotFoundError, NotADirectoryError):
                self.disk[rel] = (None, None)
            except OSError as exc:
                raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
            else:
                if stat.S_ISDIR(st.st_mode):
                    self.disk[rel] = (None, None)
                    return self.disk[rel]
                if stat.S_ISLNK(st.st_mode):
                    self.disk[rel] = (os.fsencode(os.readlink(path)), SYMLINK)
                    return self.disk[rel]
                if not stat.S_ISREG(st.st_mode):
                    raise EnvironmentFailure(
                        f"{path}: not a regular file", hint="patches can only change regular files"
                    )
                try:
                    self.disk[rel] = (path.read_bytes(), st.st_mode & 0o7777)
                except OSError as exc:
                    raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
        return self.disk[rel]

    def link_at(self, rel: str) -> str | None:
        """The target of the symlink at ``rel`` as the series has the tree now, or None.

        ``rel`` has no link in its prefixes (callers expand them first). A path under one the
        series changed is not looked up on disk: what is there now will not be after the commit.
        """
        if rel in self.now or rel in self.disk:
            data, mode = self.get(rel)
            return os.fsdecode(data) if mode == SYMLINK and data is not None else None
        if any(parent in self.now for parent in parents(rel)):
            return None
        if rel not in self.links:
            path = self.root / rel
            try:
                st = path.lstat()
                self.links[rel] = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            except (FileNotFoundError, NotADirectoryError):
                self.links[rel] = None
            except OSError as exc:
                raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
        return self.links[rel]

    def get(self, rel: str) -> tuple[bytes | None, int | None]:
        if rel in self.now:
            return self.now[rel]
        return self._load(rel)

    def set(self, rel: str, data: bytes | None, mode: int | None) -> None:
        self._load(rel)
        was = self.get(rel)[0] is not None
        self.now[rel] = (data, mode if data is not None else None)
        step = (data is not None) - was
        if step:
            for parent in parents(rel):
                self.live[parent] += step

    def _disk_kind(self, rel: str) -> str | None:
        """``file``, ``dir`` or ``None`` on disk, without reading (the result is not a touched file)."""
        if rel not in self.kinds:
            try:
                mode = (self.root / rel).lstat().st_mode
            except (FileNotFoundError, NotADirectoryError):
                self.kinds[rel] = None
            except OSError as exc:
                raise EnvironmentFailure(f"{self.root / rel}: cannot read: {exc.strerror}") from None
            else:
                self.kinds[rel] = "dir" if stat.S_ISDIR(mode) else "file"
        return self.kinds[rel]

    def is_file(self, rel: str) -> bool:
        if rel in self.now or rel in self.disk:
            return self.get(rel)[0] is not None
        return self._disk_kind(rel) == "file"

    def is_dir(self, rel: str) -> bool:
        """A directory now: a present file under it, or a directory on disk not emptied by the series."""
        if self.live[rel] > 0:
            return True
        if self._disk_kind(rel) != "dir":
            return False
        for dirpath, subdirs, names in os.walk(self.root / rel):
            if any(os.path.islink(os.path.join(dirpath, d)) for d in subdirs):
                return True  # a link to a directory: not a file the series can delete
            for name in names:
                sub = os.path.relpath(os.path.join(dirpath, name), self.root)
                if self.get(sub)[0] is not None or sub not in self.now:
                    return True  # a file the series keeps (or never touched)
        return False

    def blocker(self, rel: str) -> str | None:
        """Why a file cannot be written at ``rel`` now (a parent is a file, ``rel`` is a directory)."""
        for parent in parents(rel):
            if self.is_file(parent):
                return f"{parent} is a file, so {rel} cannot be created under it"
        if self.is_dir(rel):
            return f"{rel} is a directory that still holds files, so it cannot become a file"
        return None

    def fork(self) -> TreeState:
        other = TreeState(self.root)
        other.disk = self.disk  # shared read cache
        other.kinds = self.kinds
        other.links = self.links
        other.now = dict(self.now)
        other.live = Counter(self.live)
        return other

    def changes(self, digests: dict[str, str | None] | None = None) -> list[Change]:
        """What differs from the disk; ``digests`` (path -> sha256 of the new content, as the
        result already holds them) spare the journal hashing every file again."""
        out = []
        for rel, (data, mode) in self.now.items():
            if (data, mode) != self.disk[rel]:
                out.append(Change(rel, data, mode, (digests or {}).get(rel)))
        return out


def parents(rel: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
