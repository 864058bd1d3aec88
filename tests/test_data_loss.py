"""Silent data loss (issue #23): what patchset writes never replaces what it did not write.

The gate's ``--artifacts DIR`` and ``export DEST`` write only into a new or empty directory or one
patchset marked as its own (``.patchset-output``); a directory of someone's files is refused with
exit 2 and left byte for byte as it was. Importing a file whose name reduces to the id of a patch
imported from another name is a collision (refused, ``--id`` offered), never an update of that
patch's body. Exported patch names are portable, so quilt and ``patchset import`` read the series
back as it was written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.gateworld import gate_ledger
from tests.support.repo import new_repo, tree_digest
from tests.support.text import udiff

MARKER = ".patchset-output"  # patchset.outdir.MARKER (spelled out: the marker is a promise to users)
LEDGER = """\
schema = 1

[targets.demo]
upstream = "https://example.invalid/demo.git"
strip = 1
"""


def _quiet(r) -> None:
    """A refusal, not a crash."""
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stderr, r


def _ledger(tmp: Path, name: str = "led") -> Path:
    d = tmp / name
    d.mkdir()
    (d / "patches.toml").write_text(LEDGER)
    return d


def _state(led: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(led).items() if not k.startswith(".patchset/")}


def _patch(path: Path, new: str, old: str = "a\n", rel: str = "x.py") -> Path:
    path.write_text(udiff(rel, old, new))
    return path


# ---- the gate's artifacts directory -----------------------------------------------------------------


def _users_dir(d: Path) -> Path:
    (d / "dist").mkdir(parents=True)
    (d / "dist/mytool-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 my wheel")
    (d / "logs").mkdir()
    (d / "logs/build.log").write_text("my build log\n")
    (d / "report.md").write_text("# my report\n")
    return d


def test_gate_refuses_an_artifacts_directory_it_did_not_write(run, tmp_path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    mine = _users_dir(tmp_path / "mine")
    before = tree_digest(mine)
    r = run("gate", "--onto", c[1], "--artifacts", mine, cwd=ledger.parent)
    assert r.code == 2, r
    _quiet(r)
    assert str(mine) in r.stderr and "not empty" in r.stderr and "nothing was written" in r.stderr
    assert MARKER in r.stderr  # says how a directory becomes reusable
    assert tree_digest(mine) == before  # dist/, logs/ and report.md as they were
    # a new directory is created and marked; a second run into it replaces only its own results
    art = tmp_path / "art"
    assert run("gate", "--onto", c[1], "--artifacts", art, cwd=ledger.parent).code == 0
    assert (art / MARKER).is_file() and (art / "report.md").is_file()
    (art / "notes.txt").write_text("mine\n")
    r = run("gate", "--onto", c[1], "--artifacts", art, "--force", cwd=ledger.parent)
    assert r.code == 0, r
    assert (art / "notes.txt").read_text() == "mine\n" and (art / "logs/gate.log").is_file()
    # an empty directory is fine, and becomes the gate's
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("gate", "--onto", c[1], "--artifacts", empty, "--force", cwd=ledger.parent).code == 0
    assert (empty / MARKER).is_file()


# ---- import: two names, one id ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "pid"),
    [("my-patch.patch", "my patch.patch", "my-patch"), ("ééé.patch", "ààà.patch", "patch")],
)
def test_import_refuses_a_second_name_for_an_existing_id(run, tmp_path, first, second, pid) -> None:
    led = _ledger(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    _patch(src / first, "one\n")
    _patch(src / second, "two\n")
    assert run("import", src / first, cwd=led).code == 0
    before = _state(led)
    r = run("import", src / second, cwd=led)
    assert r.code == 2, r
    _quiet(r)
    assert repr(first) in r.stderr and repr(second) in r.stderr and repr(pid) in r.stderr
    assert "--id" in r.stderr and "nothing was imported" in r.stderr
    assert _state(led) == before  # the first body, the ledger and the lock as they were
    assert b"+one" in (led / f"patchset/series/demo/{first}").read_bytes()
    # under an id of its own both are kept
    r = run("import", "--id", f"{pid}-2", src / second, cwd=led)
    assert r.code == 0, r
    r = run("show", "--json", f"{pid}-2", cwd=led)
    assert r.code == 0 and '"body_state": "present"' in r.stdout
    assert b"+one" in (led / f"patchset/series/demo/{first}").read_bytes()
    assert b"+two" in (led / f"patchset/series/demo/{second}").read_bytes()
    # the same file name again is an update, as before
    _patch(src / first, "ONE\n")
    r = run("import", src / first, cwd=led)
    assert r.code == 0 and "updated 1" in r.stdout, r
    assert b"+ONE" in (led / f"patchset/series/demo/{first}").read_bytes()


def test_import_id_names_one_patch(run, tmp_path) -> None:
    led = _ledger(tmp_path)
    a, b = _patch(tmp_path / "a.patch", "1\n"), _patch(tmp_path / "b.patch", "2\n")
    before = _state(led)
    r = run("import", "--id", "x", a, b, cwd=led)
    assert r.code == 2 and "--id names one patch" in r.stderr, r
    r = run("import", "--id", "../x", a, cwd=led)
    assert r.code == 2 and "is not an id" in r.stderr, r
    assert _state(led) == before


# ---- export ------------------------------------------------------------------------------------------


def test_export_refuses_a_directory_of_someone_elses_files(run, tmp_path) -> None:
    led = _ledger(tmp_path)
    assert run("import", _patch(tmp_path / "fix.patch", "b\n"), cwd=led).code == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "series").write_text("my-own.patch\n")
    (mine / "fix.patch").write_text("my own notes\n")
    before = tree_digest(mine)
    for fmt in ("quilt", "mbox"):
        r = run("export", "--format", fmt, mine, cwd=led)
        assert r.code == 2, r
        _quiet(r)
        assert str(mine) in r.stderr and "not empty" in r.stderr
        assert tree_digest(mine) == before
    # a new directory, then the same again (patchset's own now), then another format into it
    out = tmp_path / "out"
    assert run("export", "--format", "quilt", out, cwd=led).code == 0
    assert (out / MARKER).is_file() and (out / "series").read_text() == "fix.patch\n"
    assert run("export", "--format", "quilt", out, cwd=led).code == 0
    assert run("export", "--format", "mbox", out, cwd=led).code == 0
    assert (out / "series").read_text() == "fix.patch\n" and (out / "series.mbox").is_file()


BASE = {"pkg/a.py": "a = 1\n", "pkg/b.py": "b = 1\n", "pkg/c.py": "c = 1\n", "pkg/d.py": "d = 1\n"}
ODD_NAMES = {  # name as imported -> the file it patches
    "my patch.patch": "pkg/a.py",
    "two\nlines.patch": "pkg/b.py",
    "ümlaut fix.diff": "pkg/c.py",
    "-rf.patch": "pkg/d.py",
}


def test_exported_names_are_portable_and_round_trip_through_quilt_and_import(run, tmp_path) -> None:
    if not shutil.which("quilt"):
        pytest.skip("quilt is not installed (Debian package `quilt`; .ci/run installs it)")
    led = _ledger(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    for name, rel in ODD_NAMES.items():
        old = BASE[rel]
        _patch(src / name, old.replace("1", "2"), old=old, rel=rel)
        assert run("import", src / name, cwd=led).code == 0
    out = tmp_path / "quilt"
    r = run("export", "--format", "quilt", out, cwd=led)
    assert r.code == 0, r
    series = (out / "series").read_text().splitlines()
    assert len(series) == len(ODD_NAMES) == len(set(series))
    for name in series:
        assert all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in name), name
        assert not name.startswith(("-", "."))
    assert series[0] == "my-patch.patch" and series[1] == "two-lines.patch"
    bodies = sorted((out / n).read_bytes() for n in series)
    assert bodies == sorted((src / n).read_bytes() for n in ODD_NAMES)
    # quilt applies the series as written
    work = tmp_path / "work"
    new_repo(work, BASE)
    (work / "patches").symlink_to(out)
    env = {**os.environ, "QUILT_PATCHES": "patches", "QUILTRC": "/dev/null"}
    q = subprocess.run(["quilt", "push", "-a"], cwd=work, capture_output=True, text=True, env=env)
    assert q.returncode == 0, q.stdout + q.stderr
    assert all((work / rel).read_text() == BASE[rel].replace("1", "2") for rel in BASE)
    # and patchset imports it back: into a new ledger the same bodies, into this one nothing changes
    led2 = _ledger(tmp_path, "led2")
    r = run("import", "--json", out, cwd=led2)
    assert r.code == 0, r
    assert sorted(p.read_bytes() for p in (led2 / "patchset/series/demo").iterdir()) == bodies
    before = _state(led)
    r = run("import", out, cwd=led)
    assert r.code == 0 and "added 0, updated 0" in r.stdout, r
    assert _state(led) == before
