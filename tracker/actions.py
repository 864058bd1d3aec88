"""The action of each dashboard row: what to do about a patch, given upstream's state.

First from the patch's own state and its PR's (``decide``): drop at the next rebase, refresh from
the PR, upstream it, held, dropped, check, nothing to do; then from upstream's later work on the
PRs it carries (``tracker.followups``): take upstream's follow-up, keep a patch whose PR upstream
reverted, drop one whose revert upstream reverted too.
"""

from __future__ import annotations

from patchset.ledger.model import Patch
from patchset.tracker.report import (
    CHECK,
    DROP,
    DROPPED,
    FOLLOW_UP,
    HEAD_MOVED,
    HELD,
    MERGED_WITH_CHANGES,
    NOTHING,
    REFRESH,
    REVERTED_UP,
    REVISED,
    UPSTREAM_IT,
    StatusRow,
)

__all__ = ["decide"]


def decide(p: Patch, row: StatusRow) -> None:
    _decide_state(p, row)
    if p.state == "active":
        _followup_action(row)


def _decide_state(p: Patch, row: StatusRow) -> None:
    pr = row.pr
    if p.state == "held":
        row.action, row.action_text = HELD, p.reason or "no reason recorded"
        return
    if p.state == "dropped":
        row.action, row.action_text = DROPPED, p.reason or "no reason recorded"
        return
    if pr is None:
        if p.origin in ("ours", "port"):
            who = "" if p.origin == "ours" else f"; or ask {', '.join(p.authors) or 'the author'}"
            row.action, row.action_text = UPSTREAM_IT, f"no upstream PR{who}"
        else:
            row.action, row.action_text = NOTHING, "no upstream PR to follow"
        return
    if pr.error and pr.error.get("error") == "not_found":
        row.action, row.action_text = CHECK, f"{pr.ref} not found upstream (deleted, renamed or private?)"
        return
    if not pr.known:
        why = f" ({row.error})" if row.error else ""
        row.action, row.action_text = CHECK, f"upstream state unknown{why}: retry `patchset status --refresh`"
        return
    if pr.state == "merged":
        row.action = DROP
        if row.in_base:
            row.action_text = "already in the base: drop it now"
        elif row.drift == MERGED_WITH_CHANGES:
            row.action_text = "merged with changes: the next base has upstream's version, not ours"
        else:
            when = f" {pr.merged_at[:10]}" if pr.merged_at else ""
            rel = f", first in {row.first_release}" if row.first_release else ""
            row.action_text = f"merged{when}{rel}"
        return
    if pr.state == "closed":
        row.action, row.action_text = UPSTREAM_IT, "PR closed without merging: carry it, or open a new PR"
        return
    if row.drift == REVISED:
        row.action, row.action_text = REFRESH, f"revised upstream: `patchset fetch --check {p.id}`, then --update"
        return
    if row.drift == HEAD_MOVED:
        row.action, row.action_text = REFRESH, f"head moved since vendored: `patchset fetch --check {p.id}`"
        return
    bits = [b for b in (pr.review and pr.review.lower().replace("_", " "), pr.ci and f"CI {pr.ci.lower()}") if b]
    row.action, row.action_text = NOTHING, f"PR {pr.state}" + (f" ({', '.join(bits)})" if bits else "")


def _short_ref(text: str) -> str:
    """``vllm-project/vllm#58999`` -> ``vllm#58999`` for the repositories with a short name."""
    from patchset.upstream.refs import DEFAULT_ALIASES

    repo, sep, n = text.partition("#")
    short = {v.lower(): k for k, v in DEFAULT_ALIASES.items()}.get(repo.lower())
    return f"{short}#{n}" if sep and short else text


def _followup_action(row: StatusRow) -> None:
    """What upstream's later work means for the action (after ``decide``'s own choice)."""
    live = [f for f in row.followups if f.get("in_base") is not True]
    carried = [f for f in live if f.get("role") in ("prs", "ports")]
    reverted = [f for f in carried if f["class"] == "reverted"]
    if reverted:
        f = reverted[0]
        when = f" on {f['merged_at'][:10]}" if f.get("merged_at") else ""
        row.action = REVERTED_UP
        row.action_text = (
            f"upstream reverted it: {_short_ref(f['ref'])}{when}; the next base does not carry it, keep the patch"
        )
        return
    undone = [f for f in live if f.get("role") == "reverts" and f["class"] == "reverted"]
    if undone:
        f = undone[0]
        row.action = DROP
        row.action_text = (
            f"upstream reverted {_short_ref(f['of'])} too ({_short_ref(f['ref'])}): drop it at that rebase"
        )
        return
    fixed = [f for f in carried if f["class"] == "follow-up-merged"]
    if fixed:
        names = ", ".join(_short_ref(f["ref"]) for f in fixed[:3]) + (
            f" and {len(fixed) - 3} more" if len(fixed) > 3 else ""
        )
        before = row.action_text
        row.action = FOLLOW_UP
        row.action_text = f"upstream fixed it again: take {names}" + (f" ({before})" if before else "")
    opened = [f for f in carried if f["class"] == "follow-up-open"]
    if opened:
        what = (
            "revert"
            if any(str(f.get("title", "")).lower().lstrip("[").startswith("revert") for f in opened)
            else "follow-up"
        )
        row.action_text += f"; {what} open upstream: " + ", ".join(_short_ref(f["ref"]) for f in opened[:3])
