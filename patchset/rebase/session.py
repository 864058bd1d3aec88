"""``patchset rebase``: carry a target's series onto a newer upstream and drop what landed there.

Each active patch is replayed in order, in memory (``replay``), and classified (``classify``):
carried, already upstream, superseded, or in conflict (set aside; the rest go on). Without
conflicts the result is one ``ledger.edit``: bodies regenerated (``regen``), dropped patches
marked with their evidence, base and lock updated, the previous series backed up.
``interactive`` stops at a conflict; ``continue_rebase``, ``skip`` and ``abort`` carry on from the
saved state (``state``), and resolutions replay on the next rebase (``rerere``).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchset.errors import InputError, Location
from patchset.ledger import store as ledger_mod
from patchset.progress import Progress
from patchset.rebase.commit import commit, finish_interrupted
from patchset.rebase.context import Session, load_series, open_session, pick_target, report_of
from patchset.rebase.replay import BROKEN, PatchReplay
from patchset.rebase.replay import CONFLICT as F_CONFLICT
from patchset.rebase.report import CONFLICT, SKIPPED, How, RebaseReport, RebaseStatus
from patchset.rebase.rerere import RRCache, has_markers
from patchset.rebase.state import State, pause_point
from patchset.rebase.step import carry, flush_bodies, step
from patchset.rebase.stop import replay_from, resume, stop
from patchset.upstream.bases import open_bases

__all__ = ["AbortResult", "RebaseReport", "RebaseRun", "abort", "continue_rebase", "pick_target", "rebase", "skip"]


def _run(s: Session, start: int, progress: Progress | None, dry_run: bool, state: State) -> RebaseReport:
    """Step through the series from ``start``; the report is made once, at the end: stopped at a
    conflict (interactive), conflicts, a dry run, or done (written)."""
    total = len(s.patches)
    stopped: tuple[int, PatchReplay] | None = None
    for i in range(start, total):
        patch = s.patches[i]
        if progress:
            progress(patch.id, i + 1, total)
        res, rep = step(s, patch)
        s.results.append(res)
        if i == start:
            pause_point("replay")
        if res.verdict == CONFLICT and s.interactive and not dry_run:
            stopped = (i, rep)
            break
    flush_bodies(s)
    if stopped is not None:
        status = RebaseStatus.STOPPED
    elif any(r.verdict == CONFLICT for r in s.results):
        status = RebaseStatus.CONFLICTS
    else:
        status = RebaseStatus.DRY_RUN if dry_run else RebaseStatus.DONE
    report = report_of(s, status)
    if stopped is not None:
        return stop(s, state, *stopped, report)
    return commit(s, state, report) if status == RebaseStatus.DONE else report


@dataclass(frozen=True)
class RebaseRun:
    """One ``patchset rebase --onto``: the target's active series onto ``onto`` (commit, tag, branch,
    ``vllm==X.Y.Z``, a directory).

    ``repo`` holds both bases (default: the target's local ``upstream``, else the release history);
    ``pr_merges`` maps a PR to its merge commit; ``old_base`` overrides the recorded base. Nothing is
    written when ``dry_run``, nor when a patch conflicts outside ``interactive`` mode."""

    ledger_path: Path
    onto: str
    target: str | None = None
    repo: Path | str | None = None
    interactive: bool = False
    dry_run: bool = False
    progress: Progress | None = None
    pr_merges: Mapping[str, str] | None = None
    old_base: str | None = None
    download_progress: Progress | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ledger_path", Path(self.ledger_path))


def rebase(job: RebaseRun) -> RebaseReport:
    """Rebase the active series of ``job.target`` onto ``job.onto``; see ``RebaseRun``."""
    ledger_path = job.ledger_path
    if ledger_mod.pending_edit(ledger_path.parent):
        if job.dry_run:
            raise InputError(
                "a ledger edit was interrupted: the ledger, lock and bodies may be half old, half new",
                hint="run `patchset recover` to finish it (or `--back` to undo it), then rebase again",
            )
        ledger_mod.recover_edit(ledger_path.parent)  # the series is read from a whole ledger
    ledger = ledger_mod.load_ledger(ledger_path)
    state = State(ledger.root)
    if state.in_progress():
        state.refuse_if_in_progress()
    series = load_series(ledger, job.target, job.onto)
    bases = open_bases(
        ledger.root,
        series.target,
        job.onto,
        repo=job.repo,
        old_base=job.old_base,
        paths=series.paths,
        download_progress=job.download_progress,
    )
    try:
        s = open_session(ledger, series, bases, job.pr_merges, job.interactive)
    except BaseException:
        bases.close()
        raise
    try:
        return _run(s, 0, job.progress, job.dry_run, state)
    finally:
        s.close()


def continue_rebase(ledger_path: Path, *, progress: Progress | None = None) -> RebaseReport:
    """Take the edited files of the stopped patch, record the resolution, and go on.

    After a kill while the new series was being written, finishes writing it instead.
    """
    ledger_path = Path(ledger_path)
    state = State(ledger_path.parent)
    if state.committing:
        return finish_interrupted(state)
    state, d, s = resume(ledger_path)
    try:
        index = d["index"]
        patch = s.patches[index]
        rep = replay_from(state, d["replay"])
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
            f.how, f.result = How.EDITED, edited
            fr.how, fr.new_path, fr.message = "edited", rel, "resolved by hand"
        res.how = "edited"
        carry(s, patch, rep, res)
        s.results[index] = res
        return _run(s, index + 1, progress, False, state)
    finally:
        s.close()


def skip(ledger_path: Path, *, progress: Progress | None = None) -> RebaseReport:
    """Set the stopped patch aside (it becomes ``held`` with the reason) and go on."""
    state, d, s = resume(Path(ledger_path))
    try:
        index = d["index"]
        s.results[index].verdict = SKIPPED
        return _run(s, index + 1, progress, False, state)
    finally:
        s.close()


@dataclass
class AbortResult:
    """What ``rebase --abort`` restored."""

    restored: list[str]
    was: str  # stopped | committing

    def to_json(self) -> dict:
        return dict(self.__dict__)


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
