"""``patchset verify``: prove each patch with its own tests, with the series and without the patch.

Every test a patch declares in the ledger (``[[patch.tests]]``: command, cwd inside the build tree,
env, tags, timeout) runs twice: on the tree with the whole series, and on the tree with the series
minus that patch. The two outcomes classify the test:

============  =====================  ==================================================
class         with / without         meaning
============  =====================  ==================================================
proven        pass / fail            the test shows the patch is needed and works
not-needed    pass / pass            propose dropping the patch (upstream already? dead?)
broken        fail / (any)           the series with this patch fails the test
error         error on either side   could not run: timeout, missing tool, the series
                                     minus the patch does not apply (says which patch)
============  =====================  ==================================================

A patch's class is its worst test's (broken > error > proven > not-needed: one proving test is
enough to keep a patch). Trees are hard-linked overlays of one pristine base (``verify.overlay``):
the release from the package index (``--from-index``, default: the target's ``base`` release,
unpacked once into the cache) or a private copy of ``--tree DIR``. Runs go in parallel
(``jobs``), each in its own overlay, with ``OMP_NUM_THREADS`` shared out between the jobs unless
the environment sets it.

Commands run with ``/bin/sh -c`` in ``<tree>/<cwd>`` with the caller's environment plus:
``PATCHSET_TREE`` (the build tree of this run), ``PATCHSET_VARIANT`` (``with``/``without``),
``PATCHSET_PATCH`` (the patch id), ``PATCHSET_LEDGER_DIR`` (the ledger's directory, for test
files kept beside it), ``PATCHSET_PYTHON`` (the interpreter running patchset), ``PATCHSET_HOME``
(patchset's own source directory) and ``PATCHSET_CACHE``; ``$NAME`` in a test's ``env`` values
expands to these and to the caller's environment.

Long-context tests (``kind = "longctx"``: ``checks``, ``model``, ``mode``, ``baseline``,
``engine_args``) run no command: an engine is started from each tree and the named checks run against
it, one engine per tree and engine configuration, shared by every test that needs it
(``patchset.verify.longctx.runs``). They are classed exactly like command tests.

With a proof history (``history``; the CLI keeps one beside the ledger, the gate beside its state),
the without-runs of long-context tests follow a plan made before any engine starts
(``verify.plan``): a patch whose watched files, body and tests did not move since the run that
proved it carries that verdict (marked so, with the run it comes from); the rest run tonight, those
expected to be not needed tried together where it pays (``verify.plan.grouping``), those broken last time
only if their tests pass with the series. ``plan_only`` returns the plan without running anything.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from patchset.commands.apply.target import series_items
from patchset.commands.inspection import body_state
from patchset.engine.detect import detect_state
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import apply_series
from patchset.errors import ApplyFailed, EnvironmentFailure, InputError, Location
from patchset.ledger.model import Ledger, Patch, Target
from patchset.ledger.store import load_ledger
from patchset.text import split_list
from patchset.upstream import cache
from patchset.verify.base_tree import engine_log_dir, index_base, precompile, spec_for, sweep_stale
from patchset.verify.engines.definition import Preset, command_files_digest, resolve_engine
from patchset.verify.engines.vllm_cpu import engine_missing_reason
from patchset.verify.junit import write_junit
from patchset.verify.longctx.runs import LongctxSpec, resolve_spec
from patchset.verify.outcomes import NOT_NEEDED, PatchOutcome, TestOutcome, VerifyReport, classify, patch_class
from patchset.verify.overlay import private_copy, remove_tree
from patchset.verify.plan.carry import Tonight, record
from patchset.verify.plan.configs import SwitchIndex, plan_by_config
from patchset.verify.plan.decide import PlanOptions, PlanPatch, VerifyPlan, make_plan
from patchset.verify.plan.inputs import ChosenTest, plan_inputs
from patchset.verify.plan.ledger import plan_ledger
from patchset.verify.plan.rounds import Rounds, SeriesTrees
from patchset.verify.proofs import TargetHistory, load_history, save_history
from patchset.verify.results_cache import ResultCache, base_fingerprint, result_key, tree_hash
from patchset.verify.run import VerifyRun
from patchset.verify.runner import PATCHSET_HOME, Verifier, Workspace, describe_failure
from patchset.verify.selection import check_spec, choose_target, selected, test_name
from patchset.verify.serving import ServingSamples, load_serving_baseline
from patchset.verify.serving_judge import save_serving_baseline

__all__ = ["VerifyRun", "run_verify"]


@dataclass
class _Selection:
    """What a run tests: the ledger and target, the series, the chosen tests per patch, what they are
    compared with (stored serving figures) and the proof history."""

    ledger: Ledger
    home: Path  # where the ledger's relative paths live
    target: Target
    items: list[SeriesItem]  # the series
    wanted: list[str]  # tags
    wanted_ids: list[str]  # --only
    chosen: list[tuple[Patch, list[ChosenTest]]]
    untested: list[str]
    stored: dict[str, ServingSamples] | None
    histories: dict[str, TargetHistory]

    @property
    def tests(self) -> list[ChosenTest]:
        return [c for _, cs in self.chosen for c in cs]

    @property
    def specs(self) -> list[LongctxSpec]:
        return [c.lc for c in self.tests if c.lc is not None]


@dataclass
class _Base:
    """The pristine tree the run works on and how the report and the history name it."""

    path: Path
    desc: str
    label: str
    fingerprint: str  # "" when no result is cached for it
    is_cache: bool  # the release unpacked in the cache (a damaged one is removed)


@dataclass
class _Keys:
    """Result-cache keys of engine tests: (tree content, what the test measures, the engine)."""

    cache: ResultCache
    use: bool
    home: Path

    def key(self, tree_h: str, lc: LongctxSpec) -> str:
        if not (tree_h and self.use):
            return ""
        # the engine's own launcher files count too: a changed launch script is another engine
        engine_key = (*lc.engine_key(), command_files_digest(lc.engine, self.home) if lc.engine else "")
        return result_key(tree_h, lc.fingerprint(), engine_key)

    def cached(self, tree_h: str, lc: LongctxSpec) -> bool:
        k = self.key(tree_h, lc)
        return bool(k) and self.cache.get(k) is not None


def run_verify(run: VerifyRun) -> VerifyReport:
    """Run every selected per-patch test with and without its patch; return the classes
    (``run.plan_only``: the plan, ``report.plan``, without running anything).

    Raises InputError (bad ledger/arguments, exit 2), EnvironmentFailure (download, disk: exit 2),
    ForeignState (a history this installation did not write: exit 2), ApplyFailed (the whole series
    does not apply to the base: exit 1).
    """
    t0 = time.monotonic()
    started_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    run.check()
    if run.plan_only and (ledger_only := _plan_without_bodies(run)) is not None:
        ledger_only.wall_seconds = time.monotonic() - t0
        return ledger_only
    sel = _select(run)
    _engine_ready(run, sel)
    work_root = cache.subdir("verify-work")
    sweep_stale(work_root)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    try:
        base = _base(run, sel, work)
        tgt = sel.target
        report = VerifyReport(str(sel.ledger.path), tgt.name, base.desc, sel.wanted, run.jobs, untested=sel.untested)
        report.history = str(run.history) if run.history is not None else ""
        trees = _series_trees(sel, base)
        _lock_note(sel.ledger, tgt, tgt.layout, trees.full, report)
        results_root = Path(run.results_dir) if run.results_dir else cache.subdir("verify-results")
        keys = _Keys(
            ResultCache(results_root if run.use_cache else None, enabled=run.use_cache), run.use_cache, sel.home
        )
        switches = SwitchIndex.of(sel.ledger.series(tgt.name), sel.ledger.engines)
        inputs = plan_inputs(trees, sel.tests, sel.stored, keys.cached, switches, tgt.watch)
        opts = PlanOptions(run.all_, sel.wanted_ids, run.full_every, report.history)
        past = sel.histories.get(tgt.name)
        report.plan = plan_by_config(make_plan(tgt.name, base.label, inputs, past, opts, trees.applies), past)
        for pp in inputs.patches:
            report.notes += [f"{pp.id}: {n}" for n in pp.watch.notes]
        if run.plan_only:
            report.planned_only = True
            report.wall_seconds = time.monotonic() - t0
            return report
        place = Workspace(sel.ledger, tgt, base.path, work, sel.home)
        log_dir = run.log_dir or (engine_log_dir() if sel.specs else None)
        verifier = Verifier(place, run, log_dir)
        rounds = _run_rounds(verifier, report.plan, trees, keys, sel, report)
        _conclude(run, sel, rounds, report, Tonight(report.plan.night, started_at, base.label), inputs.patches)
        _damage_notes(verifier, base, report)
        report.wall_seconds = time.monotonic() - t0
        if run.keep_trees:
            report.work_dir = str(work)
        if run.junit is not None:
            write_junit(report, Path(run.junit))
        return report
    finally:
        if not run.keep_trees:
            remove_tree(work)


def _plan_without_bodies(run: VerifyRun) -> VerifyReport | None:
    """``--plan`` with bodies not imported: the plan from the ledger alone (``verify.plan.ledger``),
    each missing body named as a blocker of its patch's run; None when every body is there."""
    ledger = load_ledger(Path(run.ledger_path))
    tgt = choose_target(ledger, run.target, split_list(run.tags))
    missing = [p.id for p in ledger.series(tgt.name) if body_state(ledger, p)[1] is None]
    if not missing:
        return None
    histories = load_history(Path(run.history)) if run.history is not None else {}  # a foreign one: refused here
    only = [ledger.get(pid).id for pid in split_list(run.only)] if run.only else []
    why = f"no tree with the series can be made tonight (the bodies of {len(missing)} patch(es) are not imported)"
    opts = PlanOptions(run.all_, only, run.full_every, str(run.history or ""), unknown=why)
    stored = set(load_serving_baseline(Path(run.baseline))) if run.baseline else None
    plan = plan_ledger(replace(run, target=tgt.name), histories.get(tgt.name), opts, stored)
    plan.blockers = {pid: "its body is not imported (`patchset fetch` or `patchset import`)" for pid in missing}
    plan.notes.append(f"the run is blocked until every body is imported: {', '.join(missing)}")
    report = VerifyReport(str(ledger.path), tgt.name, "(the ledger alone)", split_list(run.tags), run.jobs)
    report.history, report.plan, report.planned_only = str(run.history or ""), plan, True
    return report


