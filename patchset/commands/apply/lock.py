"""An apply's result proved against the lock before the tree is written, and the lock recorded.

``OnePass`` runs the engine once: the series is applied in memory, ``check`` compares every
patched file with the lock (or, with ``--update-lock``, stages the ledger edit that records it)
and only then does the engine commit; the ledger edit is published while the tree's old files
are still kept, so the tree and the lock never disagree. ``applying_marker`` is the note that
lets ``validate`` name a tree an apply was killed in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from patchset import atomic
from patchset.commands.apply.target import ApplyRun, Outcome, TargetReport, series_hashes
from patchset.commands.interrupted import APPLYING_DIR
from patchset.confine import confine
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import TreePass
from patchset.errors import InputError, UnsafePathError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Target
from patchset.upstream.stock import open_stock


def file_digest(f: Path) -> str | None:
    """sha256 of a file as the engine sees it (a symlink: of its target text, as git hashes it)."""
    if f.is_symlink():
        return sha256_bytes(os.fsencode(os.readlink(f)))
    return sha256_bytes(f.read_bytes()) if f.is_file() else None


def _compare(expected: dict[str, str | None], got: dict[str, str | None]) -> list[str]:
    bad = [p for p, d in got.items() if p in expected and expected[p] != d]
    bad += [p for p in expected if p not in got]
    return sorted(bad)


@dataclass
class OnePass:
    """One engine pass that applies in memory, proves the result against the lock and only then
    commits (``TreePass.apply``'s ``before_commit``): the series is read and applied once.

    Entered, it holds the applying note and, with ``--update-lock``, the ledger edit staged before the
    tree is touched and published while the old files are still kept, so the tree and the lock never
    disagree."""

    job: ApplyRun
    target: Target
    tree: TreePass
    report: TargetReport
    expected: dict[str, str | None] | None = field(init=False)  # the lock's files (None: no lock yet)
    edit: ledger_mod.Edit | None = field(default=None, init=False)
    refused: bool = field(default=False, init=False)  # the result did not match the lock: nothing written
    _open: ExitStack = field(default_factory=ExitStack, init=False, repr=False)

    def __post_init__(self) -> None:
        locked = self.job.ledger.lock.targets.get(self.target.name)
        self.expected = dict(locked.files) if locked and locked.files else None

    def __enter__(self) -> OnePass:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._open.close()

    def on_disk(self, key: str) -> str | None:
        """The digest of the tree's file at lock key ``key``, as it is on disk now."""
        return file_digest(self.tree.root / self.target.tree_path(key, self.report.layout))

    def apply(self, items: list[SeriesItem]) -> SeriesResult:
        result = self.tree.apply(items, before_commit=self.check, before_finish=self.finish)
        if self.edit is not None:
            self.edit.cancelled = True  # committed inside the tree's transaction, or not at all
        if self.tree.dry_run and result.ok:
            self.check(result)  # the engine commits nothing in a dry run; the lock is still checked
        return result

    def check(self, result: SeriesResult) -> bool:
        """The whole result, in memory: commit it only if it is what the lock says."""
        target, expected, report = self.target, self.expected, self.report
        got = {target.lock_key(k): v for k, v in result.files.items()}
        if expected:  # files only the already-carried patches touch: as they are on disk
            got.update({k: self.on_disk(k) for k in expected if k not in got})
        if expected and not self.job.update_lock:
            bad = _compare(expected, got)
            unlisted = sorted(k for k, v in got.items() if k not in expected and v is not None)
            if bad or unlisted:
                self.refused = True
                report.outcome, report.mismatched = Outcome.MISMATCH, sorted(bad + unlisted)
                report.hashes = {p: {"expected": expected.get(p), "actual": got.get(p)} for p in report.mismatched}
                what = []
                if bad:
                    what.append(f"{len(bad)} patched file(s) would not match the lock")
                if unlisted:
                    what.append(f"{len(unlisted)} patched file(s) are not in the lock: {', '.join(unlisted)}")
                report.message += (
                    "; ".join(what) + "; nothing was written (re-run with --update-lock if the new result is intended)"
                )
                return False
        if self.tree.dry_run:
            return False
        root, ledger = self.tree.root, self.job.ledger
        self._open.enter_context(applying_marker(ledger, root))
        if self.job.update_lock:
            before = {k: file_digest(root / k) for k in result.files}
            e = self._open.enter_context(ledger_mod.edit(ledger.path))
            fill_lock(
                e,
                ledger,
                target,
                {k: v for k, v in got.items() if v is not None},
                {target.lock_key(k): v for k, v in before.items() if v is not None},
            )
            e.stage()
            self.edit = e
        return True

    def finish(self) -> None:
        """Every file in place: the ledger and lock land, or the tree rolls back."""
        if self.edit is not None:
            self.edit.commit()

    def carried_mismatch(self, said: str) -> None:
        """The tree carries the whole series but its files are not the lock's: which differ."""
        expected, report = self.expected, self.report
        assert expected is not None  # the series is applied and no lock: "already"
        on_disk = {p: self.on_disk(p) for p in expected}
        report.result, report.outcome = None, Outcome.MISMATCH
        report.mismatched = [p for p, d in expected.items() if on_disk[p] != d]
        report.hashes = {p: {"expected": expected[p], "actual": on_disk[p]} for p in report.mismatched}
        report.message += said + ", but its files do not match the lock; nothing changed"


@contextmanager
def applying_marker(ledger: Ledger, root: Path) -> Iterator[None]:
    """A note beside the ledger naming the tree while an apply commits to it, so that ``validate``
    can point at a tree an apply was killed in (``commands.interrupted``). Best effort: a
    read-only ledger directory only loses the note, and it is not fsynced (the tree's own
    transaction directory is what recovery reads). A ``.patchset`` that links out of the ledger
    directory (a cloned ledger may carry one) gets no note: nothing is written through it."""
    name = f"{APPLYING_DIR}/{sha256_bytes(str(root).encode())[:16]}.json"
    mark: Path | None = None
    made: list[Path] = []  # the directories this note creates: removed again once empty
    try:
        mark = confine(ledger.root, name, what="the apply note", allow_state=True)
        made = [d for d in (mark.parent, mark.parent.parent) if not d.exists()]
        atomic.write_bytes(mark, json.dumps({"tree": str(root)}).encode(), durable=False)
    except UnsafePathError:
        mark = None
    except OSError:
        _remove_empty(made)
        mark = None
    try:
        yield
    finally:
        if mark is not None:
            mark.unlink(missing_ok=True)
            _remove_empty(made)


def _remove_empty(made: list[Path]) -> None:
    for empty in made:  # innermost first; one another process still uses stays
        try:
            empty.rmdir()
        except OSError:
            break


def fill_lock(
    e: ledger_mod.Edit, ledger: Ledger, target: Target, files: dict[str, str], base_files: dict[str, str]
) -> None:
    tl = e.lock.target(target.name)
    tl.base = target.base
    tl.files = dict(files)
    tl.base_files = dict(base_files)
    for p in ledger.series(target.name):
        e.lock.bodies[p.id] = sha256_bytes(ledger.body_file(p).read_bytes())


def record_lock(ledger: Ledger, target: Target, files: dict[str, str], base_files: dict[str, str]) -> None:
    with ledger_mod.edit(ledger.path) as e:
        fill_lock(e, ledger, target, files, base_files)


def complete_lock(ledger_path: Path, target: str, base: str | None = None, base_tree: Path | None = None) -> list[str]:
    """Each import records the patched files it made itself (an overlay's, a script's result); once
    a target's lock holds any, every file its series patches must be there, or the first apply
    stops on "not in the lock". The missing hashes come from the series applied to the base in
    memory (zero fuzz); the caller knows the base is at hand. Returns the keys added (none when the
    series does not apply there: apply says so)."""
    ledger = ledger_mod.load_ledger(ledger_path)
    t = ledger.targets[target]
    tl = ledger.lock.targets.get(target)
    if tl is None or not tl.files:
        return []  # an empty lock is recorded whole by the first apply
    try:
        with open_stock(ledger.root, t, base, base_tree) as stock:
            state = series_hashes(ledger, t, stock.read)
            missing = {t.lock_key(k): v for k, v in state.items() if v is not None and t.lock_key(k) not in tl.files}
            originals = {k: _digest(stock.read(k)) for k in missing}
    except InputError:
        return []  # the series does not apply to that base: apply says so, naming the patch
    if missing:
        with ledger_mod.edit(ledger_path) as e:
            lk = e.lock.target(target)
            for key, digest in missing.items():
                lk.files[key] = digest
                base_digest = originals[key]
                if base_digest is not None and key not in lk.base_files:
                    lk.base_files[key] = base_digest
    return sorted(missing)


def _digest(data: bytes | None) -> str | None:
    return sha256_bytes(data) if data is not None else None
