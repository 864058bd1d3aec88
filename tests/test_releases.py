"""Releases from a package index: specs, file choice, verified cached downloads, safe unpacking.

Most tests run against ``tests.support.localindex`` (a real HTTP server on 127.0.0.1 speaking the
index's JSON API); tests marked ``network`` use the real package index and real vLLM and
FlashInfer releases, cached in $PATCHSET_CACHE so re-runs do not download again.
"""

from __future__ import annotations

import io
import itertools
import os
import random
import socket
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure, HashMismatch, InputError, UnsafePathError
from patchset.ledger.lock import sha256_file
from patchset.upstream import cache, releases
from patchset.upstream.archives import ArchiveReader, unpack
from patchset.upstream.releases import DistFile, ReleaseSpec, parse_spec, select_file
from tests.support.localindex import LocalIndex

# -- crafted archives ----------------------------------------------------------------------


def make_tar(path: Path, members: list[tuple], *, fmt: int = tarfile.PAX_FORMAT, mode: str = "w:gz") -> Path:
    """Write a tar archive; each member is (name, kind, payload, perm).

    kind: "file" (payload bytes), "dir", "sym" (payload target), "hard" (payload target name),
    "fifo", "chr".
    """
    with tarfile.open(path, mode, format=fmt) as tf:
        for name, kind, payload, perm in members:
            info = tarfile.TarInfo(name)
            info.mode = perm
            info.mtime = 1_790_000_000
            if kind == "file":
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chr": tarfile.CHRTYPE,
            }[kind]
            if kind in ("sym", "hard"):
                info.linkname = payload
            tf.addfile(info)
    return path


def make_zip(path: Path, members: list[tuple[str, bytes, int]], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, perm in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 9, 22, 5, 1, 0))
            info.create_system = 3
            info.external_attr = (stat.S_IFREG | perm) << 16
            zf.writestr(info, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name, date_time=(2026, 9, 22, 5, 1, 0))
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def sdist_members(top: str, files: dict[str, bytes]) -> list[tuple]:
    out: list[tuple] = [(top, "dir", None, 0o755)]
    for name, data in files.items():
        out.append((f"{top}/{name}", "file", data, 0o644))
    return out


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# -- specs and file choice ----------------------------------------------------------------


def test_parse_spec_accepts_exact_pins():
    assert parse_spec("vllm==0.30.0") == ReleaseSpec("vllm", "0.30.0")
    spec = parse_spec("  flashinfer_python == 0.6.18.post1 ")
    assert (spec.project, spec.version, spec.name, spec.tag) == (
        "flashinfer_python",
        "0.6.18.post1",
        "flashinfer-python",
        "v0.6.18.post1",
    )
    assert str(parse_spec("vllm==0.31.0")) == "vllm==0.31.0"


@pytest.mark.parametrize(
    "bad", ["vllm", "vllm>=0.30.0", "vllm==", "==0.30.0", "vllm==0.30.0,<1", "vllm==not.a.version", ""]
)
def test_parse_spec_rejects_everything_else_with_a_hint(bad):
    with pytest.raises(InputError) as err:
        parse_spec(bad)
    assert "vllm==0.30.0" in err.value.render()


def _df(filename: str, kind: str, platforms: tuple[str, ...] = (), yanked: bool = False) -> DistFile:
    return DistFile(filename, f"https://x/{filename}", "0" * 64, 10, kind, "1.0", yanked=yanked, platforms=platforms)


def test_select_file_prefers_sdist_tarball_and_pure_wheel():
    files = [
        _df("p-1.0.zip", "sdist"),
        _df("p-1.0.tar.gz", "sdist"),
        _df("p-1.0-cp38-abi3-manylinux_2_28_x86_64.whl", "wheel", ("manylinux_2_28_x86_64",)),
        _df("p-1.0-py3-none-any.whl", "wheel", ("any",)),
    ]
    assert select_file(files, "sdist").filename == "p-1.0.tar.gz"
    assert select_file(files, "wheel").filename == "p-1.0-py3-none-any.whl"
    assert select_file(files, "wheel", platform="x86_64").filename.endswith("x86_64.whl")


