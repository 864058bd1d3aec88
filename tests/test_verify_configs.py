"""Plan by configuration (``patchset.verify.plan.configs``): the with-series run on the production
configuration starts every night; one on a switched configuration only when something its tests rest
on moved; switched configurations whose switches the ledger declares independent share one start.
Also the simulated month (``patchset.verify.plan.simulate``) on the production ledger."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from patchset.errors import InputError
from patchset.ledger.store import load_ledger
from patchset.verify import outcomes
from patchset.verify.longctx.params import Mode
from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.outcomes import PROVEN, VerifyReport
from patchset.verify.plan.carry import engine_digest
from patchset.verify.plan.configs import SwitchIndex, plan_by_config, set_config
from patchset.verify.plan.decide import (
    CARRY,
    RUN,
    ConfigGroup,
    Decision,
    EngineTree,
    PlanInputs,
    PlanOptions,
    PlanPatch,
    PlanTest,
    VerifyPlan,
    due_by_rotation,
    make_plan,
    plan_from_json,
)
from patchset.verify.plan.rounds import Minus, Rounds
from patchset.verify.plan.simulate import Month, simulate, spread
from patchset.verify.plan.view import cost_text, starts_line
from patchset.verify.plan.watch import Watch
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof, load_history, save_history
from patchset.verify.run import VerifyRun
from tests.support.repo import REPO_ROOT

OPTS = PlanOptions(history="proofs.json", full_every=0)  # rotation apart (tested below)
CONFIGS = {  # engine key -> (args, env)
    "e0": ([], {}),
    "e1": ([], {"X_SWITCH": "1"}),
    "e2": (["--y-flag", "f32"], {}),
}
INDEX = SwitchIndex({"X_SWITCH": True, "--y-flag": True})


def _watch(digest: str = "1" * 16) -> Watch:
    w = Watch({"pkg/a.py": "patched"})
    w.digests = {"pkg/a.py": (digest, digest, digest)}
    return w


def _inputs(bodies: dict[str, str] | None = None, serving_on_e1: bool = False) -> PlanInputs:
    """Patch a tested on the production configuration, s1 on X_SWITCH=1, s2 on --y-flag f32."""
    bodies = bodies or {}
    fixed, patches = [], []
    for pid, ek in (("a", "e0"), ("s1", "e1"), ("s2", "e2")):
        args, env = CONFIGS[ek]
        config = " ".join([*args, *(f"{k}={v}" for k, v in env.items())])
        tree = set_config(
            EngineTree("with the series", ek, "cpu", [f"{pid}/lc"], config=config),
            INDEX.config("cpu", args, env),
            args,
            env,
        )
        tree.serving = serving_on_e1 and ek == "e1"
        fixed.append(tree)
        test = PlanTest("lc", "s" * 16, ek, "cpu", config=config, switched=ek != "e0")
        patches.append(PlanPatch(pid, bodies.get(pid, "b" * 16), [test], _watch()))
    return PlanInputs(patches, fixed, 6)


def _history(with_proofs: bool = True) -> TargetHistory:
    h = TargetHistory(3)
    for pid in ("a", "s1", "s2"):
        with_tests = {"lc": WithoutProof("s" * 16, "pass")} if with_proofs and pid != "a" else {}
        h.proofs[pid] = PatchProof(
            3,
            "2026-10-01T02:00:00Z",
            "vllm==0.31.0",
            PROVEN,
            "b" * 16,
            {"lc": WithoutProof("s" * 16, "fail")},
            {"pkg/a.py": ["1" * 16] * 3},
            {"pkg/a.py": "patched"},
            with_tests,
        )
        h.last[pid] = LastVerdict(PROVEN, 3, "2026-10-01T02:00:00Z", "vllm==0.31.0")
    return h


def _plan(inputs: PlanInputs, history: TargetHistory | None, opts: PlanOptions = OPTS):
    return plan_by_config(make_plan("vllm", "vllm==0.32.0", inputs, history, opts, lambda ids: ""), history)


def test_the_switch_index_tells_production_from_switched_configurations() -> None:
    assert INDEX.config("cpu", [], {}).production
    cfg = INDEX.config("cpu", ["--y-flag", "f32"], {"X_SWITCH": "1"})
    assert not cfg.production and cfg.independent and cfg.switches == ["--y-flag", "X_SWITCH"]
    assert not INDEX.config("cpu", [], {"OTHER": "1"}).independent  # a variable no switch declares
    marked = SwitchIndex(dict(INDEX.names), production_engine="spark")
    assert marked.config("spark", [], {}).production
    assert not marked.config("vllm-cpu", [], {}).production  # another engine's defaults are not production


def test_switched_configurations_are_carried_when_nothing_their_tests_rest_on_moved() -> None:
    plan = _plan(_inputs(), _history())
    assert plan.starts == 1  # the production configuration's run with the series, nothing else
    carried = [t for t in plan.trees if t.carried]
    assert {t.engine for t in carried} == {"e1", "e2"}
    assert all("carried from run 3" in t.carried for t in carried)
    doc = plan.to_json()
    assert [t["production"] for t in doc["trees"]] == [True, False, False]


def test_a_switched_configuration_without_a_proof_with_the_series_starts() -> None:
    plan = _plan(_inputs(), _history(with_proofs=False))
    started = [t for t in plan.trees if t.label.startswith("with ") and not t.carried]
    assert plan.starts == 2  # e1 and e2 grouped into one start
    assert any("no earlier proof with the series" in w for t in started for w in t.why)


def test_a_moved_patch_starts_its_switched_configuration_and_independent_ones_share_a_start() -> None:
    plan = _plan(_inputs({"s1": "c" * 16}), _history())
    assert [t.engine for t in plan.trees if t.label.startswith("with ") and not t.carried] == ["e0", "e1"]
    assert plan.starts == 3  # production, X_SWITCH's run with the series, the tree without s1
    plan = _plan(_inputs({"s1": "c" * 16, "s2": "c" * 16}), _history())
    assert plan.starts == 4  # production, one start for both switches, the trees without s1 and s2
    assert len(plan.config_groups) == 1 and plan.config_groups[0].env == {"X_SWITCH": "1"}
    assert plan.config_groups[0].args == ["--y-flag", "f32"]
    assert plan.config_group("e1") is plan.config_group("e2")
    assert any("share one start" in n for n in plan.notes)
    assert json.loads(json.dumps(plan.to_json()))["config_groups"][0]["label"] == "with the series + X_SWITCH, --y-flag"


def test_a_configuration_holding_a_serving_test_is_never_grouped() -> None:
    plan = _plan(_inputs({"s1": "c" * 16, "s2": "c" * 16}, serving_on_e1=True), _history())
    assert plan.config_groups == [] and plan.starts == 5


def test_without_a_history_every_configuration_starts() -> None:
    plan = _plan(_inputs(), None, PlanOptions())
    assert all(not t.carried for t in plan.trees) and plan.starts == 2 + 3  # switches grouped


# --------------------------------------------------------------------------- the ledger keys


def _ledger(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "patches.toml"
    p.write_text(
        'schema = 1\n[targets.vllm]\nupstream = "u"\n[engines.a]\nstart = ["./a.sh"]\nproduction = true\n' + extra
    )
    return p


def test_two_engines_marked_production_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="both marked production"):
        load_ledger(_ledger(tmp_path, '[engines.b]\nstart = ["./b.sh"]\nproduction = true\n'))


def test_the_production_ledger_declares_its_engine_and_no_switch_independent() -> None:
    """No source says the production switches do not interact: the ledger leaves the safe default."""
    ledger = load_ledger(REPO_ROOT / "patches.toml")
    index = SwitchIndex.of(ledger.series("vllm"), ledger.engines)
    assert index.production_engine == "spark"
    assert index.names == {
        "VLLM_DRAFTER_W8A16": False,
        "--mamba-ssm-cache-dtype": False,
        "VLLM_E21_BF16_RESIDUE_W8A16": False,
    }


# --------------------------------------------------------------------------- the month


def _month(full_every: int = 7) -> Month:
    run = VerifyRun(REPO_ROOT / "patches.toml", target="vllm", tags=["spark"])
    return Month(run, PlanOptions(history="simulated", full_every=full_every))


def test_a_quiet_month_on_the_production_ledger_costs_one_start_a_night_after_the_first() -> None:
    nights = simulate(_month(full_every=0), [set()] * 6)
    assert [n.planned_starts for n in nights][:1] == [19] and nights[0].full_starts == 19
    assert [n.planned_starts for n in nights[2:]] == [1, 1, 1, 1]
    assert nights[3].why == {"with the series": ["the production configuration: every night"]}
    assert set(nights[0].to_json()) == {"night", "changed_files", "planned_starts", "full_starts", "why"}


def test_a_changed_file_of_a_switched_patch_starts_its_configuration_in_the_month() -> None:
    nights = simulate(_month(full_every=0), [set(), set(), set(), {"vllm/models/glm5next/common/model.py"}])
    why = nights[3].why
    assert any("--mamba-ssm-cache-dtype" in k for k in why)  # 09 watches common/model.py
    assert "without p4-glm5next-fp8-attn-helper-nvfp4-scales" in why
    assert nights[3].changed_files == 1 and nights[3].planned_starts < nights[3].full_starts


# --------------------------------------------------------------------------- staggered rotation


def test_the_rotation_proves_about_a_seventh_of_the_patches_each_night_each_every_seven() -> None:
    ids = [p.id for p in load_ledger(REPO_ROOT / "patches.toml").series("vllm")]
    due = {n: [i for i in ids if due_by_rotation(i, n, 7, 7)] for n in range(8, 22)}
    for i in ids:  # each patch exactly once in each window of 7 nights, 7 nights apart
        nights = [n for n, d in due.items() if i in d]
        assert len(nights) == 2 and nights[1] - nights[0] == 7, (i, nights)
    assert max(len(d) for d in due.values()) < len(ids) // 2  # spread, not all on one night
    slot = next(n for n in range(7) if due_by_rotation(ids[0], n, 7, 7))
    assert not due_by_rotation(ids[0], slot, 6, 7)  # proven since its last turn: not due
    assert not due_by_rotation(ids[0], slot + 1, 13, 7) and due_by_rotation(ids[0], slot + 1, 14, 7)  # two turns
    assert not any(due_by_rotation(i, n, 9, 0) for i in ids for n in range(7))  # 0: never by age


def test_a_month_with_staggered_rotation_has_no_night_that_re_proves_everything() -> None:
    nights = simulate(_month(full_every=7), [set()] * 23)
    after = [n.planned_starts for n in nights[8:]]  # from the first night a proof of night 0 is 7 runs old
    assert max(after) <= 5 and min(after) >= 2, after  # every night some, no night all (13 at once before)
    rotated = [k for n in nights[8:] for k, why in n.why.items() if any("due by rotation" in w for w in why)]
    assert len(rotated) >= 20 and len(set(rotated)) >= 13  # each patch's without-run about twice in 14 nights


# --------------------------------------------------------------------------- verify --plan without bodies


def test_verify_plan_plans_the_production_ledger_without_its_bodies(tmp_path: Path, monkeypatch, run) -> None:
    """A fresh clone, no body imported: verify --plan plans from the ledger, naming each missing body."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("patches.toml", "engines", "verify/baselines"):
        src, dest = REPO_ROOT / name, clone / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    r = run("verify", "--plan", "--target", "vllm", "--tags", "spark", cwd=clone)
    assert r.code == 0, r
    assert "body not imported" not in r.stdout + r.stderr
    assert "blocked 05-kpool-indexer-fixes: its body is not imported" in r.stdout
    assert "verify plan: vllm on the ledger's base 0.30.1rc1.dev48 at 7f1a5398e961 (run 1;" in r.stdout  # not "on  ("
    assert "19 engine start(s) tonight; a full run: 19" in r.stdout
    r = run("verify", "--plan", "--target", "vllm", "--tags", "spark", "--json", cwd=clone)
    plan = json.loads(r.stdout)["plan"]
    assert len(plan["blockers"]) == 18 and plan["engine_starts"] == 19
    assert all(d["action"] == "run" for d in plan["decisions"])
    assert not (clone / ".patchset").exists()  # nothing written


