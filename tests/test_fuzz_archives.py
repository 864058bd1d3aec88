"""Fuzz tier for the archive readers (security issue #23): hypothesis over tar and zip headers.

Cases are mutated bytes of small valid archives (checksums repaired so that mutations reach past
the header check), tar headers built from random fields (sizes and mtimes in octal or GNU
base-256, negative ones too, pax records such as ``size=-512``, ``mtime=inf``, ``path=../x``) and
zip directories with random sizes, methods, modes and offsets. Every case goes through the
product's ``unpack`` and ``ArchiveReader`` and must end within ``CASE_DEADLINE_S``, write nothing
outside its target (a Sentinel sits where ``../sentinel/...`` or the sentinel's absolute path
would land), leave no partial tree, and raise nothing but patchset's domain exceptions.
"""

from __future__ import annotations

import gzip
import io
import shutil
import signal
import struct
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.errors import PatchsetError
from patchset.upstream.archives import ArchiveReader, unpack
from patchset.upstream.limits import ArchiveLimits
from tests.support import hostile_archives as hostile
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples

pytestmark = pytest.mark.timeout(600)

# Small limits keep each case fast; the bounds themselves are what is under test.
LIMITS = ArchiveLimits(max_bytes=8 << 20, max_member_bytes=4 << 20, max_members=500)
TOP = "demo-1.0"
FUZZ = settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Overtime(BaseException):
    """A case ran past CASE_DEADLINE_S (BaseException: no ``except Exception`` may swallow it)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise Overtime(f"an archive case did not end within {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Bench:
    """One directory for the fuzz run: ``tree`` (the target, fresh per case) beside ``sentinel``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.sentinel = Sentinel(base)
        self.tree = base / "tree"
        self.n = 0

    def run(self, data: bytes, suffix: str) -> None:
        self.n += 1
        archive = self.base / f"case{suffix}"
        archive.write_bytes(data)
        shutil.rmtree(self.tree, ignore_errors=True)
        try:
            with deadline(CASE_DEADLINE_S):
                try:  # the history importer's view: every member, no top directory stripped
                    for _ in ArchiveReader(archive, strip_top=False, limits=LIMITS):
                        pass
                except PatchsetError:
                    pass
                try:
                    unpack(archive, self.tree, limits=LIMITS)
                except PatchsetError:
                    assert not self.tree.exists(), "a refused archive left a partial tree"
        finally:
            shutil.rmtree(self.tree, ignore_errors=True)
            archive.unlink()
        self.sentinel.assert_untouched()
        stray = sorted(p.name for p in self.base.iterdir() if p.name not in ("sentinel",))
        assert stray == [], f"left behind: {stray}"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench(tmp_path_factory.mktemp("fuzz-archives"))


def _names(bench: Bench) -> st.SearchStrategy[str]:
    """Member names, hostile ones included: escapes, the sentinel, state dirs, odd bytes."""
    return st.one_of(
        st.sampled_from(
            [
                f"{TOP}/a.py",
                f"{TOP}/sub/b.py",
                f"{TOP}/",
                f"{TOP}/../sentinel/victim.txt",
                "../sentinel/victim.txt",
                f"{bench.sentinel.root}/victim.txt",
                f"{TOP}/.patchset-txn/journal.json",
                f"{TOP}/.PATCHSET/x",
                f"{TOP}/sub/.git/config",
                f"{TOP}/link",
                "./",
                ".",
                "",
                f"{TOP}/" + "d" * 300,
                f"{TOP}\\..\\x",
            ]
        ),
        st.text(alphabet=st.sampled_from("ab/.\\\x00\n-é"), max_size=20).map(lambda s: f"{TOP}/{s}"),
    )


# -- mutated bytes of a small valid tar ------------------------------------------------------


