"""Drift: what became upstream of a PR the ledger carries verbatim.

For a patch whose ``origin`` is upstream, upstream-partial or revert: has the PR's head moved
since it was vendored (``lock.heads[id]``, else ``status.head``), and does its current diff,
filtered like the body (``[patch.source]`` globs, else the files our body touches), still have
our body's patch id. The answer is a drift class of ``tracker.report``: unchanged, revised,
merged-as-vendored, merged-with-changes, closed-unmerged, or head-moved / unknown when the diff
cannot be read (a note on the row says why).
"""

from __future__ import annotations

from typing import Any

from patchset.errors import PatchFormatError
from patchset.ledger.model import Ledger, Patch
from patchset.tracker.report import (
    CLOSED_UNMERGED,
    HEAD_MOVED,
    MERGED,
    MERGED_AS_VENDORED,
    MERGED_WITH_CHANGES,
    REVISED,
    UNCHANGED,
    UNKNOWN,
    StatusRow,
)
from patchset.upstream.refs import NO_NETWORK, OFFLINE, FetchError, PRRef

__all__ = ["analyse"]


def _upstream_filtered(ledger: Ledger, p: Patch, diff: bytes, body: bytes) -> bytes:
    strip = ledger.strip_of(p)
    from patchset.patchfmt.filters import filter_diff, split_sections

    if p.source.kind == "pr":
        return filter_diff(diff, p.source.include, p.source.exclude, strip, source=f"{p.id} upstream").data
    ours = [path for s in split_sections(body, strip, source=p.body_path) if s.kind == "file" for path in s.paths]
    return filter_diff(diff, ours, [], strip, source=f"{p.id} upstream").data if ours else diff


def analyse(ledger: Ledger, p: Patch, row: StatusRow, client: Any, mode: str) -> None:
    """The drift class of a verbatim upstream patch."""
    pr = row.pr
    if pr is None or not p.origin.verbatim or p.state == "dropped":
        return
    row.vendored_head = ledger.lock.heads.get(p.id) or p.status.head or None
    if pr.head and row.vendored_head:
        row.head_moved = not (pr.head.startswith(row.vendored_head) or row.vendored_head.startswith(pr.head))
    if pr.state == "closed":
        row.drift = CLOSED_UNMERGED
        return
    if not pr.known:
        row.drift = UNKNOWN
        return
    if row.head_moved is False:
        # the head we vendored is still the head: the diff is the one we took
        row.drift = MERGED_AS_VENDORED if pr.state == "merged" else UNCHANGED
        return
    same = _same_change(ledger, p, row, client)
    if pr.state == "merged":
        row.drift = {True: MERGED_AS_VENDORED, False: MERGED_WITH_CHANGES, None: MERGED}[same]
    elif same is True:
        row.drift = UNCHANGED
        if row.head_moved:
            row.notes.append("head moved since vendored, same change (patch id)")
    elif same is False:
        row.drift = REVISED
    else:
        row.drift = HEAD_MOVED if row.head_moved else UNKNOWN


def _same_change(ledger: Ledger, p: Patch, row: StatusRow, client: Any) -> bool | None:
    """Does upstream's current diff carry our body's change? None when it cannot be told."""
    body_path = ledger.body_file(p)
    if not body_path.is_file():
        row.notes.append("body not imported: cannot compare with upstream's diff")
        return None
    if client is None or row.pr is None or row.pr.source == "recorded":
        row.notes.append("upstream diff not read (no live or cached state): run `patchset status --refresh`")
        return None
    try:
        diff = client.pr_diff(PRRef.parse(row.pr.ref))
    except FetchError as exc:
        if exc.row.kind == OFFLINE:
            row.notes.append("upstream diff not cached: run `patchset status --refresh`")
        elif exc.row.kind == NO_NETWORK:
            row.notes.append("upstream diff not read: no network")
        else:
            row.notes.append(f"upstream diff: {exc.row}")
        return None
    body = body_path.read_bytes()
    strip = ledger.strip_of(p)
    from patchset.patchfmt.filters import patch_id

    try:
        theirs = patch_id(_upstream_filtered(ledger, p, diff, body), strip, source=f"{p.id} upstream")
        ours = patch_id(body, strip, source=p.body_path)
    except PatchFormatError as exc:
        row.notes.append(f"cannot compare diffs: {exc.message}")
        return None
    if theirs is None or ours is None:
        row.notes.append("nothing to compare: a diff without file sections")
        return None
    return theirs == ours
