"""The verify plan's decisions (``verify.plan.decide``) on plans of several patches: which trees start
tonight, which wait for the series, which are tried together, what is carried and why, the rotation,
the counts of starts, and the plan read back from its JSON as the gate's report keeps it."""

from __future__ import annotations

import hashlib

import pytest

from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED, PROVEN
from patchset.verify.plan.decide import (
    AFTER_WITH,
    CARRY,
    RUN,
    TONIGHT,
    ConfigGroup,
    EngineTree,
    PlanInputs,
    PlanOptions,
    PlanTest,
    VerifyPlan,
    decide,
    due_by_rotation,
    make_plan,
    plan_from_json,
    rotation_slot,
)
from patchset.verify.proofs import TargetHistory
from tests.support.plans import AT, BASE, ENGINE, SPEC, digests, history_of, plan_patch, proof_of

OPTS = PlanOptions(history="proofs.json", full_every=0)  # no rotation unless a test asks for it


def _series() -> EngineTree:
    """The tree with the series, fresh for each plan (a plan's trees are its own to change)."""
    return EngineTree("with the series", ENGINE, "cpu", ["a/lc", "b/lc", "c/lc"])


NIGHT = 4  # tonight: the history has 3 runs


def _ok(ids: list[str]) -> str:
    return ""


def _plan(patches, history, opts=OPTS, fixed=None, applies=_ok, base=BASE):
    inputs = PlanInputs(patches, list(fixed) if fixed is not None else [_series()], full_starts=1 + len(patches))
    return make_plan("vllm", base, inputs, history, opts, applies)


# --------------------------------------------------------------------------- one patch


def test_no_proof_says_how_the_last_run_ended() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    for klass, said in ((BROKEN, "it was broken in run 3"), (ERROR, "it was error in run 3")):
        d = decide(p, history_of(last={"a": klass}), OPTS, NIGHT, BASE)
        assert d.action == RUN and d.reasons == ["no earlier proof", f"{said} ({AT} on {BASE})"]
    d = decide(p, history_of(last={"a": PROVEN}), OPTS, NIGHT, BASE)
    assert d.action == RUN and d.reasons == ["no earlier proof"]
    d = decide(p, None, OPTS, NIGHT, BASE)
    assert d.reasons == ["no earlier proof"] and d.proof is None


def test_a_carried_verdict_on_the_same_base_says_nothing_it_watches_changed() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    d = decide(p, history_of(("a", proof_of(p, night=2))), OPTS, NIGHT, BASE)
    assert d.action == CARRY and d.reasons == []
    assert d.carried_from == f"run 2 ({AT} on {BASE})" and d.carry_note == "nothing it watches changed"
    assert d.text() == f"carried from run 2 ({AT} on {BASE}) (nothing it watches changed)"


def test_an_upstream_change_on_the_same_base_names_no_span() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    proof = proof_of(p, night=2)
    proof.watch["pkg/a.py"][0] = "0" * 16
    d = decide(p, history_of(("a", proof)), OPTS, NIGHT, BASE)
    assert d.action == RUN and d.reasons == [f"upstream changed pkg/a.py (patched) since run 2 ({AT} on {BASE})"]
    assert d.text() == "needed: " + d.reasons[0]


def test_a_newly_watched_file_and_many_files_are_named() -> None:
    files = [f"pkg/m{i}.py" for i in range(6)]
    p = plan_patch("a", files)
    proof = proof_of(p, night=2)
    for f in files:
        proof.watch[f][0] = "0" * 16
    p.watch.why["pkg/new.py"] = "imported by pkg/m0.py"
    p.watch.digests["pkg/new.py"] = digests("pkg/new.py")
    d = decide(p, history_of(("a", proof)), OPTS, NIGHT, "vllm==0.32.0")
    shown = ", ".join(f"{f} (patched)" for f in files[:4])
    assert d.reasons == [
        f"upstream changed {shown} and 2 more since run 2 ({AT} on {BASE}) (upstream {BASE}..vllm==0.32.0)",
        "it now watches pkg/new.py (imported by pkg/m0.py)",
    ]


def test_a_series_change_of_the_without_digest_is_noticed() -> None:
    """The third digest (the tree without the patch) is the series around it too."""
    p = plan_patch("a", ["pkg/a.py", "pkg/b.py"])
    proof = proof_of(p, night=2)
    proof.watch["pkg/b.py"][2] = "0" * 16
    d = decide(p, history_of(("a", proof)), OPTS, NIGHT, BASE)
    assert d.reasons == [f"the series around it changed pkg/b.py (patched) since run 2 ({AT} on {BASE})"]


