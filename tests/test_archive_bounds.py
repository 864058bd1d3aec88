"""Security issue #23: release archives and index answers that never end, grow without bound,
fill the disk, carry patchset's state or name a path outside the download cache.

Every archive is real (tarfile/zipfile plus byte edits, tests/support/hostile_archives.py) and
goes through the product's own reader, unpacker, history importer or ``apply --from-index``
against a real HTTP index on 127.0.0.1. Each test has a time bound (an archive that loops must
fail the test, not hang it) and checks that nothing outside the target was written (a Sentinel
where ``../`` or an absolute name would land).
"""

from __future__ import annotations

import gzip
import os
import tarfile
import time
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.upstream import cache, limits, releases
from patchset.upstream.archives import ArchiveReader, unpack
from patchset.upstream.history import ReleaseHistory
from tests.support import hostile_archives as hostile
from tests.support.fuzz import Sentinel, snapshot
from tests.support.localindex import LocalIndex
from tests.support.smallfs import tmpfs

pytestmark = pytest.mark.timeout(60)

TOP = "demo_pkg-1.0"


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Sentinel]:
    """``(work, sentinel)``: archives and targets go under ``work``; the sentinel sits beside it."""
    work = tmp_path / "work"
    work.mkdir()
    return work, Sentinel(tmp_path)


def refused(archive: Path, dest: Path, error: type[Exception], match: str, **kw) -> Exception:
    """Unpack ``archive`` into ``dest`` within 10 s; it must raise ``error`` and leave nothing."""
    start = time.monotonic()
    with pytest.raises(error, match=match) as info:
        unpack(archive, dest, **kw)
    assert time.monotonic() - start < 10
    assert not dest.exists()
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".")] == []
    return info.value


# -- archives that never end ---------------------------------------------------------------


def test_negative_gnu_base256_size_is_refused_not_looped(place):
    work, sentinel = place
    archive = work / f"{TOP}.tar.gz"
    archive.write_bytes(hostile.negative_size_tar())
    err = refused(archive, work / "tree", InputError, "negative size")
    assert str(archive) in str(err) and "b.py" in str(err)
    sentinel.assert_untouched()


@pytest.mark.parametrize("scope", ["global", "member"])
def test_pax_size_minus_512_is_refused_not_looped(place, scope):
    work, sentinel = place
    archive = work / f"{TOP}.tar.gz"
    records = {"size": "-512"}
    archive.write_bytes(hostile.pax_tar(pax=records) if scope == "global" else hostile.pax_tar(member=records))
    refused(archive, work / "tree", InputError, r"negative size \(-512\)")
    sentinel.assert_untouched()


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "-1", "1e300", "soon"])
def test_pax_mtime_must_be_a_real_time(place, value):
    work, sentinel = place
    archive = work / f"{TOP}.tar.gz"
    archive.write_bytes(hostile.pax_tar(member={"mtime": value}))
    match = "not a number" if value == "soon" else "impossible timestamp"
    err = refused(archive, work / "tree", InputError, match)
    assert "a.py" in str(err) or "soon" in str(err)
    sentinel.assert_untouched()


def test_absurd_base256_mtime_is_refused(place):
    work, _ = place
    data = hostile.tar_bytes([(f"{TOP}/a.py", b"x")], fmt=tarfile.GNU_FORMAT)
    hostile.set_base256(data, 0, hostile.MTIME_FIELD, 1 << 80)
    archive = work / f"{TOP}.tar"
    archive.write_bytes(bytes(data))
    refused(archive, work / "tree", InputError, "impossible timestamp")


def test_an_endless_run_of_extended_headers_is_refused(place):
    work, _ = place
    one = hostile.tar_bytes([(f"{TOP}/a.py", b"x")], member_pax={f"{TOP}/a.py": {"comment": "c"}})
    ext = bytes(one[: 2 * hostile.BLOCK])  # the pax header block and its data block
    archive = work / f"{TOP}.tar"
    archive.write_bytes(ext * 100 + bytes(one[2 * hostile.BLOCK :]))
    refused(archive, work / "tree", InputError, "extended headers in a row")


