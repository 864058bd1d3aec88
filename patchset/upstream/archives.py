"""Read release archives (sdist tarballs, wheels) member by member, safely.

Both the unpacker and the git-history importer stream the same members, so the path rules live in
one place: no absolute names, no ``..``, no NUL, no special files, symlinks that stay inside the
tree, hard links only to earlier regular files. ``unpack`` writes into a temporary sibling
directory and renames it into place, so a refused or damaged archive leaves nothing behind.
"""

from __future__ import annotations

import calendar
import hashlib
import itertools
import lzma
import os
import posixpath
import re
import shutil
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from patchset.atomic import publish_dir
from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.records import record
from patchset.upstream.tarstream import Decompressor, TarHeader, iter_tar_headers

FILE = "file"
DIR = "dir"
SYMLINK = "symlink"
HARDLINK = "hardlink"

_DRIVE = re.compile(r"^[A-Za-z]:")


@record(frozen=True)
class Member:
    """One archive entry, with its path relative to the tree root (top directory stripped)."""

    path: str
    kind: str  # FILE | DIR | SYMLINK | HARDLINK
    mode: int  # permission bits (0o644, 0o755 ...)
    mtime: int  # seconds since the epoch, UTC
    data: bytes = b""  # content of a FILE
    link: str = ""  # SYMLINK: target as stored; HARDLINK: tree path of the earlier member

    @property
    def executable(self) -> bool:
        return bool(self.mode & 0o111)


def is_zip_name(path: Path) -> bool:
    return path.suffix.lower() in (".whl", ".zip")


def clean_name(name: str, archive: Path | str) -> str:
    """Normalise a member name to a relative posix path, refusing names that escape the root."""
    if "\x00" in name:
        raise UnsafePathError(f"{archive}: member name contains NUL: {name!r}")
    if name.startswith("/") or _DRIVE.match(name):
        raise UnsafePathError(
            f"{archive}: member {name!r} has an absolute path",
            hint="the archive is malformed or hostile; do not unpack it",
        )
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePathError(
            f"{archive}: member {name!r} climbs out of the tree with '..'",
            hint="the archive is malformed or hostile; do not unpack it",
        )
    return "/".join(parts)


def check_symlink(path: str, target: str, archive: Path | str) -> None:
    """Refuse a symlink whose target (read textually from its own directory) leaves the tree."""
    if not target or "\x00" in target:
        raise UnsafePathError(f"{archive}: symlink {path!r} has an empty or invalid target")
    if target.startswith("/") or _DRIVE.match(target):
        raise UnsafePathError(f"{archive}: symlink {path!r} points to absolute path {target!r}")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith("../"):
        raise UnsafePathError(f"{archive}: symlink {path!r} -> {target!r} points outside the tree")
    parts = target.split("/")
    climbs = len(parts) - len(list(itertools.dropwhile(lambda p: p == "..", parts)))
    if ".." in parts[climbs:]:
        # "sub/l2/.." names sub only while sub/l2 is a directory: once a later member makes
        # sub/l2 a link, the same text leaves the tree (CVE-2025-4138/4330 in tarfile's data
        # filter before CPython 3.11.13/3.12.11/3.13.4). Release archives never need this form.
        raise UnsafePathError(
            f"{archive}: symlink {path!r} -> {target!r} has '..' after a name",
            hint="a link through another link and back up can leave the tree; the archive is hostile or broken",
        )