def test_the_spread_puts_each_release_s_files_on_one_night_of_its_cycle_repeatably() -> None:
    releases = [{"a.py", "b.py", "c.py"}, {"a.py", "d.py"}]
    nights = spread(releases, 9, seed=3)
    assert len(nights) == 9 and nights[0] == set()
    first, second = nights[1:5], nights[5:9]  # 8 nights after night 0, 4 per cycle
    assert sorted(f for n in first for f in n) == ["a.py", "b.py", "c.py"]
    assert sorted(f for n in second for f in n) == ["a.py", "d.py"]
    assert spread(releases, 9, seed=3) == nights and spread(releases, 9, seed=4) != nights


def test_the_simulated_month_s_json_on_a_small_fixture(tmp_path: Path) -> None:
    """bench/verify.py --simulate's JSON, on the production ledger and two made-up releases."""
    month = spread([{"vllm/platforms/cuda.py", "vllm/unrelated.py"}, {"vllm/v1/core/kv_cache_utils.py"}], 7, seed=1)
    nights = [n.to_json() for n in simulate(_month(full_every=0), month)]
    assert [n["night"] for n in nights] == list(range(7))
    assert [n["changed_files"] for n in nights] == [len(m) for m in month]
    assert all(n["full_starts"] == (19 if n["night"] == 0 else 17) for n in nights)
    kv = next(n for n in nights if "vllm/v1/core/kv_cache_utils.py" in month[n["night"]])
    assert "without u58021-single-group-prefix-match-unit" in kv["why"]  # it patches kv_cache_utils.py
    quiet = [
        n for n in nights[2:] if not month[n["night"]] & {"vllm/platforms/cuda.py", "vllm/v1/core/kv_cache_utils.py"}
    ]
    assert all(n["planned_starts"] == 1 for n in quiet)


