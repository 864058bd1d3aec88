"""Read release archives (sdist tarballs, wheels) member by member, safely.

Both the unpacker and the git-history importer stream the same members, so the path rules live in
one place: names go through ``patchset.confine.check_relative`` (no absolute names, no ``..``, no
control characters, nothing under ``.patchset``/``.patchset-txn`` or ``.git``), no special files,
symlinks that stay inside the tree, hard links only to earlier regular files. Sizes, member counts
and timestamps are bounded (``limits``) before a member's bytes are read. ``unpack`` writes into a
temporary sibling directory and renames it into place, so a refused or damaged archive, or a disk
that fills up, leaves nothing behind.
"""

from __future__ import annotations

import calendar
import errno
import hashlib
import itertools
import lzma
import os
import posixpath
import re
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from patchset.atomic import publish_dir
from patchset.confine import check_relative
from patchset.errors import EnvironmentFailure, InputError, PatchsetError, UnsafePathError
from patchset.upstream.boundedtar import HashedFile, Header, HeaderStream, data_filter_mode, decompressed
from patchset.upstream.limits import MAX_LINK_BYTES, MAX_MEMBERS_ENV, ArchiveLimits, Budget, check_mtime

FILE = "file"
DIR = "dir"
SYMLINK = "symlink"
HARDLINK = "hardlink"

_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
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


def clean_name(name: str, archive: Path | str, *, what: str | None = None) -> str:
    """Normalise a member name to a relative posix path (``""`` for the archive's root entry,
    ``./``), refusing names that escape the root (``confine.check_relative``). Patchset's state
    directories and ``.git`` are refused (``check_relative`` again) once the top directory is gone."""
    if not name.startswith("/") and all(p in ("", ".") for p in name.split("/")):
        return ""
    return check_relative(name, what=what or f"archive {archive} member", allow_state=True, allow_git=True)


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
    if joined != ".":  # nor may a link lead into patchset's state or a .git directory
        check_relative(joined, what=f"archive {archive} symlink {path!r} -> {target!r}")


