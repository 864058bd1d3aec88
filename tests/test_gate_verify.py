"""The gate's per-patch tests through ``verify`` (``ci.gate.tests``) on the completions double's world
(``tests.support.nights``): the plan options a ``GateRun`` carries reach the plan (the defaults carry
proofs, ``all_`` re-proves, ``use_cache`` False measures every tree again), the proof history names
tonight's base by the judged label, and each long-context test's two runs land in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.ci.gate import GateRun, run_gate
from tests.support.nights import double_world
from tests.support.repo import git

TESTED = ["d2-stale-cache-fix", "d3-banner", "d4-decode-drift"]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))  # this test's own result cache
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    return tmp_path


def test_the_plan_options_reach_verify_and_the_report(isolated: Path) -> None:
    world = double_world(isolated / "world")
    git(world.upstream, "tag", "night-0", world.nights[0][1])
    night1 = world.nights[1][1]  # touches nothing a patch watches
    state = isolated / "gate" / "gate-state.json"

    def gate(n: int, onto: str, **kw):
        art = isolated / f"art-{n}"
        return run_gate(GateRun(world.ledger, onto=onto, artifacts=art, tags=world.tags, state_file=state, **kw))

    first = gate(0, "night-0")
    assert first.errors == [] and first.plan["engine_starts"] == 4  # the series + one tree per tested patch
    assert [p["patch"] for p in first.plan["proven_tonight"]] == TESTED and first.plan["carried"] == []
    decisions = first.plan["plan"]["decisions"]
    assert sorted(d["patch"] for d in decisions if d["patch"] in TESTED) == TESTED
    d2 = next(t for t in first.tests if t["patch"] == "d2-stale-cache-fix")
    assert d2["class"] == "proven" and d2["kind"] == "longctx" and d2["status"] == "passed"
    assert d2["longctx"]["with"]["outcome"] == "pass" and d2["longctx"]["without"]["outcome"] == "fail"
    assert "resume" in d2["longctx"]["without"]["reason"] and d2["seconds"] > 0  # the with-run's own time
    assert [x["check"] for x in d2["longctx"]["with"]["checks"]] == d2["checks"] == ["resume"]  # per-check verdicts
    assert all(t["seconds"] == round(t["seconds"], 3) for t in first.tests)  # milliseconds, as every time here

    planned = gate(1, night1)  # the defaults: nothing the patches watch moved, every proof carries
    assert planned.plan["engine_starts"] == 1 and planned.plan["proven_tonight"] == []
    carried = planned.plan["carried"]
    assert [p["patch"] for p in carried] == TESTED
    assert all(p["from"].endswith(" on night-0)") for p in carried), carried  # the base named as judged
    d2 = next(t for t in planned.tests if t["patch"] == "d2-stale-cache-fix")
    assert d2["carried"] and d2["class"] == "proven"  # last night's verdict, not a new one

    everything = gate(2, night1, force=True, all_=True)  # re-prove all; the series tree comes from the cache
    assert [p["patch"] for p in everything.plan["proven_tonight"]] == TESTED and everything.plan["carried"] == []
    assert all("(--all)" in p["proof"] for p in everything.plan["proven_tonight"])
    assert everything.plan["engine_starts"] == 3

    measured = gate(3, night1, force=True, all_=True, use_cache=False)  # nothing cached: every tree again
    assert measured.plan["engine_starts"] == 4

    rotated = gate(5, night1, force=True, full_every=1)  # a proof one run old is due again
    due = rotated.plan["proven_tonight"]
    assert [p["patch"] for p in due] == TESTED[:2] and all("its turn of every 1 runs" in p["proof"] for p in due)

    moved = gate(4, world.nights[3][1])  # upstream made d1's fault inert: d2 is re-proven, and not needed now
    (change,) = moved.plan["changed"]
    assert (change["patch"], change["was"], change["now"]) == ("d2-stale-cache-fix", "proven", "not-needed")
    assert f"d2-stale-cache-fix: verdict changed: proven -> not-needed (last: {change['since']})" in moved.warnings