def test_a_release_without_an_sdist_points_at_the_installed_layout():
    """Issue 33: "the release has no sdist" says how to use its wheels."""
    wheels = [_df("vllm-1.0-cp38-abi3-manylinux_2_28_aarch64.whl", "wheel", ("manylinux_2_28_aarch64",))]
    with pytest.raises(InputError) as err:
        select_file(wheels, "sdist")
    said = err.value.render()
    assert "the release has no sdist" in said and "--layout installed" in said and "--platform" in said
    with pytest.raises(InputError) as err:
        select_file([_df("p-1.0.tar.gz", "sdist")], "wheel")
    assert "--layout installed" not in err.value.render()  # nothing to point at when it has no wheel


def test_select_file_platform_wheels_only_when_asked():
    files = [
        _df("vllm-1.0-cp38-abi3-manylinux_2_28_aarch64.whl", "wheel", ("manylinux_2_28_aarch64",)),
        _df("vllm-1.0-cp38-abi3-manylinux_2_28_x86_64.whl", "wheel", ("manylinux_2_28_x86_64",)),
    ]
    with pytest.raises(InputError) as err:
        select_file(files, "wheel")
    assert "--platform x86_64" in err.value.render()
    assert select_file(files, "wheel", platform="aarch64").filename.endswith("aarch64.whl")
    with pytest.raises(InputError, match="no wheel matches platform 'ppc64le'"):
        select_file(files, "wheel", platform="ppc64le")
    with pytest.raises(InputError, match="has no sdist"):
        select_file(files, "sdist")
    with pytest.raises(InputError, match="unknown distribution kind"):
        select_file(files, "egg")


def test_select_file_skips_yanked_when_possible():
    files = [_df("p-1.0.tar.gz", "sdist", yanked=True), _df("p-1.0.zip", "sdist")]
    assert select_file(files, "sdist").filename == "p-1.0.zip"
    assert select_file(files[:1], "sdist").filename == "p-1.0.tar.gz"