class ArchiveReader:
    """Iterate the members of a .tar[.gz|.bz2|.xz] or a .zip/.whl, once, in archive order.

    ``strip_top`` drops an sdist's single top directory (a member outside it is an InputError; a
    zip strips only when all members share one). ``sha256`` is the digest after a full pass;
    ``on_bytes`` hears the compressed bytes consumed. Each pass counts against ``limits`` and refuses
    a member before reading it."""

    def __init__(
        self,
        archive: Path | str,
        *,
        strip_top: bool = True,
        on_bytes: Callable[[int], None] | None = None,
        limits: ArchiveLimits | None = None,
    ) -> None:
        self.path = Path(archive)
        self.strip_top = strip_top
        self.on_bytes = on_bytes
        self.limits = limits or ArchiveLimits.from_env()
        self._what = f"archive {self.path} member"  # built once: every member's name is checked
        self.top: str | None = None
        self.sha256: str | None = None
        if not self.path.is_file():
            raise InputError(f"archive not found: {self.path}")
        self._filter_root = os.path.realpath(self.path)  # a file: nothing can exist under it

    def __iter__(self) -> Iterator[Member]:
        self.top = None
        seen: set[str] = set()
        name = self.path.name.lower()
        tar_named = name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"))
        zipped = name.endswith((".whl", ".zip")) or (not tar_named and zipfile.is_zipfile(self.path))
        try:
            for member in self._iter_zip() if zipped else self._iter_tar():
                if member.path in seen:  # the rule `build wheel` applies too (build/wheel.py:check_members)
                    raise UnsafePathError(
                        f"archive {self.path} member {member.path!r} appears twice",
                        hint="release archives name each member once; the archive is hostile or broken",
                    )
                seen.add(member.path)
                yield member
        except (
            zipfile.BadZipFile,
            tarfile.TarError,
            zlib.error,
            lzma.LZMAError,
            EOFError,
            OSError,
            ValueError,
            NotImplementedError,
        ) as exc:
            if isinstance(exc, OSError) and exc.errno:
                raise EnvironmentFailure(f"cannot read {self.path}: {exc}") from exc
            raise InputError(
                f"archive {self.path} is damaged or not a tar/zip archive: {exc}",
                hint="delete it and download it again",
            ) from exc

    # -- tar ---------------------------------------------------------------------------------
    def _iter_tar(self) -> Iterator[Member]:
        """The standard ``tarfile`` reads the members (ustar, GNU, pax); the budget is taken at each
        512-byte header before tarfile reads what follows it (``tarheaders.Header``), and every
        member passes tarfile's ``data`` filter (PEP 706) after patchset's own path rules."""
        budget = Budget(self.path, self.limits)
        with open(self.path, "rb") as raw:
            hashed = HashedFile(raw, self.on_bytes)
            stream = HeaderStream(decompressed(hashed), self.path)
            with tarfile.TarFile(
                fileobj=cast(IO[bytes], stream),  # read, seek and tell are what tarfile uses
                mode="r",
                tarinfo=Header.for_pass(self.path, budget),
                encoding="utf-8",
                errors="surrogateescape",
            ) as tf:
                info = tf.next()
                while info is not None:
                    member = self._tar_member(tf, stream, budget, info)
                    if member is not None:
                        yield member
                    tf.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every header it read
                    stream.next_member()
                    info = tf.next()
            self.sha256 = hashed.finish()

    def _tar_member(
        self, tf: tarfile.TarFile, stream: HeaderStream, budget: Budget, h: tarfile.TarInfo
    ) -> Member | None:
        name = h.name
        Header.check_member(h, self.path, budget)  # pax size/mtime, sparse files: before any data is read
        mtime = check_mtime(h.mtime, name, self.path)
        is_dir = h.isdir()
        path = self._strip(clean_name(name, self.path, what=self._what), is_dir)
        if path is None:
            return None
        # nor under .patchset/.patchset-txn (any case) or .git: no patchset state, no repository
        check_relative(path, what=self._what)
        target = ""
        if h.issym():
            check_symlink(path, h.linkname, self.path)
        elif h.islnk():
            target = self._strip(clean_name(h.linkname, self.path, what=self._what), False) or ""
            if not target:
                raise UnsafePathError(f"{self.path}: hard link {path!r} has no valid target")
            check_relative(target, what=self._what)
        elif not (h.isreg() or is_dir):
            raise UnsafePathError(
                f"{self.path}: member {name!r} is a device, fifo or other special file "
                f"(tar type {h.type.decode(errors='replace')!r})",
                hint="release archives contain only files, directories and links",
            )
        try:
            mode = data_filter_mode(h, self._filter_root)
        except tarfile.FilterError as exc:
            raise UnsafePathError(
                f"{self.path}: {exc}", hint="tarfile's data filter refuses it; the archive is hostile or broken"
            ) from None
        if is_dir:
            return Member(path, DIR, mode, mtime)
        if h.issym():
            return Member(path, SYMLINK, mode, mtime, link=h.linkname)
        if h.islnk():
            return Member(path, HARDLINK, mode, mtime, link=target)
        with stream.data():
            fh = tf.extractfile(h)
            data = fh.read() if fh is not None else b""
        return Member(path, FILE, mode, mtime, data=data)

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
            declared = _zip_directory(raw)
        self.sha256 = digest.hexdigest()
        check_declared_members(declared, self.path, self.limits)
        with zipfile.ZipFile(self.path) as zf:
            infos = zf.infolist()
            whole = Budget(self.path, self.limits)  # every declared size, before anything is read
            for info in infos:
                whole.take_member(info.filename)
                whole.take(info.filename, info.file_size)
            names = [clean_name(i.filename, self.path, what=self._what) for i in infos]
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
                check_relative(name, what=self._what)  # no .patchset or .git in the tree
                _check_zip_entry(info, name, self.path)
                unix = info.external_attr >> 16 if info.create_system == 3 else 0
                mode = (unix & 0o7777) or (0o755 if info.is_dir() else 0o644)
                mtime = check_mtime(calendar.timegm((*info.date_time, 0, 0, 0)), name, self.path)
                if info.is_dir():
                    yield Member(name, DIR, mode, mtime)
                elif stat.S_ISLNK(unix):
                    if info.file_size > MAX_LINK_BYTES:
                        raise UnsafePathError(
                            f"{self.path}: symlink {name!r} has a {info.file_size}-byte target "
                            f"(at most {MAX_LINK_BYTES})"
                        )
                    target = zf.read(info).decode("utf-8", "surrogateescape")
                    check_symlink(name, target, self.path)
                    yield Member(name, SYMLINK, mode, mtime, link=target)
                else:
                    # zipfile reads at most file_size bytes (checked above), then checks the CRC
                    yield Member(name, FILE, mode, mtime, data=zf.read(info))


