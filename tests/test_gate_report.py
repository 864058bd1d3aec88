"""The gate's report and memory on real git repositories: the verdict and its exit code for each
documented code (docs/gate.md), the fields of ``report.json``, what the state remembers of each
run (last clean, last green, failing), and the first bad / newest safe commit it names.

The upstream is ``tests.support.gateworld``'s: A is taken upstream at c2, B breaks at c4 (#104).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from patchset.ci.gate import GateRun, run_gate
from tests.support.gateworld import CORE, gate_ledger, release_ledger, sdist, transient_upstream
from tests.support.localindex import LocalIndex
from tests.support.repo import git

FAILING_TEST = """
[[patch.tests]]
name = "boom"
command = "echo exploding; exit 3"
tags = ["boom"]
"""


def _run(ledger: Path, art: Path, **kw):
    r = run_gate(GateRun(ledger, artifacts=art, **kw))
    return r, json.loads((art / "report.json").read_text())


def _state(ledger: Path) -> dict:
    return json.loads((ledger.parent / ".patchset/gate-state.json").read_text())["targets"]["demo"]


def _tagged_copy(repo: Path, dest: Path, tags: dict[str, str]) -> Path:
    """A copy of the module's upstream with tags (the shared one is never changed)."""
    shutil.copytree(repo, dest)
    for name, sha in tags.items():
        git(dest, "tag", name, sha)
    return dest


def test_each_verdict_has_its_documented_exit_code_in_the_report(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], FAILING_TEST)
    art = tmp_path / "art"

    r, doc = _run(ledger, art, onto=c[1])  # 0: green
    assert (r.status, r.exit_code) == ("green", 0)
    assert (doc["status"], doc["exit_code"], doc["conflicts"], doc["reasons"]) == ("green", 0, [], [])
    assert (doc["commit"], doc["onto"], doc["asked"], doc["base"], doc["base_commit"]) == (c[1], c[1], c[1], c[0], c[0])
    assert (doc["target"], doc["upstream"]) == ("demo", {"kind": "repo", "location": str(repo)})
    assert doc["judged_at"] and doc["judged_at"] == _state(ledger)["judged_at"]
    assert doc["first_bad"] == {} and doc["newest_safe"] == {} and doc["previous"] == {}
    assert doc["artifacts"] == str(art.resolve()) and doc["seconds"] > 0
    assert {"rebase", "tree", "apply", "status", "fetch"} <= set(doc["timings"])
    assert doc["upstream_status"]["mode"] == "offline"  # GitHub is asked only with --refresh-status

    r, doc = _run(ledger, art, onto=c[1])  # 0: nothing new
    assert (r.status, r.exit_code, doc["exit_code"]) == ("unchanged", 0, 0)
    assert doc["previous"]["verdict"] == "green" and doc["previous"]["judged"] == c[1]

    r, doc = _run(ledger, art, onto=c[1], tags=["boom"])  # 1: a failing test (another question: the tags)
    assert (r.status, r.exit_code, doc["exit_code"]) == ("red", 1, 1)
    assert doc["conflicts"] == [] and doc["reasons"] == ["test B/boom failed"]
    assert doc["first_bad"] == {} and doc["newest_safe"] == {}  # no conflict: nothing to bisect

    r, doc = _run(ledger, art, onto=c[9])  # 1: a conflict
    assert (r.status, r.exit_code, doc["exit_code"], doc["conflicts"]) == ("red", 1, 1, ["B"])
    subject = "[Core] Rework limit_5 with a cap (#104)"
    assert doc["reasons"] == [f'B conflicts; first bad upstream commit {c[4][:12]} "{subject}" (PR #104)']
    assert doc["apply"]["outcome"] == "skipped" and doc["series_patch"]["path"] == "series.patch"

    state = (ledger.parent / ".patchset/gate-state.json").read_bytes()
    r, doc = _run(ledger, art, onto="no-such-ref")  # 2: could not judge; the state is left as it was
    assert (r.status, r.exit_code, doc["exit_code"]) == ("error", 2, 2)
    assert "no-such-ref" in doc["errors"][0] and doc["reasons"] == []
    assert (ledger.parent / ".patchset/gate-state.json").read_bytes() == state
    assert not (art / "series.patch").exists()  # the red run's files do not pass for this one


