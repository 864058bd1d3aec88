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
    tree = isolated / "tree"
    git(world.upstream, "worktree", "add", "-q", "--detach", str(tree), world.nights[0][1])
    first = run("verify", "--tree", tree, "--all", "--json", cwd=led)
    truth = _classes(json.loads(first.stdout))
    assert first.code == 1 and truth == {"d2-stale-cache-fix": PROVEN, "d3-banner": NOT_NEEDED, "d4-decode-drift": BROKEN}
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