def _select(run: VerifyRun) -> _Selection:
    """The ledger, the target and the tests the run selects, each checked; InputError before anything
    runs (an unknown patch, engine or tag, a test no one could run)."""
    ledger = load_ledger(Path(run.ledger_path))
    home = Path(run.ledger_dir).resolve() if run.ledger_dir else ledger.root.resolve()
    wanted = split_list(run.tags)
    tgt = choose_target(ledger, run.target, wanted)
    items = series_items(ledger, tgt)
    patches = ledger.series(tgt.name)
    wanted_ids: list[str] = []
    if run.only:
        wanted_ids = [ledger.get(pid).id for pid in split_list(run.only)]  # an unknown id: InputError with a hint
        patches = [p for p in patches if p.id in wanted_ids]
        if not patches:
            raise InputError(f"--only {', '.join(wanted_ids)}: no active patch of target {tgt.name}")
    if run.engine is not None:
        resolve_engine(ledger, run.engine, tgt)  # an unknown engine: InputError before anything runs
    stored = load_serving_baseline(Path(run.baseline)) if run.baseline else None
    histories = load_history(Path(run.history)) if run.history is not None else {}  # a foreign one: refused here
    sel = _Selection(ledger, home, tgt, items, wanted, wanted_ids, [], [], stored, histories)
    path_env = dict(os.environ)
    path_env.update(
        PATCHSET_LEDGER_DIR=str(home),
        PATCHSET_HOME=str(PATCHSET_HOME),
        PATCHSET_CACHE=str(cache.cache_dir()),
    )
    for p in patches:
        mine = [_chosen(run, sel, p, i, path_env) for i, t in enumerate(p.tests) if selected(t, wanted)]
        if mine:
            sel.chosen.append((p, mine))
        else:
            sel.untested.append(p.id)
    if not sel.chosen:
        choose_target(ledger, None, wanted)  # raises the helpful "no test carries ..." error
        raise InputError(f"no selected test for target {tgt.name}")
    return sel


