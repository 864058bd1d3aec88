"""The verify plan: before any engine starts, which patches' without-runs are needed tonight and why.

Why this module exists: a full per-patch verify is one engine start for the tree with the series and
one for each tree without a patch; on the production cluster a start may take an hour, and upstream
moves every night, so no tree is ever the same twice (the result cache does not help). What changed
is known, though: the files each patch watches (``verify.plan.watch``), its body, its tests, and its last
verdict (``verify.proofs``). For each patch with long-context tests the plan says

* **run** — its without-run is needed tonight, with every reason: no earlier proof; a watched file
  changed upstream (or the series around it changed) since the run that proved it; its body or a
  test changed; it was in error last time; it is due by rotation (``--full-every N`` nights); it was
  asked for (``--only``, ``--all``);
* **after the series** — it was broken last time: its without-run runs only if its tests pass with
  the series tonight (a test that fails with the series is broken whatever the tree without it does);
* **carry** — nothing it rests on moved: its last verdict stands, marked *carried from run X
  (upstream A..B did not touch it)*; the tree with the series still runs every test tonight.

Patches expected to be not needed (proven so last time) that need a without-run on the same engine
are tried together when their watched files are disjoint (``verify.plan.grouping``). Command tests and
serving tests are not planned: a command may read any file of the tree and costs no engine start; a
serving comparison is measured the same night on both sides. The plan counts the engine starts it
will cost (trees whose results are all in the result cache start nothing) and what a full run costs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from patchset.text import json_fields
from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED
from patchset.verify.plan.grouping import choose_groups
from patchset.verify.plan.watch import UNSAFE, Watch
from patchset.verify.proofs import PatchProof, TargetHistory, run_name
from patchset.verify.run import DEFAULT_FULL_EVERY
from patchset.verify.testrun import PASS

RUN, AFTER_WITH, CARRY = "run", "after-with", "carry"
TONIGHT = "tonight"
_SHOWN = 4  # files named in one reason


@dataclass
class PlanTest:
    """One long-context test of a patch, as the plan sees it."""

    name: str
    spec: str  # digest of what it measures and where (checks, model, engine)
    engine: str  # engine key (short digest): tests with the same key share a tree's engine
    engine_name: str
    cached_without: bool = False  # the tree without its patch has this result in the result cache
    config: str = ""  # the engine's arguments and environment, when the test sets any
    switched: bool = False  # on a configuration with a switch: its with-run is carried when nothing moved
    with_only: bool = False  # a serving test on a switched configuration: only its with-run is planned


@dataclass
class PlanPatch:
    """A patch with long-context tests, as the plan sees it."""

    id: str
    body: str  # digest of its body
    tests: list[PlanTest]
    watch: Watch
    minus_error: str = ""  # why the series without it does not apply ("" when it does)


@dataclass
class PlanOptions:
    all_: bool = False
    only: list[str] = field(default_factory=list)
    full_every: int = DEFAULT_FULL_EVERY
    history: str = ""  # where the proofs are kept ("" when none are: every patch is needed)
    unknown: str = ""  # why what moved cannot be told tonight (no tree): every proven patch is needed


@dataclass
class EngineTree:
    """A tree the run will start an engine for (or not, when every result is cached)."""

    label: str
    engine: str  # engine key (short digest)
    engine_name: str
    tests: list[str]
    cached: bool = False
    when: str = TONIGHT  # or the condition it starts on ("if lc-04 passes with the series")
    config: str = ""  # what sets this engine apart from others of the same name (arguments, environment)
    production: bool = True  # the production configuration (a with-series tree on it starts every night)
    switches: list[str] = field(default_factory=list)  # the env variables and flags its configuration sets
    independent: bool = False  # every switch it sets is declared independent (may share a start)
    carried: str = ""  # its with-series verdicts are carried tonight: from where (no start)
    why: list[str] = field(default_factory=list)  # why a switched with-series tree starts tonight
    args: list[str] = field(default_factory=list)  # its configuration's engine arguments
    env: dict[str, str] = field(default_factory=dict)  # and environment
    serving: bool = False  # holds a serving test: its figures are compared on this exact configuration

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "engine": self.engine_name,
            "config": self.config or None,
            **json_fields(self, "production tests cached"),
            "carried": self.carried or None,
            **json_fields(self, "why when"),
        }


@dataclass
class ConfigGroup:
    """Switched configurations of one engine whose with-series runs share one start tonight
    (``verify.plan.configs``): the production configuration plus every one of their switches."""

    engine_name: str
    members: list[str]  # engine keys of the trees merged
    args: list[str]
    env: dict[str, str]
    label: str

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine_name, "label": self.label, "args": self.args, "env": self.env}


@dataclass
class Decision:
    """One patch's plan: run its without-run tonight, after the series, or carry its verdict."""

    patch: str
    action: str
    reasons: list[str] = field(default_factory=list)  # why it runs (run, after-with)
    carried_from: str = ""  # the run its carried verdict comes from
    carry_note: str = ""  # why carrying it is safe
    tests: list[str] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # engine key -> index into plan.groups
    proof: PatchProof | None = None

    def detail(self) -> str:
        """Why, in one line: the run a carried verdict comes from, or the reasons it runs."""
        if self.action == CARRY:
            return f"from {self.carried_from} ({self.carry_note})"
        head = "runs only if its tests pass with the series tonight: " if self.action == AFTER_WITH else ""
        return head + "; ".join(self.reasons)

    def text(self) -> str:
        word = {RUN: "needed: ", AFTER_WITH: "after the series: ", CARRY: "carried "}[self.action]
        return word + self.detail()

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "patch action reasons"),
            "carried_from": self.carried_from or None,
            "carry_note": self.carry_note or None,
            "tests": self.tests,
            "groups": sorted(set(self.groups.values())),
        }


