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
from patchset.rebase.session import rebase

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
            rep = rebase(self.ledger_path, sha, target=self.target, repo=self.upstream.git_dir, dry_run=True)
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
