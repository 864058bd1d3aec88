"""Build outputs and the paths they are made of, when the inputs are hostile (security issue #23).

``build wheel`` and ``build overlay`` read a wheel, a tree and the lock, and write into ``--out``;
``import`` turns quilt ``series`` lines and ``EXPECTED.sha256`` lines into bodies and lock keys.
Every one of those paths comes from data. These tests give each reader a hostile one (``../``,
absolute, a symlink member, patchset's own state directory) with a :class:`Sentinel` where it
would land, and check the refusal: exit 2, a message naming the file (and line) and the path,
nothing written outside, no half-written output. The last part checks the rule for ``--out``:
absent, empty, or written by patchset before (``patchset.outdir``'s marker); any other directory
is left as it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import tempfile
import warnings
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from tests.support.fuzz import Sentinel, snapshot
from tests.support.wheel_demo import STOCK, make_demo, make_wheel, make_wheel_with_zeros

MARKER = ".patchset-output"  # patchset.outdir.MARKER: what marks a directory patchset wrote


@pytest.fixture
def demo(tmp_path: Path, run) -> dict[str, Path]:
    return make_demo(tmp_path, run)


def _add_patch(led: Path, pid: str, body: str) -> None:
    """One more active patch in the demo ledger, its body imported and locked."""
    from patchset.ledger.lock import load_lock, render_lock

    (led / "patchset/series/demo" / f"{pid}.patch").write_text(body)
    with (led / "patches.toml").open("a") as fh:
        fh.write(f'\n[[patch]]\nid = "{pid}"\ntarget = "demo"\ntitle = "{pid}"\norigin = "ours"\n')
    lock = load_lock(led / "patches.lock")
    lock.bodies[pid] = hashlib.sha256(body.encode()).hexdigest()
    (led / "patches.lock").write_text(render_lock(lock))


# --------------------------------------------------------------------------- build wheel: the input wheel


def test_wheel_series_file_with_dotdot_is_not_extracted(demo, run, tmp_path: Path, monkeypatch) -> None:
    """A series path ``../../sentinel/victim.txt`` that the wheel also carries: it used to be
    extracted into the scratch tree (landing beside it) before apply refused the path."""
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))  # scratch: tmp/patchset-wheel-*/tree
    bait = Sentinel(scratch_parent)
    hostile = "../../sentinel/victim.txt"
    _add_patch(
        demo["ledger"],
        "04-evil",
        f"--- a/{hostile}\n+++ b/{hostile}\n@@ -1 +1 @@\n-do not touch\n+owned\n",
    )
    wheel = make_wheel(tmp_path / "h" / "demo_pkg-1.0-py3-none-any.whl", {**STOCK, hostile: "owned\n"})
    out = tmp_path / "out"
    r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
    assert r.code == 2, r
    assert hostile in r.stderr and "'..'" in r.stderr
    bait.assert_untouched()
    assert not out.exists()


def _symlink_member(zi_name: str, target: str) -> tuple[zipfile.ZipInfo, str]:
    info = zipfile.ZipInfo(zi_name, date_time=(2024, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("../evil.py", "'..'"),
        ("/tmp/evil.py", "absolute"),
        (".patchset-txn/journal.json", "state directory"),
        ("demo\\..\\..\\evil.py", "backslash"),
        ("demo/link.py", "symbolic link"),
        ("demo/.git/config", ".git"),
        ("demo/unchanged.py", "appears twice"),  # the rule --from-index applies too (test_archive_bounds.py)
    ],
)
def test_wheel_with_a_hostile_member_is_refused_whole(demo, run, tmp_path: Path, member: str, why: str) -> None:
    """The member is not touched by the series: it used to be copied into the patched wheel."""
    wheel = tmp_path / "h" / "demo_pkg-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with WheelFile(wheel, "w") as wf:
        for name, text in STOCK.items():
            wf.writestr(name, text)
        if why == "symbolic link":
            wf.writestr(*_symlink_member(member, "../../../../etc/passwd"))
        elif why == "appears twice":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zipfile warns of the duplicate name, and writes it
                wf.writestr(member, "VALUE = 2\n")
        else:
            wf.writestr(member, "x = 1\n")
        info = "demo_pkg-1.0.dist-info"
        wf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n\nA demo.\n")
        wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    out = tmp_path / "out"
    r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
    assert r.code == 2, r
    assert str(wheel) in r.stderr and repr(member) in r.stderr and why in r.stderr, r.stderr
    assert "nothing was written" in r.stderr
    assert not out.exists()


# --------------------------------------------------------------------------- lock keys and EXPECTED.sha256


@pytest.mark.parametrize("key", ["../../etc/passwd", "/etc/shadow", ".patchset-txn/journal.json"])
def test_import_expected_with_a_hostile_path_is_refused(demo, run, tmp_path: Path, key: str) -> None:
    led = demo["ledger"]
    lock_before = (led / "patches.lock").read_bytes()
    sums = tmp_path / "EXPECTED.sha256"
    sums.write_text(f"{'a' * 64}  demo/core.py\n{'0' * 64}  {key}\n")
    r = run("import", sums, cwd=led)
    assert r.code == 2, r
    assert f"{sums}:2" in r.stderr and repr(key) in r.stderr, r.stderr
    assert (led / "patches.lock").read_bytes() == lock_before


def test_a_lock_with_a_hostile_key_is_refused_at_load(demo, run, tmp_path: Path) -> None:
    """``build overlay`` used to read ``tree/<key>`` (here: the sentinel beside the tree) and copy
    it into the overlay."""
    bait = Sentinel(tmp_path)
    led = demo["ledger"]
    victim = bait.root / "victim.txt"
    key = "../sentinel/victim.txt"
    lock = led / "patches.lock"
    text = lock.read_text()
    sha = hashlib.sha256(victim.read_bytes()).hexdigest()
    section = "[targets.demo.files]\n"
    assert section in text
    text = text.replace(section, f'{section}"{key}" = "{sha}"\n', 1)
    lock.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(f'"{key}"'))
    out = tmp_path / "out"
    r = run("build", "overlay", "--tree", demo["tree"], "--out", out, cwd=led)
    assert r.code == 2, r
    assert f"{lock}:{line}" in r.stderr and "'..'" in r.stderr and "--update-lock" in r.stderr, r.stderr
    bait.assert_untouched()
    assert not out.exists()


def test_overlay_does_not_read_through_a_link_leaving_the_tree(demo, run, tmp_path: Path) -> None:
    """A patched file of the tree replaced by a link to a file outside with the locked content."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    tree = demo["tree"]
    shutil.copy(tree / "demo/core.py", outside / "core.py")
    (tree / "demo/core.py").unlink()
    (tree / "demo/core.py").symlink_to(outside / "core.py")
    out = tmp_path / "out"
    r = run("build", "overlay", "--tree", tree, "--out", out, cwd=demo["ledger"])
    assert r.code == 2, r
    assert "demo/core.py" in r.stderr and "symlink" in r.stderr, r.stderr
    assert not out.exists()


