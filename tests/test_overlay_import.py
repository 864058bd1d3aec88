"""``import --overlay``: whole-file overlays become patches against the target's base (issue #25).

Local trees here (the real-release proof is ``tests/test_onboard_real.py``): a modified file, a
new file, a file identical to the base, files outside the package, a symlink in the kit, CRLF and
a missing final newline; a manifest with stale checksums, sets, provenance and hostile paths;
files that belong to another target; and a rebase of the imported overlay onto a newer base,
held against ``git merge-file``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from patchset.ledger.store import load_ledger
from tests.support.diffgen import unified_diff
from tests.support.fuzz import Sentinel
from tests.support.repo import tree_digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LINES = "".join(f"line{i} = {i}\n" for i in range(40))


def _write(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _world(tmp: Path) -> tuple[Path, Path, Path, dict[str, bytes | str]]:
    base = _write(
        tmp / "base",
        {
            "vllm/config/cache.py": LINES,
            "vllm/platforms/cuda.py": "CAP = (9, 10)\n" + LINES,
            "vllm/same.py": "same = 1\n",
            "vllm/crlf.py": b"a = 1\r\nb = 2\r\nc = 3\r\n",
        },
    )
    overlay: dict[str, bytes | str] = {
        "vllm/config/cache.py": LINES.replace("line20 = 20\n", "line20 = 2000  # ours\n"),
        "vllm/platforms/cuda.py": ("CAP = (9, 10, 12)\n" + LINES).rstrip("\n"),  # no final newline
        "vllm/same.py": "same = 1\n",
        "vllm/crlf.py": b"a = 1\r\nb = 20\r\nc = 3\r\n",
        "vllm/new_module.py": "print('new')\n",
        "README.md": "how to mount these\n",
        "usr/local/bin/launch.sh": "#!/bin/sh\n",
    }
    kit = _write(tmp / "kit", overlay)
    led = tmp / "led"
    led.mkdir()
    return base, kit, led, overlay


def test_overlay_files_become_patches_that_reproduce_them(run, tmp_path: Path) -> None:
    base, kit, led, overlay = _world(tmp_path)
    os.symlink("/etc/passwd", kit / "vllm" / "evil.py")
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base-tree", base, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["counts"] == {"files": 4, "patches": 4, "identical": 1, "skipped": 3}, rep
    assert rep["identical"] == ["vllm/same.py"]
    assert rep["new_files"] == ["vllm/new_module.py"]
    skipped = {s["file"]: s["reason"] for s in rep["skipped"]}
    assert "symbolic link" in skipped["vllm/evil.py"]
    assert "outside every target's package" in skipped["README.md"]
    assert "outside every target's package" in skipped["usr/local/bin/launch.sh"]
    led_data = load_ledger(led / "patches.toml")
    assert led_data.targets["vllm"].base == str(base.resolve())  # recorded: the target had none
    lock = tomllib.loads((led / "patches.lock").read_text())["targets"]["vllm"]
    want = {k: _sha(v) for k, v in overlay.items() if k.startswith("vllm/") and k != "vllm/same.py"}
    assert lock["files"] == want  # the overlay files' own sha256
    # apply onto a copy of the base reproduces every overlay file byte for byte
    tree = _write(tmp_path / "tree", {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*.py")})
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    for rel, data in overlay.items():
        if rel.startswith("vllm/"):
            assert (tree / rel).read_bytes() == (data.encode() if isinstance(data, str) else data), rel
    # the same overlay again changes nothing
    before = tree_digest(led)
    r = run("import", "--overlay", kit, "--target", "vllm", "--json", cwd=led)
    assert r.code == 0, r
    assert len(json.loads(r.stdout)["unchanged"]) == 4
    assert tree_digest(led) == before


def _manifest(kit: Path, files: list[dict], **top: str) -> Path:
    m = kit / "MANIFEST.json"
    m.write_text(json.dumps({"files": files, **top}))
    return m


def test_manifest_checksums_sets_provenance_and_hostile_paths(run, tmp_path: Path) -> None:
    base, kit, led, overlay = _world(tmp_path)
    sentinel = Sentinel(tmp_path)
    root = "/usr/local/lib/python3.12/dist-packages"
    stale = hashlib.md5(b"an older copy").hexdigest()
    files = [
        {
            "overlay_file": "vllm/config/cache.py",
            "site_packages_target": f"{root}/vllm/config/cache.py",
            "md5": stale,
            "sets": ["kv"],
            "provenance": "ours",
        },
        {
            "overlay_file": "vllm/platforms/cuda.py",
            "site_packages_target": f"{root}/vllm/platforms/cuda.py",
            "sha256": _sha(overlay["vllm/platforms/cuda.py"]),
            "sets": ["kv", "sm12x"],
            "provenance": "PR #31234 backport",
        },
        {
            "overlay_file": "vllm/crlf.py",
            "site_packages_target": "vllm/crlf.py",
            "sets": ["sm12x"],
            "provenance": "alice (identical): patches/crlf.py",
        },
        {"overlay_file": "vllm/gone.py", "site_packages_target": "vllm/gone.py"},
        {"overlay_file": "../sentinel/victim.txt", "site_packages_target": "vllm/victim.py"},
        {"overlay_file": "/etc/passwd", "site_packages_target": "vllm/passwd.py"},
        {"overlay_file": "usr/local/bin/launch.sh", "site_packages_target": "/usr/local/bin/launch.sh"},
    ]
    manifest = _manifest(kit, files, site_packages_root=root, base_image="nvcr.io/nvidia/vllm:26.01-py3")
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--manifest", manifest, "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 0, r
    text = r.stdout
    # each stale checksum named: file, the manifest's value, the actual one; the file wins
    actual = hashlib.md5(overlay["vllm/config/cache.py"].encode()).hexdigest()  # type: ignore[union-attr]
    assert f"checksum mismatch: vllm/config/cache.py: the manifest's md5 is {stale}, the file's is {actual}" in text
    assert "in the manifest (files[3]) but not in the overlay: vllm/gone.py" in text
    assert "climbs out" in text and "absolute" in text
    assert "outside site_packages_root" in text
    assert "not in the manifest (imported by its path in the overlay): vllm/new_module.py" in text
    sentinel.assert_untouched()
    led_data = load_ledger(led / "patches.toml")
    t = led_data.targets["vllm"]
    assert (t.base_image, t.installed_root) == ("nvcr.io/nvidia/vllm:26.01-py3", root)
    by_id = {p.id: p for p in led_data.patches}
    cache = by_id["overlay-vllm-config-cache.py"]
    assert (cache.origin, cache.tags, cache.notes) == ("ours", ["kv"], "provenance: ours")
    cuda = by_id["overlay-vllm-platforms-cuda.py"]
    assert (cuda.origin, cuda.upstream.prs, cuda.tags) == ("upstream", ["vllm-project/vllm#31234"], ["kv", "sm12x"])
    crlf = by_id["overlay-vllm-crlf.py"]
    assert crlf.authors == ["alice"] and "patches/crlf.py" in crlf.notes
    # one patch per set: kv holds cache.py and cuda.py (cuda.py's first set), sm12x crlf.py
    led2 = tmp_path / "led2"
    led2.mkdir()
    assert run("init", "--target", "vllm", cwd=led2).code == 0
    r = run(
        "import", "--overlay", kit, "--manifest", manifest, "--target", "vllm", "--base-tree", base,
        "--group", "set", "--json", cwd=led2,
    )  # fmt: skip
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["patches"]["kv"] == ["vllm/config/cache.py", "vllm/platforms/cuda.py"]
    assert rep["patches"]["sm12x"] == ["vllm/crlf.py"]
    assert any("carried in 'kv'" in n for n in rep["notes"])
    tree = _write(tmp_path / "tree", {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*.py")})
    assert run("apply", "--tree", tree, cwd=led2).code == 0
    assert (tree / "vllm/platforms/cuda.py").read_text() == overlay["vllm/platforms/cuda.py"]


def test_malformed_manifest_is_refused_with_its_place(run, tmp_path: Path) -> None:
    base, kit, led, _ = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(led)
    for text, said in (
        ("{not json", "not JSON"),
        ('["a list"]', "JSON object"),
        ('{"files": [{"overlay_file": 3}]}', "must be a string"),
        ('{"files": [{"site_packages_target": "vllm/x.py"}]}', "without `overlay_file`"),
        ('{"files": [{"overlay_file": "vllm/same.py", "sets": 7}]}', "`sets`"),
    ):
        (kit / "MANIFEST.json").write_text(text)
        r = run("import", "--overlay", kit, "--manifest", kit / "MANIFEST.json", "--base-tree", base, cwd=led)
        assert r.code == 2, (text, r)
        assert said in r.stderr and "MANIFEST.json" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert tree_digest(led) == before


def test_files_of_another_target_go_to_it_or_are_skipped_with_why(run, tmp_path: Path) -> None:
    base, kit, led, _ = _world(tmp_path)
    mla = "int tile = 64;\n" + "".join(f"int y{i};\n" for i in range(10))
    _write(base, {"flashinfer/data/include/flashinfer/mla.cuh": mla})
    _write(kit, {"flashinfer/data/include/flashinfer/mla.cuh": mla.replace("64", "32")})
    assert run("init", "--target", "vllm", "--target", "flashinfer", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base-tree", base, "--json", cwd=led)
    assert r.code == 0, r
    skipped = {s["file"]: s["reason"] for s in json.loads(r.stdout)["skipped"]}
    why = skipped["flashinfer/data/include/flashinfer/mla.cuh"]
    assert "target 'flashinfer'" in why and "records no base" in why and "target set flashinfer --base" in why
    r = run("target", "set", "flashinfer", "--base", str(base), cwd=led)
    assert r.code == 0, r
    r = run("import", "--overlay", kit, "--target", "vllm", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    pid = "overlay-include-flashinfer-mla.cuh"
    assert rep["targets"][pid] == "flashinfer" and rep["patches"][pid] == ["include/flashinfer/mla.cuh"]
    lock = tomllib.loads((led / "patches.lock").read_text())["targets"]["flashinfer"]["files"]
    assert lock == {"include/flashinfer/mla.cuh": _sha(mla.replace("64", "32"))}  # the source-layout key


def test_a_base_other_than_the_targets_is_refused(run, tmp_path: Path) -> None:
    base, kit, led, _ = _world(tmp_path)
    other = _write(tmp_path / "other", {"vllm/x.py": "x\n"})
    assert run("init", "--target", "vllm", cwd=led).code == 0
    assert run("target", "set", "vllm", "--base", str(base), cwd=led).code == 0
    before = tree_digest(led)
    r = run("import", "--overlay", kit, "--target", "vllm", "--base-tree", other, cwd=led)
    assert r.code == 2 and "every patch of a target applies to one base" in r.stderr, r
    assert tree_digest(led) == before
    r = run("import", "--overlay", kit, "--target", "vllm", cwd=led)  # the recorded base
    assert r.code == 0, r


def _merge_file(ours: bytes, base: bytes, theirs: bytes, tmp: Path) -> tuple[bytes, int]:
    tmp = tmp / "merge-file"
    tmp.mkdir(exist_ok=True)
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
    p = subprocess.run(
        ["git", "merge-file", "-p", str(tmp / "ours"), str(tmp / "base"), str(tmp / "theirs")], capture_output=True
    )
    return p.stdout, p.returncode


def test_rebase_carries_overlays_as_patches_keeping_upstream_changes(run, tmp_path: Path) -> None:
    """The overlay of a file upstream changed elsewhere is carried (upstream's change kept, where
    mounting the overlay would revert it); one whose own lines upstream changed is a named
    conflict; both as ``git merge-file`` decides."""
    base, kit, led, overlay = _world(tmp_path)
    new = _write(
        tmp_path / "new",
        {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()},
    )
    (new / "vllm/config/cache.py").write_text(LINES.replace("line2 = 2\n", "line2 = 22  # upstream\n"))
    (new / "vllm/crlf.py").write_bytes(b"a = 1\r\nb = 21\r\nc = 3\r\n")  # the overlay's own line
    assert run("init", "--target", "vllm", cwd=led).code == 0
    assert run("import", "--overlay", kit, "--target", "vllm", "--base-tree", base, cwd=led).code == 0
    r = run("rebase", "--onto", new, "--json", cwd=led)
    assert r.code == 1, r  # a conflict: nothing written
    rep = json.loads(r.stdout)
    verdicts = {p["id"]: p["verdict"] for p in rep["patches"]}
    assert verdicts["overlay-vllm-crlf.py"] == "conflict"
    assert verdicts["overlay-vllm-config-cache.py"] == "carried"
    merged, conflicts = _merge_file(
        (new / "vllm/config/cache.py").read_bytes(),
        (base / "vllm/config/cache.py").read_bytes(),
        overlay["vllm/config/cache.py"].encode(),  # type: ignore[union-attr]
        tmp_path,
    )
    assert conflicts == 0 and b"line2 = 22  # upstream" in merged and b"line20 = 2000  # ours" in merged
    _, crlf_conflicts = _merge_file(
        (new / "vllm/crlf.py").read_bytes(), (base / "vllm/crlf.py").read_bytes(), overlay["vllm/crlf.py"], tmp_path
    )  # type: ignore[arg-type]
    assert crlf_conflicts > 0
    # without the conflicting one the rebase lands, and apply on the new base gives merge-file's file
    assert run("import", "--overlay", kit, "--target", "vllm", cwd=led).code == 0
    text = (led / "patches.toml").read_text()
    text = text.replace('id = "overlay-vllm-crlf.py"', 'id = "overlay-vllm-crlf.py"\nstate = "held"\nreason = "x"')
    (led / "patches.toml").write_text(text)
    r = run("rebase", "--onto", new, cwd=led)
    assert r.code == 0, r
    tree = _write(tmp_path / "tree2", {p.relative_to(new).as_posix(): p.read_bytes() for p in new.rglob("*.py")})
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / "vllm/config/cache.py").read_bytes() == merged


def test_an_overlay_file_name_with_a_control_character_is_skipped(run, tmp_path: Path) -> None:
    base, kit, led, _ = _world(tmp_path)
    (kit / "vllm" / "bad\nname.py").write_text("x = 1\n")
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base-tree", base, "--json", cwd=led)
    assert r.code == 0, r
    skipped = {s["file"]: s["reason"] for s in json.loads(r.stdout)["skipped"]}
    assert "control character" in skipped["vllm/bad\\nname.py"]
    assert not [f for p in load_ledger(led / "patches.toml").patches for f in p.files if "bad" in f]


def test_a_name_too_long_for_the_file_system_is_missing_not_a_crash(run, tmp_path: Path) -> None:
    """A manifest entry (or a diff) naming a file whose name the file system cannot hold (a
    component past 255 bytes: ENAMETOOLONG from stat) is a file the kit or the base does not have,
    said as such, never an internal error."""
    base, kit, led, _ = _world(tmp_path)
    long = "vllm/" + "a" * 300 + ".py"
    manifest = _manifest(kit, [{"overlay_file": long}, {"overlay_file": "vllm/same.py"}])
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run(
        "import", "--overlay", kit, "--manifest", manifest, "--target", "vllm", "--base-tree", base, "--json", cwd=led
    )
    assert r.code == 0, r
    assert [m["file"] for m in json.loads(r.stdout)["missing"]] == [long]
    # a plain diff naming such a file, read against the base directory: a new file there
    diff = led / "long.patch"
    diff.write_text(f"--- /dev/null\n+++ b/{long}\n@@ -0,0 +1 @@\n+x = 1\n")
    r = run("import", diff, "--target", "vllm", "--base-tree", base, "--strip", "1", "--json", cwd=led)
    assert r.code == 0, r
    assert load_ledger(led / "patches.toml").patches[-1].id == "long"


def test_the_manifest_inside_the_kit_is_not_an_overlay_file_however_the_kit_is_named(run, tmp_path: Path) -> None:
    """`--overlay ../kit --manifest ../kit/MANIFEST.json` (relative names, as typed): the manifest
    is the kit's description, neither an overlay file left out of itself nor a file outside the package."""
    _, kit, led, _ = _world(tmp_path)
    _manifest(kit, [{"overlay_file": "vllm/same.py"}])
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run(
        "import", "--overlay", "../kit", "--manifest", "../kit/MANIFEST.json", "--target", "vllm",
        "--base-tree", "../base", "--json", cwd=led,
    )  # fmt: skip
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert "MANIFEST.json" not in rep["not_in_manifest"], rep["not_in_manifest"]
    assert "MANIFEST.json" not in [s["file"] for s in rep["skipped"]], rep["skipped"]


