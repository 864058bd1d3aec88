"""The gate on real git repositories: green, unchanged, red with the first bad commit, tests by tag,
infrastructure failures, and the refreshed series as a patch ``git apply`` takes.

The upstream is a real git repository written here, with GitHub-style squash-merge subjects
(``... (#104)``): ``c2`` takes patch A upstream verbatim, ``c4`` rewrites the lines patch B
changes, the other commits touch other files. The ledger lives in a sub-directory of its own git
repository so the series patch must carry the repository prefix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patchset.ci.bisect import first_bad
from patchset.ci.gate import GateRun, run_gate
from patchset.ci.report import render
from patchset.ci.upstream import Commit
from patchset.rebase.session import RebaseRun, rebase
from patchset.text import split_list
from tests.support.gateworld import CORE, gate_ledger, release_ledger, sdist
from tests.support.localindex import LocalIndex
from tests.support.repo import commit_files, git, tree_digest
from tests.support.text import edit


def _gate(ledger: Path, tmp: Path, **kw) -> tuple:
    art = tmp / "art"
    t0 = time.monotonic()
    r = run_gate(GateRun(ledger, artifacts=art, **kw))
    return r, time.monotonic() - t0, art


def _ledger_bytes(d: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(d).items() if not k.startswith(".patchset/")}


def test_green_unchanged_red_with_first_bad_commit_and_pr(tmp_path, upstream):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    before = _ledger_bytes(ledger.parent)

    r, _, art = _gate(ledger, tmp_path, onto=c[1])
    assert (r.status, r.exit_code) == ("green", 0), r.to_json()
    assert [(p["id"], p["verdict"]) for p in r.rebase["patches"]] == [("A", "carried"), ("B", "carried")]
    assert r.apply["outcome"] == "applied"
    assert {f.name for f in art.iterdir()} >= {"report.md", "report.json", "junit.xml", "series.patch", "logs"}
    assert json.loads((art / "report.json").read_text())["exit_code"] == 0

    r, took, art = _gate(ledger, tmp_path, onto=c[1])
    assert (r.status, r.exit_code) == ("unchanged", 0)
    assert took < 1.0, took  # measured ~0.05 s in-process
    assert r.previous["verdict"] == "green" and "has not moved" in (art / "report.md").read_text()
    assert (art / "series.patch").exists() and (art / "junit.xml").exists()  # the verdict's, kept (issue #27)
    assert "unchanged since the run of" in (art / "report.md").read_text()

    r, _, art = _gate(ledger, tmp_path, onto=c[3])
    assert r.status == "green"
    assert {p["id"]: p["verdict"] for p in r.rebase["patches"]} == {"A": "already-upstream", "B": "carried"}
    assert "ledgers/demo/patches.toml" in r.series_patch["files"]

    r, _, art = _gate(ledger, tmp_path, latest=True)
    assert (r.status, r.exit_code, r.commit) == ("red", 1, c[-1])
    assert r.conflicts == ["B"]
    fb = r.first_bad["B"]
    assert fb["commit"] == {"sha": c[4], "subject": "[Core] Rework limit_5 with a cap (#104)", "pr": 104, "release": ""}
    assert fb["last_good"] == c[3] and fb["range_size"] == 6  # from the last clean replay (c3), not the base
    assert 1 <= fb["probes"] <= 3
    md = (art / "report.md").read_text()
    assert "PR #104" in md and "first bad upstream commit" in md
    junit = (art / "junit.xml").read_text()
    assert 'name="B"' in junit and "PR #104" in junit and 'failures="1"' in junit
    state = json.loads((ledger.parent / ".patchset/gate-state.json").read_text())["targets"]["demo"]
    assert (state["verdict"], state["judged"], state["last_clean"], state["failing"]) == ("red", c[-1], c[3], ["B"])

    r, took, _ = _gate(ledger, tmp_path, latest=True)
    assert (r.status, r.exit_code, r.previous["verdict"]) == ("unchanged", 0, "red")
    assert _ledger_bytes(ledger.parent) == before  # the gate never writes the ledger

    # a changed series is a new question even when upstream has not moved
    (ledger.parent / "patches.toml").write_text(ledger.read_text().replace("limit_5 caps at 5", "limit_5 caps"))
    r, _, _ = _gate(ledger, tmp_path, latest=True)
    assert r.status == "red" and r.previous["verdict"] == "red"


def test_series_patch_is_what_rebase_writes(tmp_path, upstream):
    repo, c = upstream
    proj = tmp_path / "proj"
    ledger = gate_ledger(proj, repo, c[0])
    r, _, art = _gate(ledger, tmp_path, onto=c[3])
    assert r.status == "green"
    patch = (art / "series.patch").read_bytes()
    assert b"diff --git a/ledgers/demo/patches.toml b/ledgers/demo/patches.toml\n" in patch
    assert b"new file mode" in patch  # the first lock of this ledger

    twin = tmp_path / "twin"
    shutil.copytree(proj, twin)
    rep = rebase(RebaseRun(twin / "ledgers/demo/patches.toml", c[3], repo=repo))
    assert rep.status == "done"
    shutil.rmtree(twin / "ledgers/demo/.patchset")

    subprocess.run(["git", "apply", "--index", str(art / "series.patch")], cwd=proj, check=True)
    got, want = _ledger_bytes(proj / "ledgers/demo"), _ledger_bytes(twin / "ledgers/demo")
    assert got == want
    assert 'state = "dropped"' in (proj / "ledgers/demo/patches.toml").read_text()


def test_tests_selected_by_tags_failures_and_timeouts(tmp_path, upstream):
    repo, c = upstream
    extra = """