@dataclass
class WithoutPool:
    """Patches whose without-runs are tried on one tree without all of them."""

    engine: str
    engine_name: str
    patches: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine_name, "patches": self.patches}


@dataclass
class PlanInputs:
    """What the plan is made from: the planned patches, the trees that start whatever the plan says
    (the series, serving tests' trees) and the engine starts of a full run."""

    patches: list[PlanPatch]
    fixed: list[EngineTree]
    full_starts: int


@dataclass
class VerifyPlan:
    """What a verify run will do with each patch's without-run, and the engine starts it costs."""

    target: str
    base: str
    night: int  # the number tonight's run gets in the history
    history: str
    decisions: list[Decision] = field(default_factory=list)
    groups: list[WithoutPool] = field(default_factory=list)
    trees: list[EngineTree] = field(default_factory=list)
    full_starts: int = 0  # what a full run (every tree, nothing cached) costs
    notes: list[str] = field(default_factory=list)
    config_groups: list[ConfigGroup] = field(default_factory=list)
    blockers: dict[str, str] = field(default_factory=dict)  # patch -> what keeps its run from running
    cost: dict[str, Any] = field(default_factory=dict)  # tonight's estimated cluster time (``estimate``)

    @property
    def starts(self) -> int:
        """Engine starts tonight, before any condition is known."""
        return sum(1 for t in self.trees if t.when == TONIGHT and not t.cached and not t.carried)

    @property
    def starts_at_most(self) -> int:
        """Engine starts if every condition comes true (each group split down to single patches)."""
        extra = sum(1 for t in self.trees if t.when != TONIGHT and not t.cached and not t.carried)
        return self.starts + extra + sum(max(0, 2 * len(g.patches) - 2) for g in self.groups)

    def estimate(self, history: TargetHistory | None) -> None:
        """Tonight's cost: planned and full starts, and the cluster time the planned ones take at
        each engine's median recorded start (``None`` when an engine has no recorded start)."""
        per: dict[str, int] = {}
        for t in self.trees:
            if t.when == TONIGHT and not t.cached and not t.carried:
                per[t.engine_name] = per.get(t.engine_name, 0) + 1
        each = {e: (history.start_seconds(e) if history else None) for e in per}
        known = all(v is not None for v in each.values())
        self.cost = {
            "planned_starts": self.starts,
            "full_starts": self.full_starts,
            "starts_per_engine": per,
            "seconds_per_start": each,
            "estimated_seconds": round(sum(n * (each[e] or 0.0) for e, n in per.items()), 1) if known else None,
        }

    def decision(self, patch: str) -> Decision | None:
        return next((d for d in self.decisions if d.patch == patch), None)

    def with_tree(self, engine: str) -> EngineTree | None:
        """The with-series tree of an engine key (None: it was merged into a group's)."""
        return next((t for t in self.trees if t.label == "with the series" and t.engine == engine), None)

    def config_group(self, engine: str) -> ConfigGroup | None:
        """The group a switched configuration's with-series run shares a start with tonight."""
        return next((g for g in self.config_groups if engine in g.members), None)

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "target base night"),
            "history": self.history or None,
            "engine_starts": self.starts,
            "engine_starts_at_most": self.starts_at_most,
            "full_run_engine_starts": self.full_starts,
            **json_fields(self, "decisions groups config_groups blockers cost trees notes"),
        }


def _files(paths: list[str], why: dict[str, str]) -> str:
    shown = [f"{p} ({why.get(p, 'watched')})" for p in paths[:_SHOWN]]
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(shown) + more