def test_a_large_overlay_file_is_imported_in_about_three_times_its_size(tmp_path: Path) -> None:
    """Memory (``tracemalloc``, every Python allocation; ``git diff`` runs in a child) against the
    overlay file's size, for a 4 MB file with scattered edits and one with an edit every 10th line
    (many small hunks); the figures at other sizes and for one whole-file hunk are
    ``bench/overlay_import.py``'s. Before: each read allocated the 64 MiB limit up front and the
    whole kit's files were held at once (18x at this size), and the diff was copied several times."""
    import tracemalloc

    from patchset.commands.overlay_import import import_overlay

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        from overlay_import import world  # the bench's kit: one file of 80-byte lines
    finally:
        sys.path.pop(0)
    for every, bound in ((1000, 3.0), (10, 4.5)):
        ledger, kit, base, size = world(tmp_path / str(every), 4, every)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            rep = import_overlay(ledger, kit, "vllm", base_tree=base)
            used = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert rep.added == ["overlay-vllm-big.py"] and not rep.skipped, rep.to_json()
        assert used < bound * size + (1 << 20), f"every {every}th line: {used / size:.2f}x a {size} byte overlay"
    body = (ledger.parent / "patchset/series/vllm/overlay-vllm-big.py.patch").read_bytes()
    from patchset.engine.hunks import apply_file
    from patchset.patchfmt.diffs import parse_patch

    out = apply_file((base / "vllm/big.py").read_bytes(), parse_patch(body)[0])
    assert out.ok and out.new == (kit / "vllm/big.py").read_bytes()  # and the body still reproduces the file


