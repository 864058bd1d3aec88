"""The gate's options (``GateRun``) on real git repositories: what is refused before anything is
read, where the state and its neighbours live, ``--tags all``, ``--patch`` (a matrix job), ``--force``,
and the per-stage timings of the run's log."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from patchset.ci.gate import GateRun, run_gate
from patchset.ci.gate.run import BUILDS, RunLog, proofs_path, serving_figures_path
from patchset.ci.report import ERROR, GateReport
from patchset.errors import InputError
from tests.support.gateworld import gate_ledger

NOT_NEEDED = """
[[patch.tests]]
name = "always"
command = "true"
tags = ["loose"]
"""


def test_what_cannot_be_judged_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    ledger = tmp_path / "no-ledger" / "patches.toml"  # never read: the options are refused first
    art = tmp_path / "art"
    with pytest.raises(InputError, match="--onto REF or --latest"):
        run_gate(GateRun(ledger, artifacts=art))
    with pytest.raises(InputError, match="--onto REF or --latest"):
        run_gate(GateRun(ledger, artifacts=art, onto="x", latest=True))
    with pytest.raises(InputError, match="--build 'deb': unknown artifact") as exc:  # the first unknown one
        run_gate(GateRun(ledger, artifacts=art, onto="x", build=["deb", "wheel", "rpm"]))
    assert exc.value.hint == f"one of: {', '.join(BUILDS)}"
    assert not art.exists()
    GateRun(ledger, onto="x", build=list(BUILDS)).check()  # every known artifact passes
    GateRun(ledger, latest=True).check()


def test_a_gate_run_is_not_changed_once_asked() -> None:
    job = GateRun(Path("p.toml"), onto="v1")  # the newest safe judgement shares it (dataclasses.replace)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.onto = "v2"  # type: ignore[misc]


def test_asked_names_the_question_as_given() -> None:
    assert GateRun(Path("p.toml"), onto="v1").asked == "v1"
    assert GateRun(Path("p.toml"), latest=True).asked == "--latest"
    assert GateRun(Path("p.toml")).asked == ""
    assert GateRun(Path("p.toml"), tags=["cpu,gpu", "cpu"]).tag_list == ["cpu", "gpu"]
    assert GateRun(Path("p.toml"), patches=("A",)).only == ["A"] and GateRun(Path("p.toml")).only == []


def test_the_state_file_and_its_neighbours(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    state = tmp_path / "elsewhere" / "state.json"
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", state_file=state))
    assert r.status == "green" and state.is_file()
    assert not (ledger.parent / ".patchset/gate-state.json").exists()  # the default is not written
    assert proofs_path(state) == state.parent / "gate-proofs.json"
    assert serving_figures_path(state, "demo") == state.parent / "serving-demo.json"
    # the same question against the same state file: nothing to do; another state file judges afresh
    again = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", state_file=state))
    assert again.status == "unchanged"
    other = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art"))
    assert other.status == "green" and (ledger.parent / ".patchset/gate-state.json").is_file()


def test_a_state_of_another_upstream_is_not_this_ones_memory(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    assert run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art")).status == "green"
    other = tmp_path / "mirror"
    shutil.copytree(repo, other)
    t0 = time.monotonic()
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", upstream=str(other)))
    assert 0 < r.seconds <= time.monotonic() - t0 + 0.001  # the run's own duration
    assert (r.status, r.previous, r.upstream["location"]) == ("green", {}, str(other))  # judged afresh
    assert f"the state names another upstream ({repo}); judging afresh" in (tmp_path / "art/logs/gate.log").read_text()


def test_without_the_verify_package_the_gate_judges_and_says_no_test_ran(
    tmp_path: Path, upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation without ``patchset.verify`` (None in ``sys.modules``: its import fails, as
    when it is absent): no proof history to check, the series still judged, the tests reported as not run."""
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    for name in ("patchset.verify.proofs", "patchset.verify.pertest"):
        monkeypatch.setitem(sys.modules, name, None)
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", tags=["cpu"]))
    assert (r.status, r.errors, r.tests) == ("green", [], [])
    assert "per-patch tests not run: the verify package is not installed" in r.warnings


def test_force_judges_an_unchanged_upstream_again(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    first = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art"))
    forced = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", force=True))
    assert (first.status, forced.status) == ("green", "green")
    assert forced.previous["judged_at"] == first.judged_at  # it knew the last run, and judged anyway
    assert forced.rebase["patches"]  # replayed again


def test_tags_all_runs_every_test_and_a_not_needed_patch_is_a_warning(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0], NOT_NEEDED)
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=tmp_path / "art", tags=["all"]))
    got = {(t["patch"], t["name"]): (t["status"], t["class"]) for t in r.tests}
    assert got == {
        ("A", "util-patched"): ("passed", "proven"),
        ("B", "core-patched"): ("passed", "proven"),
        ("B", "always"): ("passed", "not-needed"),
    }
    assert r.status == "green" and r.plan["engine_starts"] == 0
    assert not any(w.startswith("A:") for w in r.warnings)  # A's test needs its patch
    doc = json.loads((tmp_path / "art/report.json").read_text())
    assert {t["name"] for t in doc["tests"]} == {"util-patched", "core-patched", "always"}
    assert all(t["returncode"] == 0 and t["seconds"] >= 0 and t["kind"] == "command" for t in doc["tests"])


def test_a_matrix_job_runs_only_its_patch_and_says_when_it_has_no_such_test(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=art, tags=["gpu"], patches=["A"], force=True))
    assert r.status == "green" and r.tests == []
    assert "no test of A carries the tags gpu: none ran" in r.warnings
    assert not (ledger.parent / ".patchset/gate-state.json").exists()  # a matrix job remembers nothing
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=art, tags=["cpu"], patches=["B"], force=True))
    assert [(t["patch"], t["name"]) for t in r.tests] == [("B", "core-patched")]
    r = run_gate(GateRun(ledger, onto=c[1], artifacts=art, tags=["nothing"]))
    assert "no test carries the tags nothing: none ran" in r.warnings


def test_a_stage_run_twice_adds_its_times() -> None:
    notes: list[tuple[str, int, int | None]] = []
    log = RunLog(GateReport(status=ERROR), lambda what, done, total: notes.append((what, done, total)))
    log.report.timings["tree"] = 5.0
    with log.stage("tree"):
        pass
    assert 5.0 <= log.report.timings["tree"] < 6.0  # added to the earlier tree's time, not replacing it
    with pytest.raises(RuntimeError), log.stage("apply"):
        raise RuntimeError("the stage failed")
    assert 0.0 <= log.report.timings["apply"] < 1.0  # a failed stage is timed too
    assert notes == [("tree: start", 0, None), ("apply: start", 0, None)]  # a note finishes no step of a count
    assert log.lines[0].endswith("] tree: start") and log.lines[0].startswith("[")
    assert re.fullmatch(r"\[ *\d+\.\d\ds\] tree: \d+\.\d{3} s", log.lines[1]), log.lines


def test_a_stage_is_timed_to_the_millisecond() -> None:
    """A few milliseconds of a stage are not rounded away (nor up to a hundredth): each stage's time
    lies between its sleep and the time measured around it."""
    log = RunLog(GateReport(status=ERROR), None)
    for n in range(5):
        t0 = time.monotonic()
        with log.stage(f"s{n}"):
            time.sleep(0.003)
        around = time.monotonic() - t0
        assert 0.003 <= log.report.timings[f"s{n}"] <= around + 0.0005, (log.report.timings, around)
