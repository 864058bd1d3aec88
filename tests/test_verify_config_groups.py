"""Grouping switched configurations into one engine start (``patchset.verify.plan.configs``), planned
from real ledgers written to ``tmp_path``: the ledger's ``[patch.switches] independent`` declaration
decides which configurations share a start; without it, switches interact and start apart."""

from __future__ import annotations

from pathlib import Path

from patchset.ledger.store import load_ledger
from patchset.verify.plan.configs import SwitchIndex, plan_by_config
from patchset.verify.plan.decide import CARRY, RUN, PlanOptions, VerifyPlan, make_plan
from patchset.verify.plan.ledger import ledger_inputs
from patchset.verify.plan.simulate import Month, simulate
from patchset.verify.run import VerifyRun
from tests.support.vllm_ledger import patch_entry, vllm_target

OPTS = PlanOptions(history="simulated", full_every=0)  # rotation apart
ENGINE = [
    "[engines.box]",
    'start = ["./start.sh", "{name}", "{args}"]',
    'url = "http://127.0.0.1:8123"',
    "production = true",
    "",
]


def _test(name: str, kind: str = "longctx", env: str = "", args: str = "", checks: str = "") -> list[str]:
    checks = checks or ('["causality"]' if kind == "longctx" else '["decode"]')
    lines = ["[[patch.tests]]", f'name = "{name}"', f'kind = "{kind}"', 'engine = "box"', f"checks = {checks}"]
    lines += [f"env = {{ {env} }}"] if env else []
    lines += [f"engine_args = {args}"] if args else []
    return [*lines, 'tags = ["box"]', ""]


def _switches(env: str = "", flags: str = "", independent: bool | None = True) -> list[str]:
    lines = ["[patch.switches]"]
    lines += [f"env = {{ {env} }}"] if env else []
    lines += [f"flags = {flags}"] if flags else []
    lines += [f"independent = {str(independent).lower()}"] if independent is not None else []
    return lines


def _ledger(
    tmp_path: Path,
    *,
    s2_env: str = "",
    s2_independent: bool | None = True,
    s1_serving: bool = False,
) -> Path:
    """Patch a tested on the production configuration; s1 on X_SWITCH=1; s2 on --y-flag f32 (or on
    ``s2_env``); each writes its own file."""
    lines = vllm_target() + ENGINE
    lines += [*patch_entry("a", "vllm/a.py"), *_test("lc")]
    lines += [*patch_entry("s1", "vllm/s1.py"), *_switches(env='X_SWITCH = "1"'), *_test("lc", env='X_SWITCH = "1"')]
    if s1_serving:
        lines += _test("serve", kind="serving", env='X_SWITCH = "1"')
    if s2_env:
        switch, test = _switches(env=s2_env, independent=s2_independent), _test("lc", env=s2_env)
    else:
        switch = _switches(flags='["--y-flag"]', independent=s2_independent)
        test = _test("lc", args='["--y-flag", "f32"]')
    lines += [*patch_entry("s2", "vllm/s2.py"), *switch, *test]
    path = tmp_path / "patches.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _month(ledger: Path) -> Month:
    return Month(VerifyRun(ledger, target="vllm", tags=["box"]), OPTS)


def _tonight(month: Month, changed: set[str]) -> VerifyPlan:
    """The plan of the night after ``month``'s nights with ``changed`` files moved (as simulate plans it)."""
    for f in changed:
        month.versions[f] = month.versions.get(f, 0) + 1
    inputs, files = ledger_inputs(month.run, [], set())
    for p in inputs.patches:
        p.watch = month.watch(files[p.id])
    plan = make_plan("vllm", "tonight", inputs, month.history, month.opts, lambda ids: "")
    return plan_by_config(plan, month.history)


def _started(plan: VerifyPlan) -> list[str]:
    return [t.label for t in plan.trees if not t.carried and not t.cached]


def test_independent_switches_moved_the_same_night_share_one_start_beside_production(tmp_path: Path) -> None:
    month = _month(_ledger(tmp_path))
    nights = simulate(month, [set(), set()])
    # night 0: production, both switches in one start, the 3 trees without a patch; then production alone
    assert [n.planned_starts for n in nights] == [1 + 1 + 3, 1]
    plan = _tonight(month, {"vllm/s1.py", "vllm/s2.py"})
    assert _started(plan) == ["with the series", "with the series + X_SWITCH, --y-flag", "without s1", "without s2"]
    assert plan.starts == 4 and plan.full_starts == 6
    (group,) = plan.config_groups
    assert group.env == {"X_SWITCH": "1"} and group.args == ["--y-flag", "f32"]
    assert any("2 switched configurations on box share one start" in n for n in plan.notes)
    grouped = next(t for t in plan.trees if t.label.startswith("with the series +"))
    assert grouped.tests == ["s1/lc", "s2/lc"] and not grouped.production
    assert grouped.why == ["s1 is needed tonight", "s2 is needed tonight"]


def test_a_lone_moved_switch_starts_only_its_own_configuration(tmp_path: Path) -> None:
    month = _month(_ledger(tmp_path))
    simulate(month, [set(), set()])
    plan = _tonight(month, {"vllm/s2.py"})
    assert _started(plan) == ["with the series", "with the series", "without s2"]
    assert plan.config_groups == [] and plan.starts == 3
    s1 = next(t for t in plan.trees if t.tests == ["s1/lc"] and t.label == "with the series")
    assert s1.carried.startswith("carried from run 1") and "nothing its tests rest on moved" in s1.carried