def check_declared_members(declared: tuple[int, int] | None, archive: Path, limits: ArchiveLimits) -> None:
    """Refuse a zip whose end record (``zip_directory``) declares more members than ``limits``
    allow, before ``zipfile`` parses (and holds) the whole central directory."""
    if declared is None:
        return
    entries, size = declared
    if entries > limits.max_members or size > limits.max_members * _ZIP_ENTRY_BYTES:
        raise InputError(
            f"archive {archive} has more than {limits.max_members} members "
            f"(its directory declares {entries} in {size} bytes)",
            hint=f"the archive is hostile or broken; if it is a genuine release, raise {MAX_MEMBERS_ENV}",
        )


def check_zip(path: Path, limits: ArchiveLimits | None = None) -> list[zipfile.ZipInfo]:
    """The members of the zip (or wheel) at ``path``, refused whole (InputError) before any is read
    when the archive is past ``limits`` (declared member count, every member's declared size, the
    total; zipfile then reads at most the declared size of a member and checks its CRC) or a
    member is one zipfile cannot read (encrypted, an unknown method). Names are the caller's to
    check. The one gate for every reader of a zip that is data (``build wheel`` too)."""
    limits = limits or ArchiveLimits.from_env()
    try:
        with open(path, "rb") as raw:
            check_declared_members(_zip_directory(raw), path, limits)
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(
            f"{path}: not a zip archive ({exc})", hint="the archive is damaged: download it again"
        ) from None
    except OSError as exc:
        raise EnvironmentFailure(f"cannot read {path}: {exc.strerror or exc}") from None
    budget = Budget(path, limits)
    for info in infos:
        budget.take_member(info.filename)
        budget.take(info.filename, info.file_size)
        _check_zip_entry(info, info.filename, path)
    return infos


_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
_ZIP_UNREADABLE = 0x1 | 0x20 | 0x40  # encrypted, patched data, strong encryption


def _check_zip_entry(info: zipfile.ZipInfo, name: str, archive: Path) -> None:
    """Refuse, before reading, a member zipfile cannot read (it would raise outside its own errors)."""
    if info.flag_bits & _ZIP_UNREADABLE:
        raise InputError(
            f"archive {archive} member {name!r} is encrypted or patched data (zip flags {info.flag_bits:#x})",
            hint="release wheels are never encrypted; the archive is hostile or broken",
        )
    if info.compress_type not in _ZIP_METHODS:
        raise InputError(
            f"archive {archive} member {name!r} uses zip compression method {info.compress_type}",
            hint="wheels use stored or deflate; the archive is hostile or broken",
        )


# A central-directory record is 46 bytes and a name; real wheels average 115 bytes a member.
_ZIP_ENTRY_BYTES = 512


def _zip_directory(raw: BinaryIO) -> tuple[int, int] | None:
    """``(members, directory bytes)`` as the zip's end record declares them (zip64 too); None
    when there is no end record (``zipfile`` then says why)."""
    end = raw.seek(0, os.SEEK_END)
    tail_len = min(end, 22 + 0xFFFF)
    raw.seek(end - tail_len)
    tail = raw.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    entries, size, offset = struct.unpack("<HLL", tail[at + 10 : at + 20])
    if (entries == 0xFFFF or size == 0xFFFFFFFF or offset == 0xFFFFFFFF) and at >= 20:
        locator = tail[at - 20 : at]
        if locator[:4] == b"PK\x06\x07":
            (where,) = struct.unpack("<Q", locator[8:16])
            if where < end:
                raw.seek(where)
                record = raw.read(56)
                if len(record) == 56 and record[:4] == b"PK\x06\x06":
                    entries, size = struct.unpack("<QQ", record[32:48])
    return entries, size