def _base_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, payload in [
            (TOP, tarfile.DIRTYPE, b""),
            (f"{TOP}/a.py", tarfile.REGTYPE, b"x = 1\n" * 40),
            (f"{TOP}/sub/" + "long" * 40 + ".py", tarfile.REGTYPE, b"long\n"),
            (f"{TOP}/link", tarfile.SYMTYPE, b""),
            (f"{TOP}/hard", tarfile.LNKTYPE, b""),
        ]:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mtime = 1_790_000_000.5
            if kind == tarfile.SYMTYPE:
                info.linkname = "a.py"
            if kind == tarfile.LNKTYPE:
                info.linkname = f"{TOP}/a.py"
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload) if payload else None)
    return buf.getvalue()


BASE_TAR = _base_tar()


@FUZZ
@given(
    edits=st.lists(st.tuples(st.integers(0, len(BASE_TAR) - 1), st.integers(0, 255)), min_size=1, max_size=12),
    cut=st.one_of(st.none(), st.integers(0, len(BASE_TAR))),
    repair=st.booleans(),
    wrap=st.sampled_from(["tar", "gz", "gz-mutated"]),
)
def test_fuzz_mutated_tar_bytes(bench, edits, cut, repair, wrap):
    data = bytearray(BASE_TAR)
    for offset, value in edits:
        data[offset] = value
    if repair:
        for offset in range(0, len(data) - hostile.BLOCK + 1, hostile.BLOCK):
            if data[offset + 257 : offset + 262] == b"ustar":
                hostile.fix_checksum(data, offset)
    if cut is not None:
        del data[cut:]
    out = bytes(data)
    if wrap != "tar":
        out = bytearray(gzip.compress(out, mtime=0))
        if wrap == "gz-mutated":
            for offset, value in edits[:3]:
                out[offset % len(out)] = value
        out = bytes(out)
    bench.run(out, ".tar" if wrap == "tar" else ".tar.gz")


# -- tar headers from random fields -----------------------------------------------------------