def _chosen(run: VerifyRun, sel: _Selection, p: Patch, i: int, path_env: dict[str, str]) -> ChosenTest:
    """Test ``i`` of patch ``p``, checked, with its outcome record and (engine tests) its resolved spec."""
    t = p.tests[i]
    name = test_name(t, i)
    check_spec(sel.ledger, p, t, name)
    lc = None
    if t.kind in ("longctx", "serving"):
        where = Location(sel.ledger.path, p.line or None, f"patch {p.id}: tests {name}")
        edef = resolve_engine(sel.ledger, run.engine or t.engine or "vllm-cpu", sel.target)
        lc = resolve_spec(t, sel.home, where, path_env, run.timeout, edef)
    command = f"{lc.kind}: {', '.join(t.checks)}" if lc else t.command
    to = TestOutcome(p.id, name, command, t.cwd, list(t.tags), run.timeout or t.timeout)
    if lc:
        to.kind, to.checks = lc.kind, list(lc.checks)
        to.engine = lc.engine.name if lc.engine else ""
    return ChosenTest(p, t, to, lc)


def _engine_ready(run: VerifyRun, sel: _Selection) -> None:
    """Only engine tests on the CPU engine were selected, and it is not installed: say so before any
    download."""
    specs = sel.specs
    only_cpu = all(sp.engine is not None and sp.engine.preset == Preset.VLLM_CPU for sp in specs)
    if specs and only_cpu and run.engine_factory is None and len(specs) == len(sel.tests) and not run.plan_only:
        reason = engine_missing_reason(faults=False)
        if reason:
            raise EnvironmentFailure(f"the long-context tests need the vLLM CPU engine: {reason}")


