"""Apply a patch series to a directory tree: all patches or none, crash-safe, with hashes.

``apply_series`` parses every patch, checks every path is safe (``patchset.engine.paths``), reads
only the touched files, applies the series in memory (``patchset.engine.treestate``,
``patchset.engine.patching``: a file touched by several patches sees them in order) and, only if
every hunk of every patch applied, commits all resulting files at once through
``patchset.engine.txn`` (journal + staged files + renames; ``recover`` finishes or undoes an
interrupted commit). What it returns is in ``patchset.engine.results``; which patches a tree
already carries is ``patchset.engine.detect``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from patchset import locking
from patchset.engine import txn

# Re-exported (``X as X``) for verify/, which imports SeriesItem, SeriesResult and detect_state from
# here and is another branch's area: the rest of the code base imports them from their own modules.
from patchset.engine.detect import detect_state as detect_state
from patchset.engine.patching import apply_patch, parse_all
from patchset.engine.paths import Paths, check_links
from patchset.engine.results import PatchResult
from patchset.engine.results import SeriesItem as SeriesItem
from patchset.engine.results import SeriesResult as SeriesResult
from patchset.engine.treestate import TreeState
from patchset.errors import EnvironmentFailure, PatchsetError
from patchset.ledger.lock import sha256_bytes
from patchset.progress import Progress


def apply_series(
    root: Path,
    items: list[SeriesItem],
    *,
    fuzz: int = 0,
    path_for: Callable[[str], str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    before_commit: Callable[[SeriesResult], bool] | None = None,
    before_finish: Callable[[], None] | None = None,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> SeriesResult:
    """Apply ``items`` in order to the tree at ``root``, all or nothing.

    ``remove_empty``: like GNU ``patch -E``, a file left empty by a patch is removed.
    ``before_commit`` sees the whole result (applied in memory, nothing written yet) and may veto
    the commit by returning False: one pass checks a result and writes it (apply's lock check).

    Raises ``PatchFormatError`` (a malformed patch), ``UnsafePathError`` (a path escaping the
    tree) before reading or writing anything, ``EnvironmentFailure`` (unreadable tree, another
    apply running, an interrupted apply to recover in dry-run mode). A patch that does not apply
    is *returned*: ``ok=False``, ``committed=False``, the tree untouched; call
    ``raise_for_failure()`` to turn it into ``ApplyFailed``.

    The tree lock (``patchset.locking``) is held from the first read to the last write, so a
    second apply to the same tree waits and then sees this one's result. ``before_finish`` is
    passed to ``txn.commit`` (called with every file in place; raising rolls the tree back), and
    so is ``durable`` (fsync every step against power loss; default ``$PATCHSET_FSYNC``).
    """
    root = Path(root)
    if not root.is_dir():
        raise EnvironmentFailure(f"{root}: not a directory", hint="pass the build tree's root")
    with locking.tree_lock(root):
        return _apply_series(
            root, items, fuzz, path_for, dry_run, progress, before_commit, before_finish, remove_empty, durable
        )


def _apply_series(
    root: Path,
    items: list[SeriesItem],
    fuzz: int,
    path_for: Callable[[str], str] | None,
    dry_run: bool,
    progress: Progress | None,
    before_commit: Callable[[SeriesResult], bool] | None,
    before_finish: Callable[[], None] | None,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> SeriesResult:
    recovered = None
    if txn.pending(root):
        if dry_run:
            raise interrupted_error(root)
        recovered = txn.recover(root)
    paths = Paths(root, path_for)
    state = TreeState(paths.root)
    parsed = parse_all(items, paths, state)
    results: list[PatchResult] = []
    failed: str | None = None
    for i, (item, fps) in enumerate(zip(items, parsed, strict=True), start=1):
        if failed:
            results.append(PatchResult(item.patch_id, "not_reached"))
            continue
        if progress:
            progress(item.patch_id, i, len(items))
        pr = apply_patch(state, fps, item, paths, fuzz, remove_empty)
        results.append(pr)
        if not pr.ok:
            failed = item.patch_id
    if failed is None:
        check_links(state, str(paths.root))
    touched = {rel: state.get(rel) for rel in list(state.disk)}
    files = {rel: (sha256_bytes(d) if d is not None else None) for rel, (d, _) in touched.items()}
    modes = {rel: m for rel, (_, m) in touched.items()}
    result = SeriesResult(
        root=str(root),
        ok=failed is None,
        dry_run=dry_run,
        committed=False,
        patches=results,
        files=files,
        modes=modes,
        recovered=recovered,
        failed_patch=failed,
    )
    if result.ok and not dry_run and (before_commit is None or before_commit(result)):
        txn.commit(paths.root, state.changes(files), before_finish, durable)
        result.committed = True
    return result


def recover(root: Path, direction: txn.Direction = "auto") -> str | None:
    """Finish (``auto``/``forward``) or undo (``back``) an interrupted ``apply_series``."""
    with locking.tree_lock(root):
        return txn.recover(Path(os.path.realpath(root)), direction)


def pending_apply(root: Path) -> bool:
    """Did an apply to ``root`` stop half-way (kill -9, power loss)? Reads only."""
    return txn.pending(Path(root))


def interrupted_error(root: Path) -> PatchsetError:
    """The error a read-only command gives on a tree with an interrupted apply (it writes nothing);
    ``ForeignJournal`` when the tree's transaction directory is not this installation's."""
    bad = txn.foreign(Path(root))
    if bad is not None:
        return bad
    return EnvironmentFailure(
        f"{root}: an earlier apply was interrupted ({txn.describe_pending(Path(root))}); nothing was written",
        hint=f"run `patchset recover --tree {root}` to finish it (or `--back` to undo it), or a real apply",
    )
