"""A fast, streaming reader of (compressed) tar archives: headers and file bytes, in order.

Python's ``tarfile`` in stream mode spends more time in its own buffering than zlib spends
decompressing (about 1.1 s vs 0.4 s for a 42 MB vLLM sdist), and importing a release must stay
within a few seconds. This reader decompresses in 1 MiB steps into one buffer and slices members
out of it. It understands what real sdists contain: ustar, GNU (long names ``L``/``K``) and POSIX
pax headers (``path``, ``linkpath``, ``size``, ``mtime``), and verifies every header checksum.
Anything else (sparse files, multi-volume) is refused, never guessed at.
"""

from __future__ import annotations

import bz2
import hashlib
import lzma
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from patchset.errors import InputError
from patchset.upstream.limits import Budget, check_mtime

BLOCK = 512
_CHUNK = 1 << 20
_GZIP = b"\x1f\x8b"
_BZ2 = b"BZh"
_XZ = b"\xfd7zXZ\x00"


class _Damaged(InputError):
    pass


def damaged(archive: Path | str, why: str) -> InputError:
    return _Damaged(
        f"archive {archive} is damaged or not a tar archive: {why}",
        hint="delete it and download it again",
    )


class Decompressor:
    """Pulls the raw file in 1 MiB chunks, hashes them (sha256), and decompresses."""

    def __init__(self, raw: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes
        self._sha = hashlib.sha256()
        self._pending = self._read()
        head = self._pending[:6]
        self._new: Callable[[], Any] | None = None
        if head.startswith(_GZIP):
            self._new = lambda: zlib.decompressobj(31)
        elif head.startswith(_BZ2):
            self._new = bz2.BZ2Decompressor
        elif head.startswith(_XZ):
            self._new = lzma.LZMADecompressor
        self._dec: Any = self._new() if self._new is not None else None

    def _read(self) -> bytes:
        chunk = self._raw.read(_CHUNK)
        if chunk:
            self._sha.update(chunk)
            if self._on_bytes:
                self._on_bytes(len(chunk))
        return chunk

    def more(self) -> bytes:
        """The next piece of decompressed data; b"" at the end of the file."""
        while True:
            data = self._pending or self._read()
            self._pending = b""
            if not data:
                if self._dec is not None and not self._dec.eof:
                    raise EOFError("compressed stream ends early")
                return b""
            if self._dec is None:
                return data
            if self._dec.eof:  # concatenated gzip members (or trailing garbage)
                if self._new is None or not data.strip(b"\0"):
                    continue
                self._dec = self._new()
            out = self._dec.decompress(data)
            if self._dec.eof and self._dec.unused_data:
                self._pending = self._dec.unused_data
            if out:
                return out

    def finish(self) -> str:
        """Read the rest of the file (for the digest) and return its sha256."""
        while self._read():
            pass
        return self._sha.hexdigest()


@dataclass
class TarHeader:
    """One member header of a tar stream, as read from its 512-byte block."""

    name: str
    type: bytes  # one byte: b"0" file, b"5" dir, b"2" symlink, b"1" hard link ...
    mode: int
    mtime: int
    size: int
    linkname: str
    data: bytes = b""


def _num(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * (len(field) - 1))) if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    return int(text, 8) if text else 0


def _str(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes, archive: Path | str) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos] == 0:
            break
        space = data.find(b" ", pos)
        if space < 0:
            raise damaged(archive, "malformed pax header")
        try:
            length = int(data[pos:space])
        except ValueError:
            raise damaged(archive, "malformed pax record length") from None
        record = data[space + 1 : pos + length - 1]  # drop trailing LF
        key, _, value = record.partition(b"=")
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        if length <= 0:
            raise damaged(archive, "malformed pax record length")
        pos += length
    return records


def _pax_number(records: dict[str, str], key: str, archive: Path | str) -> float | None:
    raw = records.get(key)
    if raw is None:
        return None
    try:
        return int(raw) if key == "size" else float(raw)
    except ValueError:
        raise damaged(archive, f"pax {key}={raw[:40]!r} is not a number") from None


