"""A target's series onto a directory tree, in one engine pass, checked against the lock.

What to do with a tree that does not take the series as it is: one that already carries it (its
files match the lock: nothing to do; they do not: a mismatch), one that carries part of it
(refused, or with ``--skip-applied`` only the missing patches applied), one where a patch fails.
The tree lock is held from the first read to the last write; a build tree is never the ledger.
"""

from __future__ import annotations

import os
from pathlib import Path

from patchset import locking
from patchset.commands.apply.lock import OnePass, tree_digest
from patchset.commands.apply.target import TargetReport, path_mapper, series_items
from patchset.confine import STATE_DIRS, is_within
from patchset.engine.detect import SeriesState, detect_state
from patchset.engine.results import SeriesResult
from patchset.engine.tree import interrupted_error, pending_apply, recover
from patchset.errors import InputError
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress


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
    report.outcome, report.result = "failed", result
    report.message += f"patch {result.failed_patch} does not apply; nothing was written"
    return report


def refuse_ledger_tree(ledger: Ledger, path: Path, flag: str = "--tree") -> None:
    """A build tree is never the ledger's directory, a directory holding it, or a directory inside
    its ``.patchset/`` (patches would rewrite the ledger, its bodies or patchset's own state)."""
    led, tree = os.path.realpath(ledger.root), os.path.realpath(path)
    hint = (
        "apply to a build tree (a checkout, an unpacked release, a copy of site-packages), not the ledger's directory"
    )
    if is_within(led, tree):
        how = "is" if led == tree else "contains"
        raise InputError(f"{flag} {path} {how} the ledger directory {led}: not a build tree", hint=hint)
    rel = os.path.relpath(tree, led).split(os.sep)
    if rel[0] != ".." and rel[0].lower() in STATE_DIRS:
        raise InputError(
            f"{flag} {path} is inside the ledger's state directory {os.path.join(led, rel[0])}: not a build tree",
            hint=hint,
        )


def apply_to_tree(
    ledger: Ledger,
    target: Target,
    root: Path,
    *,
    layout: str,
    fuzz: int = 0,
    update_lock: bool = False,
    dry_run: bool = False,
    kind: str = "tree",
    progress: Progress | None = None,
    skip_applied: bool = False,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> TargetReport:
    """Apply one target's series to a directory in one pass: in memory, checked against the lock,
    then committed (``durable``: fsynced against power loss too; see ``engine.txn``).

    A tree that carries part of the series is refused (named precisely) unless ``skip_applied``:
    then only the patches it lacks are applied, and the whole result is still checked.

    The tree lock is held from the first read to the last write (a second apply waits, then
    sees this one's result). A dry run writes nothing, not even to finish an interrupted apply.
    """
    refuse_ledger_tree(ledger, root, "--tree" if kind == "tree" else "--repo" if kind == "repo" else "--into")
    with locking.tree_lock(root):
        return _apply_to_tree(
            ledger,
            target,
            root,
            layout,
            fuzz,
            update_lock,
            dry_run,
            kind,
            progress,
            skip_applied,
            remove_empty,
            durable,
        )


def _apply_to_tree(
    ledger: Ledger,
    target: Target,
    root: Path,
    layout: str,
    fuzz: int,
    update_lock: bool,
    dry_run: bool,
    kind: str,
    progress: Progress | None,
    skip_applied: bool,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> TargetReport:
    items = series_items(ledger, target)
    mapper = path_mapper(target, layout)
    report = TargetReport(target.name, str(root), kind, layout, "failed", "", fuzz=fuzz)
    if pending_apply(root):
        if dry_run:
            raise interrupted_error(root)
        report.message = f"finished an interrupted earlier apply ({recover(root)}); "
    locked = ledger.lock.targets.get(target.name)
    expected: dict[str, str | None] | None = dict(locked.files) if locked and locked.files else None
    one = OnePass(ledger, target, root, layout, report, expected, update_lock, dry_run)
    with one.stack:
        trial = one.run(items, fuzz, mapper, progress, remove_empty, durable)
        if not trial.ok:
            state = detect_state(root, items, expected, path_for=mapper)
            report.state, report.result = state, trial
            if state.matches_expected or (state.all_applied and expected is None):
                report.result = None
                report.outcome = "already"
                report.message += state.summary() + "; nothing changed"
                return report
            if state.all_applied:
                assert expected is not None  # the series is applied and no lock: returned above
                report.result = None
                report.outcome = "mismatch"
                on_disk = {p: tree_digest(root, target, layout, p) for p in expected}
                report.mismatched = [p for p, d in expected.items() if on_disk[p] != d]
                report.hashes = {p: {"expected": expected[p], "actual": on_disk[p]} for p in report.mismatched}
                report.message += state.summary() + ", but its files do not match the lock; nothing changed"
                return report
            carried = [p.state == "applied" for p in state.patches]
            if not _failure_explained(trial, state):
                # the failing patch is not on the tree: a real failure, whatever else merely reverse-applies
                return _failed(report, trial)
            if any(carried) and skip_applied and all(p.state != "unknown" for p in state.patches):
                items = [i for i, c in zip(items, carried, strict=True) if not c]
                report.message += state.summary() + f"; applying only the {len(items)} missing patch(es); "
                trial = one.run(items, fuzz, mapper, progress, remove_empty, durable)
            elif any(carried):
                report.outcome = "partial"
                report.message += state.summary() + "; the tree was left as it is (--skip-applied applies the rest)"
                return report
            if not trial.ok:
                return _failed(report, trial)
    report.result = trial
    if one.refused:
        return report
    report.unlocked = expected is None
    if dry_run:
        report.outcome = "dry-run"
        report.message += f"{len(items)} patches apply; nothing was written"
        return report
    report.outcome = "applied"
    if update_lock:
        tail = ", lock updated"
    elif report.unlocked:
        tail = " (no lock to check against yet: run with --update-lock to record one)"
    else:
        tail = ", every patched file matches the lock"
    report.message += f"{len(items)} patches applied{tail}"
    return report
