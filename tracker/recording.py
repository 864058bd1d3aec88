"""``status --refresh`` writes what it read into the ledger: ``[patch.status]`` of each patch.

The freshly read state of each primary PR (state, merge date and commit, the day recorded) and
the reverts and follow-ups GitHub's timeline named go in with one atomic edit of the ledger;
human notes and the vendored ``head`` are kept. A value the ledger's schema does not take is a
warning on the page, never a stop: the other rows are still recorded.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from patchset.ledger import store as ledger_mod
from patchset.tracker.report import RefRow, StatusReport, StatusRow

__all__ = ["record_status"]


def _recorded_followups(r: StatusRow) -> list[str] | None:
    """What ``[patch.status] followups`` becomes for a freshly read row: the reverts and
    follow-ups GitHub's timeline named (not mentions, not what a clone's commits say: the clone
    is read again each time); None when no timeline was read (keep what is recorded)."""
    from patchset.tracker import followups as fu

    if "timeline" not in r.followups_from or "recorded" in r.followups_from:
        return None  # no timeline read now (or only for some refs): keep what is recorded
    out: list[str] = []
    for d in (f for f in r.followups if f.get("via") == "timeline"):
        try:
            text = fu.recorded_text(fu.FollowUp.from_json(d))
        except fu.BadItem:
            continue
        if text and text not in out:
            out.append(text)
    return out


_SHA = re.compile(r"[0-9a-f]{7,40}")


def _recordable(pr: RefRow, today: dt.date) -> dict[str, Any] | None:
    """The ``[patch.status]`` values for a freshly read state, or None when one of them is not
    what the ledger's schema takes (the client checks every answer, so this is a last guard: a
    bad value must never stop the recording of the other rows)."""
    new: dict[str, Any] = {"pr_state": pr.state, "recorded": today}
    if pr.state == "merged" and pr.merged_at:
        try:
            new["merged_at"] = dt.date.fromisoformat(pr.merged_at[:10])
        except ValueError:
            return None
    if pr.state == "merged" and pr.merge_commit:
        if not _SHA.fullmatch(pr.merge_commit):
            return None
        new["merge_commit"] = pr.merge_commit
    return new


def record_status(ledger_path: Path, report: StatusReport, today: dt.date | None = None) -> list[str]:
    """Write every freshly read primary PR state into ``[patch.status]`` (one atomic edit), and
    the reverts and follow-ups GitHub's timeline named (``followups``). Human notes and the
    vendored ``head`` are kept. Returns the ids whose status changed."""
    today = today or dt.date.today()
    fresh = {r.id for r in report.rows if r.pr is not None and r.pr.source == "network" and r.pr.known}
    follow = {r.id: f for r in report.rows if (f := _recorded_followups(r)) is not None}
    if not fresh and not follow:
        return []
    changed: list[str] = []
    with ledger_mod.edit(ledger_path) as e:
        for r in report.rows:
            t = e.patch_table(r.id) if r.id in fresh or r.id in follow else None
            if t is None:
                continue
            old = dict(t.get("status") or {})
            new = _recordable(r.pr, today) if r.id in fresh and r.pr is not None else {}
            if new is None:
                report.warnings.append(f"{r.id}: upstream state not recorded (a value is not a date or a commit)")
                new = {}
            for k, v in new.items():
                e.set_path(t, f"status.{k}", v)
            if new and new["pr_state"] != "merged":
                for k in ("merged_at", "merge_commit"):
                    t["status"].pop(k, None)
            if r.id in follow:
                items = follow[r.id]
                if items:
                    e.set_path(t, "status.followups", items)
                else:
                    (t.get("status") or {}).pop("followups", None)
                if list(old.get("followups") or []) != items:
                    changed.append(r.id)
            if any(old.get(k) != v for k, v in new.items() if k != "recorded") and r.id not in changed:
                changed.append(r.id)
    return changed