# -- downloads from a local index ---------------------------------------------------------


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local index with demo-pkg 1.0 (sdist + pure wheel) and 1.1 (sdist), private cache."""
    files = tmp_path / "files"
    files.mkdir()
    make_tar(files / "demo_pkg-1.0.tar.gz", sdist_members("demo_pkg-1.0", {"demo/a.py": b"print(1)\n"}))
    make_tar(files / "demo_pkg-1.1.tar.gz", sdist_members("demo_pkg-1.1", {"demo/a.py": b"print(2)\n"}))
    make_zip(files / "demo_pkg-1.0-py3-none-any.whl", [("demo/a.py", b"print(1)\n", 0o644)])
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(files) as idx:
        monkeypatch.setenv("PATCHSET_INDEX_URL", idx.url)
        yield idx


def test_download_once_verified_and_cached(index):
    path = releases.download("demo-pkg==1.0")
    assert path == cache.dist_dir() / "demo_pkg-1.0.tar.gz"
    assert path.read_bytes() == (index.root / "demo_pkg-1.0.tar.gz").read_bytes()
    fetched = index.requests["/files/demo_pkg-1.0.tar.gz"]
    assert fetched == 1
    # again: no file request, no listing request (the listing is cached too)
    listing_hits = index.requests["/simple/demo-pkg/"]
    assert releases.download("demo-pkg==1.0") == path
    assert index.requests["/files/demo_pkg-1.0.tar.gz"] == 1
    assert index.requests["/simple/demo-pkg/"] == listing_hits
    assert leftovers(path.parent) == []


def test_download_new_version_refreshes_cached_listing(index):
    releases.download("demo-pkg==1.0")
    make_tar(index.root / "demo_pkg-1.2.tar.gz", sdist_members("demo_pkg-1.2", {"demo/a.py": b"3\n"}))
    path = releases.download("demo-pkg==1.2")
    assert path.name == "demo_pkg-1.2.tar.gz"


def test_download_wheel_and_unknown_release(index):
    assert releases.download("demo_pkg==1.0", "wheel").name == "demo_pkg-1.0-py3-none-any.whl"
    with pytest.raises(InputError, match="no such release") as err:
        releases.download("demo-pkg==9.9")
    assert "1.0, 1.1" in err.value.render()
    with pytest.raises(InputError, match="not on the package index"):
        releases.download("no-such-project==1.0")


def test_corrupt_cached_file_is_detected_and_replaced(index, caplog):
    path = releases.download("demo-pkg==1.0")
    good = path.read_bytes()
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    files = releases.release_files("demo-pkg==1.0")
    assert not releases.verify_file(path, releases.select_file(files, "sdist"))
    with caplog.at_level("WARNING"):
        again = releases.download("demo-pkg==1.0")
    assert again.read_bytes() == good
    assert index.requests["/files/demo_pkg-1.0.tar.gz"] == 2
    assert "does not match the index's sha256" in caplog.text


def test_tampered_download_raises_and_keeps_nothing(index):
    index.tamper["demo_pkg-1.1.tar.gz"] = b"not the release"
    with pytest.raises(HashMismatch) as err:
        releases.download("demo-pkg==1.1")
    assert "/files/demo_pkg-1.1.tar.gz" in err.value.message
    assert err.value.exit_code == 1
    dist = cache.dist_dir()
    assert not (dist / "demo_pkg-1.1.tar.gz").exists()
    assert leftovers(dist) == []


def test_unreachable_index_names_the_url(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/simple"
    monkeypatch.setenv("PATCHSET_INDEX_URL", url)
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path))
    with pytest.raises(EnvironmentFailure) as err:
        releases.download("vllm==0.30.0")
    assert f"{url}/vllm/" in err.value.message
    assert err.value.exit_code == 2
    assert releases.probe_index(timeout=2) is not None


def test_missing_file_on_index_names_the_url(index):
    releases.release_files("demo-pkg==1.1")  # listing cached with 1.1
    (index.root / "demo_pkg-1.1.tar.gz").unlink()
    with pytest.raises(EnvironmentFailure, match=r"files/demo_pkg-1.1.tar.gz: HTTP 404"):
        releases.download("demo-pkg==1.1")


def test_cached_release_needs_no_network(index):
    path = releases.download("demo-pkg==1.0")
    index.stop()
    assert releases.download("demo-pkg==1.0") == path


def big_release(index: LocalIndex, version: str = "2.0", size: int = 3_500_000) -> Path:
    """An sdist of incompressible bytes, several download chunks long, added to the index."""
    data = random.Random(7).randbytes(size)
    return make_tar(index.root / f"demo_pkg-{version}.tar.gz", sdist_members(f"demo_pkg-{version}", {"blob": data}))


def test_download_progress_hears_growing_byte_counts_up_to_the_size(index):
    archive = big_release(index)
    size = archive.stat().st_size
    heard: list[tuple[str, int, int | None]] = []
    path = releases.download("demo-pkg==2.0", progress=lambda what, done, total: heard.append((what, done, total)))
    assert path.read_bytes() == archive.read_bytes()
    assert {what for what, _, _ in heard} == {"download demo_pkg-2.0.tar.gz"}
    assert {total for _, _, total in heard} == {size}  # the size the index lists, from the first report
    done = [d for _, d, _ in heard]
    assert done[0] == 0 and done[-1] == size
    assert all(a < b for a, b in itertools.pairwise(done)), done
    assert len(done) >= 4  # 0, then one report per chunk of a 3.5 MB file
    heard.clear()
    releases.download("demo-pkg==2.0", progress=lambda *a: heard.append(a))  # cached: nothing to hear
    assert heard == []


# -- unpacking ----------------------------------------------------------------------------


def test_unpack_sdist_strips_top_and_keeps_exec_bits(tmp_path):
    long_dir = "pkg/" + "d" * 120  # beyond ustar's 100-character name field
    members = [
        ("demo-1.0", "dir", None, 0o755),
        ("demo-1.0/run.sh", "file", b"#!/bin/sh\n", 0o755),
        ("demo-1.0/pkg/mod.py", "file", b"x = 1\n", 0o644),
        (f"demo-1.0/{long_dir}/deep.py", "file", b"deep\n", 0o644),
        ("demo-1.0/pkg/ünïcode.py", "file", b"u\n", 0o644),
        ("demo-1.0/pkg/alias.py", "sym", "mod.py", 0o777),
        ("demo-1.0/pkg/copy.py", "hard", "demo-1.0/pkg/mod.py", 0o644),
    ]
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        archive = make_tar(tmp_path / f"demo-1.0-{fmt}.tar.gz", members, fmt=fmt)
        dest = tmp_path / f"tree{fmt}"
        assert unpack(archive, dest) == 6
        assert (dest / "run.sh").stat().st_mode & 0o111
        assert not (dest / "pkg/mod.py").stat().st_mode & 0o111
        assert (dest / long_dir / "deep.py").read_bytes() == b"deep\n"
        assert (dest / "pkg/ünïcode.py").read_bytes() == b"u\n"
        assert os.readlink(dest / "pkg/alias.py") == "mod.py"
        assert (dest / "pkg/copy.py").read_bytes() == b"x = 1\n"
        assert not (dest / "demo-1.0").exists()
    unpack(archive, tmp_path / "kept", strip_top=False)
    assert (tmp_path / "kept/demo-1.0/run.sh").is_file()


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz", "w"])
@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_reader_matches_tarfile(tmp_path, mode, fmt):
    """The fast tar reader sees exactly what Python's tarfile sees, in every format."""
    files = {f"top/dir{i}/file_{i:03d}.py": os.urandom(i * 37 % 2000) for i in range(60)}
    files["top/" + "/".join(["segment"] * 12) + "/x.txt"] = b"long path\n"  # > 100 chars
    members = [("top", "dir", None, 0o755)] + [
        (n, "file", d, 0o755 if i % 7 == 0 else 0o644) for i, (n, d) in enumerate(files.items())
    ]
    archive = make_tar(tmp_path / "a.tar", members, fmt=fmt, mode=mode)
    with tarfile.open(archive) as tf:
        expected = {m.name[len("top/") :]: (tf.extractfile(m).read(), m.mode) for m in tf if m.isfile()}
    reader = ArchiveReader(archive)
    got = {m.path: (m.data, m.mode) for m in reader if m.kind == "file"}
    assert got == expected
    assert reader.sha256 == sha256_file(archive)