def test_a_test_new_since_the_proof_and_a_switched_tests_with_run() -> None:
    lc = PlanTest("lc", SPEC, ENGINE, "cpu")
    sw = PlanTest("sw", SPEC, ENGINE, "cpu", with_only=True)
    p = plan_patch("a", ["pkg/a.py"], tests=[lc, sw])
    proof = proof_of(p, night=2)
    assert decide(p, history_of(("a", proof)), OPTS, NIGHT, BASE).action == CARRY  # sw's with-run is proven
    moved = proof_of(p, night=2)
    moved.tests["sw"] = moved.with_tests.pop("sw")  # proven as a without-run only: not what sw has now
    d = decide(p, history_of(("a", moved)), OPTS, NIGHT, BASE)
    assert d.action == CARRY and d.reasons == []  # only the run with the series lacks a proof: its config starts
    moved.tests.pop("lc")  # a test that is not switched and has no proof still reruns the patch
    d = decide(p, history_of(("a", moved)), OPTS, NIGHT, BASE)
    assert d.action == RUN and d.reasons == ["its test lc has no earlier proof"]
    changed = proof_of(p, night=2)
    changed.with_tests["sw"].spec = "t" * 16
    d = decide(p, history_of(("a", changed)), OPTS, NIGHT, BASE)
    assert d.reasons == [f"its test sw changed since run 2 ({AT} on {BASE}) (checks, model or engine)"]


def test_only_and_all_run_a_patch_broken_last_time_tonight_an_error_too() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    h = history_of(("a", proof_of(p, night=2, klass=PROVEN)), last={"a": BROKEN})
    waits = decide(p, h, OPTS, NIGHT, BASE)
    assert waits.action == AFTER_WITH and waits.reasons == [f"it was broken in run 3 ({AT} on {BASE})"]
    assert waits.text() == "after the series: runs only if its tests pass with the series tonight: " + waits.reasons[0]
    for opts, why in (
        (PlanOptions(history="x", full_every=0, only=["a"]), "asked for (--only)"),
        (PlanOptions(history="x", full_every=0, all_=True), "asked for (--all)"),
    ):
        d = decide(p, h, opts, NIGHT, BASE)
        assert d.action == RUN and d.reasons == [why], d.reasons
    p.minus_error = "the series without a does not apply"
    d = decide(p, h, OPTS, NIGHT, BASE)
    assert d.action == RUN and d.reasons == ["the series without a does not apply (an error, no engine start)"]
    assert decide(p, h, PlanOptions(), NIGHT, BASE).reasons[-1] == "no proof history is kept"


# --------------------------------------------------------------------------- rotation


def test_rotation_slot_is_a_stable_hash_of_the_id() -> None:
    for pid in ("a", "u58021-single-group", "p2"):
        want = int.from_bytes(hashlib.sha256(pid.encode()).digest()[:8], "big")
        assert [rotation_slot(pid, n) for n in (1, 5, 7, 9)] == [want % n for n in (1, 5, 7, 9)]
    slots = {rotation_slot(f"patch-{i}", 7) for i in range(200)}
    assert slots == set(range(7))  # every night of the week takes its share


@pytest.mark.parametrize("every", [1, 3, 7])
def test_a_patch_comes_up_once_per_turn_and_always_at_two_turns(every: int) -> None:
    pid = "u58021-single-group"
    slot = rotation_slot(pid, every)
    for age in range(0, 2 * every + 2):
        due = [night for night in range(10 * every, 11 * every) if due_by_rotation(pid, night, age, every)]
        if age < every:
            assert due == [], age
        elif age < 2 * every:
            assert due == [n for n in range(10 * every, 11 * every) if n % every == slot] and len(due) == 1, age
        else:
            assert len(due) == every, age  # two turns old: due whatever the night
    assert not due_by_rotation(pid, 3, 100, 0) and not due_by_rotation(pid, 3, 100, -1)


def test_due_by_rotation_is_a_reason_in_the_decision() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    every = 3
    proof = proof_of(p, night=1)
    night = next(n for n in range(5, 20) if n % every == rotation_slot("a", every))
    h = history_of(("a", proof), nights=night - 1)
    d = decide(p, h, PlanOptions(history="x", full_every=every), night, BASE)
    assert d.action == RUN and d.reasons == [f"due by rotation: its turn of every 3 runs, proven {night - 1} runs ago"]


