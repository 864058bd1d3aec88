"""What was left half-done around a ledger: an apply killed while committing to a tree, a rebase
stopped at a conflict or killed while writing the new series, a ledger edit killed between its
renames.

``interruptions(ledger_root)`` is the one place that finds them; ``validate``, ``status`` and
``apply`` (its dry run too) all ask it. It only reads, and costs a few ``stat`` calls when there is
nothing to find: the engine and rebase modules are imported only when there is something to
describe, so ``status`` and ``validate`` stay fast to start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from patchset.ledger.store import edit_journal, pending_edit
from patchset.text import Word

APPLYING_DIR = ".patchset/applying"  # one note per tree an apply is committing to (commands.apply.lock)
REBASE_DIR = ".patchset/rebase"  # patchset.rebase.state.STATE_DIR


class WorkKind(Word):
    """The piece of work that was interrupted."""

    APPLY = "apply"
    REBASE = "rebase"
    LEDGER_EDIT = "ledger-edit"


APPLY, REBASE, LEDGER_EDIT = WorkKind


@dataclass
class Interruption:
    """One interrupted piece of work. ``problem``: files may be half old, half new until it is
    finished (``validate`` fails, ``apply`` refuses); otherwise a state the user is in on purpose
    (a rebase stopped at a conflict) or harmless leftovers."""

    kind: WorkKind
    where: str  # the tree (apply) or the ledger directory
    problem: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


MAX_NOTE = 64 << 10  # bytes: a note is one path; a cloned ledger may carry anything there


def interrupted_trees(ledger_root: Path) -> list[Path]:
    """Trees an apply from the ledger in ``ledger_root`` was killed in (still pending). Reads only.
    The notes may come with a cloned ledger: only absolute, printable paths are taken (recovery
    itself refuses a tree's journal this installation did not write)."""
    marks = sorted((ledger_root / APPLYING_DIR).glob("*.json"))
    if not marks:
        return []
    import json

    from patchset.engine.txn import pending  # the engine loads only when a note exists

    trees = []
    for mark in marks:
        try:
            with mark.open("rb") as fh:
                name = json.loads(fh.read(MAX_NOTE))["tree"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
        if not isinstance(name, str) or not name.isprintable() or not name.startswith("/"):
            continue
        tree = Path(name)
        if pending(tree):
            trees.append(tree)
    return trees


def pending_rebase(ledger_root: Path) -> tuple[bool, str] | None:
    """A rebase the ledger in ``ledger_root`` is in the middle of: (interrupted while writing?,
    what to say). Reads only."""
    if not (ledger_root / REBASE_DIR).is_dir():
        return None
    from patchset.errors import InputError
    from patchset.rebase.state import State

    state = State(ledger_root)
    alien = state.foreign()
    if alien is not None:  # a cloned ledger's own rebase state: reported, never replayed
        return False, f"{alien.message} ({alien.hint})"
    if state.committing:
        return True, (
            "a rebase was interrupted while writing the new series (the ledger, lock and bodies may be "
            "half old, half new): run `patchset rebase --continue` to finish it or `--abort` to undo it"
        )
    if state.stopped:
        try:
            data = state.load()
        except InputError:
            data = {}
        return False, (
            f"a rebase onto {data.get('onto', '?')} is in progress (stopped at {data.get('stopped_at', '?')}): "
            "the ledger still holds the series from before it (`patchset rebase --continue|--skip|--abort`)"
        )
    return None


def interruptions(ledger_root: Path) -> list[Interruption]:
    """Everything interrupted around the ledger in ``ledger_root``: a ledger edit, a rebase, the
    applies (one per tree). Reads only."""
    out = []
    bad = edit_journal(ledger_root).foreign() if pending_edit(ledger_root) else None
    if bad is not None:
        out.append(Interruption(LEDGER_EDIT, str(ledger_root), True, f"{bad.message} ({bad.hint})"))
    elif pending_edit(ledger_root):
        journal = edit_journal(ledger_root)
        torn, complete = journal.complete(), journal.describe()
        message = (
            f"a ledger edit was interrupted while writing ({complete}): the ledger, lock and bodies "
            "may be half old, half new: run `patchset recover` to finish it (add --back to undo it)"
            if torn
            else f"an interrupted ledger edit left staged files ({complete}): "
            "`patchset recover` (or the next edit) removes them"
        )
        out.append(Interruption(LEDGER_EDIT, str(ledger_root), torn, message))
    rebase = pending_rebase(ledger_root)
    if rebase:
        out.append(Interruption(REBASE, str(ledger_root), rebase[0], rebase[1]))
    if (ledger_root / APPLYING_DIR).is_dir():
        from patchset.engine.txn import describe_pending, foreign

        for tree in interrupted_trees(ledger_root):
            alien = foreign(tree)
            message = (
                f"{alien.message} ({alien.hint})"
                if alien is not None
                else f"an apply to {tree} was interrupted ({describe_pending(tree)}): "
                f"run `patchset recover --tree {tree}` (add --back to undo it)"
            )
            out.append(Interruption(APPLY, str(tree), True, message))
    return out