def _moved(p: PlanPatch, proof: PatchProof, base: str) -> list[str]:
    """Why what the patch watches is not what it was when it was proven (empty: nothing moved)."""
    old, new = proof.watch, p.watch.digests
    upstream = [f for f in new if f not in old or new[f][0] != old[f][0]]
    unsafe = [f for f in new if UNSAFE in new[f]]
    series = [f for f in new if f in old and f not in upstream and tuple(old[f][1:]) != tuple(new[f][1:])]
    gone = [f for f in old if f not in new]
    out = []
    since = f"since {proof.run_name()}"
    if unsafe:
        out.append(f"cannot read {_files(unsafe, p.watch.why)}")
    fresh = [f for f in upstream if f not in old]
    changed = [f for f in upstream if f in old]
    if changed:
        span = f" (upstream {proof.base}..{base})" if proof.base != base else ""
        out.append(f"upstream changed {_files(changed, p.watch.why)} {since}{span}")
    if fresh:
        out.append(f"it now watches {_files(fresh, p.watch.why)}")
    if series:
        out.append(f"the series around it changed {_files(series, p.watch.why)} {since}")
    if gone:
        out.append(f"it no longer watches {_files(gone, proof.why)}")
    return out


def rotation_slot(patch: str, every: int) -> int:
    """The night (mod ``every``) a patch comes up by rotation: a stable hash of its id, so about
    1/``every`` of the patches are re-proven each night and the same patch every ``every`` nights."""
    return int.from_bytes(hashlib.sha256(patch.encode()).digest()[:8], "big") % every


def due_by_rotation(patch: str, night: int, age: int, every: int) -> bool:
    """Its turn tonight and not proven since its last turn (``every`` nights ago), or two turns old
    (a proof made for another reason pushes it to its next turn, so a proof is under 2 x ``every``)."""
    if every <= 0:
        return False
    return (age >= every and night % every == rotation_slot(patch, every)) or age >= 2 * every


def decide(p: PlanPatch, history: TargetHistory | None, opts: PlanOptions, night: int, base: str) -> Decision:
    """One patch's decision (see the module docstring)."""
    d = Decision(p.id, RUN, tests=[t.name for t in p.tests])
    proof = history.proofs.get(p.id) if history else None
    last = history.last.get(p.id) if history else None
    d.proof = proof
    if opts.all_:
        d.reasons.append("asked for (--all)")
    if p.id in opts.only:
        d.reasons.append("asked for (--only)")
    if p.minus_error:
        d.reasons.append(f"{p.minus_error} (an error, no engine start)")
    if not opts.history:
        d.reasons.append("no proof history is kept")
        return d
    if proof is None:
        d.reasons.append("no earlier proof")
        if last is not None and last.klass in (BROKEN, ERROR):
            d.reasons.append(f"it was {last.klass} in {run_name(last.night, last.at, last.base)}")
        return d
    name = proof.run_name()
    if opts.unknown:
        d.reasons.append(f"{opts.unknown} (proven in {name})")
        return d
    if p.body != proof.body:
        d.reasons.append(f"its body changed since {name}")
    for t in p.tests:
        old = (proof.with_tests if t.with_only else proof.tests).get(t.name)
        if old is None and t.with_only:
            continue  # only its run with the series lacks a proof: its configuration starts (configs.gate_configs)
        if old is None:
            d.reasons.append(f"its test {t.name} has no earlier proof")
        elif old.spec != t.spec:
            d.reasons.append(f"its test {t.name} changed since {name} (checks, model or engine)")
    d.reasons += _moved(p, proof, base)
    age = night - proof.night
    if due_by_rotation(p.id, night, age, opts.full_every):
        d.reasons.append(f"due by rotation: its turn of every {opts.full_every} runs, proven {age} runs ago")
    broken = last is not None and last.klass == BROKEN
    if last is not None and last.klass == ERROR:
        d.reasons.append(f"it was in error in {run_name(last.night, last.at, last.base)}")
    d.carried_from = name
    span = f"upstream {proof.base}..{base} did not touch it" if proof.base != base else "nothing it watches changed"
    d.carry_note = span
    if broken and not opts.all_ and p.id not in opts.only and not p.minus_error:
        d.action = AFTER_WITH
        d.reasons.insert(0, f"it was broken in {run_name(last.night, last.at, last.base)}")  # type: ignore[union-attr]
        return d
    if not d.reasons:
        d.action = CARRY
    return d


def _without_side(p: PlanPatch) -> list[PlanTest]:
    """The tests of a patch that have a without-run to plan (a serving test on a switch has none)."""
    return [t for t in p.tests if not t.with_only]