[[patch.tests]]
name = "boom"
command = "echo exploding; exit 3"
tags = ["cpu"]

[[patch.tests]]
name = "hangs"
command = "sleep 30"
tags = ["slowcpu"]
timeout = 1
"""
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], extra)
    r, _, art = _gate(ledger, tmp_path, onto=c[1], tags=["gpu"])
    assert (r.status, [(t["patch"], t["name"], t["status"]) for t in r.tests]) == (
        "green",
        [("B", "core-patched", "passed")],
    )

    t0 = time.monotonic()
    r, _, art = _gate(ledger, tmp_path, onto=c[1], tags=["cpu,slowcpu"])
    assert time.monotonic() - t0 < 20
    got = {(t["patch"], t["name"]): (t["status"], t["class"]) for t in r.tests}
    assert got == {
        ("A", "util-patched"): ("passed", "proven"),
        ("B", "core-patched"): ("passed", "proven"),
        ("B", "boom"): ("failed", "broken"),
        ("B", "hangs"): ("error", "error"),
    }
    assert (r.status, r.exit_code) == ("red", 1)
    boom = next(t for t in r.tests if t["name"] == "boom")
    assert "exploding" in boom["tail"] and boom["returncode"] == 3
    junit = (art / "junit.xml").read_text()
    assert 'classname="tests.B" name="boom"' in junit and 'failures="2"' in junit
    assert (art / "logs/verify-junit.xml").is_file()

    # one patch's tests only (a workflow matrix job): the state is left alone
    state = (ledger.parent / ".patchset/gate-state.json").read_bytes()
    r, _, _ = _gate(ledger, tmp_path, onto=c[1], tags=["cpu"], patches=["A"], force=True)
    assert (r.status, [t["name"] for t in r.tests]) == ("green", ["util-patched"])
    assert (ledger.parent / ".patchset/gate-state.json").read_bytes() == state


def test_no_selected_test_applies_only_the_touched_files(tmp_path, upstream):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    r, _, _art = _gate(ledger, tmp_path, onto=c[1], tags=["nothing-has-this"])
    assert r.status == "green" and r.tests == []
    assert any("none ran" in w for w in r.warnings)
    assert r.apply["outcome"] == "applied"


def test_infrastructure_failures_exit_2_with_a_report(tmp_path, upstream):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    r, _, art = _gate(ledger, tmp_path, onto="no-such-branch")
    assert (r.status, r.exit_code) == ("error", 2)
    assert "no-such-branch" in r.errors[0]
    assert json.loads((art / "report.json").read_text())["status"] == "error"
    assert 'errors="1"' in (art / "junit.xml").read_text()
    assert not (ledger.parent / ".patchset/gate-state.json").exists()  # nothing judged, nothing remembered

    # a clone that cannot be fetched (a refused connection on loopback)
    r, _, _ = _gate(
        ledger, tmp_path, latest=True, upstream="http://127.0.0.1:9/vllm.git", state_file=tmp_path / "state.json"
    )
    assert (r.status, r.exit_code) == ("error", 2) and "cannot clone" in r.errors[0]

    # a state file that is not one
    bad = tmp_path / "bad-state.json"
    bad.write_text("{not json")
    r, _, _ = _gate(ledger, tmp_path, onto=c[1], state_file=bad)
    assert r.exit_code == 2 and "not readable JSON" in r.errors[0] and "remove it" in r.errors[0]

    # a state directory behind a dangling link (a CI cache not restored): the error names the path
    (tmp_path / "cache-link").symlink_to(tmp_path / "not-restored")
    r, _, _ = _gate(ledger, tmp_path, onto=c[1], state_file=tmp_path / "cache-link" / "gate" / "state.json")
    assert r.exit_code == 2 and r.errors == [f"File exists: {tmp_path / 'cache-link'}"], r.errors

    with pytest.raises(Exception, match="--onto REF or --latest"):
        run_gate(GateRun(ledger, artifacts=tmp_path / "x", onto=c[1], latest=True))


def test_a_crash_is_exit_2_without_a_traceback(tmp_path, upstream, monkeypatch, capsys):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    import patchset.ci.gate.judge

    def broken(ws):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(patchset.ci.gate.judge, "series_patch", broken)
    r, _, art = _gate(ledger, tmp_path, onto=c[1])
    assert (r.status, r.exit_code) == ("error", 2)
    assert "internal error: RuntimeError: disk on fire" in r.errors[0]
    assert "Traceback" in (art / "logs/gate.log").read_text()
    render(r)
    assert "Traceback" not in capsys.readouterr().out


def test_first_bad_bisects_in_log_steps():
    commits = [Commit(f"{i:040x}", f"change {i} (#{1000 + i})") for i in range(1, 201)]
    calls: list[str] = []

    def probe(sha: str) -> dict[str, str]:
        calls.append(sha)
        n = int(sha, 16)
        return {"p": "conflict" if n >= 137 else "carried", "q": "conflict" if n >= 3 else "carried"}

    found = first_bad(["p", "q"], "0" * 40, commits, probe)
    assert found["p"].commit.pr == 1137 and found["p"].last_good == f"{136:040x}"
    assert found["q"].commit.subject == "change 3 (#1003)"
    assert len(found["p"].probes) <= 8 and len(found["q"].probes) <= 8
    assert first_bad(["p"], "0" * 40, [], probe)["p"].commit is None


def test_commit_pr_is_the_last_squash_marker():
    assert Commit("x" * 40, 'Revert "Fix (#55960)" (#58250)').pr == 58250
    assert Commit("x" * 40, "vllm 0.33.0").pr is None


def test_split_tags():
    assert split_list(["cpu,gpu", " spark ", "cpu"]) == ["cpu", "gpu", "spark"]
    assert split_list("gpu,spark") == ["gpu", "spark"] and split_list(None) == []


# -- the package-index release history ---------------------------------------------------------


def test_latest_release_from_the_index_and_first_bad_release(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    dists = tmp_path / "dists"
    dists.mkdir()
    core = CORE
    sdist(dists, "1.0", {"pkg/core.py": core})
    sdist(dists, "1.1", {"pkg/core.py": core, "NEWS": "1.1\n"})
    broken = edit(core, "def limit_5(x):\n    return x + 5\n", "def limit_5(x):\n    return x - 5\n")
    sdist(dists, "1.2", {"pkg/core.py": broken, "NEWS": "1.2\n"})
    sdist(dists, "1.3rc1", {"pkg/core.py": broken, "NEWS": "rc\n"})  # a pre-release is not "latest"
    d = release_ledger(tmp_path)
    with LocalIndex(dists) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        r, _, art = _gate(d / "patches.toml", tmp_path, onto="demo==1.1")
        assert (r.status, r.onto, r.upstream["kind"]) == ("green", "demo==1.1", "releases")
        assert '+base = "demo==1.1"' in (art / "series.patch").read_text()
        r, _, art = _gate(d / "patches.toml", tmp_path, latest=True)
        assert (r.status, r.onto) == ("red", "demo==1.2")
        assert r.first_bad["B"]["commit"]["release"] == "1.2"
        safe = r.newest_safe  # a release upstream is rebased onto PROJECT==VERSION, from the index
        assert (safe["label"], safe["commit"]["release"]) == ("demo==1.1", "1.1")
        assert safe["command"].endswith("rebase --target demo --onto demo==1.1"), safe["command"]
        assert "release 1.2" in (art / "report.md").read_text()
    # the index is gone: --latest cannot be answered (exit 2), --onto a known release can
    monkeypatch.setenv("PATCHSET_INDEX_URL", "http://127.0.0.1:9/simple")
    r, _, _ = _gate(d / "patches.toml", tmp_path, latest=True, force=True)
    assert (r.status, r.exit_code) == ("error", 2) and "cannot reach the package index" in r.errors[0]
    r, _, _ = _gate(d / "patches.toml", tmp_path, onto="demo==1.2")
    assert r.status == "unchanged"


def test_first_bad_release_whatever_order_the_history_was_built_in(tmp_path, monkeypatch):
    """A cache that imported 1.0 and 1.2 before 1.1 (1.1 on a branch of its own, off 1.0): the gate
    still bisects the releases between by version and names 1.1, the commit the history names."""
    from patchset.upstream.history import ReleaseHistory

    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    dists = tmp_path / "dists"
    dists.mkdir()
    broken = edit(CORE, "def limit_5(x):\n    return x + 5\n", "def limit_5(x):\n    return x - 5\n")
    sdist(dists, "1.0", {"pkg/core.py": CORE})
    sdist(dists, "1.1", {"pkg/core.py": broken, "NEWS": "1.1\n"})
    sdist(dists, "1.2", {"pkg/core.py": broken, "NEWS": "1.2\n"})
    d = release_ledger(tmp_path)
    with LocalIndex(dists) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        history = ReleaseHistory.for_project("demo")
        v10, v12, v11 = (history.resolve(f"demo=={v}") for v in ("1.0", "1.2", "1.1"))
        assert git(history.git_dir, "rev-list", "--first-parent", f"{v10}..{v12}").split() == [v12]
        r, _, _ = _gate(d / "patches.toml", tmp_path, latest=True)
    assert (r.status, r.onto, r.commit) == ("red", "demo==1.2", v12), r.to_json()
    found = r.first_bad["B"]
    assert (found["commit"]["sha"], found["commit"]["release"], found["last_good"]) == (v11, "1.1", v10)
    assert found["range_size"] == 2


def test_refreshed_status_lands_in_the_series_patch(tmp_path, upstream, monkeypatch):
    from tests.support.fakehub.server import FakeHub

    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], '\n[patch.upstream]\nprs = ["example/demo#5"]\n')
    text = ledger.read_text()  # A follows an open PR: nothing to do, so not among the report's actions
    ledger.write_text(
        text.replace("[[patch.tests]]", '[patch.upstream]\nprs = ["example/demo#6"]\n\n[[patch.tests]]', 1)
    )
    git(tmp_path / "proj", "commit", "-qam", "A follows #6")
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    pulls = {
        "5": {"title": "limit_5 caps", "state": "open", "head_sha": "a" * 40, "diff": ""},
        "6": {"title": "VALUE_30 note", "state": "open", "head_sha": "b" * 40, "diff": ""},
    }
    data = {"repos": {"example/demo": {"pulls": pulls}}}
    with FakeHub(data) as hub:
        hub.merge("example/demo", 5, merge_commit_sha=c[4], merged_at="2026-10-01T10:00:00Z")
        monkeypatch.setenv("PATCHSET_GITHUB_API", hub.base_url)
        r, _, art = _gate(ledger, tmp_path, onto=c[1], refresh_status=True)
    assert r.status == "green" and r.upstream_status["mode"] == "refresh"
    assert r.upstream_status["counts"] == {"nothing": 1, "drop-at-rebase": 1} and r.upstream_status["errors"] == []
    assert r.upstream_status["actions"] == [{"id": "B", "action": "drop-at-rebase", "text": "merged 2026-10-01"}]
    patch = (art / "series.patch").read_text()
    assert '+pr_state = "merged"' in patch
    assert "pr_state" not in ledger.read_text()  # recorded in the refreshed series only


def test_an_upstream_status_not_reached_is_a_warning_not_a_verdict(tmp_path, upstream, monkeypatch):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], '\n[patch.upstream]\nprs = ["example/demo#5"]\n')
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    monkeypatch.setenv("PATCHSET_GITHUB_API", "http://127.0.0.1:9")  # a refused connection on loopback
    r, _, _ = _gate(ledger, tmp_path, onto=c[1], refresh_status=True)
    assert (r.status, r.exit_code) == ("green", 0)  # the series carries: what GitHub says is advice
    (error,) = r.upstream_status["errors"]
    assert error.startswith("no network: 127.0.0.1:9") and r.warnings == [f"upstream status: {error}"]


def test_a_real_clone_is_fetched_for_latest_and_for_unknown_commits(tmp_path, upstream, monkeypatch):
    repo, c = upstream
    up = tmp_path / "upstream-copy"
    shutil.copytree(repo, up)
    git(up, "config", "uploadpack.allowFilter", "true")
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    ledger = gate_ledger(tmp_path / "proj", tmp_path / "not-a-repo", c[0])
    url = up.as_uri()

    r, _, _ = _gate(ledger, tmp_path, onto=c[3], upstream=url)  # the first use clones
    assert (r.status, r.upstream["kind"], r.commit) == ("green", "clone", c[3])
    new = commit_files(up, "Tidy the README (#110)", {"README": "demo, tidied\n"})
    r, _, _ = _gate(ledger, tmp_path, latest=True, upstream=url)  # --latest fetches
    assert (r.status, r.commit) == ("red", new)
    assert r.first_bad["B"]["commit"]["pr"] == 104 and r.first_bad["B"]["last_good"] == c[3]
    newer = commit_files(up, "More docs (#111)", {"README": "demo, documented again\n"})
    r, _, _ = _gate(ledger, tmp_path, onto=newer, upstream=url)  # a commit the clone lacks: fetched
    assert (r.status, r.commit) == ("red", newer)


def test_serving_tests_compare_with_the_last_green_runs_figures(tmp_path, upstream, monkeypatch):
    """The first green run stores its serving figures; a later run is judged against them (no tree
    without the patch is started for it), and a slowdown turns the gate red without replacing them.
    The result cache is this test's own: with the user's, a red run reused the figures an earlier
    session had measured for the same tree (0 engine starts), and judged nothing of its own."""
    repo, c = upstream
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    extra = """
[[patch.tests]]
name = "decode-speed"
kind = "serving"
checks = ["decode"]
engine = "knob"
repeats = 6
warmup = 0
max_tokens = 8
tolerance = 0.15
tags = ["serving"]
timeout = 60

