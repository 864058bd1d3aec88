"""A target's series onto a directory tree, in one pass through it, checked against the lock.

The pass: the tree's lock and an interrupted earlier apply (``TreePass``), the series applied in
memory and proved against the lock (``OnePass``), what the tree already carries when it does not
apply, the commit and the lock recorded; each once. What to do with a tree that does not take the
series as it is: one that already carries it (its files match the lock: nothing to do; they do
not: a mismatch), one that carries part of it (refused, or with ``--skip-applied`` only the
missing patches applied), one where a patch fails. ``--tree`` adds the base check first,
``--from-index`` the release fetched and unpacked into ``--into`` (removed again unless applied).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from patchset.commands.apply.lock import OnePass
from patchset.commands.apply.target import (
    ApplyRun,
    Outcome,
    TargetReport,
    TreeArg,
    TreeKind,
    refuse_ledger_tree,
    series_items,
)
from patchset.engine.detect import SeriesState
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.errors import InputError
from patchset.ledger.model import Layout, Target
from patchset.progress import Progress


def apply_to_tree(
    job: ApplyRun, target: Target, root: Path, layout: str, kind: TreeKind = TreeKind.TREE
) -> TargetReport:
    """Apply one target's series to a directory in one pass: in memory, checked against the lock,
    then committed (``job.durable``: fsynced too).

    A tree carrying part of the series is refused unless ``job.skip_applied`` (then only the missing
    patches are applied, the whole result still checked). The tree lock is held from the first read
    to the last write; a dry run writes nothing."""
    refuse_ledger_tree(job.ledger, root, kind.flag)
    items = series_items(job.ledger, target)
    report = TargetReport(target.name, str(root), kind, layout, Outcome.FAILED, "", fuzz=job.fuzz)
    with job.tree_pass(root, target.mapper(layout)) as tree, OnePass(job, target, tree, report) as one:
        if tree.recovered:
            report.message = f"finished an interrupted earlier apply ({tree.recovered}); "
        trial = one.apply(items)
        if not trial.ok:
            rest = _what_is_left(one, items, trial)
            if rest is None:
                return report
            items, trial = rest, one.apply(rest)
            if not trial.ok:
                return _failed(report, trial)
    report.result = trial
    if not one.refused:
        _applied(job, report, len(items), one.expected is None)
    return report


def _what_is_left(one: OnePass, items: list[SeriesItem], trial: SeriesResult) -> list[SeriesItem] | None:
    """The series does not apply: what the tree already carries decides. The patches still to
    apply (``--skip-applied`` on a tree carrying part of it), or None: the report is final."""
    report, expected = one.report, one.expected
    state = one.tree.detect(items, expected)
    said = state.summary()
    report.state, report.result = state, trial
    if state.matches_expected or (state.all_applied and expected is None):
        report.result, report.outcome = None, Outcome.ALREADY
        report.message += said + "; nothing changed"
        return None
    if state.all_applied:
        one.carried_mismatch(said)
        return None
    carried = [p.state == "applied" for p in state.patches]
    if not _failure_explained(trial, state) or not any(carried):
        # the failing patch is not on the tree: a real failure, whatever else merely reverse-applies
        _failed(report, trial)
        return None
    if not one.job.skip_applied or any(p.state == "unknown" for p in state.patches):
        report.outcome = Outcome.PARTIAL
        report.message += said + "; the tree was left as it is (--skip-applied applies the rest)"
        return None
    rest = [i for i, c in zip(items, carried, strict=True) if not c]
    report.message += said + f"; applying only the {len(rest)} missing patch(es); "
    return rest


def _failure_explained(trial: SeriesResult, state: SeriesState) -> bool:
    """Is the trial's failure explained by the tree already carrying the patch that failed?

    Only then is the tree "partly patched": a patch that merely reverse-applies somewhere else in
    the series (an idempotent change, a patch undone by a later one) says nothing about a failure.
    """
    failed = next((p for p in trial.patches if p.patch_id == trial.failed_patch), None)
    if failed is not None and failed.status == "already_applied":
        return True
    return any(p.patch_id == trial.failed_patch and p.state == "applied" for p in state.patches)


def _failed(report: TargetReport, result: SeriesResult) -> TargetReport:
    report.outcome, report.result = Outcome.FAILED, result
    report.message += f"patch {result.failed_patch} does not apply; nothing was written"
    return report


def _applied(job: ApplyRun, report: TargetReport, count: int, unlocked: bool) -> None:
    report.unlocked = unlocked
    if job.dry_run:
        report.outcome = Outcome.DRY_RUN
        report.message += f"{count} patches apply; nothing was written"
        return
    report.outcome = Outcome.APPLIED
    if job.update_lock:
        tail = ", lock updated"
    elif unlocked:
        tail = " (no lock to check against yet: run with --update-lock to record one)"
    else:
        tail = ", every patched file matches the lock"
    report.message += f"{count} patches applied{tail}"


def apply_to_dir(job: ApplyRun, target: Target, arg: TreeArg) -> TargetReport:
    """``--tree DIR``: the tree's version files held against the target's base, then the pass."""
    if not arg.path.is_dir():
        raise InputError(f"--tree {arg.path}: not a directory")
    warnings = _base_warnings(target, arg.path, job.strict_base)
    report = apply_to_tree(job, target, arg.path, arg.layout_of(target))
    report.warnings += warnings
    return report


def _base_warnings(target: Target, tree: Path, strict: bool) -> list[str]:
    """What the tree's version files say against the target's base (offline: the ledger's base
    only): a warning when they name another commit; with ``strict`` an InputError instead, before
    anything is read or written."""
    # imported here: the base check reads version files with the upstream readers, which an
    # apply that finds nothing to compare never needs (``apply --tree`` starts light)
    from patchset.commands.basedetect import DIFFERENT, INCONSISTENT, tree_base

    check = tree_base(target, tree)
    if check is None or check.verdict not in (DIFFERENT, INCONSISTENT):
        return []
    text = f"--tree {tree}: {check.message}"
    if strict:
        raise InputError(
            text + "; nothing was written (--strict-base)",
            hint=f"apply to a tree of the base, or rebase the series onto the tree's commit "
            f"(`patchset base detect --target {target.name} --tree {tree}` says which); without --strict-base "
            "this is a warning",
        )
    return [text]


def apply_release(job: ApplyRun, target: Target, arg: TreeArg) -> TargetReport:
    """``--from-index SPEC --into DIR``: the release unpacked into DIR, then the pass; DIR is
    removed again unless the series applied (``--skip-applied`` does not apply to a fresh tree)."""
    layout = arg.layout_of(target)
    fetch_release_tree(arg.spec, arg.path, layout, job.download_progress, arg.platform or None)
    try:
        rep = apply_to_tree(replace(job, skip_applied=False), target, arg.path, layout, TreeKind.INDEX)
    except BaseException:
        shutil.rmtree(arg.path, ignore_errors=True)
        raise
    if not rep.ok:
        shutil.rmtree(arg.path, ignore_errors=True)
        rep.message += f"; removed {arg.path}"
    return rep


def fetch_release_tree(
    spec: str, into: Path, layout: str, progress: Progress | None = None, platform: str | None = None
) -> Path:
    """Download (once, cached) and unpack a release for ``--from-index``: the sdist for a source
    layout, the wheel for an installed one (pure, else ``platform``'s: native by default)."""
    from patchset.upstream.archives import unpack  # the index readers load only for --from-index
    from patchset.upstream.releases import download, download_wheel

    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise InputError(
            f"--into {into} exists and is not empty",
            hint="choose a new directory; apply --tree DIR patches an existing tree",
        )
    kind = Layout(layout).artifact
    if kind == "wheel":
        archive = download_wheel(spec, platform, progress=progress)
    else:
        archive = download(spec, kind, progress=progress)
    unpack(archive, into, strip_top=(kind == "sdist"))
    return into
