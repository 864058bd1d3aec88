"""The standard ``tarfile``, held to an archive's budget: what it reads is bounded before it reads it.

``tarfile`` parses ustar, GNU and pax headers; on data that may be hostile it needs three bounds it
does not keep itself (``limits``): the size a header declares is taken from the pass's ``Budget`` at
the header's 512-byte block, before tarfile reads the bytes that follow (a pax or GNU long-name
header past ``MAX_HEADER_BYTES``, a negative size, a member past the limits); at most
``MAX_EXTENDED_RUN`` extended headers precede one member; and between two members tarfile may read
at most about ``MAX_HEADER_BYTES`` outside member data (``HeaderStream``: a GNU sparse map, or any
other header tarfile reads on its own, cannot grow without end). Sparse and multi-volume members
are refused, never guessed at.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import lzma
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol, cast

from patchset.errors import InputError
from patchset.upstream.limits import MAX_HEADER_BYTES, Budget

BLOCK = tarfile.BLOCKSIZE
# Extended headers (pax x/g, GNU L/K) that may precede one member: real archives use at most 4.
MAX_EXTENDED_RUN = 16
_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_UNSUPPORTED = (tarfile.GNUTYPE_SPARSE, b"V", b"M", b"N")  # sparse, multi-volume
# What tarfile may read between two members outside their data: the extended headers and blocks.
_BETWEEN_MEMBERS = MAX_HEADER_BYTES + (2 * MAX_EXTENDED_RUN + 2) * BLOCK


class Readable(Protocol):
    """What tarfile uses of a file it reads: read, seek, tell."""

    def read(self, n: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def tell(self) -> int: ...


def damaged(archive: Path | str, why: str) -> InputError:
    return InputError(
        f"archive {archive} is damaged or not a tar archive: {why}", hint="delete it and download it again"
    )


class Header(tarfile.TarInfo):
    """tarfile's member header, checked against the pass's budget as soon as its block is parsed.

    ``frombuf`` is the public hook tarfile calls for every 512-byte header (extended ones too),
    before it reads the header's data; ``for_pass`` binds a fresh subclass to one pass's budget."""

    archive: Path | str = ""
    budget: Budget | None = None
    extended_run = 0
    header_size: int | None = None  # the size the header block declared (pax may change it)

    @classmethod
    def for_pass(cls, archive: Path | str, budget: Budget) -> type[Header]:
        return type("Header", (cls,), {"archive": archive, "budget": budget, "extended_run": 0})

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Any:
        h = super().frombuf(buf, encoding, errors)
        assert cls.budget is not None, "Header.for_pass binds the budget"
        extended = h.type in _EXTENDED
        if h.type in _UNSUPPORTED:
            raise damaged(cls.archive, f"unsupported tar member type {h.type.decode()!r} (sparse/multi-volume)")
        if extended:
            cls.extended_run += 1
            if cls.extended_run > MAX_EXTENDED_RUN:
                raise damaged(cls.archive, f"more than {MAX_EXTENDED_RUN} extended headers in a row")
        else:
            cls.extended_run = 0
        cls.budget.take(h.name, h.size, header=extended)  # before any of its bytes are read
        cls.budget.used += BLOCK + (-h.size % BLOCK)  # the header and the padding count too
        h.header_size = h.size
        return h

    @staticmethod
    def check_member(h: tarfile.TarInfo, archive: Path | str, budget: Budget) -> None:
        """What pax records changed after the header block was taken: the size (counted now, and a
        negative one refused before tarfile moves to the next header) and the mtime (a record
        tarfile reads as 0 when it is not a number)."""
        budget.take_member(h.name)
        budget.check_size(h.name, h.size)
        declared = h.size if not isinstance(h, Header) or h.header_size is None else h.header_size
        budget.take(h.name, max(0, h.size - declared))
        raw = h.pax_headers.get("mtime")
        if raw is not None:
            try:
                float(raw)
            except ValueError:
                raise damaged(archive, f"pax mtime={raw[:40]!r} is not a number") from None
        if h.sparse is not None:
            raise damaged(archive, f"member {h.name!r} is a sparse file")


class HeaderStream:
    """The decompressed archive as tarfile reads it: outside a member's data (``data()``), at most
    ``_BETWEEN_MEMBERS`` bytes before the next member (``next_member()``)."""

    def __init__(self, f: Readable, archive: Path | str) -> None:
        self._f = f
        self._archive = archive
        self._left: int | None = _BETWEEN_MEMBERS

    def read(self, n: int = -1) -> bytes:
        if self._left is not None:
            if n < 0 or n > self._left:
                raise damaged(self._archive, f"more than {_BETWEEN_MEMBERS} bytes of headers before one member")
            self._left -= n
        return self._f.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def next_member(self) -> None:
        self._left = _BETWEEN_MEMBERS

    @contextlib.contextmanager
    def data(self) -> Iterator[None]:
        """Reads of a member's data, whose size the budget has taken already."""
        self._left = None
        try:
            yield
        finally:
            self._left = 0


class HashedFile:
    """The raw archive file: each byte hashed (sha256) and reported once, in order, however the
    reader above seeks (gzip rewinds to 0; an uncompressed tar skips forward, read through here)."""

    _CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes
        self._sha = hashlib.sha256()
        self._hashed = 0

    def _hash(self, at: int, data: bytes) -> None:
        end = at + len(data)
        if end > self._hashed:
            fresh = data[self._hashed - at :]
            self._sha.update(fresh)
            self._hashed = end
            if self._on_bytes:
                self._on_bytes(len(fresh))

    def read(self, n: int = -1) -> bytes:
        at = self._raw.tell()
        if at > self._hashed:  # a forward seek skipped bytes: hash them first
            self._raw.seek(self._hashed)
            while self._hashed < at:
                piece = self._raw.read(min(self._CHUNK, at - self._hashed))
                if not piece:
                    break
                self._hash(self._hashed, piece)
            self._raw.seek(at)
        data = self._raw.read(n)
        self._hash(at, data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def finish(self) -> str:
        """Hash the rest of the file and return its sha256."""
        self._raw.seek(self._hashed)
        while piece := self._raw.read(self._CHUNK):
            self._hash(self._hashed, piece)
        return self._sha.hexdigest()


def decompressed(f: HashedFile) -> Readable:
    """The tar stream inside ``f``: gzip, bzip2 or xz by their magic bytes, else ``f`` itself."""
    head = f.read(6)
    f.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=f, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(f)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(cast(IO[bytes], f))
    return f


def data_filter_mode(h: tarfile.TarInfo, root: str) -> int:
    """The member's permission bits as tarfile's ``data`` filter (PEP 706) leaves them, raising its
    ``FilterError`` for what it refuses. ``root`` is a path no member can exist under (the archive
    file itself): the filter's checks are then on the names alone, as the reader yields members to
    the history importer as well as to the unpacker. Pythons without the filter (before 3.10.12,
    3.11.4) get the same bits here; what the filter refuses, the reader's own rules (absolute or
    climbing names and links, special files) have refused already."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:
        mode = data_filter(h, root).mode
        return 0o755 if mode is None else int(mode)  # directories and links: no mode of their own
    mode = h.mode & 0o755
    if h.isreg() or h.islnk():
        return (mode if mode & 0o100 else mode & ~0o111) | 0o600
    return 0o755