@pytest.mark.network
def test_the_real_releases_change_files_the_production_ledger_watches() -> None:
    from patchset.upstream.changes import changed_files, release_digests
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    old, new = release_digests("vllm==0.30.0"), release_digests("vllm==0.31.0")
    changed = changed_files(old, new)
    assert "vllm/v1/core/kv_cache_utils.py" in changed and len(changed) > 100
    assert changed <= old.keys() | new.keys() and changed_files(old, old) == set()


# --------------------------------------------------------------------------- tonight's cost


def test_tonight_s_cost_is_estimated_from_each_engine_s_recorded_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    h = _history()
    for seconds in (3000, 3600, 1200, 99999):
        h.add_start("cpu", seconds)
    assert h.start_seconds("cpu") == 3300 and h.start_seconds("spark") is None
    path = tmp_path / "proofs.json"
    save_history(path, {"vllm": h})
    assert load_history(path)["vllm"].starts == {"cpu": [3000.0, 3600.0, 1200.0, 99999.0]}
    plan = _plan(_inputs({"s1": "c" * 16}), h)  # production, X_SWITCH with the series, without s1
    assert plan.cost["planned_starts"] == 3 and plan.cost["full_starts"] == 6
    assert plan.cost["estimated_seconds"] == 3 * 3300
    assert cost_text(plan.cost) == "about 2.8 h of cluster time (cpu: 55 min a start, as recorded)"
    assert "a full run: 6; about 2.8 h" in starts_line(plan)
    assert plan_from_json(plan.to_json()).cost == plan.cost
    unknown = _plan(_inputs(), TargetHistory())
    assert unknown.cost["estimated_seconds"] is None and "no recorded start of cpu" in cost_text(unknown.cost)
    for _ in range(40):
        h.add_start("cpu", 60)
    assert len(h.starts["cpu"]) == 32  # the last 32 kept


