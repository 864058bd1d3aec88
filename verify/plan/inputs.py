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
from pathlib import Path

from patchset.engine.results import SeriesItem, SeriesResult
from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.plan.carry import engine_config, engine_digest, spec_digest
from patchset.verify.plan.decide import EngineTree, PlanPatch, PlanTest
from patchset.verify.plan.rounds import Minus
from patchset.verify.plan.watch import added_lines, body_digest, watch_for
from patchset.verify.serving import ServingSamples

WITH_SERIES = "with the series"


@dataclass
class EngineTest:
    """A selected engine test of a patch: its name, the engine it runs on, its resolved spec."""

    patch: str
    name: str
    engine_name: str
    spec: LongctxSpec


def plan_inputs(
    base: Path,
    items: list[SeriesItem],
    mapper: Callable[[str], str] | None,
    full: SeriesResult,
    full_hash: str,
    tests: list[EngineTest],
    minus: dict[str, Minus],
    stored: dict[str, ServingSamples] | None,
    cached: Callable[[str, LongctxSpec], bool],
) -> tuple[list[PlanPatch], list[EngineTree], int]:
    """``(planned patches, trees that start anyway, engine starts of a full run)``."""
    added = added_lines(items, mapper)
    bodies = {it.patch_id: it.body for it in items}
    fixed: dict[tuple[str, str], EngineTree] = {}
    full_trees: set[tuple[str, str]] = set()
    planned: dict[str, list[PlanTest]] = {}

    def tree(label: str, ek: str, name: str, test: str, hit: bool, config: str) -> None:
        t = fixed.setdefault((label, ek), EngineTree(label, ek, name, [], True, config=config))
        t.tests.append(test)
        t.cached = t.cached and hit

    for et in tests:
        m, lc = minus[et.patch], et.spec
        ek, name = engine_digest(lc), et.engine_name or "(factory)"
        shown, config = f"{et.patch}/{et.name}", engine_config(lc)
        tree(WITH_SERIES, ek, name, shown, cached(full_hash, lc), config)
        full_trees.add(("", ek))
        if lc.kind == "serving":
            if stored is None or shown not in stored:
                full_trees.add((et.patch, ek))
                if not m.error:
                    tree(f"without {et.patch}", ek, name, shown, cached(m.hash, lc), config)
            continue
        full_trees.add((et.patch, ek))
        planned.setdefault(et.patch, []).append(
            PlanTest(et.name, spec_digest(lc), ek, name, cached(m.hash, lc), config)
        )
    patches = [
        PlanPatch(
            pid, body_digest(bodies[pid]), pts, watch_for(base, pid, full, minus[pid].reduced, added), minus[pid].error
        )
        for pid, pts in planned.items()
    ]
    return patches, list(fixed.values()), len(full_trees)