def test_diffs_imported_after_an_overlay_are_locked_through_the_whole_series(run, tmp_path: Path) -> None:
    """Once an overlay put files in the lock, each later import completes it from the series applied
    to the base: a file two patches change (the second reads the first's result) and a rename get
    the series' final bytes, and the first apply checks every file without --update-lock."""
    base, kit, led, overlay = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 0, r
    two = LINES.replace("line3 = 3\n", "line3 = 30\n")
    three = two.replace("line30 = 30\n", "line30 = 3000\n")
    diffs = {
        "one.diff": unified_diff(LINES.encode(), two.encode(), "vllm/a.py"),
        "two.diff": unified_diff(two.encode(), three.encode(), "vllm/a.py"),
        "move.diff": b"diff --git a/vllm/same.py b/vllm/moved.py\nsimilarity index 100%\n"
        b"rename from vllm/same.py\nrename to vllm/moved.py\n",
    }
    _write(base, {"vllm/a.py": LINES})
    for name, body in diffs.items():
        (tmp_path / name).write_bytes(body)
    r = run("import", *(tmp_path / name for name in diffs), "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 0, r
    lock = load_ledger(led / "patches.toml").lock.targets["vllm"].files
    assert lock["vllm/a.py"] == _sha(three)
    assert lock["vllm/moved.py"] == _sha("same = 1\n") and "vllm/same.py" not in lock
    assert lock["vllm/config/cache.py"] == _sha(overlay["vllm/config/cache.py"])
    tree = tmp_path / "tree"
    subprocess.run(["cp", "-r", str(base), str(tree)], check=True)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / "vllm/a.py").read_text() == three and not (tree / "vllm/same.py").exists()