HOSTILE = {
    "dotdot": [("top", "dir", None, 0o755), ("top/../evil.txt", "file", b"x", 0o644)],
    "absolute": [("/tmp/evil.txt", "file", b"x", 0o644)],
    "symlink-out": [("top", "dir", None, 0o755), ("top/link", "sym", "../../etc/passwd", 0o777)],
    "symlink-abs": [("top", "dir", None, 0o755), ("top/link", "sym", "/etc/passwd", 0o777)],
    "symlink-chain": [
        ("top", "dir", None, 0o755),
        ("top/here", "sym", ".", 0o777),
        ("top/up", "sym", "here/..", 0o777),  # textually inside, really the parent of the tree
    ],
    "through-symlink": [
        ("top", "dir", None, 0o755),
        ("top/sub", "dir", None, 0o755),
        ("top/d", "sym", "sub", 0o777),
        ("top/d/x.txt", "file", b"x", 0o644),
    ],
    "hardlink-out": [("top", "dir", None, 0o755), ("top/h", "hard", "../outside", 0o644)],
    "fifo": [("top", "dir", None, 0o755), ("top/pipe", "fifo", None, 0o644)],
    "device": [("top", "dir", None, 0o755), ("top/dev", "chr", None, 0o644)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_unpack_refuses_members_that_escape(tmp_path, case):
    archive = make_tar(tmp_path / f"{case}.tar.gz", HOSTILE[case])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnsafePathError):
        unpack(archive, out / "tree")
    assert list(out.iterdir()) == []  # nothing left behind, not even a temporary directory
    assert not (tmp_path / "evil.txt").exists()


def test_unpack_zip_wheel_layout_and_hostile_zips(tmp_path):
    wheel = make_zip(
        tmp_path / "fi-1.0-py3-none-any.whl",
        [
            ("fi/__init__.py", b"", 0o644),
            ("fi/data/include/fi/attn.cuh", b"// header\n", 0o644),
            ("fi/bin/tool", b"#!/bin/sh\n", 0o755),
            ("fi-1.0.dist-info/RECORD", b"", 0o644),
        ],
        symlinks={"fi/data/latest": "include"},
    )
    dest = tmp_path / "site"
    assert unpack(wheel, dest) == 5
    assert (dest / "fi/data/include/fi/attn.cuh").read_bytes() == b"// header\n"
    assert (dest / "fi/bin/tool").stat().st_mode & 0o111
    assert os.readlink(dest / "fi/data/latest") == "include"
    for name, members, links in [
        ("dotdot.whl", [("../evil.py", b"x", 0o644)], None),
        ("abs.whl", [("/evil.py", b"x", 0o644)], None),
        ("link.whl", [("a.py", b"", 0o644)], {"l": "../../x"}),
    ]:
        with pytest.raises(UnsafePathError):
            unpack(make_zip(tmp_path / name, members, links), tmp_path / name.replace(".whl", ""))
        assert not (tmp_path / name.replace(".whl", "")).exists()


def test_unpack_damaged_or_misplaced_input(tmp_path):
    good = make_tar(tmp_path / "d-1.0.tar.gz", sdist_members("d-1.0", {f"f{i}": os.urandom(4000) for i in range(20)}))
    truncated = tmp_path / "trunc.tar.gz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputError, match="damaged"):
        unpack(truncated, tmp_path / "t1")
    assert not (tmp_path / "t1").exists()
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"\x1f\x8b" + os.urandom(3000))
    with pytest.raises(InputError, match="damaged"):
        unpack(garbage, tmp_path / "t2")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(InputError, match="not an empty directory"):
        unpack(good, busy)
    no_top = make_tar(tmp_path / "flat.tar.gz", [("a.py", "file", b"", 0o644), ("b.py", "file", b"", 0o644)])
    with pytest.raises(InputError, match="not inside a top directory") as err:
        unpack(no_top, tmp_path / "t3")
    assert "strip_top=False" in err.value.render()
    assert unpack(no_top, tmp_path / "t4", strip_top=False) == 2
    with pytest.raises(InputError, match="not found"):
        unpack(tmp_path / "missing.tar.gz", tmp_path / "t5")
    assert leftovers(tmp_path) == []