# Extended headers (pax x/g, GNU L/K) that may precede one member: real archives use at most 4.
_MAX_EXTENDED_RUN = 16


def iter_tar_headers(source: Decompressor, archive: Path | str, budget: Budget | None = None) -> Iterator[TarHeader]:
    """Yield every member with its data (files only), applying pax and GNU long-name headers.

    Every size is checked against ``budget`` (``limits``) before its bytes are read: a negative
    size (GNU base-256 or pax) would move the read position backwards and never end.
    """
    budget = budget or Budget(archive)
    buf = bytearray()
    pos = 0

    def need(n: int) -> None:
        nonlocal buf, pos
        if len(buf) - pos >= n:
            return
        if pos:
            del buf[:pos]
            pos = 0
        while len(buf) < n:
            piece = source.more()
            if not piece:
                raise damaged(archive, "unexpected end of archive")
            buf += piece

    glob: dict[str, str] = {}
    local: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None
    extended = 0
    while True:
        try:
            need(BLOCK)
        except _Damaged:
            if not buf[pos:].strip(b"\0"):
                return  # archive without the end-of-archive blocks: tolerated like tar does
            raise
        header = bytes(buf[pos : pos + BLOCK])
        pos += BLOCK
        if not header.strip(b"\0"):
            return  # end of archive
        stored = _num(header[148:156])
        unsigned = sum(header) - sum(header[148:156]) + 8 * 0x20
        if stored != unsigned:
            high = sum(1 for b in header[:148] if b > 127) + sum(1 for b in header[156:] if b > 127)
            signed = unsigned - 256 * high  # some old tars sum signed chars
            if stored != signed:
                raise damaged(archive, f"bad header checksum at offset near member {_str(header[:100])!r}")
        kind = header[156:157] or b"0"
        is_ext = kind in (b"x", b"g", b"L", b"K")
        size = _num(header[124:136])
        pax_size = _pax_number(local, "size", archive)
        if pax_size is None:
            pax_size = _pax_number(glob, "size", archive)
        if pax_size is not None and kind not in (b"x", b"g"):
            size = int(pax_size)
        shown = local.get("path") or long_name or _str(header[0:100])
        budget.take(shown, size, header=is_ext)  # before any of its bytes are read
        padded = (size + BLOCK - 1) // BLOCK * BLOCK
        budget.used += BLOCK + padded - size  # the header and the padding count too
        need(padded)
        data = bytes(buf[pos : pos + size])
        pos += padded
        if is_ext:
            extended += 1
            if extended > _MAX_EXTENDED_RUN:
                raise damaged(archive, f"more than {_MAX_EXTENDED_RUN} extended headers in a row")
            if kind in (b"x", b"g"):
                (local if kind == b"x" else glob).update(_pax(data, archive))
            elif kind == b"L":
                long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                long_link = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        extended = 0
        if kind in (b"S", b"V", b"M", b"N"):
            raise damaged(archive, f"unsupported tar member type {kind.decode()!r} (sparse/multi-volume)")
        name = _str(header[0:100])
        magic = header[257:263]
        if magic == b"ustar\0" and header[345:346] != b"\0":  # POSIX prefix field
            name = _str(header[345:500]) + "/" + name
        name = local.get("path") or long_name or glob.get("path") or name
        budget.take_member(name)
        linkname = local.get("linkpath") or long_link or _str(header[157:257])
        pax_mtime = _pax_number(local, "mtime", archive)
        if pax_mtime is None:
            pax_mtime = _pax_number(glob, "mtime", archive)
        member = TarHeader(
            name=name,
            type=kind if kind != b"\0" else b"0",
            mode=_num(header[100:108]) & 0o7777,
            mtime=check_mtime(_num(header[136:148]) if pax_mtime is None else pax_mtime, name, archive),
            size=size,
            linkname=linkname,
            data=data if kind in (b"0", b"\0", b"7") else b"",
        )
        if kind == b"5" and name.endswith("/"):
            member.name = name.rstrip("/")
        local = {}
        long_name = long_link = None
        yield member
