"""The runs of a planned verify: which without-runs run in the first round, which wait, which are carried.

Why this module exists: the plan (``verify.plan``) says per patch whether its without-run runs
tonight, runs only if its tests pass with the series, or is carried; and which patches are tried
together. This module turns that into runs for the runner (``verify.runner``) in at most two rounds:

1. every with-run, every command and serving test's without-run, each needed single without-run,
   and one run per test on each group's tree (the series without all of the group);
2. the without-runs that waited for the series (their tests passed with it), and the patches whose
   tests failed on a group's tree, each tried alone (``verify.plan.grouping.split``).

Carried without-runs are the recorded ones (``verify.plan.carry``), marked with the run they come from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import apply_series
from patchset.ledger.model import Patch, TestSpec
from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.outcomes import WITH, WITHOUT, EngineRun, PatchOutcome, TestOutcome, VerifyReport
from patchset.verify.plan.carry import carried_result, engine_digest
from patchset.verify.plan.decide import AFTER_WITH, CARRY, Decision, VerifyPlan
from patchset.verify.plan.grouping import split
from patchset.verify.proofs import TargetHistory, run_name
from patchset.verify.results_cache import tree_hash
from patchset.verify.runner import Run, describe_failure
from patchset.verify.serving import ServingSamples
from patchset.verify.testrun import ERROR, PASS, CommandResult


@dataclass
class Minus:
    """The series without some patches: its items, its dry run, why it does not apply, its tree hash."""

    items: list[SeriesItem]
    reduced: SeriesResult | None
    error: str
    hash: str


@dataclass
class SeriesTrees:
    """The dry runs of one verify on its pristine base: the whole series, the series without each
    patch (``minus``) and without each group tried (``groups``), each with the content hash of its
    tree (for the result cache; "" without a base fingerprint)."""

    base: Path
    items: list[SeriesItem]
    mapper: Callable[[str], str] | None
    base_fp: str
    full: SeriesResult
    full_hash: str = ""
    minus: dict[str, Minus] = field(default_factory=dict)
    groups: dict[tuple[str, ...], Minus] = field(default_factory=dict)

    def dry_run(self, items: list[SeriesItem]) -> SeriesResult:
        return apply_series(self.base, items, path_for=self.mapper, dry_run=True)

    def hash_of(self, result: SeriesResult | None) -> str:
        if not self.base_fp:
            return ""
        return tree_hash(self.base_fp, result.files, result.modes) if result else tree_hash(self.base_fp, {})

    def leave_out(self, patch_id: str) -> Minus:
        """The series without one patch (none left: nothing to apply)."""
        left = [it for it in self.items if it.patch_id != patch_id]
        reduced = self.dry_run(left) if left else None
        error = ""
        if reduced is not None and not reduced.ok:
            error = f"the series without {patch_id} does not apply: {describe_failure(reduced)}"
        self.minus[patch_id] = Minus(left, reduced, error, self.hash_of(reduced))
        return self.minus[patch_id]

    def applies(self, ids: list[str]) -> str:
        """Why the series without these patches does not apply ("" when it does); kept for the rounds."""
        left = [it for it in self.items if it.patch_id not in ids]
        res = self.dry_run(left)
        why = "" if res.ok else describe_failure(res)
        self.groups[tuple(ids)] = Minus(left, res, why, self.hash_of(res))
        return why


@dataclass
class _Try:
    """One group's try: its runs on the tree without all of the group, and what came of it."""

    index: int
    patches: list[str]
    runs: list[Run] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)