# -- the real package index ---------------------------------------------------------------


@pytest.fixture
def pypi(monkeypatch):
    reason = releases.probe_index()
    if reason:
        pytest.skip(f"network test: {reason}")


VLLM = ["0.30.0", "0.31.0", "0.32.0", "0.33.0"]


@pytest.mark.network
def test_real_vllm_sdists_download_verify_and_unpack(pypi, tmp_path):
    paths = [releases.download(f"vllm=={v}") for v in VLLM]
    for version, path in zip(VLLM, paths, strict=False):
        assert path.name == f"vllm-{version}.tar.gz"
        assert 40e6 < path.stat().st_size < 50e6
        dist = releases.select_file(releases.release_files(f"vllm=={version}"), "sdist")
        assert releases.verify_file(path, dist)
    # a flipped byte in a copy of the real file fails verification
    corrupt = tmp_path / paths[0].name
    data = bytearray(paths[0].read_bytes())
    data[1000] ^= 1
    corrupt.write_bytes(bytes(data))
    assert not releases.verify_file(corrupt, releases.select_file(releases.release_files("vllm==0.30.0"), "sdist"))
    tree = tmp_path / "vllm-0.30.0"
    count = unpack(paths[0], tree)
    assert 8000 > count > 7000
    assert (tree / "vllm/models/glm5next/nvidia/kda.py").is_file()
    assert not (tree / "vllm/models/glm5next/common").exists()
    assert (tree / "PKG-INFO").read_text().count("Version: 0.30.0") == 1


