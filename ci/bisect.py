"""First bad commit: which upstream commit made a patch stop replaying.

Between the last commit where the whole series replayed cleanly (``good``) and the judged commit
(``bad``), the gate bisects along upstream's first-parent history with the rebaser's in-memory
replay (``patchset rebase --dry-run``: no build, no checkout, nothing written). Each probe
replays the whole series onto one commit (a patch's fate depends on the patches under it) and
answers for every patch at once, so probes are shared between patches. A patch counts as broken
at a commit when the replay classifies it as a conflict there; the answer is the oldest commit
of the range whose probe says broken while the one before it does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from patchset.ci.upstream import Commit, Upstream
from patchset.progress import Progress
from patchset.rebase.report import CONFLICT
from patchset.rebase.session import RebaseRun, rebase

Probe = Callable[[str], dict[str, str]]  # commit sha -> {patch id: verdict}


@dataclass
class FirstBad:
    """The first upstream commit a patch breaks at, the last good one, and the commits probed."""

    patch: str
    commit: Commit | None  # None: the range was empty (it broke at the judged commit itself)
    last_good: str  # the commit before it (the lower bound when nothing else was probed)
    range_size: int  # commits between the last good commit and the judged one
    probes: list[str] = field(default_factory=list)  # commits replayed for this patch, in probe order

    def to_json(self) -> dict:
        return {
            "patch": self.patch,
            "commit": self.commit.to_json() if self.commit else None,
            "last_good": self.last_good,
            "range_size": self.range_size,
            "probes": len(self.probes),
        }


class Prober:
    """Replays the series onto a commit once and remembers every patch's verdict there."""

    def __init__(self, ledger_path: Path, target: str, upstream: Upstream, progress: Progress | None = None) -> None:
        self.ledger_path, self.target, self.upstream, self.progress = ledger_path, target, upstream, progress
        self.seen: dict[str, dict[str, str]] = {}

    def __call__(self, sha: str) -> dict[str, str]:
        if sha not in self.seen:
            if self.progress:
                self.progress(f"replay onto {sha[:12]}", 0, None)
            rep = rebase(RebaseRun(self.ledger_path, sha, target=self.target, repo=self.upstream.git_dir, dry_run=True))
            self.seen[sha] = {p.id: p.verdict for p in rep.patches}
        return self.seen[sha]


def first_bad(patches: list[str], good: str, commits: list[Commit], probe: Probe) -> dict[str, FirstBad]:
    """For each patch (broken at ``commits[-1]``), the first commit of ``commits`` where it breaks.

    ``commits`` is ``good..bad`` oldest first; the last one is never probed (it is known broken).
    """
    out: dict[str, FirstBad] = {}
    if not commits:
        return {p: FirstBad(p, None, good, 0) for p in patches}
    for pid in patches:
        lo, hi = -1, len(commits) - 1  # lo: replays cleanly (the good commit), hi: broken
        probes: list[str] = []
        while hi - lo > 1:
            mid = (lo + hi) // 2
            probes.append(commits[mid].sha)
            if probe(commits[mid].sha).get(pid) == CONFLICT:
                hi = mid
            else:
                lo = mid
        out[pid] = FirstBad(pid, commits[hi], commits[lo].sha if lo >= 0 else good, len(commits), probes)
    return out


@dataclass
class NewestSafe:
    """The newest upstream commit below the first bad one onto which the whole series replays.

    ``index`` is its place in ``commits`` (``-1``: none of them; the lower bound itself, the base
    or the last clean commit, is the newest safe one)."""

    index: int
    sha: str
    probes: list[str] = field(default_factory=list)  # commits replayed by this search (beyond the bisection's)


def newest_clean(good: str, commits: list[Commit], found: dict[str, FirstBad], probe: Probe) -> NewestSafe:
    """Search down from the earliest first bad commit for the newest commit where no patch of the
    series conflicts: the commit just below it is replayed whole; a patch that conflicts there
    (one that broke and healed, or one the judged commit does not show) is bisected below it in
    turn, and the search goes on below its first bad commit. Every step lowers the bound, so the
    search ends, at the latest at ``good`` (which replayed cleanly)."""
    index = {c.sha: i for i, c in enumerate(commits)}
    bad = [index[f.commit.sha] for f in found.values() if f.commit is not None and f.commit.sha in index]
    hi = min(bad) if bad else len(commits) - 1  # the lowest commit known broken
    probes: list[str] = []
    while hi > 0:
        cand = commits[hi - 1]
        if cand.sha not in probes:
            probes.append(cand.sha)
        verdicts = probe(cand.sha)
        broken = sorted(pid for pid, v in verdicts.items() if v == CONFLICT)
        if not broken:
            return NewestSafe(hi - 1, cand.sha, probes)
        again = first_bad(broken, good, commits[:hi], probe)  # commits[hi - 1] is known broken for them
        hi = min(index[f.commit.sha] for f in again.values() if f.commit is not None)
        probes += [s for f in again.values() for s in f.probes if s not in probes]
    return NewestSafe(-1, good, probes)