def test_undeclared_switches_interact_and_start_apart(tmp_path: Path) -> None:
    month = _month(_ledger(tmp_path, s2_independent=None))  # the safe default: it may interact
    assert not load_ledger(month.run.ledger_path).series("vllm")[2].switches.independent
    simulate(month, [set(), set()])
    plan = _tonight(month, {"vllm/s1.py", "vllm/s2.py"})
    assert plan.config_groups == [] and plan.starts == 5
    assert not any("share one start" in n for n in plan.notes)


def test_one_switch_set_to_two_values_is_never_grouped(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, s2_env='X_SWITCH = "2"')
    index = SwitchIndex.of(load_ledger(ledger).series("vllm"), load_ledger(ledger).engines)
    assert index.names == {"X_SWITCH": True} and index.production_engine == "box"
    month = _month(ledger)
    simulate(month, [set(), set()])
    plan = _tonight(month, {"vllm/s1.py", "vllm/s2.py"})
    assert plan.config_groups == [] and plan.starts == 5  # X_SWITCH=1 and X_SWITCH=2 clash


def test_a_switch_one_patch_declares_independent_and_another_does_not_interacts(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, s2_env='X_SWITCH = "1"', s2_independent=False)
    index = SwitchIndex.of(load_ledger(ledger).series("vllm"), {})
    assert index.names == {"X_SWITCH": False} and index.production_engine == ""
    assert not index.config("box", [], {"X_SWITCH": "1"}).independent
    assert index.config("box", [], {}).production  # no engine marked: each test's default is production


def test_a_switched_serving_test_lacking_its_run_with_the_series_starts_its_configuration_only(tmp_path: Path) -> None:
    """Night 0 measures a switched serving test on both sides, so its run with the series is not
    recorded as a with-run proof; the next night (figures stored) that run starts its configuration,
    but the patch's long-context without-run, proven the night before, is carried."""
    month = _month(_ledger(tmp_path, s1_serving=True))
    simulate(month, [set()])
    inputs, files = ledger_inputs(month.run, [], {"s1/serve"})
    for p in inputs.patches:
        p.watch = month.watch(files[p.id])
    plan = plan_by_config(make_plan("vllm", "night 1", inputs, month.history, OPTS, lambda ids: ""), month.history)
    s1 = plan.decision("s1")
    assert s1 is not None and s1.action != RUN, s1.reasons
    assert "without s1" not in _started(plan)
    switched = [t for t in plan.trees if t.label == "with the series" and not t.production and not t.carried]
    assert [t.tests for t in switched] == [["s1/lc", "s1/serve"]]
    assert switched[0].why == ["s1/serve has no earlier proof with the series on this configuration"]
    assert plan.config_groups == []  # it holds a serving test: its figures are compared on exactly it


def _serving_first(tmp_path: Path, serve_checks: str, lc_checks: str) -> Path:
    """Patch s1 on X_SWITCH=1 with a serving test listed before its long-context one."""
    lines = vllm_target() + ENGINE + [*patch_entry("s1", "vllm/s1.py"), *_switches(env='X_SWITCH = "1"')]
    lines += _test("serve", kind="serving", env='X_SWITCH = "1"', checks=serve_checks)
    lines += _test("lc", env='X_SWITCH = "1"', checks=lc_checks)
    path = tmp_path / "patches.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _night_after(month: Month) -> VerifyPlan:
    inputs, files = ledger_inputs(month.run, [], {"s1/serve"})
    for p in inputs.patches:
        p.watch = month.watch(files[p.id])
    return plan_by_config(make_plan("vllm", "tonight", inputs, month.history, OPTS, lambda ids: ""), month.history)


def test_a_changed_switched_serving_test_makes_its_patch_needed(tmp_path: Path) -> None:
    """Its run with the series has a proof (night 1 made it), but of other checks: re-proven, not carried."""
    month = _month(_serving_first(tmp_path, '["decode"]', '["causality"]'))
    nights = simulate(month, [set(), set()])
    assert "serve" in month.history.proofs["s1"].with_tests and nights[1].planned_starts == 1  # its configuration only
    assert _night_after(month).decision("s1").action == CARRY  # type: ignore[union-attr]
    _serving_first(tmp_path, '["decode", "concurrent"]', '["causality"]')
    d = _night_after(month).decision("s1")
    assert d is not None and d.action == RUN
    assert d.reasons == ["its test serve changed since run 1 (night 1 on night 0) (checks, model or engine)"]


def test_a_long_context_test_after_a_switched_serving_one_is_still_checked(tmp_path: Path) -> None:
    month = _month(_serving_first(tmp_path, '["decode"]', '["causality"]'))
    simulate(month, [set()])  # night 0: the serving test's run with the series has no proof yet
    _serving_first(tmp_path, '["decode"]', '["causality", "resume"]')
    d = _night_after(month).decision("s1")
    assert d is not None and d.action == RUN
    assert d.reasons == ["its test lc changed since run 1 (night 1 on night 0) (checks, model or engine)"]
