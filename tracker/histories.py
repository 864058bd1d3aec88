"""Where a merged PR's merge commit stands in a local upstream history: in the base, in
upstream's branch, first in which release.

Only a clone that is already there is read (``patchset.upstream.clone.UpstreamClone``): status
never clones or fetches. Without one the row says it cannot tell; a broken clone is a note on
the row, never a failure of the page.
"""

from __future__ import annotations

from typing import Any

from patchset.ledger.model import Ledger
from patchset.tracker.report import StatusRow

__all__ = ["open_histories", "place_merge"]


def open_histories(ledger: Ledger) -> dict[str, Any]:
    """A local upstream git history per target, when one is already there (never cloned or
    fetched here): the clone ``patchset.upstream.clone.UpstreamClone`` keeps for the target's upstream."""
    from patchset.upstream import cache

    clones = cache.subdir("upstream", create=False)
    if not clones.is_dir() or not any(clones.iterdir()):
        return {}  # no clone at all: skip importing the git layer (status --offline starts fast)
    from patchset.upstream.clone import UpstreamClone

    out: dict[str, Any] = {}
    for name, t in ledger.targets.items():
        try:
            clone = UpstreamClone(t.upstream)
        except Exception:
            continue
        if clone.cloned:
            out[name] = clone
    return out


def _releases(repo: Any) -> list[tuple[str, str]]:
    """``[(version, sha)]`` of the release tags of a history, oldest first."""
    if hasattr(repo, "releases"):
        return list(repo.releases())
    from packaging.version import InvalidVersion, Version

    out = repo.git(
        "for-each-ref", "--format=%(refname:strip=2) %(*objectname) %(objectname)", "refs/tags"
    ).stdout.decode()
    found = []
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        tag, sha = parts[0], parts[1] if len(parts) == 3 else parts[-1]
        try:
            found.append((Version(tag.lstrip("v")), tag.lstrip("v"), sha))
        except InvalidVersion:
            continue
    return [(v, s) for _, v, s in sorted(found)]


def place_merge(row: StatusRow, target: Any, repo: Any | None) -> None:
    """Fill ``in_base``, ``in_main`` and ``first_release`` for a merged PR."""
    mc = row.pr.merge_commit if row.pr else None
    if not mc:
        return
    if repo is None:
        row.notes.append(f"no local history of {row.target}: cannot tell whether the merge is in the base")
        return
    try:
        if not repo.rev(mc):
            row.notes.append(f"merge commit {mc[:12]} is not in the local history of {row.target} (fetch it)")
            return
        base = repo.rev(target.base) if target.base else None
        if base is None and target.base:
            base = repo.rev(f"refs/tags/{target.base}") or repo.rev(f"refs/tags/v{target.base}")
        row.in_base = repo.is_ancestor(mc, base) if base else None
        if target.base and base is None:
            row.notes.append(f"base {target.base} is not in the local history of {row.target}")
        tip = repo.rev(f"refs/heads/{target.branch}") or repo.rev(f"refs/remotes/origin/{target.branch}")
        row.in_main = repo.is_ancestor(mc, tip) if tip else None
        for version, sha in _releases(repo):
            if repo.is_ancestor(mc, sha):
                row.first_release = version
                break
    except Exception as exc:
        row.notes.append(f"history of {row.target}: {exc}")