def _base(run: VerifyRun, sel: _Selection, work: Path) -> _Base:
    """The pristine base: a private copy of ``run.tree``, or the release unpacked in the cache."""
    specs = sel.specs
    layout = sel.target.layout
    if run.tree is not None:
        tree = Path(run.tree).resolve()
        if not tree.is_dir():
            raise InputError(f"--tree {tree}: not a directory")
        base = work / "base"
        private_copy(tree, base)
        fp = base_fingerprint(base) if specs and run.use_cache else ""
        if not run.plan_only:
            precompile(base, workers=os.cpu_count() or 1)
        return _Base(base, f"copy of {tree}", run.base_label or str(tree), fp, False)
    spec = spec_for(sel.target, run.from_index)
    base = index_base(spec, layout, progress=run.download_progress)
    marker = (base / ".patchset-verify-base").read_text(errors="replace")
    fp = base_fingerprint(base, f"{marker} {layout}")
    return _Base(base, f"{spec} ({layout}, from the package index)", run.base_label or spec, fp, True)


def _series_trees(sel: _Selection, base: _Base) -> SeriesTrees:
    """The dry runs: the whole series (ApplyFailed, or InputError on a tree that carries it already),
    and the series without each patch whose tests were chosen."""
    tgt, items = sel.target, sel.items
    mapper = tgt.mapper(tgt.layout)
    full = apply_series(base.path, items, path_for=mapper, dry_run=True)
    if not full.ok:
        state = detect_state(base.path, items, path_for=mapper)
        if state.all_applied or any(p.state == "applied" for p in state.patches):
            raise InputError(
                f"the build tree already carries patches of the series ({state.summary()})",
                hint="verify needs the pristine tree the series applies to",
            )
        raise ApplyFailed(
            f"the series does not apply to {base.desc}: {describe_failure(full)}",
            hint="see `patchset apply --dry-run`; rebase the series first",
        )
    full_hash = tree_hash(base.fingerprint, full.files, full.modes) if base.fingerprint else ""
    trees = SeriesTrees(base.path, items, mapper, base.fingerprint, full, full_hash)
    for p, _ in sel.chosen:
        trees.leave_out(p.id)
    return trees