# --------------------------------------------------------------------------- plans


def _three(cached: str = "") -> tuple[list, TargetHistory]:
    ps = [plan_patch(pid, [f"pkg/{pid}.py"], cached=pid in cached) for pid in "abc"]
    return ps, history_of(*((p.id, proof_of(p, night=2)) for p in ps))


def test_patches_expected_not_needed_are_tried_together_on_one_start() -> None:
    ps, h = _three()
    opts = PlanOptions(history="x", full_every=0, all_=True)
    plan = _plan(ps, h, opts)
    assert plan.night == NIGHT and [d.action for d in plan.decisions] == [RUN] * 3
    assert [g.patches for g in plan.groups] == [["a", "b", "c"]]
    assert [t.label for t in plan.trees] == ["with the series", "without a, b, c (tried together)"]
    together = plan.trees[1]
    assert together.tests == ["a/lc", "b/lc", "c/lc"] and together.when == TONIGHT and not together.cached
    assert [d.groups for d in plan.decisions] == [{ENGINE: 0}] * 3
    assert plan.starts == 2 and plan.starts_at_most == 2 + 4  # split down: one more start per patch
    doc = plan.to_json()
    assert doc["engine_starts"] == 2 and doc["engine_starts_at_most"] == 6 and doc["full_run_engine_starts"] == 4
    assert [d["groups"] for d in doc["decisions"]] == [[0], [0], [0]]
    assert doc["groups"] == [{"engine": "cpu", "patches": ["a", "b", "c"]}]


def test_a_group_whose_drop_does_not_apply_is_tried_one_by_one() -> None:
    ps, h = _three()
    asked: list[list[str]] = []

    def applies(ids: list[str]) -> str:
        asked.append(ids)
        return "hunk 2 of b fails"

    plan = _plan(ps, h, PlanOptions(history="x", full_every=0, all_=True), applies=applies)
    assert asked == [["a", "b", "c"]] and plan.groups == []
    assert plan.notes == ["the series without a, b, c together does not apply (hunk 2 of b fails): tried one by one"]
    assert [t.label for t in plan.trees] == ["with the series", "without a", "without b", "without c"]
    assert plan.starts == plan.starts_at_most == 4


def test_who_joins_a_group_and_what_starts_tonight() -> None:
    """Only patches that run tonight, were not needed with every test passing, apply, and are not all
    cached join a group; a cached tree starts nothing; a broken patch's tree waits for the series."""
    ps = [plan_patch(pid, [f"pkg/{pid}.py"], cached=pid == "c") for pid in "abcdefg"]
    ps.append(plan_patch("h", ["pkg/h.py"]))
    proofs = {p.id: proof_of(p, night=2) for p in ps}
    proofs["d"] = proof_of(ps[3], night=2, klass=PROVEN, outcome="fail")  # needed last time
    proofs["e"] = proof_of(ps[4], night=2, outcome="fail")  # not needed, but its test failed
    ps[5].minus_error = "the series without f does not apply"
    del proofs["h"]
    h = history_of(*proofs.items(), last={"g": BROKEN})
    plan = _plan(ps, h, PlanOptions(history="x", full_every=0, only=list("abcdef")))
    actions = {d.patch: d.action for d in plan.decisions}
    assert actions == {"a": RUN, "b": RUN, "c": RUN, "d": RUN, "e": RUN, "f": RUN, "g": AFTER_WITH, "h": RUN}
    assert [g.patches for g in plan.groups] == [["a", "b"]]
    trees = {t.label: t for t in plan.trees}
    assert set(trees) == {
        "with the series",
        "without a, b (tried together)",
        "without c",
        "without d",
        "without e",
        "without g",
        "without h",
    }  # f: an error, no engine start
    assert trees["without c"].cached and not trees["without d"].cached
    assert trees["without g"].when == "if g passes with the series"
    assert plan.starts == 5  # the series, the group, d, e, h
    assert plan.starts_at_most == 5 + 1 + 2  # g if it passes; the group split