def unpack(
    archive: Path | str, dest: Path | str, *, strip_top: bool = True, limits: ArchiveLimits | None = None
) -> int:
    """Unpack ``archive`` into ``dest`` (absent or empty); return the file count.

    Built in a temporary sibling and renamed into place only when complete: an escaping member
    (UnsafePathError), an archive past ``limits`` (InputError) or a full disk (EnvironmentFailure)
    leaves nothing behind. Executable bits are kept, timestamps not."""
    archive = Path(archive)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(
            f"unpack destination {dest} exists and is not an empty directory",
            hint="choose a new directory or remove the old tree first",
        )
    reader = ArchiveReader(archive, strip_top=strip_top, limits=limits)
    try:
        with publish_dir(dest) as tmp:
            count = _extract(reader, tmp)
    except OSError as exc:  # reading errors are domain errors already: this is the disk we write to
        raise _write_failure(exc, reader, dest) from None
    return count


_BLOCK = 4096  # what a file or directory takes at least on disk, for the space estimate


def _space_needed(reader: ArchiveReader) -> int | None:
    """About how many bytes the unpacked tree takes (files rounded up to blocks), from a fresh pass."""
    total = 0
    try:
        for m in ArchiveReader(reader.path, strip_top=reader.strip_top, limits=reader.limits):
            total += (len(m.data) + _BLOCK - 1) // _BLOCK * _BLOCK if m.kind == FILE else _BLOCK
    except PatchsetError:
        return None
    return total


def _write_failure(exc: OSError, reader: ArchiveReader, dest: Path) -> PatchsetError:
    where = dest.parent
    what = f"cannot unpack {reader.path} into {dest}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        needed = _space_needed(reader)
        need = f"needs about {mib(needed)}" if needed is not None else "needs more space"
        return EnvironmentFailure(
            f"{what}: no space left on the file system of {where} (the tree {need}; {free_space(where)})",
            hint=f"free space under {where}, or unpack elsewhere; the partial tree was removed",
        )
    if exc.errno in (errno.ENAMETOOLONG, errno.EILSEQ):
        return InputError(
            f"{what}: a member name cannot be created there ({exc.strerror}: {exc.filename})",
            hint="the archive is hostile or broken, or the file system does not accept its names",
        )
    return EnvironmentFailure(
        f"{what}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""),
        hint=f"check that {where} is writable; the partial tree was removed",
    )


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def free_space(where: Path) -> str:
    """What the file system of ``where`` has free, for a "no space left" message."""
    try:
        vfs = os.statvfs(where)
    except OSError:
        return "free space unknown"
    free = mib(vfs.f_bavail * vfs.f_frsize) + " free"
    return free + ", no free inodes" if vfs.f_files and not vfs.f_favail else free


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
                        os.unlink(full)  # a later directory replaces an earlier file
                        files.discard(prefix)
                    os.mkdir(full)
                made_dirs.add(prefix)

    for m in reader:  # each path once (the reader refuses a name that appears twice)
        if m.kind == DIR:
            ensure_dir(m.path)
            continue
        ensure_dir(posixpath.dirname(m.path))
        full = os.path.join(root_str, m.path)
        if m.kind == SYMLINK:
            if m.path in made_dirs:
                raise UnsafePathError(f"{reader.path}: member {m.path!r} is both a directory and a link")
            links[m.path] = m.link  # created last, so no write can go through it
            continue
        if m.path in made_dirs:
            raise UnsafePathError(f"{reader.path}: member {m.path!r} is both a directory and a file")
        if m.kind == HARDLINK and m.link not in files:
            raise UnsafePathError(f"{reader.path}: hard link {m.path!r} -> {m.link!r} does not name an earlier file")
        if m.kind == HARDLINK:
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