def test_the_state_remembers_last_clean_last_green_and_failing(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    up = _tagged_copy(repo, tmp_path / "up", {"docs-tag": c[3]})
    ledger = gate_ledger(tmp_path / "proj", up, c[0], FAILING_TEST)
    art = tmp_path / "art"

    r, _ = _run(ledger, art, onto=c[9])  # red on the first run: the base is the last clean commit
    s = _state(ledger)
    assert (s["verdict"], s["judged"], s["judged_label"], s["failing"]) == ("red", c[9], c[9], ["B"])
    assert (s["last_clean"], s["last_clean_label"], s["last_green"], s["last_green_label"]) == (c[0], c[0], "", "")

    r, _ = _run(ledger, art, onto="docs-tag")  # green, named by a tag: the tag is the label
    assert r.status == "green"
    s = _state(ledger)
    assert (s["last_clean"], s["last_clean_label"], s["last_green"], s["last_green_label"]) == (
        c[3],
        "docs-tag",
        c[3],
        "docs-tag",
    )
    assert s["failing"] == [] and s["tags"] == []

    r, _ = _run(ledger, art, onto=c[2], tags=["boom"])  # red by a test: it replayed, so it is clean
    assert r.status == "red"
    s = _state(ledger)
    assert (s["last_clean"], s["last_clean_label"]) == (c[2], c[2])
    assert (s["last_green"], s["last_green_label"]) == (c[3], "docs-tag")  # kept from the green run
    assert (s["failing"], s["tags"], s["verdict"]) == (["B"], ["boom"], "red")

    r, _ = _run(ledger, art, onto=c[9])  # red by a conflict: last clean and last green stay
    s = _state(ledger)
    assert (s["last_clean"], s["last_green"], s["last_green_label"], s["failing"]) == (c[2], c[3], "docs-tag", ["B"])
    assert r.first_bad["B"]["last_good"] == c[3] and r.first_bad["B"]["range_size"] == 7  # c3..c9 from c2


def test_first_bad_fields_and_the_newest_safe_commit_just_below_it(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    up = _tagged_copy(repo, tmp_path / "up", {"v0.3.0": c[3]})  # a release tag on a git upstream
    ledger = gate_ledger(tmp_path / "proj", up, c[0])
    _, doc = _run(ledger, tmp_path / "art", onto=c[9])
    fb = doc["first_bad"]["B"]
    assert set(fb) == {"patch", "commit", "last_good", "range_size", "probes"} and fb["patch"] == "B"
    assert fb["commit"] == {"sha": c[4], "subject": "[Core] Rework limit_5 with a cap (#104)", "pr": 104, "release": ""}
    assert (fb["last_good"], fb["range_size"]) == (c[3], 9) and 1 <= fb["probes"] <= 4
    replays = (tmp_path / "art/logs/gate.log").read_text().count("] bisect: replay onto ")
    assert replays >= fb["probes"], replays  # each replay of the bisection is in the run's log
    safe = doc["newest_safe"]
    assert safe["commit"]["sha"] == c[3] and safe["commit"]["release"] == "0.3.0"
    assert safe["label"] == c[3]  # a git upstream is rebased onto the commit, not PROJECT==VERSION
    assert safe["why"] == "the whole series replays onto it; the commit just before the first bad one"
    assert safe["probes"] == 1  # c3 was replayed by the bisection already: one more replay, remembered
    assert safe["command"].endswith(f"--onto {c[3]} --upstream {up}")


def test_the_newest_safe_commit_below_a_patch_that_broke_and_healed(tmp_path: Path) -> None:
    repo, c = transient_upstream(tmp_path / "up")  # B breaks at c5; A conflicts on c3 and c4 only
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    _, doc = _run(ledger, tmp_path / "art", onto=c[6])
    assert doc["first_bad"]["B"]["commit"]["sha"] == c[5] and doc["first_bad"]["B"]["last_good"] == c[4]
    safe = doc["newest_safe"]
    assert safe["commit"]["sha"] == c[2]
    assert safe["why"] == "the whole series replays onto it; 2 commit(s) below the first bad one"  # c3, c4
    assert safe["probes"] >= 2  # c4 (below B's first bad), then A's bisection below it


def test_the_last_clean_commit_is_the_newest_safe_when_the_range_has_none(tmp_path: Path, upstream) -> None:
    """Green on c3 (named by a tag), red on c4: the range c3..c4 is the first bad commit alone, so
    the newest safe commit is the last one the series replayed onto, named as that run named it."""
    repo, c = upstream
    up = _tagged_copy(repo, tmp_path / "up", {"docs-tag": c[3]})
    ledger = gate_ledger(tmp_path / "proj", up, c[0])
    assert _run(ledger, tmp_path / "art", onto="docs-tag")[0].status == "green"
    _, doc = _run(ledger, tmp_path / "art", onto=c[4])
    fb = doc["first_bad"]["B"]
    assert (fb["commit"]["sha"], fb["last_good"], fb["range_size"], fb["probes"]) == (c[4], c[3], 1, 0)
    safe = doc["newest_safe"]
    assert (safe["label"], safe["why"]) == ("docs-tag", "the last commit the series replayed onto")
    assert safe["commit"] == {"sha": c[3], "subject": "Docs (#103)", "pr": 103, "release": ""}
    assert "--onto docs-tag" in safe["command"] and safe["probes"] == 0


def test_a_first_bad_commit_at_the_range_first_names_the_lower_bound(tmp_path: Path, upstream) -> None:
    """The base is c3, B breaks at c4 and c4..c9 are judged: the first commit of the range is the
    first bad one, its last good commit is the base, and nothing newer than the base carries."""
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[3])
    _, doc = _run(ledger, tmp_path / "art", onto=c[9])
    fb = doc["first_bad"]["B"]
    assert (fb["commit"]["sha"], fb["last_good"], fb["range_size"]) == (c[4], c[3], 6)
    assert doc["newest_safe"]["commit"] is None and doc["newest_safe"]["label"] == c[3]
    assert doc["newest_safe"]["probes"] == 0 and doc["newest_safe"]["command"] == ""


def test_a_download_that_does_not_match_the_index_is_exit_2_not_a_regression(tmp_path: Path, monkeypatch) -> None:
    """The release's sdist arrives with other bytes than the index lists (HashMismatch, a Finding
    for ``patchset fetch``): the gate could not judge (2), it found no regression (1), and
    remembers nothing, so the next run with an honest download judges the release."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    dists = tmp_path / "dists"
    dists.mkdir()
    sdist(dists, "1.0", {"pkg/core.py": CORE})
    sdist(dists, "1.1", {"pkg/core.py": CORE, "NEWS": "1.1\n"})
    ledger = release_ledger(tmp_path) / "patches.toml"
    art = tmp_path / "art"
    with LocalIndex(dists) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        index.tamper["demo-1.1.tar.gz"] = b"not the bytes the index lists"
        r, doc = _run(ledger, art, onto="demo==1.1")
        assert (r.status, r.exit_code, doc["exit_code"], doc["reasons"]) == ("error", 2, 2, [])
        assert "does not match the index" in doc["errors"][0]
        assert not (ledger.parent / ".patchset/gate-state.json").exists()
        del index.tamper["demo-1.1.tar.gz"]
        r, doc = _run(ledger, art, onto="demo==1.1")
    assert (r.status, doc["exit_code"], doc["onto"]) == ("green", 0, "demo==1.1")
    assert _state(ledger)["verdict"] == "green"
