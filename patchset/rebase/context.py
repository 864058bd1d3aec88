"""One rebase run in memory: the series, both bases, the trees and what was found so far.

``open_session`` reads what the run needs up front (the bodies, parsed; the blobs of every touched
path in both bases; the files moved upstream; the patch-id and subject signals) so each patch's
step (``step``) asks git for little more. ``pick_target`` is the rule for which target a move onto
a new base is for (the gate uses it too); ``report_of`` turns a run into its report.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from patchset.errors import InputError, LedgerError, Location
from patchset.ledger.model import Ledger, Patch, Target
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import FilePatch
from patchset.rebase.classify import Signal, moves_for, patch_id_signals, subject_prs
from patchset.rebase.regen import FileChange
from patchset.rebase.replay import BlobStore, Merger, Move, Tree
from patchset.rebase.report import PatchResult, RebaseReport, RebaseStatus
from patchset.upstream.bases import Bases

__all__ = [
    "Series",
    "Session",
    "load_series",
    "open_session",
    "pick_target",
    "report_of",
    "source_named",
    "touched_paths",
]


@dataclass
class Session:
    """Everything one rebase run holds in memory."""

    ledger: Ledger
    target: Target
    bases: Bases
    patches: list[Patch]
    bodies: dict[str, bytes]
    parsed: dict[str, list[FilePatch]]
    old: Tree
    new: Tree
    new_base: BlobStore
    moves: dict[str, Move]
    pr_merges: Mapping[str, str]
    interactive: bool
    results: list[PatchResult] = field(default_factory=list)
    new_bodies: dict[str, bytes] = field(default_factory=dict)
    pending: dict[str, list[FileChange]] = field(default_factory=dict)  # carried, body not regenerated yet
    patch_ids: dict[str, Signal] = field(default_factory=dict)
    subject_prs: dict[int, tuple[str, str]] = field(default_factory=dict)  # (#N) in old..new subjects
    merger: Merger = field(default_factory=Merger)
    started: float = field(default_factory=time.monotonic)
    workspace: Any = None  # a generate.Workspace of the new base, made when a generated patch needs it
    ledger_files: list[str] = field(default_factory=list)  # the ledger, lock and bodies, relative to its root

    @property
    def root(self) -> Path:
        return self.ledger.root

    @property
    def label(self) -> str:
        return self.bases.onto

    def move(self, path: str) -> Move:
        m = self.moves.get(path)
        if m is None:
            m = moves_for(self.bases.repo, self.bases.old, self.bases.new, [path], (self.old.store, self.new_base))[
                path
            ]
            self.moves[path] = m
        return m

    def close(self) -> None:
        self.merger.close()
        if self.workspace is not None:
            self.workspace.close()
        self.bases.close()


def pick_target(ledger: Ledger, target: str | None, onto: str) -> Target:
    """The target a move onto ``onto`` is for: ``target`` when named; else the one whose package
    (or name) a ``PROJECT==VERSION`` spec names; else the only target with patches. InputError
    when it stays ambiguous."""
    if target is not None:
        if target not in ledger.targets:
            raise InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(ledger.targets)}")
        return ledger.targets[target]
    spec_project = onto.split("==", 1)[0].strip().lower() if "==" in onto else ""
    if spec_project:
        hits = [t for t in ledger.targets.values() if t.package.lower() == spec_project or t.name == spec_project]
        if len(hits) == 1:
            return hits[0]
    with_patches = [t for t in ledger.targets.values() if ledger.series(t.name)]
    if len(with_patches) == 1:
        return with_patches[0]
    raise InputError(
        f"which target should move onto {onto!r}? the ledger has several: {', '.join(ledger.targets)}",
        hint="name it with --target",
    )


@dataclass
class Series:
    """The target's active series as read once: the target, its patches, their bodies, the bodies
    parsed, and every path they name (as written), which the bases read."""

    target: Target
    patches: list[Patch]
    bodies: dict[str, bytes]
    parsed: dict[str, list[FilePatch]]
    paths: list[str]


def load_series(ledger: Ledger, target: str | None, onto: str) -> Series:
    """The series a move onto ``onto`` is for (``pick_target``), its bodies read and parsed."""
    t = pick_target(ledger, target, onto)
    patches = ledger.series(t.name)
    bodies: dict[str, bytes] = {}
    parsed: dict[str, list[FilePatch]] = {}
    for p in patches:
        path = ledger.body_file(p)
        if not path.is_file():
            raise LedgerError(
                f"the body of {p.id} is not imported ({p.body_path})",
                where=Location(ledger.path, p.line),
                hint="import or fetch it first: rebase needs every active body",
            )
        bodies[p.id] = path.read_bytes()
        parsed[p.id] = parse_patch(bodies[p.id], p.strip_on(t), source=p.body_path)
    return Series(t, patches, bodies, parsed, touched_paths(parsed))


def source_named(fp: FilePatch, target: Target) -> FilePatch:
    """``fp`` with the names of the source layout (the lock's keys, ``Target.lock_key``): a body
    imported from a build repository may name installed paths (``flashinfer/data/include/…``),
    while an upstream commit or release holds ``include/…``. A plain-directory base is read in the
    patches' own layout, so its session keeps the names as written."""
    old = target.lock_key(fp.old_path) if fp.old_path is not None else None
    new = target.lock_key(fp.new_path) if fp.new_path is not None else None
    if (old, new) == (fp.old_path, fp.new_path):
        return fp
    return replace(fp, old_path=old, new_path=new)


def touched_paths(parsed: dict[str, list[FilePatch]]) -> list[str]:
    out: list[str] = []
    for files in parsed.values():
        for fp in files:
            for p in fp.paths():
                if p not in out:
                    out.append(p)
    return out


def open_session(
    ledger: Ledger, series: Series, bases: Bases, pr_merges: Mapping[str, str] | None, interactive: bool
) -> Session:
    target, patches, bodies, parsed = series.target, series.patches, series.bodies, series.parsed
    if bases.kind != "dirs":  # a commit or a release: the source layout, as the lock's keys
        parsed = {pid: [source_named(fp, target) for fp in fps] for pid, fps in parsed.items()}
    old_store = BlobStore(bases.repo, bases.old)
    new_store = BlobStore(bases.repo, bases.new)
    paths = touched_paths(parsed)
    old_store.prefetch(paths)
    new_store.prefetch(paths)
    # rename detection only for paths the old base has and the new base lacks
    gone = [p for p in paths if old_store.get(p)[0] is not None and new_store.get(p)[0] is None]
    moves = moves_for(bases.repo, bases.old, bases.new, gone, (old_store, new_store))
    targets = [m.path for m in moves.values() if m.path]
    new_store.prefetch(targets)
    s = Session(
        ledger,
        target,
        bases,
        patches,
        bodies,
        parsed,
        Tree(old_store),
        Tree(new_store),
        new_store,
        moves,
        dict(pr_merges or {}),
        interactive,
    )
    wanted = {}
    for p in patches:
        touched = {q for fp in parsed[p.id] for q in fp.paths()}
        touched |= {path for q in touched if q in moves and (path := moves[q].path)}
        wanted[p.id] = (bodies[p.id], sorted(touched))
    s.patch_ids = patch_id_signals(bases.repo, bases.old, bases.new, wanted)
    if any(p.upstream.prs or p.upstream.ports for p in patches):
        s.subject_prs = subject_prs(bases.repo, bases.old, bases.new)
    s.ledger_files = [ledger.path.name, ledger.lock_path.name]
    s.ledger_files += [ledger.body_file(p).relative_to(ledger.root).as_posix() for p in patches]
    return s


def report_of(s: Session, status: RebaseStatus) -> RebaseReport:
    return RebaseReport(
        target=s.target.name,
        onto=s.bases.onto,
        old_base=s.bases.old_ref,
        old_commit=s.bases.old,
        new_commit=s.bases.new,
        new_base=s.bases.new_label,
        status=status,
        patches=list(s.results),
        seconds=round(time.monotonic() - s.started, 3),
    )