def make_plan(
    target: str,
    base: str,
    inputs: PlanInputs,
    history: TargetHistory | None,
    opts: PlanOptions,
    applies: Callable[[list[str]], str],
) -> VerifyPlan:
    """The plan of one verify run. ``applies(ids)``: why the series without those patches does not
    apply ("" when it does), for group tries."""
    patches = inputs.patches
    night = (history.nights if history else 0) + 1
    plan = VerifyPlan(target, base, night, opts.history, full_starts=inputs.full_starts, trees=list(inputs.fixed))
    by_id = {p.id: p for p in patches}
    for p in patches:
        plan.decisions.append(decide(p, history, opts, night, base))
    # group tries: per engine, patches expected to be not needed with disjoint watched files
    for engine in dict.fromkeys(t.engine for p in patches for t in _without_side(p)):
        wanted = []
        for d in plan.decisions:
            p = by_id[d.patch]
            on = [t for t in _without_side(p) if t.engine == engine]
            proof = d.proof
            expected = (
                proof is not None
                and proof.klass == NOT_NEEDED
                and all(proof.tests.get(t.name) is not None and proof.tests[t.name].outcome == PASS for t in on)
            )
            if d.action == RUN and on and expected and not p.minus_error and not all(t.cached_without for t in on):
                wanted.append(p)
        groups, notes = choose_groups([(p.id, p.watch) for p in wanted], applies)
        plan.notes += notes
        name = next(t.engine_name for p in patches for t in _without_side(p) if t.engine == engine)
        for members in groups:
            plan.groups.append(WithoutPool(engine, name, members))
            for pid in members:
                next(d for d in plan.decisions if d.patch == pid).groups[engine] = len(plan.groups) - 1
    for g in plan.groups:
        tests = [f"{pid}/{t.name}" for pid in g.patches for t in _without_side(by_id[pid]) if t.engine == g.engine]
        config = next((t.config for pid in g.patches for t in _without_side(by_id[pid]) if t.engine == g.engine), "")
        plan.trees.append(
            EngineTree(
                f"without {', '.join(g.patches)} (tried together)", g.engine, g.engine_name, tests, config=config
            )
        )
    for d in plan.decisions:
        p = by_id[d.patch]
        if d.action == CARRY or p.minus_error:
            continue
        for engine in dict.fromkeys(t.engine for t in _without_side(p)):
            if engine in d.groups:
                continue
            on = [t for t in _without_side(p) if t.engine == engine]
            when = TONIGHT if d.action == RUN else f"if {p.id} passes with the series"
            tests = [f"{p.id}/{t.name}" for t in on]
            cached = all(t.cached_without for t in on)
            shared = next((x for x in plan.trees if x.label == f"without {p.id}" and x.engine == engine), None)
            if shared is not None:  # a serving test of the patch starts this tree anyway
                shared.tests += tests
                shared.cached = shared.cached and cached
                continue
            plan.trees.append(
                EngineTree(f"without {p.id}", engine, on[0].engine_name, tests, cached, when, on[0].config)
            )
    plan.trees.sort(key=lambda t: not t.label.startswith("with "))  # the series first, each tree without after
    serving = sorted({x.split("/", 1)[0] for t in inputs.fixed if t.label != "with the series" for x in t.tests})
    if serving:
        plan.notes.append(f"serving tests are not planned (both sides are measured tonight): {', '.join(serving)}")
    return plan


def plan_from_json(doc: dict[str, Any]) -> VerifyPlan:
    """A plan again from its ``to_json`` (the gate's report keeps it as JSON), for printing it."""
    plan = VerifyPlan(
        str(doc.get("target", "")),
        str(doc.get("base", "")),
        int(doc.get("night", 0)),
        str(doc.get("history") or ""),
        full_starts=int(doc.get("full_run_engine_starts", 0)),
        notes=[str(n) for n in doc.get("notes", [])],
    )
    for d in doc.get("decisions", []):
        plan.decisions.append(
            Decision(
                str(d["patch"]),
                str(d["action"]),
                [str(x) for x in d.get("reasons", [])],
                str(d.get("carried_from") or ""),
                str(d.get("carry_note") or ""),
                [str(x) for x in d.get("tests", [])],
            )
        )
    for g in doc.get("groups", []):
        plan.groups.append(WithoutPool("", str(g.get("engine", "")), [str(x) for x in g.get("patches", [])]))
    for t in doc.get("trees", []):
        plan.trees.append(
            EngineTree(
                str(t["label"]),
                "",
                str(t.get("engine", "")),
                [str(x) for x in t.get("tests", [])],
                bool(t.get("cached")),
                str(t.get("when", TONIGHT)),
                str(t.get("config") or ""),
                bool(t.get("production", True)),
                carried=str(t.get("carried") or ""),
                why=[str(x) for x in t.get("why", [])],
            )
        )
    plan.cost = dict(doc.get("cost") or {})
    return plan