def test_overlay_paths_mapped_out_of_the_output_are_refused(demo, run, tmp_path: Path) -> None:
    """A path map turning a lock key into ``../../../../../../sentinel/...`` in the installed layout:
    the overlay used to write ``out/overlay/<root>/`` + that, i.e. into the sentinel."""
    bait = Sentinel(tmp_path)
    led = demo["ledger"]
    toml = led / "patches.toml"
    climb = "../" * 6 + "sentinel/"
    toml.write_text(toml.read_text().replace('"include/" = "demo/data/include/"', f'"include/" = "{climb}"'))
    src_tree = tmp_path / "src-tree"
    shutil.copytree(demo["tree"], src_tree)
    shutil.move(src_tree / "demo/data/include", src_tree / "include")
    out = tmp_path / "out"
    r = run("build", "overlay", "--tree", src_tree, "--layout", "source", "--out", out, cwd=led)
    assert r.code == 2, r
    assert climb in r.stderr and "'..'" in r.stderr, r.stderr
    bait.assert_untouched()
    assert not out.exists()


# --------------------------------------------------------------------------- quilt series lines


@pytest.mark.parametrize("line", ["{outside}", "../secret.patch", "sub/../../secret.patch"])
def test_quilt_series_line_outside_the_patches_directory_is_refused(run, ledger_dir: Path, tmp_path: Path, line: str):
    secret = tmp_path / "secret.patch"
    secret.write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    quilt = tmp_path / "quilt"
    (quilt / "sub").mkdir(parents=True)
    (quilt / "ok.patch").write_text("--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n")
    name = line.format(outside=secret)
    (quilt / "series").write_text(f"ok.patch\n{name}\n")
    before = snapshot(ledger_dir)
    r = run("import", quilt, cwd=ledger_dir)
    assert r.code == 2, r
    assert f"{quilt / 'series'}:2" in r.stderr and repr(name) in r.stderr, r.stderr
    assert snapshot(ledger_dir) == before