def test_a_history_with_malformed_start_durations_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    h = _history()
    h.starts["cpu"] = [-5.0]
    path = tmp_path / "proofs.json"
    save_history(path, {"vllm": h})
    with pytest.raises(InputError, match="durations in seconds"):
        load_history(path)


# --------------------------------------------------------------------------- the runs of a plan by configuration


def _round_parts(env: dict[str, str]):
    ledger = load_ledger(REPO_ROOT / "patches.toml")
    patch = ledger.get("p2-mla-fused-qkv-a-w8a16")
    spec = next(t for t in patch.tests if t.kind == "longctx")
    lc = LongctxSpec(["resume"], "m", Mode.FIXED, None, [], dict(env), 60)
    outcome = outcomes.TestOutcome(patch.id, "lc", "", "", [], 60)
    trees = SimpleNamespace(items=[], minus={patch.id: Minus([], None, "", "")}, groups={})
    proof = _history().proofs["s1"]
    return patch, spec, lc, outcome, trees, proof


def test_a_carried_configuration_s_with_run_is_the_recorded_one_and_nothing_starts() -> None:
    patch, spec, lc, outcome, trees, proof = _round_parts({"X_SWITCH": "1"})
    plan = VerifyPlan("vllm", "vllm==0.32.0", 4, "proofs.json")
    tree = EngineTree("with the series", engine_digest(lc), "cpu", [f"{patch.id}/lc"], production=False)
    tree.carried = "carried from run 3 (nothing its tests rest on moved)"
    plan.trees = [tree]
    plan.decisions = [Decision(patch.id, CARRY, carried_from="run 3", carry_note="quiet", proof=proof)]
    rounds = Rounds(plan, trees, lambda h, lc: "", None)  # type: ignore[arg-type]
    rounds.add(patch, spec, outcome, lc, "", VerifyReport("l", "vllm", "b", [], 1))
    assert rounds.first == []  # no run at all: with the series and without it both carried
    assert outcome.with_run is not None and outcome.with_run.outcome == "pass"
    assert outcome.with_run.carried == "run 3" and outcome.without_run.outcome == "fail"  # type: ignore[union-attr]