NUMBER = st.one_of(
    st.integers(0, 0o77777777777),
    st.integers(-(1 << 40), 1 << 40),
    st.sampled_from([-512, -1, -(1 << 87), (1 << 87) - 1, 1 << 33, 0]),
)
PAX_VALUE = st.one_of(
    st.sampled_from(["-512", "-1", "0", "inf", "-inf", "nan", "1e400", "1e30", "9" * 5000, "12abc", "", " 7"]),
    st.integers(-(1 << 64), 1 << 64).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


def _field(value: int, width: int, octal: bool) -> bytes:
    if octal and 0 <= value < 8 ** (width - 1):
        return b"%0*o\0" % (width - 1, value)
    raw = (value % (1 << (8 * (width - 1)))).to_bytes(width - 1, "big")
    return bytes([0xFF if value < 0 else 0x80]) + raw


def _header(name: str, kind: bytes, size: int, mtime: int, link: str, octal: bool, mode: int) -> bytes:
    block = bytearray(hostile.BLOCK)
    raw_name = name.encode("utf-8", "surrogateescape")[:100]
    block[0 : len(raw_name)] = raw_name
    block[100:108] = _field(mode, 8, True)
    block[108:116] = _field(0, 8, True)
    block[116:124] = _field(0, 8, True)
    block[124:136] = _field(size, 12, octal)
    block[136:148] = _field(mtime, 12, octal)
    block[156:157] = kind
    raw_link = link.encode("utf-8", "surrogateescape")[:100]
    block[157 : 157 + len(raw_link)] = raw_link
    block[257:265] = b"ustar\x0000"
    hostile.fix_checksum(block, 0)
    return bytes(block)


def _pax_body(records: dict[str, str]) -> bytes:
    out = b""
    for key, value in records.items():
        rec = f" {key}={value}\n".encode("utf-8", "surrogateescape")
        n = len(rec)
        while len(str(n).encode()) + len(rec) != n:
            n = len(str(n).encode()) + len(rec)
        out += str(n).encode() + rec
    return out


@st.composite
def tar_members(draw: st.DrawFn, bench: Bench) -> bytes:
    out = b""
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            records = draw(
                st.dictionaries(
                    st.sampled_from(["size", "mtime", "path", "linkpath", "comment"]),
                    st.one_of(PAX_VALUE, _names(bench)),
                    max_size=3,
                )
            )
            body = _pax_body(records)
            kind = draw(st.sampled_from([b"x", b"g"]))
            out += _header("pax", kind, len(body), 0, "", True, 0o644)
            out += body + b"\0" * (-len(body) % hostile.BLOCK)
        kind = draw(st.sampled_from([b"0", b"\0", b"5", b"2", b"1", b"7", b"L", b"K", b"S", b"3", b"6", b"Z"]))
        payload = draw(st.binary(max_size=1200))
        declared = draw(st.one_of(st.just(len(payload)), NUMBER))
        out += _header(
            draw(_names(bench)),
            kind,
            declared,
            draw(NUMBER),
            draw(_names(bench)),
            draw(st.booleans()),
            draw(st.integers(0, 0o7777)),
        )
        out += payload + b"\0" * (-len(payload) % hostile.BLOCK)
    if draw(st.booleans()):
        out += b"\0" * (2 * hostile.BLOCK)
    return out


@FUZZ
@given(data=st.data())
def test_fuzz_tar_header_fields(bench, data):
    archive = data.draw(tar_members(bench))
    gz = data.draw(st.booleans())
    bench.run(gzip.compress(archive, mtime=0) if gz else archive, ".tar.gz" if gz else ".tar")


# -- zip: mutated bytes and random directory fields ------------------------------------------


def _base_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in [
            ("pkg/__init__.py", b"", 0o100644),
            ("pkg/mod.py", b"x = 1\n" * 50, 0o100755),
            ("pkg/data/", b"", 0o40755),
            ("pkg/latest", b"mod.py", 0o120777),
            ("pkg-1.0.dist-info/RECORD", b"pkg/mod.py,,\n", 0o100644),
        ]:
            info = zipfile.ZipInfo(name, date_time=(2026, 9, 22, 5, 1, 0))
            info.create_system = 3
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return buf.getvalue()


BASE_ZIP = _base_zip()
CENTRAL = [i for i in range(len(BASE_ZIP)) if BASE_ZIP.startswith(b"PK\x01\x02", i)]
# offset in a central-directory record -> struct format of the field
ZIP_FIELDS = {
    8: "<H",
    10: "<H",
    12: "<H",
    14: "<H",
    16: "<L",
    20: "<L",
    24: "<L",
    28: "<H",
    30: "<H",
    38: "<L",
    42: "<L",
}


@FUZZ
@given(
    edits=st.lists(st.tuples(st.integers(0, len(BASE_ZIP) - 1), st.integers(0, 255)), max_size=8),
    fields=st.lists(
        st.tuples(
            st.sampled_from(range(len(CENTRAL))),
            st.sampled_from(sorted(ZIP_FIELDS)),
            st.one_of(st.integers(0, 0xFFFFFFFF), st.sampled_from([0, 1, 0xFFFF, 0xFFFFFFFF, 1 << 31, 8, 12, 14, 99])),
        ),
        max_size=4,
    ),
    names=st.lists(st.tuples(st.sampled_from(range(len(CENTRAL))), st.integers(0, 20)), max_size=2),
    cut=st.one_of(st.none(), st.integers(0, len(BASE_ZIP))),
)
def test_fuzz_zip_headers(bench, edits, fields, names, cut):
    data = bytearray(BASE_ZIP)
    for entry, offset, value in fields:
        fmt = ZIP_FIELDS[offset]
        struct.pack_into(fmt, data, CENTRAL[entry] + offset, value % (1 << (8 * struct.calcsize(fmt))))
    for entry, at in names:  # rewrite a name in place: "../" and "/" where the name was
        start = CENTRAL[entry] + 46
        length = struct.unpack_from("<H", BASE_ZIP, CENTRAL[entry] + 28)[0]
        evil = b"../sentinel/victim.txt"[: min(length, 22)]
        data[start + at % max(length, 1) : start + at % max(length, 1) + len(evil)] = evil
    for offset, value in edits:
        data[offset] = value
    if cut is not None:
        del data[cut:]
    bench.run(bytes(data), "-1.0-py3-none-any.whl")
