"""``patchset apply``: the ledger's series onto a build tree, checked byte for byte against the lock.

Three kinds of tree: a plain directory (``--tree``), a git checkout (``--repo``: one commit per
patch, with trailers) and a release from the package index (``--from-index`` + ``--into``). The
engine work is ``patchset.engine.tree``; this package decides what to apply, proves the result
against the lock before anything is written, and records the lock. ``target`` holds the run and
the report, ``tree`` the pass through a directory, ``lock`` the proof and record, ``repo`` the
git checkout.
"""

from __future__ import annotations

from dataclasses import replace

from patchset.commands.apply.repo import apply_to_repo
from patchset.commands.apply.target import ApplyRun, TargetReport, TreeArg, TreeKind, refuse_ledger_tree
from patchset.commands.apply.tree import apply_release, apply_to_dir
from patchset.commands.inspection import LOCK_HINT, lock_gap
from patchset.commands.interrupted import LEDGER_EDIT, REBASE, Interruption, interruptions
from patchset.errors import EnvironmentFailure, InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target


def run(job: ApplyRun, trees: dict[str, TreeArg]) -> list[TargetReport]:
    """Apply each target's series to its tree (``trees``: target name -> where it goes)."""
    rebase = _refuse_before_reading(job, trees)
    reports = []
    for name, arg in trees.items():
        target = _target(job.ledger, name)
        if arg.kind == TreeKind.TREE:
            reports.append(apply_to_dir(job, target, arg))
        elif arg.kind == TreeKind.REPO:
            reports.append(apply_to_repo(job, target, arg))
        elif arg.kind == TreeKind.INDEX:
            reports.append(apply_release(job, target, arg))
        else:  # pragma: no cover - the CLI only builds the three kinds
            raise EnvironmentFailure(f"unknown tree kind {arg.kind}")
        if job.update_lock:  # the next target's lock check sees this one's record
            job = replace(job, ledger=ledger_mod.load_ledger(job.ledger.path))
    if rebase:  # stopped at a conflict: say which series this was
        for rep in reports:
            rep.message = f"note: {rebase.message}; " + rep.message
    return reports


def _refuse_before_reading(job: ApplyRun, trees: dict[str, TreeArg]) -> Interruption | None:
    """What refuses the whole run before anything is downloaded or read: a ``--fuzz`` out of
    range, a tree that is the ledger, a ledger edit or rebase left half-done, an emptied lock.
    Returns a rebase stopped at a conflict (the apply goes on, and says so)."""
    if job.fuzz < 0 or job.fuzz > 3:
        raise InputError(f"--fuzz {job.fuzz} is out of range", hint="use 0 (default), 1, 2 or 3")
    ledger = job.ledger
    for arg in trees.values():
        refuse_ledger_tree(ledger, arg.path, arg.kind.flag)
    alien = ledger_mod.edit_journal(ledger.root).foreign() if ledger_mod.pending_edit(ledger.root) else None
    if alien is not None:  # a cloned ledger's own .patchset/ledger-txn: never replayed
        raise alien
    found = interruptions(ledger.root)
    rebase = next((i for i in found if i.kind == REBASE), None)
    if rebase and rebase.problem:
        raise InputError(rebase.message.split(": run")[0], hint="run `patchset rebase --continue` or `--abort` first")
    edit = next((i for i in found if i.kind == LEDGER_EDIT and i.problem), None)
    if edit:  # the ledger read may be half old, half new: nothing is checked against it
        raise EnvironmentFailure(
            edit.message.split(": run")[0] + "; nothing was written",
            hint="run `patchset recover` to finish it (or `--back` to undo it), then apply again",
        )
    gap = None if job.update_lock else lock_gap(ledger)
    if gap:  # an emptied lock would turn every check off: refused, not applied unchecked
        raise InputError(gap + "; nothing was written", hint=LOCK_HINT)
    return rebase


def _target(ledger: Ledger, name: str) -> Target:
    if name not in ledger.targets:
        raise InputError(f"unknown target {name!r}", hint=f"one of: {', '.join(ledger.targets)}")
    return ledger.targets[name]
