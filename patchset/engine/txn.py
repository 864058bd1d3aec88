"""Crash-safe multi-file commit into a build tree (``apply``): the shared journal of
``patchset.journal`` with its transaction directory ``<tree>/.patchset-txn``.

After a crash at any instant ``recover(root)`` leaves the old tree or the new one. Ctrl-C (and
TERM/HUP) is held from the journal to the end of the commit. A tree commit fsyncs only when asked
(``apply --durable``, ``PATCHSET_FSYNC=1``), like ``git checkout`` and GNU ``patch``. A foreign
``.patchset-txn`` is never replayed (``ForeignJournal``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from patchset.errors import EnvironmentFailure, ForeignJournal
from patchset.journal.commit import Change, Journal
from patchset.journal.recovery import Direction

__all__ = [
    "FSYNC_ENV",
    "TXN_DIR",
    "commit",
    "describe_pending",
    "durable_default",
    "foreign",
    "pending",
    "recover",
]

TXN_DIR = ".patchset-txn"
FSYNC_ENV = "PATCHSET_FSYNC"  # "1": every commit is durable against power loss (``apply --durable``)


def durable_default() -> bool:
    """Whether a commit fsyncs when its caller does not say: ``$PATCHSET_FSYNC`` set and not 0."""
    return os.environ.get(FSYNC_ENV, "") not in ("", "0")


def journal(root: Path, durable: bool = True) -> Journal:
    """The transaction directory of the tree under ``root``."""
    root = Path(root)
    return Journal(
        root,
        root / TXN_DIR,
        busy="another patchset process is applying to this tree",
        back_cmd=f"patchset recover --tree {root} --back",
        durable=durable,
    )


def pending(root: Path) -> bool:
    """Is there an interrupted transaction (leftovers of any kind) under ``root``?"""
    return journal(root).pending()


def foreign(root: Path) -> ForeignJournal | None:
    """The error for a transaction directory under ``root`` this installation did not write
    (shipped with the tree, copied from another user), or None. Reads only."""
    return journal(root).foreign()


def describe_pending(root: Path) -> str:
    """What an interrupted transaction under ``root`` left, in words (reads only)."""
    return journal(root).describe()


def commit(
    root: Path,
    changes: list[Change],
    before_finish: Callable[[], None] | None = None,
    durable: bool | None = None,
) -> None:
    """Apply ``changes`` to the tree under ``root`` all-or-nothing, crash-safe.

    ``before_finish`` runs once every file is in place but while the old files are still kept
    (``apply --update-lock`` writes the lock there): if it raises, the tree is rolled back.
    ``durable`` (default: ``durable_default()``) fsyncs every step against power loss.
    """
    root = Path(root)
    if not changes:
        if before_finish is not None:
            before_finish()
        return
    j = journal(root, durable_default() if durable is None else durable)
    with j.locked():
        j.recover_locked("auto")
        try:
            prepared = j.prepare(changes)
        except OSError as exc:  # nothing in the tree has changed yet (no journal)
            raise EnvironmentFailure(
                f"{root}: cannot stage the new files: {exc}",
                hint="check free space and permissions; the tree is unchanged",
            ) from None
        try:
            j.commit_prepared(prepared, before_finish)
        except EnvironmentFailure:
            raise
        except OSError as exc:  # from before_finish: the tree was rolled back
            raise EnvironmentFailure(
                f"{root}: the tree was patched but {exc.filename or 'the lock'} could not be written: "
                f"{exc.strerror or exc}",
                hint="the tree was rolled back to its old state; free space or fix permissions and re-run",
            ) from None


def recover(root: Path, direction: Direction = "auto") -> str | None:
    """Finish or undo an interrupted commit under ``root``.

    Returns ``None`` (nothing to do), ``"discarded"`` (the journal was incomplete: tree untouched),
    ``"rolled forward"`` or ``"rolled back"`` (``back``). A foreign journal raises ``ForeignJournal``."""
    return journal(root).recover(direction)
