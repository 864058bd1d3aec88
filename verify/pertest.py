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
(``patchset.verify.longctx_runs``). They are classed exactly like command tests.

With a proof history (``history``; the CLI keeps one beside the ledger, the gate beside its state),
the without-runs of long-context tests follow a plan made before any engine starts
(``verify.plan``): a patch whose watched files, body and tests did not move since the run that
proved it carries that verdict (marked so, with the run it comes from); the rest run tonight, those
expected to be not needed tried together where it pays (``verify.grouping``), those broken last time
only if their tests pass with the series. ``plan_only`` returns the plan without running anything.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from patchset.commands.apply.target import series_items
from patchset.engine.detect import detect_state
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import apply_series
from patchset.errors import ApplyFailed, EnvironmentFailure, InputError, Location
from patchset.ledger.model import Ledger, Patch, Target, TestSpec
from patchset.ledger.store import load_ledger
from patchset.progress import Progress
from patchset.text import split_list
from patchset.upstream import cache
from patchset.verify.base_tree import engine_log_dir, index_base, precompile, spec_for, sweep_stale
from patchset.verify.carry import Tonight, record
from patchset.verify.engines import command_files_digest, resolve_engine
from patchset.verify.longctx_runs import EngineFactory, LongctxSpec, resolve_spec
from patchset.verify.outcomes import NOT_NEEDED, PatchOutcome, TestOutcome, VerifyReport, classify, patch_class
from patchset.verify.overlay import private_copy, remove_tree
from patchset.verify.plan import DEFAULT_FULL_EVERY, PlanOptions, make_plan
from patchset.verify.plan_inputs import EngineTest, plan_inputs
from patchset.verify.planned_runs import Minus, Rounds
from patchset.verify.proofs import TargetHistory, load_history, save_history
from patchset.verify.results_cache import ResultCache, base_fingerprint, result_key, tree_hash
from patchset.verify.runner import PATCHSET_HOME, Verifier, describe_failure
from patchset.verify.selection import check_spec, choose_target, parse_tags, selected, test_name
from patchset.verify.serving import load_serving_baseline
from patchset.verify.serving_judge import save_serving_baseline


def _dry_run(base: Path, items: list[SeriesItem], mapper) -> SeriesResult:
    return apply_series(base, items, path_for=mapper, dry_run=True)


@dataclass
class _Chosen:
    """A selected test of a patch: its ledger spec, its outcome record, its engine spec (engine tests)."""

    patch: Patch
    spec: TestSpec
    outcome: TestOutcome
    lc: LongctxSpec | None