[engines.knob]
start = ["{ledger}/launch-knob.sh", "{tree}", "{port}", "{ledger}"]
max_parallel = 2
ready_timeout = 60
"""
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], extra)
    launcher = ledger.parent / "launch-knob.sh"  # beside the ledger, not among the files the gate copies
    launcher.write_text(
        "#!/bin/sh\n# fast with patch B, slow without it, or when slow.flag says so\n"
        'delay=0.004\ngrep -q PATCHED-B "$1/pkg/core.py" && delay=0.001\n[ -f "$3/slow.flag" ] && delay=0.004\n'
        f'export PYTHONPATH="{Path(__file__).resolve().parents[1]}"\n'
        f'exec "{sys.executable}" -m tests.support.completions_double --port "$2" --flag token_delay=$delay\n'
    )
    launcher.chmod(0o755)
    r, _, art = _gate(ledger, tmp_path, onto=c[1], tags=["serving"])
    (t,) = r.tests
    assert (r.status, t["status"], t["class"]) == ("green", "passed", "proven"), t["tail"]
    assert t["engine"] == "knob" and t["serving"]["paired"] is True
    figures = ledger.parent / ".patchset" / "serving-demo.json"
    stored = figures.read_bytes()
    assert b'"decode tok/s (prompt 32)"' in stored

    (ledger.parent / "slow.flag").write_text("upstream got slower\n")
    r, _, art = _gate(ledger, tmp_path, onto=c[3], tags=["serving"])
    (t,) = r.tests
    assert (r.status, t["status"], t["class"]) == ("red", "failed", "broken")
    verdicts = {v["metric"]: v["verdict"] for v in t["serving"]["verdicts"]}
    assert verdicts["decode tok/s (prompt 32)"] == "regression" and t["serving"]["paired"] is False
    assert "regression: decode tok/s" in t["tail"]
    verify_json = json.loads((art / "logs" / "verify.json").read_text())
    assert verify_json["baseline"] == str(figures)
    # only the tree with the series of the new commit started (its own figures, not the cache's):
    # the baseline is the stored file, so no tree without the patch is measured
    assert verify_json["engine_starts"] == 1 and verify_json["reused"] == []
    (engine,) = verify_json["engines"]
    assert engine["started"] and engine["variant"] == "with"
    assert figures.read_bytes() == stored  # a red run keeps the last green figures


def test_bisection_starts_at_the_base_after_upstream_rewrote_history(tmp_path, upstream):
    """The last clean commit of the previous run is no longer on upstream's history (a force-push):
    the bisection's lower bound falls back to the ledger's base, not to the vanished commit."""
    repo, c = upstream
    up = tmp_path / "up"
    shutil.copytree(repo, up)
    ledger = gate_ledger(tmp_path / "proj", up, c[0])
    r, _, _ = _gate(ledger, tmp_path, onto=c[3])
    assert r.status == "green"
    git(up, "reset", "-q", "--hard", c[1])
    commit_files(up, "Docs, rewritten (#203)", {"README": "demo, rewritten\n"})
    core = (up / "pkg/core.py").read_text()
    core = core.replace(
        "def limit_5(x):\n    return x + 5\n", "def limit_5(x, cap=None):\n    return x + 5 if cap is None else cap\n"
    )
    rework = commit_files(up, "[Core] Rework limit_5 with a cap (#204)", {"pkg/core.py": core})
    commit_files(up, "Unrelated change (#205)", {"docs/n205.md": "205\n"})
    r, _, _ = _gate(ledger, tmp_path, latest=True)
    assert (r.status, r.conflicts) == ("red", ["B"]), r.to_json()
    fb = r.first_bad["B"]
    assert fb["commit"]["sha"] == rework
    assert fb["range_size"] == 4  # c1 and the three rewritten commits: c0 (the base) .. the new head