class Rounds:
    """Builds the runs of both rounds and puts each result where it belongs."""

    def __init__(
        self,
        plan: VerifyPlan,
        trees: SeriesTrees,
        key: Callable[[str, LongctxSpec], str],
        stored: dict[str, ServingSamples] | None,
    ) -> None:
        self.plan, self.items, self.minus, self.group_dry = plan, trees.items, trees.minus, trees.groups
        self.key, self.stored = key, stored
        self.first: list[Run] = []
        self.second: list[Run] = []
        self.waiting: list[tuple[Run, Decision]] = []
        self.tries: dict[int, _Try] = {}

    def _without(self, outcome: TestOutcome, spec: TestSpec, patch: Patch, lc: LongctxSpec | None) -> Run:
        m = self.minus[patch.id]
        r = Run(outcome, spec, patch, WITHOUT, m.items, longctx=lc, tree_hash=m.hash)
        r.cache_key = self.key(m.hash, lc) if lc else ""
        return r

    def add(
        self,
        patch: Patch,
        spec: TestSpec,
        outcome: TestOutcome,
        lc: LongctxSpec | None,
        full_hash: str,
        report: VerifyReport,
    ) -> None:
        """The runs of one test: its with-run, and its without-run as the plan says."""
        self._with(outcome, spec, patch, lc, full_hash)
        name = f"{patch.id}/{outcome.name}"
        if lc and lc.kind == "serving" and self.stored is not None:
            if name in self.stored:
                return  # compared with the stored figures: no tree without the patch
            report.notes.append(f"the stored baseline has no figures for {name}: compared with the tree without it")
        m = self.minus[patch.id]
        if m.error:
            outcome.without_run = CommandResult(ERROR, None, 0.0, m.error)
            return
        d = self.plan.decision(patch.id) if lc is not None and lc.kind == "longctx" else None
        if d is None or lc is None:
            self.first.append(self._without(outcome, spec, patch, lc))
            return
        if d.action == CARRY:
            self._carry(outcome, d, f"carried from {d.carried_from} ({d.carry_note})")
            return
        if d.action == AFTER_WITH:
            self.waiting.append((self._without(outcome, spec, patch, lc), d))
            return
        index = d.groups.get(engine_digest(lc))
        if index is None:
            self.first.append(self._without(outcome, spec, patch, lc))
            return
        g = self.plan.groups[index]
        t = self.tries.setdefault(index, _Try(index, list(g.patches)))
        dry = self.group_dry[tuple(g.patches)]
        r = Run(outcome, spec, patch, WITHOUT, dry.items, longctx=lc, tree_hash=dry.hash, left_out=list(g.patches))
        r.cache_key = self.key(dry.hash, lc)
        t.runs.append(r)
        self.first.append(r)

    def _with(self, outcome: TestOutcome, spec: TestSpec, patch: Patch, lc: LongctxSpec | None, full_hash: str) -> None:
        """The with-run: carried when its switched configuration is, on a group's configuration when
        it shares a start (``verify.plan.configs``), else on its own."""
        ek = engine_digest(lc) if lc else ""
        tree = self.plan.with_tree(ek) if lc else None
        d = self.plan.decision(patch.id)
        if tree is not None and tree.carried and d is not None and d.proof is not None:
            outcome.with_run = carried_result(d.proof.with_tests[outcome.name], d.carried_from)
            outcome.carried = tree.carried
            return
        group = self.plan.config_group(ek) if lc else None
        if lc is not None and group is not None:
            lc = replace(lc, engine_args=list(group.args), env=dict(group.env))
        w = Run(outcome, spec, patch, WITH, self.items, longctx=lc, tree_hash=full_hash)
        w.cache_key = self.key(full_hash, lc) if lc else ""
        self.first.append(w)

    def _carry(self, outcome: TestOutcome, d: Decision, text: str) -> None:
        assert d.proof is not None
        outcome.without_run = carried_result(d.proof.tests[outcome.name], d.carried_from)
        outcome.carried = text

    @staticmethod
    def _assign(runs: list[Run], skip: set[int]) -> None:
        for r in runs:
            if id(r) in skip:
                continue
            if r.variant == WITH:
                r.test.with_run = r.result
            else:
                r.test.without_run = r.result

    def after_first(self) -> list[Run]:
        """Results of the first round on their tests; the runs of the second round."""
        self._assign(self.first, {id(r) for t in self.tries.values() for r in t.runs})  # a group's: below
        for r, d in self.waiting:
            w = r.test.with_run
            if w is not None and w.outcome == PASS:
                self.second.append(r)
            else:
                why = "not run: the test does not pass with the series tonight, so the tree without it cannot change its class"
                self._carry(r.test, d, f"carried from {d.carried_from} ({why})")
        for t in self.tries.values():
            failed = list(dict.fromkeys(r.patch.id for r in t.runs if r.result is None or r.result.outcome != PASS))
            t.passed = [pid for pid in t.patches if pid not in failed]
            for r in t.runs:
                if r.patch.id in t.passed:
                    r.test.without_run = r.result
                    r.test.without_also = [pid for pid in t.patches if pid != r.patch.id]
            for (pid,) in split(t.patches, failed):
                t.retried.append(pid)
                for r in t.runs:
                    if r.patch.id == pid:
                        self.second.append(self._without(r.test, r.spec, r.patch, r.longctx))
        return self.second

    def after_second(self) -> None:
        self._assign(self.second, set())

    def group_report(self, engines: list[EngineRun]) -> list[dict[str, Any]]:
        """Per group try: its patches, which passed together, which were tried alone, starts saved."""
        out = []
        for t in self.tries.values():
            starts = 1 + len(t.retried)
            out.append(
                {
                    "patches": t.patches,
                    "engine": self.plan.groups[t.index].engine_name,
                    "passed_together": t.passed,
                    "tried_alone": t.retried,
                    "engine_starts": starts,
                    "starts_saved": len(t.patches) - starts,
                }
            )
        return out

    def describe(self, po: PatchOutcome) -> None:
        """What the patch's long-context verdict rests on: proven tonight (and why), or carried."""
        d = self.plan.decision(po.patch_id)
        if d is None or not self.plan.history:  # no history: nothing is carried, nothing to say
            return
        planned = [t for t in po.tests if t.kind == "longctx"]
        carried = [t for t in planned if t.carried]
        if carried:
            po.carried_from = d.carried_from
            po.proof = carried[0].carried
            return
        together = next((t.without_also for t in planned if t.without_also), [])
        how = f" (passed with {', '.join(together)} missing too)" if together else ""
        po.proof = f"proven tonight{how}: " + "; ".join(d.reasons)

    def changed(self, outcomes: list[PatchOutcome], past: TargetHistory | None) -> list[dict[str, str]]:
        """Planned patches whose class is not their last one: what was found tonight."""
        out = []
        for po in outcomes:
            last = past.last.get(po.patch_id) if past is not None else None
            if last is None or self.plan.decision(po.patch_id) is None or last.klass == po.klass:
                continue
            out.append(
                {
                    "patch": po.patch_id,
                    "was": last.klass,
                    "now": po.klass,
                    "since": run_name(last.night, last.at, last.base),
                }
            )
        return out