def test_carried_patches_start_nothing_and_the_estimate_counts_starts() -> None:
    ps, h = _three()
    h.add_start("cpu", 100.0)
    h.add_start("cpu", 300.0)
    plan = _plan(ps, h)
    assert [d.action for d in plan.decisions] == [CARRY] * 3
    assert [t.label for t in plan.trees] == ["with the series"] and plan.starts == plan.starts_at_most == 1
    plan.estimate(h)
    assert plan.cost == {
        "planned_starts": 1,
        "full_starts": 4,
        "starts_per_engine": {"cpu": 1},
        "seconds_per_start": {"cpu": 200.0},
        "estimated_seconds": 200.0,
    }
    plan.estimate(None)
    assert plan.cost["seconds_per_start"] == {"cpu": None} and plan.cost["estimated_seconds"] is None
    plan.trees.append(EngineTree("without x", "f" * 16, "gpu", ["x/lc"]))
    plan.trees.append(EngineTree("without y", "f" * 16, "gpu", ["y/lc"], cached=True))
    plan.trees.append(EngineTree("without z", "f" * 16, "gpu", ["z/lc"], carried="run 2"))
    plan.estimate(h)
    assert plan.cost["starts_per_engine"] == {"cpu": 1, "gpu": 1} and plan.cost["estimated_seconds"] is None


def test_a_serving_tree_of_the_patch_takes_its_long_context_tests() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    serving = EngineTree("without a", ENGINE, "cpu", ["a/decode"], cached=True)
    plan = _plan([p], None, PlanOptions(history="x"), fixed=[_series(), serving])
    assert [t.label for t in plan.trees] == ["with the series", "without a"]
    assert plan.trees[1].tests == ["a/decode", "a/lc"] and not plan.trees[1].cached
    assert plan.notes == ["serving tests are not planned (both sides are measured tonight): a"]
    cached = plan_patch("a", ["pkg/a.py"], cached=True)
    serving = EngineTree("without a", ENGINE, "cpu", ["a/decode"], cached=True)
    plan = _plan([cached], None, PlanOptions(history="x"), fixed=[_series(), serving])
    assert plan.trees[1].cached and plan.starts == 1


def test_the_series_trees_come_first_and_lookups_find_them() -> None:
    ps, h = _three()
    other = EngineTree("with the series", "g" * 16, "gpu", ["c/lc"], config="--tp 2", production=False)
    plan = _plan(ps, h, PlanOptions(history="x", full_every=0, all_=True), fixed=[other], applies=lambda ids: "no")
    assert [t.label for t in plan.trees] == ["with the series", "without a", "without b", "without c"]
    assert plan.with_tree("g" * 16) is other and plan.with_tree(ENGINE) is None
    plan.config_groups.append(ConfigGroup("gpu", ["g" * 16], ["--tp", "2"], {}, "gpu with every switch"))
    assert plan.config_group("g" * 16) is plan.config_groups[0] and plan.config_group(ENGINE) is None
    assert plan.decision("b") is plan.decisions[1] and plan.decision("zz") is None
    assert other.to_json()["config"] == "--tp 2" and plan.trees[1].to_json()["config"] is None
    assert plan.trees[1].to_json()["carried"] is None


def test_a_plan_reads_back_from_its_json() -> None:
    ps = [plan_patch(pid, [f"pkg/{pid}.py"]) for pid in "abc"]
    proofs = {p.id: proof_of(p, night=2) for p in ps}
    proofs["a"].body = "0" * 16
    h = history_of(*proofs.items(), last={"c": BROKEN})
    h.add_start("cpu", 60.0)
    plan = _plan(ps, h, PlanOptions(history="proofs.json", full_every=0))
    plan.estimate(h)
    plan.trees[0].carried = "run 2"
    plan.trees[0].why = ["a switch moved"]
    back = plan_from_json(plan.to_json())
    assert (back.target, back.base, back.night, back.history) == ("vllm", BASE, NIGHT, "proofs.json")
    assert back.full_starts == 4 and back.notes == plan.notes and back.cost == plan.cost
    assert [d.text() for d in back.decisions] == [d.text() for d in plan.decisions]
    assert [d.action for d in back.decisions] == [RUN, CARRY, AFTER_WITH]
    assert [(t.label, t.tests, t.cached, t.when, t.carried, t.why) for t in back.trees] == [
        (t.label, t.tests, t.cached, t.when, t.carried, t.why) for t in plan.trees
    ]
    assert back.starts == plan.starts and back.starts_at_most == plan.starts_at_most
    empty = plan_from_json({})
    assert (empty.target, empty.night, empty.decisions, empty.trees, empty.cost) == ("", 0, [], [], {})


