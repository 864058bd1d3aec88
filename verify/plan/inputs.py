"""What the plan (``verify.plan``) sees of one verify run, gathered before any engine starts.

Why this module exists: the plan itself is pure (decisions from digests and a history); this
module reads them off the run: per patch with long-context tests, its body's digest, each test's
parameters and engine, whether the tree without it already has each result in the result cache,
its watched files (``verify.plan.watch``); the trees that start whatever the plan says (the series, per
engine; serving tests' trees without their patch); and what a full run would start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from patchset.ledger.model import Patch, TestSpec, WatchScope
from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.outcomes import TestOutcome
from patchset.verify.plan.carry import engine_config, engine_digest, spec_digest
from patchset.verify.plan.configs import Config, SwitchIndex, set_config
from patchset.verify.plan.decide import EngineTree, PlanInputs, PlanPatch, PlanTest
from patchset.verify.plan.rounds import SeriesTrees
from patchset.verify.plan.watch import added_lines, body_digest, watch_for
from patchset.verify.serving import ServingSamples

WITH_SERIES = "with the series"


@dataclass
class ChosenTest:
    """A selected test of a patch: its ledger spec, its outcome record, its engine spec (engine tests)."""

    patch: Patch
    spec: TestSpec
    outcome: TestOutcome
    lc: LongctxSpec | None


def plan_inputs(
    trees: SeriesTrees,
    chosen: list[ChosenTest],
    stored: dict[str, ServingSamples] | None,
    cached: Callable[[str, LongctxSpec], bool],
    switches: SwitchIndex | None = None,
    watch: WatchScope = WatchScope.NAMES,
) -> PlanInputs:
    """The planned patches, the trees that start anyway and the engine starts of a full run.
    ``switches``: the ledger's switches (which configuration is production, which may share a start);
    ``watch``: the target's scope of an imported module (its names used, or the whole file)."""
    index = switches or SwitchIndex()
    added = added_lines(trees.items, trees.mapper)
    bodies = {it.patch_id: it.body for it in trees.items}
    minus = trees.minus
    fixed: dict[tuple[str, str], EngineTree] = {}
    full_trees: set[tuple[str, str]] = set()
    planned: dict[str, list[PlanTest]] = {}

    def tree(label: str, ek: str, name: str, test: str, hit: bool, lc: LongctxSpec) -> Config:
        cfg = index.config(name, list(lc.engine_args), dict(lc.env))
        new = EngineTree(label, ek, name, [], True, config=engine_config(lc))
        t = fixed.setdefault((label, ek), set_config(new, cfg, list(lc.engine_args), dict(lc.env)))
        t.tests.append(test)
        t.cached = t.cached and hit
        t.serving = t.serving or lc.kind == "serving"
        return cfg

    for c in chosen:
        if c.lc is None:
            continue
        pid, lc = c.patch.id, c.lc
        m = minus[pid]
        ek, name = engine_digest(lc), c.outcome.engine or "(factory)"
        shown, config = f"{pid}/{c.outcome.name}", engine_config(lc)
        switched = not tree(WITH_SERIES, ek, name, shown, cached(trees.full_hash, lc), lc).production
        full_trees.add(("", ek))
        if lc.kind == "serving":
            if stored is None or shown not in stored:
                full_trees.add((pid, ek))
                if not m.error:
                    tree(f"without {pid}", ek, name, shown, cached(m.hash, lc), lc)
            if switched and stored is not None and shown in stored:  # its run with the series is planned
                test = PlanTest(c.outcome.name, spec_digest(lc), ek, name, config=config, switched=True, with_only=True)
                planned.setdefault(pid, []).append(test)
            continue
        full_trees.add((pid, ek))
        planned.setdefault(pid, []).append(
            PlanTest(c.outcome.name, spec_digest(lc), ek, name, cached(m.hash, lc), config, switched)
        )
    patches = [
        PlanPatch(
            pid,
            body_digest(bodies[pid]),
            pts,
            watch_for(trees.base, pid, trees.full, minus[pid].reduced, added, watch is WatchScope.NAMES),
            minus[pid].error,
        )
        for pid, pts in planned.items()
    ]
    return PlanInputs(patches, list(fixed.values()), len(full_trees))