@pytest.mark.network
def test_real_vllm_wheels_are_platform_specific(pypi):
    files = releases.release_files("vllm==0.30.0")
    with pytest.raises(InputError, match="only platform wheels"):
        releases.select_file(files, "wheel")
    wheel = releases.select_file(files, "wheel", platform="x86_64")
    assert wheel.filename == "vllm-0.30.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert wheel.size and wheel.size > 200e6  # why it is never chosen by default


@pytest.mark.network
def test_real_flashinfer_wheel_has_installed_layout(pypi, tmp_path):
    path = releases.download("flashinfer-python==0.6.18.post1", "wheel")
    assert path.name == "flashinfer_python-0.6.18.post1-py3-none-any.whl"
    dest = tmp_path / "site"
    unpack(path, dest)
    headers = list((dest / "flashinfer/data/include").rglob("*.cuh"))
    assert len(headers) > 10
    assert (dest / "flashinfer_python-0.6.18.post1.dist-info/RECORD").is_file()


# -- the CLI's bar ---------------------------------------------------------------------------


def test_the_cli_bar_shows_a_download_in_bytes_and_steps_as_counts(index):
    """The one adapter (patchset.commands.progressbar) draws the callback's reports: sizes for a
    byte callback, done/total for a step callback; a finished download leaves the screen."""
    from rich.console import Console

    from patchset.commands.progressbar import Bars

    archive = big_release(index)
    screen = io.StringIO()
    with Bars(console=Console(file=screen, force_terminal=True, width=120)) as bars:
        releases.download("demo-pkg==2.0", progress=bars.callback("", unit="bytes"))
        steps = bars.callback("apply")
        assert steps is not None
        steps("02-pdl-off-sm12x", 2, 5)
        dl, st = bars.rich.tasks
        columns = bars.rich.columns
        amount = next(str(c.render(dl)) for c in columns if type(c).__name__ == "Amount")
        count = next(str(c.render(st)) for c in columns if type(c).__name__ == "Amount")
    size = archive.stat().st_size
    assert (dl.completed, dl.total, dl.fields["unit"], dl.visible) == (size, size, "bytes", False)
    assert dl.description == "download demo_pkg-2.0.tar.gz"
    assert amount == f"{size / 1e6:.1f}/{size / 1e6:.1f} MB", amount
    assert (st.completed, st.total, st.description, count) == (2, 5, "apply 02-pdl-off-sm12x", "2/5")
    with Bars(console=Console(file=screen, force_terminal=True, width=120)) as bars:  # one bar, file after file
        heard = bars.callback("", unit="bytes")
        releases.download("demo-pkg==2.0", progress=heard)  # cached: nothing to draw
        assert bars.rich.tasks == []
        releases.download("demo-pkg==1.0", progress=heard)
        releases.download("demo-pkg==1.1", progress=heard)
        (only,) = bars.rich.tasks
    small = (index.root / "demo_pkg-1.1.tar.gz").stat().st_size
    assert (only.description, only.completed, only.total, only.visible) == (
        "download demo_pkg-1.1.tar.gz",
        small,
        small,
        False,
    )


def test_no_bar_off_a_terminal_and_no_rich_import():
    probe = (
        "import io, sys\n"
        "from patchset.commands.progressbar import Bars\n"
        "with Bars(io.StringIO()) as bars:\n"
        "    assert bars.callback('apply') is None and bars.callback('', unit='bytes') is None\n"
        "print('rich' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r
