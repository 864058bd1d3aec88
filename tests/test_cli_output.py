"""Honest output (issue 24): a piped ``list`` is data without a header unless ``--header``;
``validate`` says how many bodies it checked and how many it could not (never a bare "ok" beside
unchecked ones); a hash mismatch shows the expected and the actual sha256 (validate, apply,
build overlay)."""

from __future__ import annotations

import difflib
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from tests.support.wheel_demo import make_demo

LEDGER = """\
schema = 1
[targets.lib]
upstream = "https://example.invalid/lib.git"
"""
OLD = "".join(f"line {i}\n" for i in range(12))


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def led(tmp_path: Path, run) -> Path:
    """Three patches: one imported (its body locked), two not imported."""
    d = tmp_path / "led"
    d.mkdir()
    text = LEDGER
    for pid in ("lib-01-fix", "lib-02-more", "lib-03-last"):
        text += f'\n[[patch]]\nid = "{pid}"\ntarget = "lib"\ntitle = "{pid}"\norigin = "ours"\n'
    (d / "patches.toml").write_text(text)
    new = OLD.replace("line 5\n", "line five\n")
    body = "".join(difflib.unified_diff(OLD.splitlines(True), new.splitlines(True), "a/pkg/m.py", "b/pkg/m.py"))
    (tmp_path / "lib-01-fix.patch").write_text(body)
    assert run("import", tmp_path / "lib-01-fix.patch", cwd=d).code == 0
    (d / "tree/pkg").mkdir(parents=True)
    (d / "tree/pkg/m.py").write_text(OLD)
    return d


# --------------------------------------------------------------------------- list


def test_piped_list_is_rows_only(run, led: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_TTY", "0")
    r = run("list", cwd=led)
    assert r.code == 0
    assert [ln.split("\t")[1] for ln in r.stdout.splitlines()] == ["lib-01-fix", "lib-02-more", "lib-03-last"]
    r = run("list", "--header", cwd=led)
    assert r.stdout.splitlines()[0].split("\t")[:3] == ["#", "id", "target"]
    assert len(r.stdout.splitlines()) == 4


def test_terminal_list_keeps_its_header(run, led: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_TTY", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    plain = run("list", cwd=led).stdout
    assert plain == run("list", "--header", cwd=led).stdout
    assert plain.splitlines()[0].split()[:2] == ["#", "id"]


# --------------------------------------------------------------------------- validate


def test_validate_counts_what_it_did_not_check(run, led: Path) -> None:
    r = run("validate", cwd=led)
    assert r.code == 0, r
    last = r.stdout.splitlines()[-1]
    assert last == "ok: 1 checked; 2 not imported, not checked", r.stdout
    r = run("validate", "--json", cwd=led)
    data = json.loads(r.stdout)
    assert data["ok"] and data["checked"] == 1 and data["not_checked"] == {"not imported": 2}


def test_validate_with_everything_checked_says_so(run, led: Path) -> None:
    text = (led / "patches.toml").read_text()
    (led / "patches.toml").write_text(text.split('\n[[patch]]\nid = "lib-02-more"')[0])
    r = run("validate", cwd=led)
    assert r.code == 0 and r.stdout.splitlines()[-1] == "ok: 1 checked", r.stdout
    assert json.loads(run("validate", "--json", cwd=led).stdout)["not_checked"] == {}


def test_validate_counts_an_unlocked_body_as_not_checked(run, led: Path) -> None:
    lock = led / "patches.lock"
    lock.write_text("\n".join(ln for ln in lock.read_text().splitlines() if not ln.startswith("lib-01-fix")) + "\n")
    r = run("validate", cwd=led)
    # the lock now holds no hash at all while a body is imported: that is a problem of its own
    assert any("the lock is empty but 1 patch body is imported" in ln for ln in r.stdout.splitlines()), r.stdout
    assert r.stdout.splitlines()[-1] == "1 problem(s): 0 checked; 2 not imported, 1 not in lock, not checked", r.stdout


def test_validate_body_mismatch_shows_both_hashes(run, led: Path) -> None:
    body = led / "patchset/series/lib/lib-01-fix.patch"
    locked = sha(body.read_bytes())
    body.write_bytes(body.read_bytes() + b"\n")
    r = run("validate", cwd=led)
    assert r.code == 1
    problem = next(ln for ln in r.stdout.splitlines() if "does not match" in ln)
    assert f"expected sha256 {locked}" in problem and f"actual {sha(body.read_bytes())}" in problem, problem
    assert r.stdout.splitlines()[-1] == "1 problem(s): 1 checked; 2 not imported, not checked"


# --------------------------------------------------------------------------- apply / build


def test_apply_lock_mismatch_shows_both_hashes(run, led: Path) -> None:
    for pid in ("lib-02-more", "lib-03-last"):  # an all-imported series
        text = (led / "patches.toml").read_text()
        (led / "patches.toml").write_text(text.replace(f'\n[[patch]]\nid = "{pid}"', '\n[[patch]]\nid = "x"', 1))
    (led / "patches.toml").write_text((led / "patches.toml").read_text().split('\n[[patch]]\nid = "x"')[0])
    tree = led / "tree"
    assert run("apply", "--tree", tree, "--update-lock", "--dry-run", cwd=led).code == 0
    assert run("apply", "--tree", tree, "--update-lock", cwd=led).code == 0
    good = (tree / "pkg/m.py").read_text()
    (tree / "pkg/m.py").write_text(OLD + "drift\n")
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 1, r
    assert f"expected sha256 {sha(good)}" in r.stdout, r.stdout
    assert f"actual   sha256 {sha(good + 'drift' + chr(10))}" in r.stdout, r.stdout
    rep = json.loads(run("apply", "--tree", tree, "--json", cwd=led).stdout)["targets"][0]
    assert rep["hashes"] == {"pkg/m.py": {"expected": sha(good), "actual": sha(good + "drift\n")}}
    # a tree that carries the series but whose file drifted afterwards: the file on disk is the actual
    (tree / "pkg/m.py").write_text(good + "# edited\n")
    r = run("apply", "--tree", tree, "--json", cwd=led)
    rep = json.loads(r.stdout)["targets"][0]
    assert rep["outcome"] == "mismatch", rep
    assert rep["hashes"] == {"pkg/m.py": {"expected": sha(good), "actual": sha(good + "# edited\n")}}


def test_build_overlay_mismatch_shows_both_hashes(run, tmp_path: Path) -> None:
    demo = make_demo(tmp_path, run)
    stock = tmp_path / "stock-tree"
    with zipfile.ZipFile(demo["wheel"]) as zf:
        zf.extractall(stock)
    r = run("build", "overlay", "--tree", stock, "--out", tmp_path / "out", cwd=demo["ledger"])
    assert r.code == 1, r
    core = (stock / "demo/core.py").read_bytes()
    patched = (demo["tree"] / "demo/core.py").read_bytes()
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "demo/core.py")
    assert lines[at + 1].split() == ["expected", "sha256", sha(patched)], r.stdout
    assert lines[at + 2].split() == ["actual", "sha256", sha(core)], r.stdout
