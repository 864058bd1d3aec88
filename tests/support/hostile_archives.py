"""Hostile release archives, built with tarfile/zipfile and byte edits (no mocks of the readers).

Each builder returns the archive's bytes (or writes a file) so that tests and fuzz tests can
mutate them further: a tar header's size set to a negative GNU base-256 number, a pax header
carrying ``size=-512`` or ``mtime=inf``, a wheel whose one member inflates to gigabytes (a deflate
stream of repeated full-flush blocks: 2 GiB of zeros in about 2 MB), archives with many members.
"""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

BLOCK = 512
MTIME = 1_790_000_000


def tar_bytes(
    members: list[tuple[str, bytes]],
    *,
    fmt: int = tarfile.PAX_FORMAT,
    pax: dict[str, str] | None = None,
    member_pax: dict[str, dict[str, str]] | None = None,
    links: dict[str, str] | None = None,
) -> bytearray:
    """An uncompressed tar of regular files ``(name, data)``, then symlinks ``{name: target}``;
    ``pax`` becomes a global pax header, ``member_pax[name]`` a member's own."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=pax or {}) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = MTIME
            info.pax_headers = dict((member_pax or {}).get(name, {}))
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mtime = MTIME
            tf.addfile(info)
    return bytearray(buf.getvalue())


def header_offsets(data: bytes | bytearray) -> list[int]:
    """Offsets of every header block of an uncompressed tar (extended headers included)."""
    out, pos = [], 0
    while pos + BLOCK <= len(data) and data[pos : pos + BLOCK].strip(b"\0"):
        out.append(pos)
        size = int(bytes(data[pos + 124 : pos + 136]).split(b"\0")[0].strip() or b"0", 8)
        pos += BLOCK + (size + BLOCK - 1) // BLOCK * BLOCK
    return out


def fix_checksum(data: bytearray, offset: int) -> None:
    """Recompute the header checksum of the block at ``offset`` (after a byte edit)."""
    data[offset + 148 : offset + 156] = b" " * 8
    total = sum(data[offset : offset + BLOCK])
    data[offset + 148 : offset + 156] = b"%06o\0 " % total


def set_base256(data: bytearray, offset: int, field: tuple[int, int], value: int) -> None:
    """Store ``value`` (may be negative) in a numeric header field as GNU base-256."""
    start, end = field
    width = end - start
    raw = (value % (1 << (8 * (width - 1)))).to_bytes(width - 1, "big")
    data[offset + start : offset + end] = bytes([0xFF if value < 0 else 0x80]) + raw
    fix_checksum(data, offset)


SIZE_FIELD = (124, 136)
MTIME_FIELD = (136, 148)


def negative_size_tar(top: str = "demo_pkg-1.0") -> bytes:
    """A gzipped tar whose second member's size is -512 in GNU base-256: a reader that trusts it
    steps back onto the same header for ever."""
    data = tar_bytes([(f"{top}/a.py", b"A" * 10), (f"{top}/b.py", b"B" * 10)], fmt=tarfile.GNU_FORMAT)
    set_base256(data, header_offsets(data)[1], SIZE_FIELD, -512)
    return gzip.compress(bytes(data))


def pax_tar(
    top: str = "demo_pkg-1.0", *, pax: dict[str, str] | None = None, member: dict[str, str] | None = None
) -> bytes:
    """A gzipped tar with one file whose global (``pax``) or own (``member``) pax records are given."""
    name = f"{top}/a.py"
    return gzip.compress(bytes(tar_bytes([(name, b"x = 1\n")], pax=pax, member_pax={name: member or {}})))


def many_members_tar(n: int, top: str = "demo_pkg-1.0") -> bytes:
    return gzip.compress(bytes(tar_bytes([(f"{top}/f{i:06d}.py", b"") for i in range(n)])), compresslevel=1)


def _deflate_zeros(mib: int) -> bytes:
    """A raw deflate stream of ``mib`` MiB of zeros: one full-flushed block repeated (each block
    starts from an empty window, so copies of it concatenate into a valid stream)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = comp.compress(b"\0" * (1 << 20)) + comp.flush(zlib.Z_FULL_FLUSH)
    return block * mib + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def _crc_zeros(mib: int) -> int:
    crc, chunk = 0, b"\0" * (1 << 20)
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    return crc


def zip_bomb(path: Path, mib: int, *, name: str = "bomb/zeros.bin", crc: int | None = None) -> Path:
    """A wheel-named zip with one honest member of ``mib`` MiB of zeros (its sizes and CRC are
    right), plus a small ``RECORD``; the file is about ``mib`` KiB. ``crc`` skips computing it."""
    stream = _deflate_zeros(mib)
    size = mib << 20
    crc = _crc_zeros(mib) if crc is None else crc
    out = bytearray()
    central = bytearray()
    entries = 0

    def add(fname: bytes, method: int, payload: bytes, crc32: int, usize: int) -> None:
        nonlocal entries
        offset = len(out)
        out.extend(
            struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc32, len(payload), usize, len(fname), 0)
        )
        out.extend(fname + payload)
        central.extend(
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                0x0314,  # made by: unix
                20,
                0,
                method,
                0,
                0x21,
                crc32,
                len(payload),
                usize,
                len(fname),
                0,
                0,
                0,
                0,
                0o100644 << 16,
                offset,
            )
        )
        central.extend(fname)
        entries += 1

    add(name.encode(), zipfile.ZIP_DEFLATED, stream, crc, size)
    record = b"bomb/zeros.bin,,\n"
    add(b"bomb-1.0.dist-info/RECORD", zipfile.ZIP_STORED, record, zlib.crc32(record), len(record))
    start = len(out)
    out.extend(central)
    out.extend(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, len(central), start, 0))
    path.write_bytes(bytes(out))
    return path


def many_members_zip(path: Path, n: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(n):
            zf.writestr(f"pkg/f{i:06d}.py", b"")
    return path


def lying_directory_zip(path: Path, declared: int) -> Path:
    """A small valid zip whose end record claims ``declared`` members."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/a.py", b"x = 1\n")
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, at + 8, min(declared, 0xFFFF), min(declared, 0xFFFF))
    path.write_bytes(bytes(data))
    return path