def _run_rounds(
    verifier: Verifier, vplan: VerifyPlan, trees: SeriesTrees, keys: _Keys, sel: _Selection, report: VerifyReport
) -> Rounds:
    """The planned runs, in one or two rounds (runs waiting for the series, split groups)."""
    rounds = Rounds(vplan, trees, keys.key, sel.stored)
    for c in sel.tests:
        rounds.add(c.patch, c.spec, c.outcome, c.lc, trees.full_hash, report)
    verifier.run(rounds.first, cache=keys.cache, stored=sel.stored)
    second = rounds.after_first()
    if second:
        verifier.run(second, cache=keys.cache, stored=sel.stored)
        rounds.after_second()
    report.engines = verifier.engines
    report.reused = verifier.reused
    report.cache_ignored = list(keys.cache.ignored)
    report.engine_starts = sum(1 for e in verifier.engines if e.started)
    report.group_tries = rounds.group_report(verifier.engines)
    return rounds


def _conclude(
    run: VerifyRun, sel: _Selection, rounds: Rounds, report: VerifyReport, tonight: Tonight, planned: list[PlanPatch]
) -> None:
    """Each test's and patch's class, what changed since the last run, the proofs recorded."""
    report.baseline = str(run.baseline) if run.baseline else ""
    tgt = sel.target
    if run.save_baseline is not None and save_serving_baseline(Path(run.save_baseline), rounds.first, tgt.name):
        report.notes.append(f"stored the serving figures of the tree with the series in {run.save_baseline}")
    outcomes = []
    for p, cs in sel.chosen:
        po = PatchOutcome(p.id, p.title, [c.outcome for c in cs])
        for outcome in po.tests:
            outcome.klass, outcome.note = classify(outcome.with_run, outcome.without_run)
            if outcome.carried:
                outcome.note += f" (without the patch: {outcome.carried})"
        po.klass = patch_class(po.tests)
        po.note = _patch_note(p, po)
        rounds.describe(po)
        outcomes.append(po)
    report.patches = outcomes
    past = sel.histories.get(tgt.name)
    report.changed = rounds.changed(outcomes, past)
    if run.history is not None and run.record_history:
        th = sel.histories.setdefault(tgt.name, past or TargetHistory())
        report.proven_tonight = record(th, tonight, planned, outcomes)
        for er in report.engines:  # each engine's start durations: tomorrow's cost estimate
            if er.started and er.startup_seconds is not None and er.engine:
                th.add_start(er.engine, er.startup_seconds + er.check_seconds)
        save_history(Path(run.history), sel.histories)
    else:
        report.proven_tonight = [po.patch_id for po in outcomes if po.proof.startswith("proven tonight")]


def _damage_notes(verifier: Verifier, base: _Base, report: VerifyReport) -> None:
    if not verifier.damaged:
        return
    report.notes.append(
        f"tests rewrote {len(verifier.damaged)} file(s) of the pristine base in place: "
        + ", ".join(verifier.damaged[:5])
    )
    if base.is_cache:
        remove_tree(base.path)
        report.notes.append(f"removed the damaged cached base {base.path}; the next run unpacks it again")


def _patch_note(patch: Patch, po: PatchOutcome) -> str:
    notes = []
    if po.klass == NOT_NEEDED and patch.switches.env:
        unset = [k for k in patch.switches.env if not any(k in t.command for t in po.tests)]
        if unset:
            notes.append(f"the patch acts only with {', '.join(unset)} set; check its tests set it")
    if po.klass == NOT_NEEDED:
        notes.append("every test passes without the patch: propose dropping it")
    return "; ".join(notes)


def _lock_note(ledger: Ledger, target: Target, layout: str, full: SeriesResult, report: VerifyReport) -> None:
    locked = ledger.lock.targets.get(target.name)
    if not locked or not locked.files:
        report.notes.append("no lock of patched-file hashes to compare the tested tree against")
        return
    got = {target.lock_key(k): v for k, v in full.files.items()}
    bad = sorted(p for p, d in locked.files.items() if got.get(p) != d)
    if bad:
        report.notes.append(
            f"the tested tree differs from the lock in {len(bad)} file(s) ({', '.join(bad[:3])}): "
            "the base is not the release the lock was made on"
        )
    else:
        report.notes.append("the tested tree matches the lock (every patched file)")