class ArchiveReader:
    """Iterate the members of a .tar[.gz|.bz2|.xz] or a .zip/.whl, once, in archive order.

    ``strip_top`` drops the single top directory every sdist has (``vllm-0.30.0/``); a member
    outside it raises InputError. Zip files strip only when all members share one top directory
    (wheels never do). ``sha256`` holds the archive's digest after a full iteration.
    ``on_bytes`` is called with the number of compressed bytes consumed (for progress bars).
    """

    def __init__(
        self,
        archive: Path | str,
        *,
        strip_top: bool = True,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self.path = Path(archive)
        self.strip_top = strip_top
        self.on_bytes = on_bytes
        self.top: str | None = None
        self.sha256: str | None = None
        if not self.path.is_file():
            raise InputError(f"archive not found: {self.path}")

    def __iter__(self) -> Iterator[Member]:
        try:
            if is_zip_name(self.path) or (not _looks_like_tar(self.path) and zipfile.is_zipfile(self.path)):
                yield from self._iter_zip()
            else:
                yield from self._iter_tar()
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno:
                raise EnvironmentFailure(f"cannot read {self.path}: {exc}") from exc
            raise InputError(
                f"archive {self.path} is damaged or not a tar/zip archive: {exc}",
                hint="delete it and download it again",
            ) from exc

    # -- tar ---------------------------------------------------------------------------------
    def _iter_tar(self) -> Iterator[Member]:
        with open(self.path, "rb") as raw:
            source = Decompressor(raw, self.on_bytes)
            for header in iter_tar_headers(source, self.path):
                member = self._tar_member(header)
                if member is not None:
                    yield member
            self.sha256 = source.finish()

    def _tar_member(self, h: TarHeader) -> Member | None:
        is_dir = h.type == b"5"
        path = self._strip(clean_name(h.name, self.path), is_dir)
        if path is None:
            return None
        if h.type in (b"0", b"\0", b"7"):
            return Member(path, FILE, h.mode, h.mtime, data=h.data)
        if is_dir:
            return Member(path, DIR, h.mode, h.mtime)
        if h.type == b"2":
            check_symlink(path, h.linkname, self.path)
            return Member(path, SYMLINK, h.mode, h.mtime, link=h.linkname)
        if h.type == b"1":
            target = self._strip(clean_name(h.linkname, self.path), False)
            if not target:
                raise UnsafePathError(f"{self.path}: hard link {path!r} has no valid target")
            return Member(path, HARDLINK, h.mode, h.mtime, link=target)
        raise UnsafePathError(
            f"{self.path}: member {h.name!r} is a device, fifo or other special file "
            f"(tar type {h.type.decode(errors='replace')!r})",
            hint="release archives contain only files, directories and links",
        )

    def _strip(self, path: str, is_dir: bool) -> str | None:
        """Remove the top directory; None for the top directory entry itself (or '.')."""
        if not path:
            return None
        if not self.strip_top:
            return path
        head, _, rest = path.partition("/")
        if self.top is None:
            if not rest and not is_dir:
                raise InputError(
                    f"{self.path}: member {path!r} is not inside a top directory",
                    hint="pass strip_top=False for archives without a single top directory",
                )
            self.top = head
        if head != self.top:
            raise InputError(
                f"{self.path}: member {path!r} is outside the top directory {self.top + '/'!r}",
                hint="pass strip_top=False for archives without a single top directory",
            )
        return rest or None

    # -- zip ---------------------------------------------------------------------------------
    def _iter_zip(self) -> Iterator[Member]:
        digest = hashlib.sha256()
        with open(self.path, "rb") as raw:
            for chunk in iter(lambda: raw.read(1 << 20), b""):
                digest.update(chunk)
        self.sha256 = digest.hexdigest()
        with zipfile.ZipFile(self.path) as zf:
            infos = zf.infolist()
            names = [clean_name(i.filename, self.path) for i in infos]
            common: str | None = None
            if self.strip_top:
                heads = {n.partition("/")[0] for n in names if n}
                nested = all("/" in n or i.is_dir() for n, i in zip(names, infos, strict=True) if n)
                if len(heads) == 1 and nested:
                    common = heads.pop()
                    self.top = common
            for info, name in zip(infos, names, strict=True):
                if common is not None:
                    name = name.partition("/")[2]
                if self.on_bytes:
                    self.on_bytes(info.compress_size)
                if not name:
                    continue
                unix = info.external_attr >> 16 if info.create_system == 3 else 0
                mode = (unix & 0o7777) or (0o755 if info.is_dir() else 0o644)
                mtime = calendar.timegm((*info.date_time, 0, 0, 0))
                if info.is_dir():
                    yield Member(name, DIR, mode, mtime)
                elif stat.S_ISLNK(unix):
                    target = zf.read(info).decode("utf-8", "surrogateescape")
                    check_symlink(name, target, self.path)
                    yield Member(name, SYMLINK, mode, mtime, link=target)
                else:
                    yield Member(name, FILE, mode, mtime, data=zf.read(info))


def _looks_like_tar(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"))


def unpack(archive: Path | str, dest: Path | str, *, strip_top: bool = True) -> int:
    """Unpack ``archive`` into ``dest`` (which must not exist or be empty); return the file count.

    Sdists lose their top directory (``vllm-0.30.0/``) when ``strip_top``. Executable bits are
    kept; timestamps are not (build trees do not need them). Members that escape ``dest`` raise
    UnsafePathError and nothing is left behind: the tree is built in a temporary sibling and
    renamed into place only when complete.
    """
    archive = Path(archive)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(
            f"unpack destination {dest} exists and is not an empty directory",
            hint="choose a new directory or remove the old tree first",
        )
    with publish_dir(dest) as tmp:
        count = _extract(ArchiveReader(archive, strip_top=strip_top), tmp)
    return count


def _extract(reader: ArchiveReader, root: Path) -> int:
    made_dirs: set[str] = {""}
    files: set[str] = set()
    links: dict[str, str] = {}
    root_str = str(root)

    def ensure_dir(rel: str) -> None:
        if rel in made_dirs:
            return
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix in links:
                raise UnsafePathError(f"{reader.path}: member under {prefix!r} would be written through a symlink")
            if prefix not in made_dirs:
                full = os.path.join(root_str, prefix)
                if not os.path.isdir(full):
                    if os.path.lexists(full):
                        os.unlink(full)
                    os.mkdir(full)
                made_dirs.add(prefix)

    for m in reader:
        if m.path in links:
            del links[m.path]  # a later member replaces an earlier link of the same name
        if m.kind == DIR:
            ensure_dir(m.path)
            continue
        parent = posixpath.dirname(m.path)
        ensure_dir(parent)
        full = os.path.join(root_str, m.path)
        if m.kind == SYMLINK:
            if m.path in made_dirs:
                raise UnsafePathError(f"{reader.path}: member {m.path!r} is both a directory and a link")
            if m.path in files:
                files.discard(m.path)
                os.unlink(full)
            links[m.path] = m.link  # created last, so no write can go through it
            continue
        if m.path in made_dirs:
            raise UnsafePathError(f"{reader.path}: member {m.path!r} is both a directory and a file")
        if os.path.lexists(full):
            os.unlink(full)
        if m.kind == HARDLINK:
            if m.link not in files:
                raise UnsafePathError(
                    f"{reader.path}: hard link {m.path!r} -> {m.link!r} does not name an earlier file"
                )
            shutil.copy2(os.path.join(root_str, m.link), full)
        else:
            with open(full, "wb") as fh:
                fh.write(m.data)
            if m.mode & 0o111:
                os.chmod(full, 0o755)
        files.add(m.path)

    real_root = os.path.realpath(root_str)
    for path, target in links.items():
        os.symlink(target, os.path.join(root_str, path))
    # every link checked once all exist: a later link can change where an earlier one leads
    for path, target in links.items():
        resolved = os.path.realpath(os.path.join(root_str, path))
        if resolved != real_root and not resolved.startswith(real_root + os.sep):
            raise UnsafePathError(f"{reader.path}: symlink {path!r} -> {target!r} resolves outside the tree")
    return len(files) + len(links)
