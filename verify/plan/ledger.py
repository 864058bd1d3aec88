"""The verify plan of a ledger alone, without a tree: what a run would do, from the ledger and the proofs.

Why this module exists: ``gate --plan`` must answer on a fresh clone, where no body is imported yet,
no tree is at hand and no proof was ever made, and when tonight's upstream is not named. Then no
watched file can be compared: a patch with no earlier proof is needed ("no earlier proof"), one with
a proof is needed for the reason the caller gives, and the engine starts are counted from the
ledger's engine definitions (one per tree and engine configuration; nothing is known cached).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from patchset.commands.inspection import body_state
from patchset.errors import Location
from patchset.ledger.store import load_ledger
from patchset.upstream import cache
from patchset.verify.engines.definition import EngineDef, resolve_engine
from patchset.verify.longctx.runs import LongctxSpec, resolve_spec
from patchset.verify.plan.carry import engine_config, engine_digest, spec_digest
from patchset.verify.plan.configs import SwitchIndex, plan_by_config, set_config
from patchset.verify.plan.decide import EngineTree, PlanInputs, PlanOptions, PlanPatch, PlanTest, VerifyPlan, make_plan
from patchset.verify.plan.watch import ABSENT, Watch, body_digest
from patchset.verify.proofs import TargetHistory
from patchset.verify.run import VerifyRun
from patchset.verify.runner import PATCHSET_HOME
from patchset.verify.selection import selected, test_name


@dataclass
class _Build:
    """The plan inputs of a ledger, as they are gathered test by test."""

    index: SwitchIndex
    stored: set[str]
    fixed: dict[tuple[str, str], EngineTree] = field(default_factory=dict)
    full: set[tuple[str, str]] = field(default_factory=set)

    def add(self, pid: str, name: str, lc: LongctxSpec, edef: EngineDef) -> PlanTest | None:
        """One engine test: the trees it starts whatever the plan says; its planned test, if any."""
        ek, config = engine_digest(lc), engine_config(lc)
        cfg = self.index.config(edef.name, list(lc.engine_args), dict(lc.env))
        shown = f"{pid}/{name}"
        for label, key in (("with the series", ""), (f"without {pid}", pid)):
            if key and (lc.kind != "serving" or shown in self.stored):
                continue  # a serving test's tree without its patch, unless compared with stored figures
            new = EngineTree(label, ek, edef.name, [], config=config)
            tree = self.fixed.setdefault((key, ek), set_config(new, cfg, list(lc.engine_args), dict(lc.env)))
            tree.tests.append(shown)
            tree.serving = tree.serving or lc.kind == "serving"
            self.full.add((key, ek))
        switched = not cfg.production
        if lc.kind == "serving":  # on a switch and compared with stored figures: its run with the series is planned
            if switched and shown in self.stored:
                return PlanTest(name, spec_digest(lc), ek, edef.name, config=config, switched=True, with_only=True)
            return None
        self.full.add((pid, ek))
        return PlanTest(name, spec_digest(lc), ek, edef.name, config=config, switched=switched)


def ledger_inputs(
    run: VerifyRun, only: list[str], stored: set[str] | None = None
) -> tuple[PlanInputs, dict[str, list[str]]]:
    """The plan inputs of ``run.target``'s selected engine tests (``run.tags``; ``only`` these
    patches) from the ledger alone (no watched file: ``Watch()``), and each planned patch's files."""
    ledger = load_ledger(Path(run.ledger_path))
    home = Path(run.ledger_dir).resolve() if run.ledger_dir else ledger.root.resolve()
    target, tags = str(run.target), run.tags or []
    tgt = ledger.targets[target]
    env = dict(os.environ)
    env.update(PATCHSET_LEDGER_DIR=str(home), PATCHSET_HOME=str(PATCHSET_HOME), PATCHSET_CACHE=str(cache.cache_dir()))
    build = _Build(SwitchIndex.of(ledger.series(target), ledger.engines), stored or set())
    planned: list[PlanPatch] = []
    files: dict[str, list[str]] = {}
    for p in ledger.series(target):
        if only and p.id not in only:
            continue
        tests: list[PlanTest] = []
        for i, t in enumerate(p.tests):
            if t.kind not in ("longctx", "serving") or not selected(t, tags):
                continue
            name = test_name(t, i)
            where = Location(ledger.path, p.line or None, f"patch {p.id}: tests {name}")
            edef = resolve_engine(ledger, run.engine or t.engine or "vllm-cpu", tgt)
            pt = build.add(p.id, name, resolve_spec(t, home, where, env, None, edef), edef)
            tests += [pt] if pt is not None else []
        if tests:
            _, data = body_state(ledger, p)  # a fresh clone: not imported yet
            body = body_digest(data) if data is not None else ABSENT
            planned.append(PlanPatch(p.id, body, tests, Watch()))
            files[p.id] = list(p.files)
    return PlanInputs(planned, list(build.fixed.values()), len(build.full)), files


def plan_ledger(
    run: VerifyRun, history: TargetHistory | None, opts: PlanOptions, stored: set[str] | None = None
) -> VerifyPlan:
    """The plan of ``run.target``'s selected engine tests (``run.tags``; ``opts.only`` these
    patches), named ``run.base_label``. ``stored``: serving tests compared with stored figures (no
    tree without their patch)."""
    inputs, _ = ledger_inputs(run, opts.only, stored)
    plan = make_plan(str(run.target), run.base_label or _recorded_base(run), inputs, history, opts, lambda ids: "")
    return plan_by_config(plan, history)


def _recorded_base(run: VerifyRun) -> str:
    """What the plan is on when no base is named: the target's base as the ledger records it."""
    tgt = load_ledger(Path(run.ledger_path)).targets[str(run.target)]
    version = f" {tgt.base_version} at" if tgt.base_version else ""
    return f"the ledger's base{version} {tgt.base[:12]}" if tgt.base else "an unknown base (the ledger names none)"
