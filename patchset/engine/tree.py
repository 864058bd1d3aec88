"""Apply a patch series to a directory tree: all patches or none, crash-safe, with hashes.

``TreePass`` holds a build tree for one pass: its lock taken and an interrupted commit finished
first (refused in a dry run), once, whatever the pass then does (``apply``, ``detect``).
``apply_series`` is a pass with one series. The series is parsed, its paths checked
(``patchset.engine.paths``), applied in memory (``treestate``, ``patching``) and, only if every
hunk applied, committed at once through ``patchset.engine.txn``; results are in
``patchset.engine.results``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from patchset import locking
from patchset.engine import txn
from patchset.engine.detect import SeriesState, detect_state
from patchset.engine.patching import apply_patch, parse_all
from patchset.engine.paths import Paths, check_links
from patchset.engine.results import PatchResult, SeriesItem, SeriesResult
from patchset.engine.treestate import TreeState
from patchset.errors import EnvironmentFailure, PatchsetError
from patchset.journal.recovery import Direction
from patchset.ledger.lock import sha256_bytes
from patchset.progress import Progress


@dataclass
class TreePass:
    """A build tree held for one pass (``with TreePass(root) as tree:``), and how series go onto it.

    Entering takes the tree lock (held to the last write) and finishes an interrupted earlier commit
    (``recovered``), or in a dry run raises ``interrupted_error``. ``path_for`` maps the patches'
    paths onto the tree's; ``remove_empty`` removes a file a patch leaves empty (GNU ``patch -E``);
    ``durable`` fsyncs every step (default ``$PATCHSET_FSYNC``)."""

    root: Path
    path_for: Callable[[str], str] | None = None
    fuzz: int = 0
    dry_run: bool = False
    remove_empty: bool = False
    durable: bool | None = None
    progress: Progress | None = None
    recovered: str | None = field(default=None, init=False)
    _held: ExitStack = field(default_factory=ExitStack, init=False, repr=False)

    def __enter__(self) -> TreePass:
        self.root = Path(self.root)
        if not self.root.is_dir():
            raise EnvironmentFailure(f"{self.root}: not a directory", hint="pass the build tree's root")
        with ExitStack() as held:
            held.enter_context(locking.tree_lock(self.root))
            if txn.pending(self.root):
                if self.dry_run:
                    raise interrupted_error(self.root)
                self.recovered = txn.recover(self.root)
            self._held = held.pop_all()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._held.close()

    def detect(self, items: list[SeriesItem], expected: dict[str, str | None] | None = None) -> SeriesState:
        """Which patches of ``items`` the tree carries (``detect_state``; reads only)."""
        return detect_state(self.root, items, expected, path_for=self.path_for)

    def apply(
        self,
        items: list[SeriesItem],
        before_commit: Callable[[SeriesResult], bool] | None = None,
        before_finish: Callable[[], None] | None = None,
    ) -> SeriesResult:
        """Apply ``items`` in order, all or nothing.

        ``before_commit`` sees the whole result in memory and may veto the commit by returning False;
        ``before_finish`` goes to ``txn.commit`` (raising rolls the tree back). A malformed patch or an
        escaping path raises before anything is read or written; a patch that does not apply is
        *returned* (``ok=False``, tree untouched; ``raise_for_failure()`` makes it ``ApplyFailed``)."""
        paths = Paths(self.root, self.path_for)
        state = TreeState(paths.root)
        parsed = parse_all(items, paths, state)
        results: list[PatchResult] = []
        failed: str | None = None
        for i, (item, fps) in enumerate(zip(items, parsed, strict=True), start=1):
            if failed:
                results.append(PatchResult(item.patch_id, "not_reached"))
                continue
            if self.progress:
                self.progress(item.patch_id, i, len(items))
            pr = apply_patch(state, fps, item, paths, self.fuzz, self.remove_empty)
            results.append(pr)
            if not pr.ok:
                failed = item.patch_id
        if failed is None:
            check_links(state, str(paths.root))
        touched = {rel: state.get(rel) for rel in list(state.disk)}
        files = {rel: (sha256_bytes(d) if d is not None else None) for rel, (d, _) in touched.items()}
        result = SeriesResult(
            root=str(self.root),
            ok=failed is None,
            dry_run=self.dry_run,
            committed=False,
            patches=results,
            files=files,
            modes={rel: m for rel, (_, m) in touched.items()},
            recovered=self.recovered,
            failed_patch=failed,
        )
        if result.ok and not self.dry_run and (before_commit is None or before_commit(result)):
            txn.commit(paths.root, state.changes(files), before_finish, self.durable)
            result.committed = True
        return result


def apply_series(
    root: Path,
    items: list[SeriesItem],
    *,
    fuzz: int = 0,
    path_for: Callable[[str], str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    remove_empty: bool = False,
) -> SeriesResult:
    """Apply ``items`` in order to the tree at ``root``, all or nothing: one ``TreePass`` (see it
    for the lock, the interrupted commit and what is raised or returned)."""
    with TreePass(Path(root), path_for, fuzz, dry_run, remove_empty, progress=progress) as tree:
        return tree.apply(items)


def recover(root: Path, direction: Direction = "auto") -> str | None:
    """Finish (``auto``/``forward``) or undo (``back``) an interrupted ``apply_series``."""
    with locking.tree_lock(root):
        return txn.recover(Path(os.path.realpath(root)), direction)


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