def test_a_huge_extended_header_is_refused_before_it_is_read(place):
    work, _ = place
    data = hostile.tar_bytes([(f"{TOP}/a.py", b"x")], member_pax={f"{TOP}/a.py": {"comment": "c"}})
    hostile.set_base256(data, 0, hostile.SIZE_FIELD, 64 << 20)
    archive = work / f"{TOP}.tar"
    archive.write_bytes(bytes(data))
    refused(archive, work / "tree", InputError, "extended header")


# -- archives that never stop growing ------------------------------------------------------


@pytest.fixture(scope="module")
def bomb_crc() -> int:
    return hostile._crc_zeros(2048)


def test_zip_bomb_in_a_small_wheel_is_refused_before_it_is_read(place, bomb_crc):
    """2 GiB of zeros in a 2 MB wheel, with honest sizes and CRC: refused at the default limits
    before a byte of it is inflated (little memory, no file written)."""
    work, sentinel = place
    wheel = hostile.zip_bomb(work / "bomb-1.0-py3-none-any.whl", 2048, crc=bomb_crc)
    assert wheel.stat().st_size < 3 << 20
    tracemalloc.start()
    try:
        err = refused(wheel, work / "site", InputError, "more than the 1.0 GiB allowed for one member")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"peak {peak} bytes while refusing"
    assert limits.MAX_MEMBER_BYTES_ENV in err.render()
    sentinel.assert_untouched()


def test_the_limits_are_set_through_the_environment(place, monkeypatch):
    work, _ = place
    wheel = hostile.zip_bomb(work / "bomb-1.0-py3-none-any.whl", 64)
    assert unpack(wheel, work / "ok") == 2  # 64 MiB is within the defaults
    monkeypatch.setenv(limits.MAX_MEMBER_BYTES_ENV, "16M")
    refused(wheel, work / "t1", InputError, "64.0 MiB, more than the 16.0 MiB allowed")
    monkeypatch.setenv(limits.MAX_MEMBER_BYTES_ENV, "1G")
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "32m")
    refused(wheel, work / "t2", InputError, "unpacks to more than 32.0 MiB")
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "lots")
    with pytest.raises(EnvironmentFailure, match=f"{limits.MAX_BYTES_ENV}='lots' is not a positive number"):
        unpack(wheel, work / "t3")
    assert not (work / "t3").exists()


def test_a_tar_member_past_the_limit_is_refused_before_it_is_read(place, monkeypatch):
    work, _ = place
    archive = work / f"{TOP}.tar.gz"
    data = hostile.tar_bytes([(f"{TOP}/small.py", b"x"), (f"{TOP}/big.bin", b"\0" * (8 << 20))])
    archive.write_bytes(gzip.compress(bytes(data), compresslevel=1))
    monkeypatch.setenv(limits.MAX_MEMBER_BYTES_ENV, "4M")
    refused(archive, work / "tree", InputError, "big.bin.*8.0 MiB, more than the 4.0 MiB")
    monkeypatch.delenv(limits.MAX_MEMBER_BYTES_ENV)
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "6M")
    refused(archive, work / "tree", InputError, "unpacks to more than 6.0 MiB")


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_too_many_members_are_refused(place, monkeypatch, kind):
    work, sentinel = place
    monkeypatch.setenv(limits.MAX_MEMBERS_ENV, "50")
    if kind == "tar":
        archive = work / f"{TOP}.tar.gz"
        archive.write_bytes(hostile.many_members_tar(60))
    else:
        archive = hostile.many_members_zip(work / "pkg-1.0-py3-none-any.whl", 60)
    err = refused(archive, work / "tree", InputError, "more than 50 members")
    assert limits.MAX_MEMBERS_ENV in err.render()
    monkeypatch.setenv(limits.MAX_MEMBERS_ENV, "61")
    assert unpack(archive, work / "ok") == 60
    sentinel.assert_untouched()


def test_a_zip_directory_that_declares_too_many_members_is_refused_before_parsing(place):
    work, _ = place
    wheel = hostile.lying_directory_zip(work / "pkg-1.0-py3-none-any.whl", 0xFFFF)
    refused(wheel, work / "tree", InputError, r"more than 50000 members \(its directory declares 65535")


