"""``patchset rebase``: carry a target's series onto a newer upstream and drop what landed there.

Each active patch is replayed in order, in memory (``replay``), onto the new base; every patch is
tried and classified (``classify``): carried (clean, with offset, merged 3-way, across a file
move), already upstream, superseded, or in conflict. A conflicting patch is set aside and the rest
go on top of the others. Without conflicts the result is recorded in one ``ledger.edit`` step:
bodies regenerated against the new base (``regen``), dropped patches marked with their evidence,
the target's base and the lock updated, the previous series kept in a backup. ``interactive``
stops at a conflict with only the conflicted files written out; ``continue_rebase``, ``skip`` and
``abort`` carry on from the saved state (``rebase_state``); resolutions are recorded in git's
rerere format (``rerere``) and replay on the next rebase.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

import tomlkit

from patchset.errors import InputError, LedgerError, Location
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import render_lock, sha256_bytes
from patchset.ledger.model import Ledger, Patch, Target
from patchset.patchfmt.diffs import FilePatch, header_text, parse_patch
from patchset.progress import Progress
from patchset.rebase.classify import (
    Signal,
    blame_lines,
    map_line,
    merge_signals,
    moves_for,
    patch_id_signals,
    reverse_apply_signal,
    subject_prs,
    subject_signals,
)
from patchset.rebase.regen import FileChange, range_diff, regenerate_many
from patchset.rebase.replay import (
    BROKEN,
    BlobStore,
    FileReplay,
    Merger,
    Move,
    PatchReplay,
    Tree,
    replay_patch,
)
from patchset.rebase.replay import (
    CONFLICT as F_CONFLICT,
)
from patchset.rebase.report import (
    ALREADY_UPSTREAM,
    CARRIED,
    CONFLICT,
    SKIPPED,
    SUPERSEDED,
    FileResult,
    HunkConflict,
    PatchResult,
    RebaseReport,
)
from patchset.rebase.rerere import RRCache, has_markers
from patchset.rebase.state import State, new_backup_dir, pause_point
from patchset.records import record
from patchset.upstream.bases import Bases, open_bases, reopen

__all__ = ["AbortResult", "RebaseReport", "abort", "continue_rebase", "pick_target", "rebase", "skip"]


# --------------------------------------------------------------------------- the session


@record
class _Session:
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


def _load_series(ledger: Ledger, target: Target) -> tuple[list[Patch], dict[str, bytes], dict[str, list[FilePatch]]]:
    patches = ledger.series(target.name)
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
        parsed[p.id] = parse_patch(bodies[p.id], strip_of(p, target), source=p.body_path)
    return patches, bodies, parsed


def strip_of(p: Patch, target: Target) -> int:
    """The patch's own ``-p`` level (a quilt series line ``x.patch -p0``), else the target's."""
    return p.source.strip if p.source.strip is not None else target.strip


def _touched(parsed: dict[str, list[FilePatch]]) -> list[str]:
    out: list[str] = []
    for files in parsed.values():
        for fp in files:
            for p in fp.paths():
                if p not in out:
                    out.append(p)
    return out


def _open_session(
    ledger: Ledger,
    target: Target,
    bases: Bases,
    pr_merges: Mapping[str, str] | None,
    interactive: bool,
    series: tuple[list[Patch], dict[str, bytes], dict[str, list[FilePatch]]],
) -> _Session:
    patches, bodies, parsed = series
    old_store = BlobStore(bases.repo, bases.old)
    new_store = BlobStore(bases.repo, bases.new)
    paths = _touched(parsed)
    old_store.prefetch(paths)
    new_store.prefetch(paths)
    # rename detection only for paths the old base has and the new base lacks
    gone = [p for p in paths if old_store.get(p)[0] is not None and new_store.get(p)[0] is None]
    moves = moves_for(bases.repo, bases.old, bases.new, gone, (old_store, new_store))
    targets = [m.path for m in moves.values() if m.path]
    new_store.prefetch(targets)
    s = _Session(
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
    return s


# --------------------------------------------------------------------------- one patch


def _evidence(signals: list[Signal]) -> list[dict]:
    return [s.to_json() for s in signals]


def _file_result(s: _Session, f: FileReplay) -> FileResult:
    fr = FileResult(path=f.path, new_path=f.new_path, how=f.how, moved_from=f.moved_from, message=f.message)
    if f.move is not None and f.moved_from:
        fr.move_candidates = [{"path": c.path, "similarity": c.similarity, "how": c.how} for c in f.move.candidates]
    return fr


def _conflict_hunks(s: _Session, f: FileReplay, fp: FilePatch) -> list[HunkConflict]:
    """The conflicting hunks of one file, each with the upstream commits that changed its lines."""
    repo, old, new = s.bases.repo, s.bases.old, s.bases.new
    path = f.new_path or f.path
    base_now = s.new_base.get(path)[0]
    failed = [h for h in f.hunks if h.status == "failed"]
    if not failed or base_now is None:  # deleted upstream, created on both sides, or not even the old base
        commits = [{"sha": e.sha, "subject": e.subject} for e in repo.log_range(old, new, path)]
        return [HunkConflict(0, "(whole file)", 0, commits)]
    out = []
    last = max(base_now.count(b"\n"), 1)
    for h in failed:
        hunk = fp.hunks[h.index - 1]
        start = min(map_line(f.ours, base_now, max(h.nearest.line if h.nearest else h.expected_line, 1)), last)
        end = min(start + max(len(hunk.old_lines()), 1) - 1, last)
        commits = [{"sha": b.sha, "subject": b.subject} for b in blame_lines(repo, old, new, path, start, end)]
        out.append(HunkConflict(h.index, hunk.header(), start, commits))
    return out


def _changes_for(s: _Session, rep: PatchReplay) -> list[FileChange]:
    """What the patch changes in the new world, file by file (taken before it is stacked)."""
    changes = []
    for f in rep.files:
        if not f.changed:
            continue
        if f.delete_path and f.new_path and f.delete_path != f.new_path:
            ch = FileChange(f.delete_path, f.new_path, f.ours, f.result, s.new.mode(f.delete_path), f.mode)
        elif f.delete_path and f.new_path is None:
            ch = FileChange(f.delete_path, None, f.ours, None, s.new.mode(f.delete_path), None)
        elif f.new_path is not None:
            before_mode = s.new.mode(f.new_path) if f.ours is not None else None
            ch = FileChange(
                f.new_path if f.ours is not None else None, f.new_path, f.ours, f.result, before_mode, f.mode
            )
        else:
            continue
        ch.patch_path = f.path
        changes.append(ch)
    return changes


def _carry(s: _Session, patch: Patch, rep: PatchReplay, res: PatchResult) -> None:
    s.pending[patch.id] = _changes_for(s, rep)
    rep.apply_to(s.new)
    res.verdict = CARRIED


def _flush_bodies(s: _Session) -> None:
    """Regenerate the bodies of every carried patch not done yet (one ``git diff`` for all)."""
    ids = [k for k in s.pending]
    if not ids:
        return
    by_patch = {p.id: p for p in s.patches}
    strips = [strip_of(by_patch[k], s.target) for k in ids]
    new = regenerate_many([(s.bodies[k], s.pending[k]) for k in ids], strips)
    by_id = {r.id: r for r in s.results}
    for k, body in zip(ids, new, strict=True):
        s.new_bodies[k] = body
        by_id[k].new_sha256 = sha256_bytes(body)
        by_id[k].range_diff = range_diff(s.bodies[k], body, k)
    s.pending.clear()


def _step(s: _Session, patch: Patch) -> tuple[PatchResult, PatchReplay]:
    files = s.parsed[patch.id]
    repo, label = s.bases.repo, s.label
    res = PatchResult(patch.id, CONFLICT, old_sha256=sha256_bytes(s.bodies[patch.id]))
    github = s.target.github
    signals = merge_signals(patch, repo, s.bases.new, label, s.pr_merges, ports=True)
    signals += subject_signals(patch, github, s.subject_prs, label, ports=True)
    superseded = any(sig.name == "port-merged" for sig in signals)
    signals += merge_signals(patch, repo, s.bases.new, label, s.pr_merges, ports=False)
    signals += subject_signals(patch, github, s.subject_prs, label, ports=False)
    rev = None if superseded else reverse_apply_signal(files, s.new, s.move, label)
    rep = replay_patch(files, s.old, s.new, s.move, s.merger, (f"upstream {label}", f"patch {patch.id}"))
    res.files = [_file_result(s, f) for f in rep.files]
    for f in rep.files:
        if f.moved_from and f.move is not None and f.move.ambiguous:
            cands = ", ".join(f"{c.path} ({c.similarity}%)" for c in f.move.candidates)
            res.warnings.append(f"the move target of {f.moved_from} is ambiguous: {cands}; followed {f.new_path}")
    if superseded:
        res.verdict, res.evidence = SUPERSEDED, _evidence(signals)
        return res, rep
    if patch.id in s.patch_ids:
        signals.append(s.patch_ids[patch.id])
    if rev:
        signals.append(rev)
    if rep.status == "empty":
        signals.append(Signal("empty-replay", f"replayed on {label}, the patch changes nothing"))
    res.evidence = _evidence(signals)
    if any(sig.decisive for sig in signals):
        res.verdict = ALREADY_UPSTREAM
        return res, rep
    if patch.generate is not None:  # a generated patch: its command decides, on the new world
        return res, _regenerate(s, patch, rep, res)
    if rep.status in ("conflict", "broken"):
        if rep.status == "conflict" and _rerere(s, rep, res):
            res.how = "resolved"
            _carry(s, patch, rep, res)
            return res, rep
        for f, fr, fp in zip(rep.files, res.files, files, strict=True):
            if f.how in (F_CONFLICT, BROKEN):
                fr.hunks = _conflict_hunks(s, f, fp)
        res.verdict = CONFLICT
        return res, rep
    res.how = "moved" if rep.moved else rep.how
    _carry(s, patch, rep, res)
    return res, rep


def _new_base_maker(s: _Session) -> Callable[[Path], None]:
    """Writes the whole new base into a directory (a plain-directory base is copied as it is: its
    throwaway history holds only the files the series touches)."""
    from patchset.rebase.generate import copy_tree
    from patchset.upstream.stock import materialise_commit

    b = s.bases
    if b.kind == "dirs":
        return lambda dest: copy_tree(Path(b.location["new"]), dest)
    return lambda dest: materialise_commit(b.repo.git_dir, b.new, dest)


def _new_base_reader(s: _Session) -> Callable[[str], bytes | None]:
    """A file of the new base by its (source-layout) path: from the directory itself for a
    plain-directory base (its history holds only the series' files), else from the commit."""
    b = s.bases
    if b.kind != "dirs":
        return lambda key: s.new_base.get(key)[0]
    from patchset.confine import confine
    from patchset.errors import UnsafePathError

    root = Path(b.location["new"])

    def read(key: str) -> bytes | None:  # the directory is in the patches' layout, as the rebase reads it
        try:
            f = confine(root, key, what=f"file {key!r} of the new base")
        except UnsafePathError:
            return None
        return f.read_bytes() if f.is_file() and not f.is_symlink() else None

    return read


def _regenerate(s: _Session, patch: Patch, rep: PatchReplay, res: PatchResult) -> PatchReplay:
    """Run a generated patch's command on the new world: the same diff is carried, another one
    refreshes the body (its range-diff in the report), a failing command is a conflict with the
    command's own message, a command that changes nothing means the change is upstream."""
    from patchset.rebase.generate import ScriptFailed, Workspace, run_generate
    from patchset.rebase.regen import render_changes

    assert patch.generate is not None
    label = s.label
    if s.workspace is None:
        s.workspace = Workspace(_new_base_maker(s), _new_base_reader(s), s.target)
    s.workspace.set_world(dict(s.new.changes))
    try:
        gen = run_generate(patch.generate, s.root, s.workspace, label=label)
    except ScriptFailed as exc:
        why = f"the generate command fails on {label}: {exc.output.strip() or exc.message}"
        for f in rep.files:
            f.how, f.result, f.new_path = F_CONFLICT, s.new.read(f.new_path or f.path), f.new_path or f.path
        res.files = [_file_result(s, f) for f in rep.files]
        for fr in res.files:
            fr.message = why
        res.verdict = CONFLICT
        return rep
    if not gen.changes:
        res.evidence.append(Signal("empty-regeneration", f"run on {label}, the command changes nothing").to_json())
        res.verdict = ALREADY_UPSTREAM
        return rep
    files = []
    for ch in gen.changes:
        path = ch.new_path or ch.old_path or ""
        if ch.after is None:
            files.append(FileReplay(path, None, "clean", ours=ch.before, delete_path=path))
        else:
            files.append(FileReplay(path, path, "clean", result=ch.after, mode=ch.new_mode, ours=ch.before))
    new_rep = PatchReplay(files)
    res.files = [_file_result(s, f) for f in files]
    same = header_text(s.bodies[patch.id]) + render_changes(gen.changes) == s.bodies[patch.id]
    _carry(s, patch, new_rep, res)
    res.how = "regenerated" if same else "refreshed"
    return new_rep


def _rerere(s: _Session, rep: PatchReplay, res: PatchResult) -> bool:
    """Resolve every conflicting file of ``rep`` from recorded resolutions; all or nothing."""
    rr = RRCache(s.root)
    found: list[tuple[FileReplay, FileResult, str, bytes]] = []
    for f, fr in zip(rep.files, res.files, strict=True):
        if f.how != F_CONFLICT:
            continue
        if f.result is None:
            return False

        def merge3(base: bytes, ours: bytes, theirs: bytes) -> tuple[bytes, int]:
            m = s.merger.merge(base, ours, theirs, ("this", "preimage", "postimage"))
            return m.data, m.conflicts

        hit = rr.resolve(f.result, merge3)
        if hit is None:
            return False
        found.append((f, fr, hit[0], hit[1]))
    for f, fr, rid, data in found:
        f.how, f.result = "resolved", data
        fr.how, fr.rerere_id = "resolved", rid
        fr.message = f"resolved by the recorded resolution {rid[:12]} (patchset/rr-cache)"
    return bool(found)


# --------------------------------------------------------------------------- running


def _report(s: _Session, status: str) -> RebaseReport:
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


def _run(s: _Session, start: int, progress: Progress | None, dry_run: bool, state: State) -> RebaseReport:
    total = len(s.patches)
    for i in range(start, total):
        patch = s.patches[i]
        if progress:
            progress(patch.id, i + 1, total)
        res, rep = _step(s, patch)
        s.results.append(res)
        if i == start:
            pause_point("replay")
        if res.verdict == CONFLICT and s.interactive and not dry_run:
            return _stop(s, state, i, rep)
    _flush_bodies(s)
    if any(r.verdict == CONFLICT for r in s.results):
        return _report(s, "conflicts")
    if dry_run:
        return _report(s, "dry-run")
    return _commit(s, state)


def rebase(
    ledger_path: Path,
    onto: str,
    *,
    target: str | None = None,
    repo: Path | str | None = None,
    interactive: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    pr_merges: Mapping[str, str] | None = None,
    old_base: str | None = None,
    download_progress: Progress | None = None,
) -> RebaseReport:
    """Rebase the active series of ``target`` onto ``onto`` (commit, tag, branch, ``vllm==X.Y.Z``,
    a directory).

    ``repo``: a local git repository holding both bases (default: the target's ``upstream`` when it
    is a local path, else the release history of the target's package). ``pr_merges`` maps a PR
    (``owner/repo#N``) to its merge commit (fresher than the ledger's recorded status).
    ``old_base`` overrides the base recorded in the ledger. ``download_progress`` hears the bytes
    of a release downloaded for the bases. Nothing is written when ``dry_run``,
    nor when a patch conflicts outside ``interactive`` mode (the report says what to read).
    """
    ledger_path = Path(ledger_path)
    if ledger_mod.pending_edit(ledger_path.parent):
        if dry_run:
            raise InputError(
                "a ledger edit was interrupted: the ledger, lock and bodies may be half old, half new",
                hint="run `patchset recover` to finish it (or `--back` to undo it), then rebase again",
            )
        ledger_mod.recover_edit(ledger_path.parent)  # the series is read from a whole ledger
    ledger = ledger_mod.load_ledger(ledger_path)
    state = State(ledger.root)
    if state.in_progress():
        state.refuse_if_in_progress()
    t = pick_target(ledger, target, onto)
    series = _load_series(ledger, t)
    bases = open_bases(
        ledger.root,
        t,
        onto,
        repo=repo,
        old_base=old_base,
        paths=_touched(series[2]),
        download_progress=download_progress,
    )
    try:
        s = _open_session(ledger, t, bases, pr_merges, interactive, series)
    except BaseException:
        bases.close()
        raise
    try:
        return _run(s, 0, progress, dry_run, state)
    finally:
        s.close()


# --------------------------------------------------------------------------- commit


def _ledger_rels(s: _Session) -> list[str]:
    root = s.root
    rels = [s.ledger.path.name, s.ledger.lock_path.name]
    rels += [s.ledger.body_file(p).relative_to(root).as_posix() for p in s.patches]
    return rels


def _apply_to_doc(s: _Session, e: ledger_mod.Edit) -> None:
    label = s.bases.new_label
    tdoc = e.doc["targets"][s.target.name]
    tdoc["base"] = label
    if s.bases.new_version:
        tdoc["base_version"] = s.bases.new_version
    tl = e.lock.target(s.target.name)
    tl.base, tl.base_files, tl.files = label, {}, {}
    for r in s.results:
        patch = next(p for p in s.patches if p.id == r.id)
        table = e.patch_table(r.id)
        if table is None:
            raise LedgerError(f"patch {r.id} vanished from {s.ledger.path} during the rebase")
        if r.verdict in (ALREADY_UPSTREAM, SUPERSEDED):
            e.set_path(table, "state", "dropped")
            e.set_path(table, "reason", r.reason(label))
        elif r.verdict == SKIPPED:
            e.set_path(table, "state", "held")
            e.set_path(table, "reason", r.reason(label))
        elif r.verdict == CARRIED:
            body = s.new_bodies[r.id]
            if body != s.bodies[r.id]:  # an unchanged body is not rewritten
                e.write_file(patch.body_path, body)
            e.lock.bodies[r.id] = sha256_bytes(body)
            moved = {f.path: f.new_path for f in r.files if f.moved_from and f.new_path}
            if moved and "files" in table:
                arr = tomlkit.array()
                for f in table["files"]:
                    arr.append(moved.get(str(f), str(f)))
                table["files"] = arr
            for fp in parse_patch(body, strip_of(patch, s.target), source=patch.body_path):
                for path in fp.paths():
                    key = s.target.lock_key(path)
                    base, final = s.new_base.get(path)[0], s.new.read(path)
                    if base is not None:
                        tl.base_files[key] = sha256_bytes(base)
                    if final is not None:
                        tl.files[key] = sha256_bytes(final)


def _commit(s: _Session, state: State) -> RebaseReport:
    report = _report(s, "done")
    backup = new_backup_dir(s.root, s.target.name)
    with ledger_mod.edit(s.ledger.path) as e:
        _apply_to_doc(s, e)
        text = tomlkit.dumps(e.doc)
        ledger_mod.load_ledger(s.ledger.path, text)  # refuse before anything is written
        pending: dict[str, bytes | None] = {
            s.ledger.path.name: text.encode("utf-8"),
            s.ledger.lock_path.name: render_lock(e.lock).encode("utf-8"),
        }
        for path, data in e.files.items():
            pending[path.relative_to(s.root).as_posix()] = data
        report.written, report.backup = True, str(backup.relative_to(s.root))
        state.backup(backup, sorted(set(pending) | set(_ledger_rels(s))), _report_files(report))
        state.journal(backup, pending)
        pause_point("journal")
    pause_point("written")
    state.clear()
    return report


def _report_files(report: RebaseReport) -> dict[str, bytes]:
    rd = "".join(p.range_diff for p in report.patches if p.range_diff)
    return {
        "report.json": json.dumps(report.to_json(), indent=1, sort_keys=True).encode(),
        "range-diff.txt": rd.encode("utf-8"),
    }


# --------------------------------------------------------------------------- stop / continue / skip / abort


def _tree_json(state: State, t: Tree) -> dict[str, list]:
    return {p: [state.put(data), mode] for p, (data, mode) in sorted(t.changes.items())}


def _tree_from(state: State, store: BlobStore, d: dict[str, list]) -> Tree:
    return Tree(store, {p: (state.get(v[0]), v[1]) for p, v in d.items()})


def _replay_json(state: State, rep: PatchReplay) -> list[dict]:
    return [
        {
            "path": f.path,
            "new_path": f.new_path,
            "how": f.how,
            "result": state.put(f.result),
            "mode": f.mode,
            "ours": state.put(f.ours),
            "moved_from": f.moved_from,
            "delete_path": f.delete_path,
            "message": f.message,
        }
        for f in rep.files
    ]


def _replay_from(state: State, d: list[dict]) -> PatchReplay:
    return PatchReplay(
        [
            FileReplay(
                x["path"],
                x["new_path"],
                x["how"],
                state.get(x["result"]),
                x["mode"],
                state.get(x["ours"]),
                None,
                x["moved_from"],
                None,
                [],
                x["message"],
                x["delete_path"],
            )
            for x in d
        ]
    )


def _stop(s: _Session, state: State, index: int, rep: PatchReplay) -> RebaseReport:
    """Save the session and write the conflicted files out for editing."""
    _flush_bodies(s)
    if not state.stopped:
        state.clear()
        state.backup(state.dir / "backup", _ledger_rels(s))
    res = s.results[index]
    work = []
    for f in rep.files:
        if f.how == F_CONFLICT:
            work.append(state.write_work(f.new_path or f.path, f.result if f.result is not None else b""))
        elif f.how == BROKEN:
            # the body does not fit even the old base: give the human the new base's file to edit
            dest = f.new_path or s.move(f.path).path or f.path
            f.new_path = dest
            work.append(state.write_work(dest, s.new.read(dest) or b""))
    b = s.bases
    state.save(
        {
            "version": 1,
            "ledger": s.ledger.path.name,
            "target": s.target.name,
            "onto": b.onto,
            "old_ref": b.old_ref,
            "old": b.old,
            "new": b.new,
            "new_label": b.new_label,
            "new_version": b.new_version,
            "location": b.location,
            "pr_merges": dict(s.pr_merges),
            "interactive": s.interactive,
            "index": index,
            "stopped_at": res.id,
            "results": [asdict(r) for r in s.results],
            "new_bodies": {k: state.put(v) for k, v in s.new_bodies.items()},
            "old_tree": _tree_json(state, s.old),
            "new_tree": _tree_json(state, s.new),
            "replay": _replay_json(state, rep),
            "work": work,
            "started": time.time(),
            "ledger_sha256": sha256_bytes(s.ledger.path.read_bytes()),
        }
    )
    report = _report(s, "stopped")
    report.stopped_at, report.work_files, report.state_dir = res.id, work, str(state.dir.relative_to(s.root))
    return report


def _resume(ledger_path: Path) -> tuple[State, dict, _Session]:
    ledger_path = Path(ledger_path)
    ledger = ledger_mod.load_ledger(ledger_path)
    state = State(ledger.root)
    if not state.stopped:
        raise InputError("no rebase is stopped here", hint="start one with `patchset rebase --onto REF --interactive`")
    d = state.load()
    if sha256_bytes(ledger_path.read_bytes()) != d["ledger_sha256"]:
        raise InputError(
            f"{ledger_path.name} changed since the rebase stopped",
            hint="run `patchset rebase --abort` (it restores the ledger as it was) and start again",
        )
    t = ledger.targets[d["target"]]
    series = _load_series(ledger, t)
    bases = reopen(
        d["location"],
        d["old"],
        d["new"],
        d["old_ref"],
        d["onto"],
        d["new_label"],
        d["new_version"],
        _touched(series[2]),
    )
    try:
        s = _open_session(ledger, t, bases, d["pr_merges"], d["interactive"], series)
    except BaseException:
        bases.close()
        raise
    s.results = [PatchResult.from_json(r) for r in d["results"]]
    s.new_bodies = {k: state.get(v) or b"" for k, v in d["new_bodies"].items()}
    s.old = _tree_from(state, s.old.store, d["old_tree"])
    s.new = _tree_from(state, s.new_base, d["new_tree"])
    if [p.id for p in s.patches[: d["index"] + 1]] != [r.id for r in s.results]:
        s.close()
        raise InputError("the series changed since the rebase stopped", hint="run `patchset rebase --abort`")
    return state, d, s


def continue_rebase(ledger_path: Path, *, progress: Progress | None = None) -> RebaseReport:
    """Take the edited files of the stopped patch, record the resolution, and go on.

    After a kill while the new series was being written, finishes writing it instead.
    """
    ledger_path = Path(ledger_path)
    state = State(ledger_path.parent)
    if state.committing:
        return _finish_interrupted(state)
    state, d, s = _resume(ledger_path)
    try:
        index = d["index"]
        patch = s.patches[index]
        rep = _replay_from(state, d["replay"])
        res = s.results[index]
        rr = RRCache(s.root)
        for f, fr in zip(rep.files, res.files, strict=True):
            if f.how not in (F_CONFLICT, BROKEN):
                continue
            rel = f.new_path or f.path
            edited = state.read_work(rel)
            line = has_markers(edited)
            if line:
                raise InputError(
                    "a conflict marker is still there",
                    where=Location(state.dir / "work" / rel, line),
                    hint="finish resolving the file, or `patchset rebase --skip` this patch",
                )
            if f.how == F_CONFLICT and f.result is not None:
                fr.rerere_id = rr.record(f.result, edited) or ""
            f.how, f.result = "edited", edited
            fr.how, fr.new_path, fr.message = "edited", rel, "resolved by hand"
        res.how = "edited"
        _carry(s, patch, rep, res)
        s.results[index] = res
        return _run(s, index + 1, progress, False, state)
    finally:
        s.close()


def skip(ledger_path: Path, *, progress: Progress | None = None) -> RebaseReport:
    """Set the stopped patch aside (it becomes ``held`` with the reason) and go on."""
    state, d, s = _resume(Path(ledger_path))
    try:
        index = d["index"]
        s.results[index].verdict = SKIPPED
        return _run(s, index + 1, progress, False, state)
    finally:
        s.close()


def _finish_interrupted(state: State) -> RebaseReport:
    j = state.load_journal()
    state.finish_journal()
    backup = state.root / j["backup"]
    try:
        report = RebaseReport.from_json(json.loads((backup / "report.json").read_text()))
    except (OSError, ValueError):
        report = RebaseReport(target="", onto="", old_base="", old_commit="", new_commit="", new_base="", status="done")
    report.written, report.backup = True, j["backup"]
    state.clear()
    return report


@record
class AbortResult:
    """What ``rebase --abort`` restored."""

    restored: list[str]
    was: str  # stopped | committing

    def to_json(self) -> dict:
        return {"restored": self.restored, "was": self.was}


def abort(ledger_path: Path) -> AbortResult:
    """Stop the rebase in progress and put the ledger, lock and bodies back byte for byte."""
    state = State(Path(ledger_path).parent)
    if state.committing:
        j = state.load_journal()
        backup = state.root / j["backup"]
        restored = state.restore(backup)
        state.clear()
        shutil.rmtree(backup, ignore_errors=True)  # it would claim a rebase that did not happen
        return AbortResult(restored, "committing")
    if state.stopped:
        restored = state.restore(state.dir / "backup")
        state.clear()
        return AbortResult(restored, "stopped")
    if state.dir.exists():
        state.clear()
    raise InputError("no rebase is in progress here", hint="nothing to abort")