def test_a_grouped_configuration_s_with_run_runs_on_the_merged_configuration_only() -> None:
    patch, spec, lc, outcome, trees, proof = _round_parts({"X_SWITCH": "1"})
    plan = VerifyPlan("vllm", "vllm==0.32.0", 4, "proofs.json")
    ek = engine_digest(lc)
    plan.config_groups = [
        ConfigGroup("cpu", [ek, "other"], ["--y-flag", "f32"], {"X_SWITCH": "1"}, "with the series + …")
    ]
    plan.decisions = [Decision(patch.id, RUN, ["its body changed"], proof=proof)]
    rounds = Rounds(plan, trees, lambda h, lc: "", None)  # type: ignore[arg-type]
    rounds.add(patch, spec, outcome, lc, "", VerifyReport("l", "vllm", "b", [], 1))
    with_run, without_run = rounds.first
    assert with_run.longctx.engine_args == ["--y-flag", "f32"] and with_run.longctx.env == {"X_SWITCH": "1"}  # type: ignore[union-attr]
    assert without_run.longctx.engine_args == [] and without_run.longctx is lc  # the tree without it: its own


def test_the_month_watches_what_the_patched_files_import() -> None:
    month = _month(full_every=0)
    used = "used by vllm/v1/core/kv_cache_utils.py"
    month.watches = {"vllm/v1/core/kv_cache_utils.py": {"vllm/utils/hashing.py::xxhash": used}}
    nights = simulate(month, [set(), set(), set(), {"vllm/utils/hashing.py", "vllm/utils/hashing.py::xxhash"}])
    why = nights[3].why["without u58021-single-group-prefix-match-unit"]
    assert any(f"vllm/utils/hashing.py::xxhash ({used})" in w for w in why), why
    assert nights[3].changed_files == 1  # the file, not its names
    month = _month(full_every=0)
    month.watches = {"vllm/v1/core/kv_cache_utils.py": {"vllm/utils/hashing.py::xxhash": used}}
    other = simulate(month, [set(), set(), set(), {"vllm/utils/hashing.py", "vllm/utils/hashing.py::sha"}])
    assert other[3].planned_starts == 1  # another name of the file changed: nothing it watches
    assert simulate(_month(full_every=0), [set(), set(), set(), {"vllm/utils/hashing.py"}])[3].planned_starts == 1
