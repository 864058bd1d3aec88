"""Recorded state is either sealed or re-measured (issue #31, item 4).

* the verify result cache: an entry is a verdict without an engine start, so an entry this
  installation did not seal (hand-edited, another machine's) is ignored and measured again, the
  report says so (terminal and ``--json``), and no forged verdict reaches the proof history. Before:
  turning the failing results of the cache into passing ones made the broken patch "not needed"
  with 0 engine starts, even under ``--all``, and that verdict was sealed into the history;
* output markers (``.patchset-output``): a marker is a token sealed for the directory it sits in (its
  device and inode), so a planted marker (a plain file anyone can write or commit) or one copied from
  a directory patchset wrote gives no right to delete or overwrite; the refusal names the files it
  would have touched. Before: a planted marker let ``gate --artifacts`` delete ``dist/`` and ``logs/``
  and ``export`` overwrite ``series``. A directory patchset made keeps working.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from patchset import outdir
from patchset.verify.outcomes import BROKEN, NOT_NEEDED, PROVEN
from patchset.verify.proofs import load_history
from tests.support.consent import allow_ledger
from tests.support.nights import double_world
from tests.support.repo import git

pytestmark = pytest.mark.timeout(300)

MARKER = ".patchset-output"  # patchset.outdir.MARKER, spelled out: it is what a user would plant


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    return tmp_path


# --------------------------------------------------------------------------- the verify result cache


def _forge(cache: Path) -> list[str]:
    """Turn every failing cached result into a pass, as a hand edit would (the old seal kept)."""
    forged = []
    for entry in sorted((cache / "verify-results").rglob("*.json")):
        doc = json.loads(entry.read_text())
        result = doc["result"]
        if result.get("outcome") != "fail":
            continue
        result.update(outcome="pass", reason="")
        for check in result.get("checks", []):
            check.update(ok=True, failed_cases=[])
        entry.write_text(json.dumps(doc))
        forged.append(str(entry))
    return forged


def _classes(data: dict) -> dict[str, str]:
    return {p["patch"]: p["class"] for p in data["patches"]}


def test_a_forged_cache_entry_changes_no_verdict_and_is_not_sealed_into_the_history(isolated: Path, run) -> None:
    world = double_world(isolated / "world")
    led = world.ledger.parent
    allow_ledger(led)  # its engine's commands, as its user would
    tree = isolated / "tree"
    git(world.upstream, "worktree", "add", "-q", "--detach", str(tree), world.nights[0][1])
    first = run("verify", "--tree", tree, "--all", "--json", cwd=led)
    truth = _classes(json.loads(first.stdout))
    assert first.code == 1 and truth == {
        "d2-stale-cache-fix": PROVEN,
        "d3-banner": NOT_NEEDED,
        "d4-decode-drift": BROKEN,
    }
    again = json.loads(run("verify", "--tree", tree, "--all", "--json", cwd=led).stdout)
    assert again["engine_starts"] == 0 and not again.get("cache_ignored")  # our own entries are reused

    forged = _forge(isolated / "cache")
    assert len(forged) == 2  # the series' failing check (d4), the tree without d2
    r = run("verify", "--tree", tree, "--all", cwd=led)
    text = " ".join(r.stdout.split())
    assert r.code == 1 and "1 broken" in text and "0 engine start(s)" not in text, r
    assert "ignored 2 cached result(s) not sealed by this installation" in text

    forged = _forge(isolated / "cache")  # the re-measured results replaced the forged ones: forge again
    r = run("verify", "--tree", tree, "--all", "--json", cwd=led)
    data = json.loads(r.stdout)
    assert r.code == 1 and _classes(data) == truth
    assert sorted(data["cache_ignored"]) == sorted(forged)
    assert data["engine_starts"] == 2  # exactly the trees the forged entries stood for
    history = load_history(led / ".patchset" / "verify-proofs.json")["fake"]
    assert history.last["d4-decode-drift"].klass == BROKEN
    assert history.proofs["d2-stale-cache-fix"].klass == PROVEN
    assert history.proofs["d2-stale-cache-fix"].tests["lc"].outcome == "fail"  # the without-run as measured


def test_a_cache_entry_of_another_installation_or_key_is_a_miss(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchset.verify.results_cache import ResultCache

    root = isolated / "results"
    mine, other = "ab" * 32, "cd" * 32
    ResultCache(root).put(mine, {"outcome": "pass"})
    got = ResultCache(root).get(mine)
    assert got is not None and got["outcome"] == "pass"  # ours: a hit
    (root / other[:2]).mkdir()
    shutil.copy(root / mine[:2] / f"{mine}.json", root / other[:2] / f"{other}.json")
    assert ResultCache(root).get(other) is None  # sealed, but for another key
    monkeypatch.setenv("PATCHSET_STATE", str(isolated / "another-machine"))
    cache = ResultCache(root)
    assert cache.get(mine) is None and cache.ignored == [str(root / mine[:2] / f"{mine}.json")]


# --------------------------------------------------------------------------- output markers


def _quiet(r) -> None:
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stderr, r


def _users_dir(d: Path, marker: bytes | None = b"") -> Path:
    (d / "dist").mkdir(parents=True)
    (d / "dist/mytool-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 my wheel")
    (d / "logs").mkdir()
    (d / "logs/build.log").write_text("my build log\n")
    (d / "series").write_text("my-own.patch\n")
    if marker is not None:
        (d / MARKER).write_bytes(marker)
    return d


@pytest.mark.parametrize(
    "marker",
    [
        b"",  # touched into place
        b"Written by `patchset gate`. patchset may replace what is in this directory;\n",  # the old text
        b"command: gate\ndirectory: 1:2\nseal: " + b"0" * 64 + b"\n",  # a token sealed by no one here
    ],
    ids=["empty", "old-text", "forged-token"],
)
def test_a_planted_marker_lets_the_gate_delete_nothing(isolated: Path, run, upstream, marker: bytes) -> None:
    from tests.support.gateworld import gate_ledger
    from tests.support.repo import tree_digest

    repo, c = upstream
    ledger = gate_ledger(isolated / "proj", repo, c[0])
    mine = _users_dir(isolated / "mine", marker)
    before = tree_digest(mine)
    r = run("gate", "--onto", c[1], "--artifacts", mine, cwd=ledger.parent)
    _quiet(r)
    assert r.code == 2, r
    text = " ".join(r.stderr.split())
    assert f"{MARKER} patchset did not write for it" in text and "nothing was written or removed" in text
    assert "it would have replaced or removed logs, dist" in text  # the gate's own names that are there
    assert "remove it yourself first" in text  # what to do
    assert tree_digest(mine) == before  # dist/ and logs/ as they were


def test_a_planted_or_copied_marker_lets_export_overwrite_nothing(isolated: Path, run) -> None:
    from tests.support.repo import tree_digest
    from tests.support.text import udiff

    led = isolated / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\n')
    (isolated / "fix.patch").write_text(udiff("x.py", "a\n", "b\n"))
    assert run("import", isolated / "fix.patch", cwd=led).code == 0
    planted = _users_dir(isolated / "planted")
    before = tree_digest(planted)
    r = run("export", "--format", "quilt", planted, cwd=led)
    _quiet(r)
    assert r.code == 2 and "it would have replaced or removed series;" in " ".join(r.stderr.split()), r
    assert tree_digest(planted) == before and (planted / "series").read_text() == "my-own.patch\n"

    ours = isolated / "ours"  # patchset's own: exported into again, and again in another format
    for fmt in ("quilt", "quilt", "mbox"):
        assert run("export", "--format", fmt, ours, cwd=led).code == 0
    assert (ours / "series").read_text() == "fix.patch\n" and (ours / "series.mbox").is_file()

    copied = isolated / "copied"  # a copy of patchset's directory (cp -r, a restored archive, a clone)
    shutil.copytree(ours, copied)
    (copied / "series").write_text("my-own.patch\n")
    before = tree_digest(copied)
    r = run("export", "--format", "quilt", copied, cwd=led)
    _quiet(r)
    assert r.code == 2 and "sealed for another directory: it was copied here" in " ".join(r.stderr.split()), r
    assert tree_digest(copied) == before


def test_a_directory_patchset_made_stays_its_own_and_a_rename_keeps_it(isolated: Path, run, upstream) -> None:
    from tests.support.gateworld import gate_ledger

    repo, c = upstream
    ledger = gate_ledger(isolated / "proj", repo, c[0])
    art = isolated / "art"
    assert run("gate", "--onto", c[1], "--artifacts", art, cwd=ledger.parent).code == 0
    r = run("gate", "--onto", c[1], "--artifacts", art, "--force", cwd=ledger.parent)
    assert r.code == 0 and (art / "logs/gate.log").is_file(), r
    moved = isolated / "moved"
    art.rename(moved)  # the same directory under another name: still patchset's
    assert outdir.is_owned(moved)
    assert run("gate", "--onto", c[1], "--artifacts", moved, "--force", cwd=ledger.parent).code == 0
    marker = (moved / MARKER).read_text()
    assert "seal: " in marker and "Written by `patchset gate`" in marker