def test_quilt_series_line_through_a_link_out_is_refused(run, ledger_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "out").symlink_to(tmp_path / "elsewhere")
    (quilt / "series").write_text("out/x.patch\n")
    before = snapshot(ledger_dir)
    r = run("import", quilt, cwd=ledger_dir)
    assert r.code == 2 and "symlink" in r.stderr and f"{quilt / 'series'}:1" in r.stderr, r
    assert snapshot(ledger_dir) == before


# --------------------------------------------------------------------------- --out: fresh or patchset's own


def test_wheel_out_refuses_a_foreign_directory(demo, run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, cwd=demo["ledger"])
    assert r.code == 2, r
    assert str(out) in r.stderr and "not empty" in r.stderr and "hint:" in r.stderr, r.stderr
    assert snapshot(out) == before


def test_wheel_out_of_patchset_is_reused(demo, run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, "--json", cwd=demo["ledger"])
    assert r.code == 0, r
    built = Path(json.loads(r.stdout)["wheel"])
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, built.name])
    first = built.read_bytes()
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, cwd=demo["ledger"])
    assert r.code == 0, r
    assert built.read_bytes() == first


def test_overlay_out_of_patchset_is_replaced_and_a_foreign_one_kept(demo, run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    led, tree = demo["ledger"], demo["tree"]
    assert run("build", "overlay", "--tree", tree, "--out", out, cwd=led).code == 0
    assert (out / MARKER).is_file() and (out / "Dockerfile").is_file()
    (out / "Dockerfile").write_text("stale\n")
    r = run("build", "overlay", "--tree", tree, "--out", out, "--base-image", "other:2", cwd=led)
    assert r.code == 0, r
    assert "FROM other:2\n" in (out / "Dockerfile").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "Dockerfile").write_text("mine\n")
    r = run("build", "overlay", "--tree", tree, "--out", foreign, cwd=led)
    assert r.code == 2 and "not empty" in r.stderr, r
    assert snapshot(foreign) == {"Dockerfile": ("file", hashlib.sha256(b"mine\n").hexdigest())}
    # a marker that is not a regular file (a link, a directory) does not make a directory patchset's
    (foreign / MARKER).symlink_to(out / MARKER)
    r = run("build", "overlay", "--tree", tree, "--out", foreign, cwd=led)
    assert r.code == 2 and "not empty" in r.stderr, r
    assert (foreign / "Dockerfile").read_text() == "mine\n"