def test_the_default_limits_leave_headroom_over_real_releases():
    """Measured on vLLM 0.30.0 (x86_64 wheel: 772 MB in 5,098 members, largest 308 MB; sdist:
    8,108 members) and flashinfer-python 0.6.18.post1 (94 MB): the defaults are 3-6 times that."""
    d = limits.ArchiveLimits()
    assert d.max_bytes >= 5 * 772_000_000
    assert d.max_member_bytes >= 3 * 308_000_000
    assert d.max_members >= 6 * 8_108


def test_history_import_is_bounded_too(tmp_path, monkeypatch):
    repo = ReleaseHistory(tmp_path / "h.git")
    for i, data in enumerate([hostile.negative_size_tar(), hostile.pax_tar(pax={"size": "-512"})]):
        archive = tmp_path / f"demo_pkg-1.{i}.tar.gz"
        archive.write_bytes(data)
        start = time.monotonic()
        with pytest.raises(InputError, match="negative size"):
            repo.import_release(archive)
        assert time.monotonic() - start < 10
    monkeypatch.setenv(limits.MAX_MEMBERS_ENV, "10")
    archive = tmp_path / "demo_pkg-2.0.tar.gz"
    archive.write_bytes(hostile.many_members_tar(20, top="demo_pkg-2.0"))
    with pytest.raises(InputError, match="more than 10 members"):
        repo.import_release(archive)
    assert repo.releases() == []


# -- archives may not carry patchset's state -----------------------------------------------


@pytest.mark.parametrize(
    "name", [".patchset-txn/journal.json", ".PATCHSET/ledger", ".Patchset-Txn/x", "sub/.git/config"]
)
def test_state_directories_in_archives_are_refused(place, name):
    work, _ = place
    archive = work / f"{TOP}.tar.gz"
    archive.write_bytes(gzip.compress(bytes(hostile.tar_bytes([(f"{TOP}/ok.py", b""), (f"{TOP}/{name}", b"{}")]))))
    refused(archive, work / "tree", UnsafePathError, r"state directory|\.git directory")
    wheel = work / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/ok.py", b"")
        zf.writestr(name, b"{}")
    refused(wheel, work / "site", UnsafePathError, r"state directory|\.git directory")


def test_a_link_into_the_state_directory_is_refused(place):
    work, _ = place
    archive = work / f"{TOP}.tar.gz"
    data = hostile.tar_bytes([(f"{TOP}/ok.py", b"")], links={f"{TOP}/sub/j": "../.patchset-txn/journal.json"})
    archive.write_bytes(gzip.compress(bytes(data)))
    refused(archive, work / "tree", UnsafePathError, "state directory")


@pytest.mark.parametrize("kind", ["tar", "tar-dot", "wheel"])
def test_a_member_named_twice_is_refused(place, kind):
    """One rule for both readers of release archives: the unpacker and the history importer (here,
    and ``apply --from-index`` below) refuse a name that appears twice, as ``build wheel`` does
    (tests/test_build_trust.py), naming the archive and the member; nothing is written. Before,
    the later member silently replaced the earlier one."""
    work, sentinel = place
    if kind == "wheel":
        archive = work / "demo_pkg-1.0-py3-none-any.whl"
        with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as zf:
            warnings.simplefilter("ignore")  # zipfile warns of the duplicate name, and writes it
            zf.writestr("demo/a.py", "x = 1\n")
            zf.writestr("demo/b.py", "y = 1\n")
            zf.writestr("demo/a.py", "x = 9\n")
    else:
        second = f"{TOP}/./a.py" if kind == "tar-dot" else f"{TOP}/a.py"
        members = [(f"{TOP}/a.py", b"x = 1\n"), (f"{TOP}/b.py", b"y = 1\n"), (second, b"x = 9\n")]
        archive = work / f"{TOP}.tar.gz"
        archive.write_bytes(gzip.compress(bytes(hostile.tar_bytes(members))))
    named = "'demo/a.py'" if kind == "wheel" else f"'{TOP}/a.py'"
    with pytest.raises(UnsafePathError, match="appears twice") as info:
        list(ArchiveReader(archive, strip_top=False))  # the history importer's view
    assert str(archive) in str(info.value) and named in str(info.value)
    err = refused(archive, work / "tree", UnsafePathError, "appears twice")
    assert str(archive) in str(err) and "'a.py'" in str(err)
    sentinel.assert_untouched()


