"""Group testing of without-runs: one engine start for several patches when none of them is needed.

Why this module exists: when several patches need a without-run on the same engine, the tree
without all of them answers for all at once if their tests still pass there: each is "not needed"
for those tests, in one start instead of one each. A test that fails there says nothing yet about
its patch (any patch of the group may be the one it needs), so the patches whose tests failed are
tried again, each alone (adaptive: the per-test results say which ones to split off, so k needed
patches among n cost 1 + k starts instead of n; classic group testing, which knows only that the
group failed, needs about k·log2(n)). With every patch needed a group costs n + 1, so groups are
formed only from patches expected to be not needed (their last proof says so).

Two rules keep a group's answer the answer each patch would give alone:

* its patches watch disjoint files (``verify.plan.watch``): dropping them together changes each one's
  files exactly as dropping it alone does, so a later patch that depends on an earlier one (the
  same file, or a module it imports) is never dropped with it;
* the series without the whole group must apply (a dry run): when it does not, the group is
  dropped and its patches are tried one by one, and the plan says so.

What a pass without the group proves rests on one assumption, said in docs/verify-plan.md: a
patch's test that passes with several independent patches missing passes with only that one
missing (no other patch of the group undoes a fault this one's absence would show).
"""

from __future__ import annotations

from collections.abc import Callable

from patchset.verify.plan.watch import Watch, disjoint


def choose_groups(
    candidates: list[tuple[str, Watch]], applies: Callable[[list[str]], str]
) -> tuple[list[list[str]], list[str]]:
    """Groups of at least two candidates with pairwise disjoint watched files (greedy, in series
    order) whose drop applies; and notes on the groups given up."""
    groups: list[list[tuple[str, Watch]]] = []
    for pid, watch in candidates:
        for g in groups:
            if all(disjoint(watch, w) for _, w in g):
                g.append((pid, watch))
                break
        else:
            groups.append([(pid, watch)])
    out: list[list[str]] = []
    notes: list[str] = []
    for g in groups:
        ids = [pid for pid, _ in g]
        if len(ids) < 2:
            continue
        problem = applies(ids)
        if problem:
            notes.append(f"the series without {', '.join(ids)} together does not apply ({problem}): tried one by one")
            continue
        out.append(ids)
    return out, notes


def split(group: list[str], failed: list[str]) -> list[list[str]]:
    """The next tries after a group try whose tests failed for ``failed``: each of those patches
    alone (a single patch's own try is final)."""
    if len(group) <= 1:
        return []
    return [[pid] for pid in failed]


def simulate(members: list[str], needed: set[str]) -> int:
    """Engine starts adaptive splitting spends on ``members`` when exactly ``needed`` of them are
    needed (their tests fail without them, and only then): for the docs, the bench and the tests."""
    starts = 0
    todo = [members]
    while todo:
        group = todo.pop()
        starts += 1
        todo += split(group, [m for m in group if m in needed])
    return starts
