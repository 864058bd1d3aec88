"""A month of nights planned from the ledger: what the planner would start, night by night, over a
given sequence of upstream file changes, with the proof history it would have had.

Why this module exists: the planner's cost on the production ledger cannot be measured on the
cluster a month at a time. Here each night is a set of upstream files that changed since the night
before, with the top-level names of each that changed (``path::NAME``; ``bench/verify.py
--simulate`` draws them from real vLLM releases); each planned patch watches the files its ledger
entry names and what the planner's scan of them found (``watches``: names or whole files). The planner runs on each night
with the history so far; every run it plans is taken to pass and to confirm the patch's last class
(a night where a watched file changed is one that needs a proof, and gets it), so the history moves
on as the gate's would on a quiet month. Serving tests are compared with the figures of the last
green night from night 1 on (night 0 measures their trees without the patch too).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from patchset.verify.outcomes import PROVEN
from patchset.verify.plan.configs import plan_by_config
from patchset.verify.plan.decide import CARRY, PlanInputs, PlanOptions, VerifyPlan, make_plan
from patchset.verify.plan.ledger import ledger_inputs
from patchset.verify.plan.names import SEP
from patchset.verify.plan.watch import Watch
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof
from patchset.verify.run import VerifyRun
from patchset.verify.testrun import FAIL, PASS


@dataclass
class SimNight:
    """One simulated night: what changed upstream, what the plan starts, what a full run would."""

    night: int
    changed_files: int
    planned_starts: int
    full_starts: int
    why: dict[str, list[str]] = field(default_factory=dict)  # tree started -> why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Month:
    """The state a simulated month carries from night to night."""

    run: VerifyRun
    opts: PlanOptions
    by_config: bool = True  # False: every configuration's with-series run starts every night (as before)
    group: bool = True  # False: switched configurations never share a start
    history: TargetHistory = field(default_factory=TargetHistory)
    versions: dict[str, int] = field(default_factory=dict)  # key (a file, a file's name) -> its changes so far
    watches: dict[str, dict[str, str]] = field(default_factory=dict)  # patched path -> {key: why} of its imports

    def watch(self, files: list[str]) -> Watch:
        """What a patch writing ``files`` watches: them and, when known, what they use of their imports."""
        w = Watch()
        for f in files:
            for k, why in [(f, "patched"), *self.watches.get(f, {}).items()]:
                d = f"{self.versions.get(k, 0):016x}"
                w.why.setdefault(k, why)
                w.digests[k] = (d, d, d)
        return w


def _why(plan: VerifyPlan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in plan.trees:
        if t.cached or t.carried or t.when != "tonight":
            continue
        label = f"{t.label} [{t.config}]" if t.config else t.label
        if t.label.startswith("with "):
            out[label] = t.why or ["the production configuration: every night"]
            continue
        pids = [x.split("/", 1)[0] for x in t.tests]
        decisions = [d for pid in dict.fromkeys(pids) if (d := plan.decision(pid)) is not None]
        reasons = [r for d in decisions for r in d.reasons]
        out[label] = reasons or ["a serving test's tree without its patch"]
    return out


def _record(month: Month, plan: VerifyPlan, inputs: PlanInputs) -> None:
    """Tonight's planned runs, all passing, into the history."""
    h, night = month.history, plan.night
    h.nights = night
    for p in inputs.patches:
        d = plan.decision(p.id)
        if d is None:
            continue
        old = h.proofs.get(p.id)
        klass = old.klass if old else PROVEN
        h.last[p.id] = LastVerdict(klass, night, plan.base, plan.base)
        ran_with = {
            t.name
            for t in p.tests
            if t.switched and (tree := plan.with_tree(t.engine)) is not None and not tree.carried
        } | {t.name for t in p.tests if t.switched and plan.config_group(t.engine) is not None}
        with_made = {t.name: WithoutProof(t.spec, PASS) for t in p.tests if t.name in ran_with}
        if d.action == CARRY:
            if old is not None:
                old.with_tests.update(with_made)
            continue
        tests = {t.name: WithoutProof(t.spec, FAIL if klass == PROVEN else PASS) for t in p.tests if not t.with_only}
        watch = {f: list(v) for f, v in p.watch.digests.items()}
        h.proofs[p.id] = PatchProof(
            night, f"night {night}", plan.base, klass, p.body, tests, watch, dict(p.watch.why), with_made
        )


def spread(
    releases: list[set[str]], nights: int, seed: int = 0, names: list[dict[str, set[str]]] | None = None
) -> list[set[str]]:
    """Night 0 (the base, nothing changed) and ``nights - 1`` nights after it: release ``i``'s changed
    files (``releases[i]``: from release ``i`` to ``i + 1``) each fall on one night of its cycle, drawn
    uniformly (``random.Random(seed)``: repeatable); the nights are split evenly among the cycles.
    ``names[i][file]``: the keys of that file's names that changed in release ``i`` (``path::NAME``),
    landing on the night the file does."""
    rng = random.Random(seed)
    after = max(nights - 1, 0)
    out: list[set[str]] = [set() for _ in range(after + 1)]
    if not releases or not after:
        return out[:nights]
    for i, files in enumerate(releases):
        first, last = 1 + i * after // len(releases), (i + 1) * after // len(releases)
        for f in sorted(files):
            if last >= first:
                night = out[rng.randint(first, last)]
                night.add(f)
                night.update(names[i].get(f, ()) if names else ())
    return out


def simulate(month: Month, nights: Iterable[set[str]]) -> list[SimNight]:
    """Plan each night of ``nights`` (the upstream files changed since the night before; the first
    is night 0, with no proof) and record what it would prove."""
    out: list[SimNight] = []
    stored: set[str] = set()
    for i, changed in enumerate(nights):
        for f in changed:
            month.versions[f] = month.versions.get(f, 0) + 1
        inputs, files = ledger_inputs(month.run, month.opts.only, stored)
        for p in inputs.patches:
            p.watch = month.watch(files.get(p.id, []))
        plan = make_plan(str(month.run.target), f"night {i}", inputs, month.history, month.opts, lambda ids: "")
        if month.by_config:
            plan = plan_by_config(plan, month.history, group=month.group)
        files_changed = sum(1 for k in changed if SEP not in k)
        out.append(SimNight(i, files_changed, plan.starts, plan.full_starts, _why(plan)))
        _record(month, plan, inputs)
        stored = {x for t in plan.trees for x in t.tests if t.serving}  # the last green night's figures
    return out
