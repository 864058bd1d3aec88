"""One patch of a rebase: is it upstream already, superseded, carried, or in conflict?

``step`` gathers the signals that a patch landed upstream (``classify``), replays it on the new
tree (``replay``) and decides its verdict; a conflict that a recorded resolution (``rerere``)
resolves is carried like a clean one, any other gets the upstream commits that changed its lines.
``carry`` stacks a carried patch on the new tree; its body is regenerated later, for all carried
patches at once (``flush_bodies``).
"""

from __future__ import annotations

from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Patch
from patchset.patchfmt.diffs import header_text
from patchset.patchfmt.filepatch import FilePatch
from patchset.rebase.classify import (
    Evidence,
    Signal,
    blame_lines,
    map_line,
    merge_signals,
    reverse_apply_signal,
    subject_signals,
)
from patchset.rebase.context import Session
from patchset.rebase.regen import FileChange, range_diff, regenerate_many, render_changes
from patchset.rebase.replay import BROKEN, FileReplay, PatchReplay, replay_patch
from patchset.rebase.replay import CONFLICT as F_CONFLICT
from patchset.rebase.report import (
    ALREADY_UPSTREAM,
    CARRIED,
    CONFLICT,
    SUPERSEDED,
    FileResult,
    How,
    HunkConflict,
    PatchResult,
)
from patchset.rebase.rerere import RRCache

__all__ = ["carry", "flush_bodies", "step"]


def _evidence(signals: list[Signal]) -> list[dict]:
    return [s.to_json() for s in signals]


def _file_result(s: Session, f: FileReplay) -> FileResult:
    fr = FileResult(path=f.path, new_path=f.new_path, how=f.how, moved_from=f.moved_from, message=f.message)
    if f.move is not None and f.moved_from:
        fr.move_candidates = [{"path": c.path, "similarity": c.similarity, "how": c.how} for c in f.move.candidates]
    return fr


def _conflict_hunks(s: Session, f: FileReplay, fp: FilePatch) -> list[HunkConflict]:
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


def _changes_for(s: Session, rep: PatchReplay) -> list[FileChange]:
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


def carry(s: Session, patch: Patch, rep: PatchReplay, res: PatchResult) -> None:
    s.pending[patch.id] = _changes_for(s, rep)
    rep.apply_to(s.new)
    res.verdict = CARRIED


def flush_bodies(s: Session) -> None:
    """Regenerate the bodies of every carried patch not done yet (one ``git diff`` for all)."""
    ids = [k for k in s.pending]
    if not ids:
        return
    by_patch = {p.id: p for p in s.patches}
    strips = [by_patch[k].strip_on(s.target) for k in ids]
    new = regenerate_many([(s.bodies[k], s.pending[k]) for k in ids], strips)
    by_id = {r.id: r for r in s.results}
    for k, body in zip(ids, new, strict=True):
        s.new_bodies[k] = body
        by_id[k].new_sha256 = sha256_bytes(body)
        by_id[k].range_diff = range_diff(s.bodies[k], body, k)
    s.pending.clear()


def step(s: Session, patch: Patch) -> tuple[PatchResult, PatchReplay]:
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
        signals.append(Signal(Evidence.EMPTY_REPLAY, f"replayed on {label}, the patch changes nothing"))
    res.evidence = _evidence(signals)
    if any(sig.decisive for sig in signals):
        res.verdict = ALREADY_UPSTREAM
        return res, rep
    if patch.generate is not None:  # a generated patch: its command decides, on the new world
        return res, _regenerate(s, patch, rep, res)
    if rep.status in ("conflict", "broken"):
        if rep.status == "conflict" and _rerere(s, rep, res):
            res.how = "resolved"
            carry(s, patch, rep, res)
            return res, rep
        for f, fr, fp in zip(rep.files, res.files, files, strict=True):
            if f.how in (F_CONFLICT, BROKEN):
                fr.hunks = _conflict_hunks(s, f, fp)
        res.verdict = CONFLICT
        return res, rep
    res.how = "moved" if rep.moved else rep.how
    carry(s, patch, rep, res)
    return res, rep


def _regenerate(s: Session, patch: Patch, rep: PatchReplay, res: PatchResult) -> PatchReplay:
    """Run a generated patch's command on the new world: the same diff is carried, another one
    refreshes the body (its range-diff in the report), a failing command is a conflict with the
    command's own message, a command that changes nothing means the change is upstream."""
    from patchset.rebase.generate import ScriptFailed, base_workspace, run_generate  # only a generated patch loads it

    assert patch.generate is not None
    label = s.label
    if s.workspace is None:  # made once, on the first generated patch
        s.workspace = base_workspace(s.bases, lambda key: s.new_base.get(key)[0], s.target)
    workspace = s.workspace
    workspace.set_world(dict(s.new.changes))
    try:
        gen = run_generate(patch.generate, s.root, workspace, label=label)
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
        res.evidence.append(
            Signal(Evidence.EMPTY_REGENERATION, f"run on {label}, the command changes nothing").to_json()
        )
        res.verdict = ALREADY_UPSTREAM
        return rep
    files = []
    for ch in gen.changes:
        path = ch.new_path or ch.old_path or ""
        if ch.after is None:
            files.append(FileReplay(path, None, How.CLEAN, ours=ch.before, delete_path=path))
        else:
            files.append(FileReplay(path, path, How.CLEAN, result=ch.after, mode=ch.new_mode, ours=ch.before))
    new_rep = PatchReplay(files)
    res.files = [_file_result(s, f) for f in files]
    same = header_text(s.bodies[patch.id]) + render_changes(gen.changes) == s.bodies[patch.id]
    carry(s, patch, new_rep, res)
    res.how = "regenerated" if same else "refreshed"
    return new_rep


def _rerere(s: Session, rep: PatchReplay, res: PatchResult) -> bool:
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
        f.how, f.result = How.RESOLVED, data
        fr.how, fr.rerere_id = How.RESOLVED, rid
        fr.message = f"resolved by the recorded resolution {rid[:12]} (patchset/rr-cache)"
    return bool(found)