def run_verify(
    ledger_path: Path,
    tree: Path | None = None,
    *,
    from_index: str | None = None,
    tags: list[str] | None = None,
    jobs: int = 1,
    timeout: int | None = None,
    junit: Path | None = None,
    progress: Progress | None = None,
    target: str | None = None,
    keep_trees: bool = False,
    download_progress: Progress | None = None,
    engine_factory: EngineFactory | None = None,
    log_dir: Path | None = None,
    engine: str | None = None,
    only: list[str] | None = None,
    baseline: Path | None = None,
    save_baseline: Path | None = None,
    use_cache: bool = True,
    ledger_dir: Path | None = None,
    results_dir: Path | None = None,
    history: Path | None = None,
    plan_only: bool = False,
    all_: bool = False,
    full_every: int = DEFAULT_FULL_EVERY,
    base_label: str | None = None,
    record_history: bool = True,
) -> VerifyReport:
    """Run every selected per-patch test with and without its patch; return the classes.

    ``tree``: a pristine build tree (never modified: verify works on a private copy);
    ``from_index``: ``vllm==0.30.0`` (or just ``0.30.0``); neither: the target's ``base`` release.
    ``timeout`` overrides every test's ledger timeout. ``junit``: also write JUnit XML there.
    ``keep_trees`` keeps the work directory (trees and full logs) and names it in the report.
    Long-context tests start engines through ``engine_factory`` (default: the CPU vLLM engine of
    ``ci/setup_engine.sh``); their logs go to ``log_dir`` (default: ``<cache>/engine-logs/verify-*``),
    which outlives the run. ``engine`` names the engine every engine test runs on (``[engines.NAME]``
    or a preset), overriding the tests' own. ``only``: these patches' tests only.
    Serving tests compare the tree with the series with the tree without the patch, or, with
    ``baseline``, with the figures stored there (``save_baseline`` stores this run's figures of the tree
    with the series). Engine-test results are cached by (tree content, test, engine) unless
    ``use_cache`` is False: an unchanged tree starts no engine. ``ledger_dir``: where the ledger's
    relative paths (models, launchers, test files) live, when the ledger read is a copy (the gate's).
    ``results_dir``: the result cache (default ``<cache>/verify-results``).
    ``history``: the sealed proof history the plan reads and (``record_history``) this run's proofs go
    to; None: no history, every without-run runs. ``plan_only``: return the plan (``report.plan``)
    without running anything. ``all_``: every patch is re-proven. ``full_every``: a proof this many runs
    old is re-proven (0: never by age). ``base_label``: how the history names the base (the gate: the
    upstream commit); default: the release spec or the tree.
    Raises InputError (bad ledger/arguments, exit 2), EnvironmentFailure (download, disk: exit 2),
    ForeignState (a history this installation did not write: exit 2), ApplyFailed (the whole series
    does not apply to the base: exit 1).
    """
    t0 = time.monotonic()
    started_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: must be at least 1")
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout {timeout}: must be a positive number of seconds")
    if full_every < 0:
        raise InputError(f"--full-every {full_every}: must be 0 (never by age) or a number of runs")
    if tree is not None and from_index:
        raise InputError("pass either --tree or --from-index, not both")
    ledger = load_ledger(Path(ledger_path))
    home = Path(ledger_dir).resolve() if ledger_dir else ledger.root.resolve()
    wanted = parse_tags(tags)
    tgt = choose_target(ledger, target, wanted)
    layout = tgt.layout
    items = series_items(ledger, tgt)
    patches = ledger.series(tgt.name)
    wanted_ids: list[str] = []
    if only:
        wanted_ids = [ledger.get(pid).id for pid in split_list(only)]  # an unknown id: InputError with a hint
        patches = [p for p in patches if p.id in wanted_ids]
        if not patches:
            raise InputError(f"--only {', '.join(wanted_ids)}: no active patch of target {tgt.name}")
    if engine is not None:
        resolve_engine(ledger, engine, tgt)  # an unknown engine: InputError before anything runs
    stored = load_serving_baseline(Path(baseline)) if baseline else None
    histories = load_history(Path(history)) if history is not None else {}  # a foreign one: refused here

    chosen: list[tuple[Patch, list[_Chosen]]] = []
    untested: list[str] = []
    path_env = dict(os.environ)
    path_env.update(
        PATCHSET_LEDGER_DIR=str(home),
        PATCHSET_HOME=str(PATCHSET_HOME),
        PATCHSET_CACHE=str(cache.cache_dir()),
    )
    for p in patches:
        mine = []
        for i, t in enumerate(p.tests):
            if not selected(t, wanted):
                continue
            name = test_name(t, i)
            check_spec(ledger, p, t, name)
            lc = None
            if t.kind in ("longctx", "serving"):
                where = Location(ledger.path, p.line or None, f"patch {p.id}: tests {name}")
                edef = resolve_engine(ledger, engine or t.engine or "vllm-cpu", tgt)
                lc = resolve_spec(t, home, where, path_env, timeout, edef)
            command = f"{lc.kind}: {', '.join(t.checks)}" if lc else t.command
            to = TestOutcome(p.id, name, command, t.cwd, list(t.tags), timeout or t.timeout)
            if lc:
                to.kind, to.checks = lc.kind, list(lc.checks)
                to.engine = lc.engine.name if lc.engine else ""
            mine.append(_Chosen(p, t, to, lc))
        if mine:
            chosen.append((p, mine))
        else:
            untested.append(p.id)
    if not chosen:
        choose_target(ledger, None, wanted)  # raises the helpful "no test carries ..." error
        raise InputError(f"no selected test for target {tgt.name}")
    specs = [c.lc for _, cs in chosen for c in cs if c.lc is not None]

    only_cpu = all(sp.engine is not None and sp.engine.preset == "vllm-cpu" for sp in specs)
    n_tests = sum(len(cs) for _, cs in chosen)
    if specs and only_cpu and engine_factory is None and len(specs) == n_tests and not plan_only:
        from patchset.verify.server import engine_missing_reason

        reason = engine_missing_reason(faults=False)
        if reason:  # only engine tests were selected, and none can run: say so before any download
            raise EnvironmentFailure(f"the long-context tests need the vLLM CPU engine: {reason}")

    work_root = cache.subdir("verify-work")
    sweep_stale(work_root)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    base_is_cache = tree is None
    try:
        if tree is not None:
            tree = Path(tree).resolve()
            if not tree.is_dir():
                raise InputError(f"--tree {tree}: not a directory")
            base = work / "base"
            private_copy(tree, base)
            base_fp = base_fingerprint(base) if specs and use_cache else ""
            if not plan_only:
                precompile(base, workers=os.cpu_count() or 1)
            base_desc = f"copy of {tree}"
            label = base_label or str(tree)
        else:
            spec = spec_for(tgt, from_index)
            base = index_base(spec, layout, progress=download_progress)
            base_desc = f"{spec} ({layout}, from the package index)"
            marker = (base / ".patchset-verify-base").read_text(errors="replace")
            base_fp = base_fingerprint(base, f"{marker} {layout}")
            label = base_label or spec
        report = VerifyReport(str(ledger.path), tgt.name, base_desc, wanted, jobs, untested=untested)
        report.history = str(history) if history is not None else ""
        mapper = tgt.mapper(layout)
        full = _dry_run(base, items, mapper)
        if not full.ok:
            state = detect_state(base, items, path_for=mapper)
            if state.all_applied or any(p.state == "applied" for p in state.patches):
                raise InputError(
                    f"the build tree already carries patches of the series ({state.summary()})",
                    hint="verify needs the pristine tree the series applies to",
                )
            raise ApplyFailed(
                f"the series does not apply to {base_desc}: {describe_failure(full)}",
                hint="see `patchset apply --dry-run`; rebase the series first",
            )
        _lock_note(ledger, tgt, layout, full, report)
        results_root = Path(results_dir) if results_dir else cache.subdir("verify-results")
        results_cache = ResultCache(results_root if use_cache else None, enabled=use_cache)

        full_hash = tree_hash(base_fp, full.files, full.modes) if base_fp else ""
        minus: dict[str, Minus] = {}
        for p, _ in chosen:
            left = [it for it in items if it.patch_id != p.id]
            reduced = _dry_run(base, left, mapper) if left else None
            error = "" if reduced is None or reduced.ok else f"the series without {p.id} does not apply"
            if error:
                error += f": {describe_failure(reduced)}"  # type: ignore[arg-type]
            h = ""
            if base_fp:
                h = tree_hash(base_fp, reduced.files, reduced.modes) if reduced else tree_hash(base_fp, {})
            minus[p.id] = Minus(left, reduced, error, h)

        def key(tree_h: str, lc: LongctxSpec) -> str:
            if not (tree_h and use_cache):
                return ""
            # the engine's own launcher files count too: a changed launch script is another engine
            engine_key = (*lc.engine_key(), command_files_digest(lc.engine, home) if lc.engine else "")
            return result_key(tree_h, lc.fingerprint(), engine_key)

        def cached(tree_h: str, lc: LongctxSpec) -> bool:
            k = key(tree_h, lc)
            return bool(k) and results_cache.get(k) is not None

        group_dry: dict[tuple[str, ...], Minus] = {}

        def applies(ids: list[str]) -> str:
            left = [it for it in items if it.patch_id not in ids]
            res = _dry_run(base, left, mapper)
            h = tree_hash(base_fp, res.files, res.modes) if base_fp else ""
            group_dry[tuple(ids)] = Minus(left, res, "" if res.ok else describe_failure(res), h)
            return "" if res.ok else describe_failure(res)

        engine_tests = [
            EngineTest(p.id, c.outcome.name, c.outcome.engine, c.lc) for p, cs in chosen for c in cs if c.lc is not None
        ]
        planned, fixed, full_starts = plan_inputs(
            base, items, mapper, full, full_hash, engine_tests, minus, stored, cached
        )
        opts = PlanOptions(all_, wanted_ids, full_every, str(history) if history is not None else "")
        past = histories.get(tgt.name)
        vplan = make_plan(tgt.name, label, planned, past, opts, fixed, full_starts, applies)
        report.plan = vplan
        for pp in planned:
            report.notes += [f"{pp.id}: {n}" for n in pp.watch.notes]
        if plan_only:
            report.planned_only = True
            report.wall_seconds = time.monotonic() - t0
            return report

        verifier = Verifier(
            ledger,
            tgt,
            base,
            layout,
            work,
            jobs=jobs,
            timeout=timeout,
            progress=progress,
            keep=keep_trees,
            base_is_cache=base_is_cache,
            engine_factory=engine_factory,
            log_dir=log_dir or (engine_log_dir() if specs else None),
            home=home,
        )
        rounds = Rounds(vplan, items, minus, group_dry, key, stored)
        for c in (c for _, cs in chosen for c in cs):
            rounds.add(c.patch, c.spec, c.outcome, c.lc, full_hash, report)
        runs = rounds.first
        verifier.run(runs, cache=results_cache, stored=stored)
        second = rounds.after_first()
        if second:
            verifier.run(second, cache=results_cache, stored=stored)
            rounds.after_second()
        report.engines = verifier.engines
        report.reused = verifier.reused
        report.engine_starts = sum(1 for e in verifier.engines if e.started)
        report.group_tries = rounds.group_report(verifier.engines)
        report.baseline = str(baseline) if baseline else ""
        if save_baseline is not None and save_serving_baseline(Path(save_baseline), runs, tgt.name):
            report.notes.append(f"stored the serving figures of the tree with the series in {save_baseline}")
        outcomes = []
        for p, cs in chosen:
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
        report.changed = rounds.changed(outcomes, past)
        if history is not None and record_history:
            th = histories.setdefault(tgt.name, past or TargetHistory())
            report.proven_tonight = record(th, Tonight(vplan.night, started_at, label), planned, outcomes)
            save_history(Path(history), histories)
        else:
            report.proven_tonight = [po.patch_id for po in outcomes if po.proof.startswith("proven tonight")]
        if verifier.damaged:
            report.notes.append(
                f"tests rewrote {len(verifier.damaged)} file(s) of the pristine base in place: "
                + ", ".join(verifier.damaged[:5])
            )
            if base_is_cache:
                remove_tree(base)
                report.notes.append(f"removed the damaged cached base {base}; the next run unpacks it again")
        report.wall_seconds = time.monotonic() - t0
        if keep_trees:
            report.work_dir = str(work)
        if junit is not None:
            from patchset.verify.junit import write_junit

            write_junit(report, Path(junit))
        return report
    finally:
        if not keep_trees:
            remove_tree(work)


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