def test_the_top_directory_itself_may_have_any_name(place):
    """Only the path in the tree counts: ``.patchset`` as the stripped top directory is fine."""
    work, _ = place
    archive = work / "x.tar.gz"
    archive.write_bytes(gzip.compress(bytes(hostile.tar_bytes([(".patchset/ok.py", b"1")]))))
    assert unpack(archive, work / "tree") == 1
    assert (work / "tree/ok.py").read_bytes() == b"1"
    assert [m.path for m in ArchiveReader(archive)] == ["ok.py"]


# -- a full disk ---------------------------------------------------------------------------


def big_sdist(path: Path, top: str = TOP) -> Path:
    files = [(f"{top}/f{i}.bin", os.urandom(600_000)) for i in range(4)]
    path.write_bytes(gzip.compress(bytes(hostile.tar_bytes(files)), compresslevel=1))
    return path


def test_a_full_disk_is_an_environment_failure_naming_the_space(tmp_path):
    archive = big_sdist(tmp_path / f"{TOP}.tar.gz")
    with tmpfs(tmp_path / "small", size="1m") as small:
        err = refused(archive, small / "tree", EnvironmentFailure, "no space left")
        text = err.render()
        assert err.exit_code == 2
        assert f"file system of {small}" in text and "needs about 2.3 MiB" in text and "MiB free" in text
        assert "partial tree was removed" in text
        assert list(small.iterdir()) == []


# -- index answers naming paths ------------------------------------------------------------


@pytest.fixture
def index(tmp_path, monkeypatch):
    files = tmp_path / "files"
    files.mkdir()
    (files / f"{TOP}.tar.gz").write_bytes(hostile.pax_tar())
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(files) as idx:
        monkeypatch.setenv("PATCHSET_INDEX_URL", idx.url)
        yield idx


@pytest.mark.parametrize("how", ["dotdot", "absolute", "subdir", "other-name"])
def test_an_index_file_name_is_confined_to_the_cache(tmp_path, index, how):
    sentinel = Sentinel(tmp_path)  # tmp_path/sentinel, beside tmp_path/cache
    victim = sentinel.root / f"{TOP}.tar.gz"
    victim.write_bytes(b"precious\n")
    sentinel.before = snapshot(sentinel.root)
    listed = {
        "dotdot": f"../../sentinel/{TOP}.tar.gz",
        "absolute": str(victim),
        "subdir": f"sub/{TOP}.tar.gz",
        "other-name": "demo_pkg-1.0.zip",
    }[how]
    index.listed_as[f"{TOP}.tar.gz"] = listed
    with pytest.raises(UnsafePathError, match="not one plain file name matching its URL") as err:
        releases.download("demo-pkg==1.0")
    assert f"{index.url}/demo-pkg/" in str(err.value) and repr(listed) in str(err.value)
    assert victim.read_bytes() == b"precious\n"
    sentinel.assert_untouched()
    assert not [k for k in index.requests if k.startswith("/files/")]  # nothing was downloaded
    assert list(cache.dist_dir().iterdir()) == []


def test_a_plain_index_file_name_still_downloads(index):
    path = releases.download("demo-pkg==1.0")
    assert path == cache.dist_dir() / f"{TOP}.tar.gz"


def test_a_full_cache_while_downloading_names_the_directory_and_the_space(index, tmp_path, monkeypatch):
    """The download cache on a real 1 MiB tmpfs and a 2.4 MB release. Before: the OSError (ENOSPC)
    escaped ``releases.download`` as it was (an internal error on the command line)."""
    archive = big_sdist(index.root / f"{TOP}.tar.gz")
    with tmpfs(tmp_path / "small", size="1m") as small:
        monkeypatch.setenv("PATCHSET_CACHE", str(small / "cache"))
        with pytest.raises(EnvironmentFailure, match="no space left") as info:
            releases.download("demo-pkg==1.0")
        text = info.value.render()
        assert info.value.exit_code == 2
        dist = cache.dist_dir()
        assert f"on the file system of {dist}" in text and "the download needs 2.3 MiB" in text, text
        assert "MiB free" in text and archive.name in text and "PATCHSET_CACHE" in text
        assert list(dist.iterdir()) == []  # no partial file, no temporary name left


