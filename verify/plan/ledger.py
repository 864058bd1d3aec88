"""The verify plan of a ledger alone, without a tree: what a run would do, from the ledger and the proofs.

Why this module exists: ``gate --plan`` must answer on a fresh clone, where no body is imported yet,
no tree is at hand and no proof was ever made, and when tonight's upstream is not named. Then no
watched file can be compared: a patch with no earlier proof is needed ("no earlier proof"), one with
a proof is needed for the reason the caller gives, and the engine starts are counted from the
ledger's engine definitions (one per tree and engine configuration; nothing is known cached).
"""

from __future__ import annotations

import os
from pathlib import Path

from patchset.commands.inspection import body_state
from patchset.errors import Location
from patchset.ledger.store import load_ledger
from patchset.upstream import cache
from patchset.verify.engines.definition import resolve_engine
from patchset.verify.longctx.runs import resolve_spec
from patchset.verify.plan.carry import engine_config, engine_digest, spec_digest
from patchset.verify.plan.decide import EngineTree, PlanInputs, PlanOptions, PlanPatch, PlanTest, VerifyPlan, make_plan
from patchset.verify.plan.watch import ABSENT, Watch, body_digest
from patchset.verify.proofs import TargetHistory
from patchset.verify.run import VerifyRun
from patchset.verify.runner import PATCHSET_HOME
from patchset.verify.selection import selected, test_name


def plan_ledger(
    run: VerifyRun, history: TargetHistory | None, opts: PlanOptions, stored: set[str] | None = None
) -> VerifyPlan:
    """The plan of ``run.target``'s selected engine tests (``run.tags``; ``opts.only`` these
    patches), named ``run.base_label``. ``stored``: serving tests compared with stored figures (no
    tree without their patch)."""
    ledger = load_ledger(Path(run.ledger_path))
    home = Path(run.ledger_dir).resolve() if run.ledger_dir else ledger.root.resolve()
    target, tags, only, engine = str(run.target), run.tags or [], opts.only, run.engine
    tgt = ledger.targets[target]
    env = dict(os.environ)
    env.update(PATCHSET_LEDGER_DIR=str(home), PATCHSET_HOME=str(PATCHSET_HOME), PATCHSET_CACHE=str(cache.cache_dir()))
    fixed: dict[tuple[str, str], EngineTree] = {}
    full: set[tuple[str, str]] = set()
    planned: list[PlanPatch] = []
    for p in ledger.series(target):
        if only and p.id not in only:
            continue
        tests: list[PlanTest] = []
        for i, t in enumerate(p.tests):
            if t.kind not in ("longctx", "serving") or not selected(t, tags):
                continue
            name = test_name(t, i)
            where = Location(ledger.path, p.line or None, f"patch {p.id}: tests {name}")
            edef = resolve_engine(ledger, engine or t.engine or "vllm-cpu", tgt)
            lc = resolve_spec(t, home, where, env, None, edef)
            ek, config = engine_digest(lc), engine_config(lc)
            w = fixed.setdefault(
                ("with the series", ek), EngineTree("with the series", ek, edef.name, [], config=config)
            )
            w.tests.append(f"{p.id}/{name}")
            full.add(("", ek))
            if lc.kind == "serving":
                if f"{p.id}/{name}" not in (stored or set()):
                    s = fixed.setdefault((p.id, ek), EngineTree(f"without {p.id}", ek, edef.name, [], config=config))
                    s.tests.append(f"{p.id}/{name}")
                    full.add((p.id, ek))
                continue
            full.add((p.id, ek))
            tests.append(PlanTest(name, spec_digest(lc), ek, edef.name, config=config))
        if tests:
            _, data = body_state(ledger, p)  # a fresh clone: not imported yet
            body = body_digest(data) if data is not None else ABSENT
            planned.append(PlanPatch(p.id, body, tests, Watch()))
    inputs = PlanInputs(planned, list(fixed.values()), len(full))
    return make_plan(target, run.base_label or "", inputs, history, opts, lambda ids: "")