def test_unknown_changes_run_every_proven_patch() -> None:
    ps, h = _three()
    plan = _plan(ps, h, PlanOptions(history="x", full_every=0, unknown="no tree tonight"))
    assert [d.reasons for d in plan.decisions] == [[f"no tree tonight (proven in run 2 ({AT} on {BASE}))"]] * 3
    assert [g.patches for g in plan.groups] == [["a", "b", "c"]]
    assert h.proofs["a"].klass == NOT_NEEDED


def test_four_files_are_all_named() -> None:
    files = [f"pkg/m{i}.py" for i in range(4)]
    p = plan_patch("a", files)
    proof = proof_of(p, night=2)
    for f in files:
        proof.watch[f][0] = "0" * 16
    (reason,) = decide(p, history_of(("a", proof)), OPTS, NIGHT, BASE).reasons
    assert reason == f"upstream changed {', '.join(f'{f} (patched)' for f in files)} since run 2 ({AT} on {BASE})"


def test_each_tree_keeps_its_configuration_and_the_series_comes_first() -> None:
    ps = [
        plan_patch(pid, [f"pkg/{pid}.py"], tests=[PlanTest("lc", SPEC, ENGINE, "cpu", config=f"--{pid}")])
        for pid in "abc"
    ]
    h = history_of(*((p.id, proof_of(p, night=2)) for p in ps))
    serving = EngineTree("without z", ENGINE, "cpu", ["z/decode"])
    plan = _plan(ps, h, PlanOptions(history="x", full_every=0, only=["a", "b"]), fixed=[serving, _series()])
    assert [t.label for t in plan.trees] == [
        "with the series",
        "without z",
        "without a, b (tried together)",
    ]  # c is carried
    trees = {t.label: t for t in plan.trees}
    assert trees["without a, b (tried together)"].config == "--a"  # the first member's
    none = _plan(ps, None, PlanOptions(history="x"))
    assert none.night == 1 and {t.label: t.config for t in none.trees if t.label.startswith("without")} == {
        "without a": "--a",
        "without b": "--b",
        "without c": "--c",
    }


def test_the_estimate_multiplies_each_engines_starts_by_its_median() -> None:
    ps = [plan_patch(pid, [f"pkg/{pid}.py"]) for pid in "ab"]
    h = history_of()
    h.add_start("cpu", 100.1)
    h.add_start("cpu", 200.4)
    plan = _plan(ps, h)  # no proofs: the series and a tree without each patch, all tonight
    plan.estimate(h)
    assert plan.cost["starts_per_engine"] == {"cpu": 3} and plan.cost["seconds_per_start"] == {"cpu": 150.25}
    assert plan.cost["estimated_seconds"] == 450.8  # to a tenth of a second


def test_a_plan_document_missing_fields_reads_with_defaults() -> None:
    doc = {"decisions": [{"patch": "a", "action": RUN}], "trees": [{"label": "with the series"}], "groups": [{}]}
    plan = plan_from_json(doc)
    (d,) = plan.decisions
    assert (d.patch, d.action, d.reasons, d.carried_from, d.tests) == ("a", RUN, [], "", [])
    (t,) = plan.trees
    assert (t.label, t.tests, t.cached, t.when, t.config, t.production, t.carried) == (
        "with the series",
        [],
        False,
        TONIGHT,
        "",
        True,
        "",
    )
    assert plan.full_starts == 0 and plan.groups[0].patches == [] and plan.starts == 1


def test_broken_last_time_goes_before_every_other_reason() -> None:
    p = plan_patch("a", ["pkg/a.py"])
    proof = proof_of(p, night=2, klass=PROVEN)
    proof.body = "0" * 16
    proof.tests["lc"].spec = "t" * 16
    proof.watch["pkg/a.py"][0] = "0" * 16
    d = decide(p, history_of(("a", proof), last={"a": BROKEN}), OPTS, NIGHT, BASE)
    assert d.action == AFTER_WITH and len(d.reasons) == 4
    assert [r.split(" ")[:3] for r in d.reasons] == [
        ["it", "was", "broken"],
        ["its", "body", "changed"],
        ["its", "test", "lc"],
        ["upstream", "changed", "pkg/a.py"],
    ]


def test_a_plan_of_nothing_costs_nothing() -> None:
    """The gate's plan of a target without planned tests: no starts, and a full run costs none either."""
    doc = VerifyPlan("vllm", BASE, 0, "proofs.json").to_json()
    assert (doc["engine_starts"], doc["engine_starts_at_most"], doc["full_run_engine_starts"]) == (0, 0, 0)