# -- the command line ----------------------------------------------------------------------

LEDGER = """\
schema = 1
[targets.demo]
upstream = "https://example.invalid/demo.git"
github = "example/demo"
package = "demo-pkg"
"""


@pytest.fixture
def ledger(tmp_path, run) -> Path:
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(LEDGER + '[[patch]]\nid = "p1"\ntarget = "demo"\ntitle = "t"\norigin = "port"\n')
    src = tmp_path / "src"
    src.mkdir()
    (src / "p1.patch").write_text("--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    assert run("import", src / "p1.patch", cwd=led).code == 0
    return led


@pytest.mark.parametrize("case", ["negative-size", "pax-size", "pax-mtime", "state-dir", "named-twice"])
def test_apply_from_index_refuses_hostile_archives_quickly(run, ledger, index, tmp_path, case):
    archive = index.root / f"{TOP}.tar.gz"
    archive.write_bytes(
        {
            "negative-size": hostile.negative_size_tar,
            "pax-size": lambda: hostile.pax_tar(pax={"size": "-512"}),
            "pax-mtime": lambda: hostile.pax_tar(member={"mtime": "inf"}),
            "state-dir": lambda: gzip.compress(bytes(hostile.tar_bytes([(f"{TOP}/.patchset-txn/journal.json", b"")]))),
            "named-twice": lambda: gzip.compress(bytes(hostile.tar_bytes([(f"{TOP}/a.py", b"x = 1\n")] * 2))),
        }[case]()
    )
    start = time.monotonic()
    r = run("apply", "--from-index", "demo-pkg==1.0", "--into", tmp_path / "tree", cwd=ledger)
    assert time.monotonic() - start < 20
    assert r.code == 2, r
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert str(archive.name) in r.stderr
    if case == "named-twice":
        assert "'a.py' appears twice" in r.stderr, r.stderr
    assert not (tmp_path / "tree").exists()


def test_apply_from_index_with_a_full_cache_exits_2(run, ledger, index, tmp_path, monkeypatch):
    big_sdist(index.root / f"{TOP}.tar.gz")
    with tmpfs(tmp_path / "small", size="1m") as small:
        monkeypatch.setenv("PATCHSET_CACHE", str(small / "cache"))
        r = run("apply", "--from-index", "demo-pkg==1.0", "--into", tmp_path / "tree", cwd=ledger)
        assert r.code == 2, r
        assert "no space left on the file system of" in r.stderr and "the download needs" in r.stderr, r
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr
        assert list((small / "cache" / "dist").iterdir()) == []
        assert not (tmp_path / "tree").exists()


def test_apply_from_index_on_a_full_disk_exits_2_with_the_space_needed(run, ledger, index, tmp_path):
    big_sdist(index.root / f"{TOP}.tar.gz")
    with tmpfs(tmp_path / "small", size="1m") as small:
        r = run("apply", "--from-index", "demo-pkg==1.0", "--into", small / "tree", cwd=ledger)
        assert r.code == 2, r
        assert "no space left on the file system of" in r.stderr and "needs about" in r.stderr
        assert "internal error" not in r.stderr
        assert list(small.iterdir()) == []


def test_a_zip_member_of_an_unknown_format_version_is_input_error(tmp_path: Path) -> None:
    """Found by the fuzz tier: zipfile raises NotImplementedError for a version it cannot read."""
    path = tmp_path / "odd-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("odd/__init__.py", b"x = 1\n")
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04")
    data[local + 4 : local + 6] = (64).to_bytes(2, "little")  # version needed to extract: 6.4
    central = data.index(b"PK\x01\x02")
    data[central + 6 : central + 8] = (64).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged or not a tar/zip"):
        list(ArchiveReader(path))