def test_quilt_series_file_that_is_not_text_is_bad_input(run, ledger_dir: Path, tmp_path: Path) -> None:
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "series").write_bytes(b"\x80\xff fix.patch\n")
    r = run("import", quilt, cwd=ledger_dir)
    assert r.code == 2 and f"{quilt / 'series'}: not UTF-8" in r.stderr and "internal error" not in r.stderr, r


# --------------------------------------------------------------------------- build wheel: bombs and honest mismatches


def test_wheel_member_past_the_archive_limits_is_refused_before_it_is_read(demo, run, tmp_path: Path, monkeypatch):
    """The limits ``apply --from-index`` unpacks with (``patchset.upstream.limits``) bound ``build
    wheel`` too. Before: no limit at all, a member of any size was read whole into memory."""
    from patchset.upstream import limits

    wheel = make_wheel_with_zeros(tmp_path / "big" / "demo_pkg-1.0-py3-none-any.whl", STOCK, "demo/zeros.bin", 64)
    assert wheel.stat().st_size < 1 << 20
    out = tmp_path / "out"
    monkeypatch.setenv(limits.MAX_MEMBER_BYTES_ENV, "16M")
    r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
    assert r.code == 2, r
    assert "'demo/zeros.bin' is 64.0 MiB, more than the 16.0 MiB allowed" in r.stderr, r.stderr
    assert limits.MAX_MEMBER_BYTES_ENV in r.stderr and str(wheel) in r.stderr
    assert not out.exists()
    monkeypatch.delenv(limits.MAX_MEMBER_BYTES_ENV)
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "32M")
    r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
    assert r.code == 2 and "unpacks to more than 32.0 MiB" in r.stderr and limits.MAX_BYTES_ENV in r.stderr, r
    monkeypatch.delenv(limits.MAX_BYTES_ENV)
    monkeypatch.setenv(limits.MAX_MEMBERS_ENV, "5")
    r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
    assert r.code == 2 and "more than 5 members" in r.stderr and limits.MAX_MEMBERS_ENV in r.stderr, r
    assert not out.exists()


def test_unchanged_members_are_streamed_not_held_in_memory(demo, run, tmp_path: Path) -> None:
    """A 256 MiB member the series does not touch is copied a block at a time. Before: read whole
    (``zin.read``) and written from memory: the peak held the member at least once."""
    import tracemalloc

    wheel = make_wheel_with_zeros(tmp_path / "big" / "demo_pkg-1.0-py3-none-any.whl", STOCK, "demo/zeros.bin", 256)
    out = tmp_path / "out"
    tracemalloc.start()
    try:
        r = run("build", "wheel", "--wheel", wheel, "--out", out, cwd=demo["ledger"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.code == 0, r
    assert peak < 64 << 20, f"peak {peak >> 20} MiB while copying a 256 MiB member"
    (built,) = out.glob("*.whl")
    with zipfile.ZipFile(built) as zf:
        assert zf.getinfo("demo/zeros.bin").file_size == 256 << 20
        assert zf.testzip() is None


def test_a_mismatch_shows_the_expected_and_the_actual_sha256(demo, run, tmp_path: Path) -> None:
    """Before: the report named the file only (the actual sha256 was lost)."""
    from patchset.ledger.lock import load_lock, render_lock

    path = demo["ledger"] / "patches.lock"
    lock = load_lock(path)
    lock.targets["demo"].files["demo/core.py"] = "0" * 64
    path.write_text(render_lock(lock))
    actual = hashlib.sha256((demo["tree"] / "demo/core.py").read_bytes()).hexdigest()
    out = tmp_path / "out"
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, "--json", cwd=demo["ledger"])
    assert r.code == 1, r
    rep = json.loads(r.stdout)
    assert rep["hashes"]["demo/core.py"] == {"expected": "0" * 64, "actual": actual}
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, cwd=demo["ledger"])
    assert r.code == 1
    assert f"expected sha256 {'0' * 64}" in r.stdout and f"actual   sha256 {actual}" in r.stdout, r.stdout
    assert not out.exists()
