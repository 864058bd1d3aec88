"""Later upstream work naming a patch's PRs, gathered for its dashboard row.

For each PR a patch carries, ports, reverts or is based on: the cross-references of its
timeline (in the batched GraphQL answer, live or cached), else what the ledger recorded
(``[patch.status] followups``); and, with a local clone, the branch's commits that name it.
Every item is checked again here (a cached state is as untrusted as an answer), merged into one
list (``tracker.followups.merge``) and placed against the target's base.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from patchset.ledger.model import Patch
from patchset.tracker.report import StatusRow
from patchset.upstream.refs import PRRef, PRState, RowError

__all__ = ["FOLLOWUP_ROLES", "collect_followups"]

FOLLOWUP_ROLES = ("prs", "ports", "reverts", "based_on")


def collect_followups(
    p: Patch,
    row: StatusRow,
    refs: list[tuple[str, PRRef]],
    states: Mapping[PRRef, PRState | RowError],
    target: Any,
    repo: Any | None,
) -> None:
    """Later upstream work naming each PR of the patch: the timeline of its state (live or
    cached), else what the ledger recorded; and, with a local clone, the branch's commits that
    name it. Each item is checked again here (a cached state is as untrusted as an answer)."""
    from patchset.tracker import followups as fu

    found: list[fu.FollowUp] = []
    recorded = [f for f in (fu.from_recorded(t) for t in p.status.followups) if f is not None]
    base = tip = None
    if repo is not None and target is not None:
        try:
            base = (repo.rev(target.base) if target.base else None) or None
            tip = repo.rev(f"refs/heads/{target.branch}") or repo.rev(f"refs/remotes/origin/{target.branch}")
        except Exception as exc:  # a broken clone: say so, show the rest
            row.notes.append(f"history of {row.target}: {exc}")
    for role, ref in refs:
        if role not in FOLLOWUP_ROLES or ref.kind != "pr":
            continue
        got = states.get(ref)
        items: list[fu.FollowUp] = []
        if isinstance(got, PRState) and got.followups is not None:
            _source(row, "timeline")
            for d in got.followups:
                try:
                    f = fu.FollowUp.from_json(d)
                except fu.BadItem as exc:
                    row.notes.append(f"{ref}: a follow-up left out ({exc})")
                    continue
                if f.of == str(ref):
                    items.append(f)
            row.notes += [f"{ref}: {n}" for n in got.followup_notes if isinstance(n, str)][:3]
        else:
            mine = [f for f in recorded if f.of == str(ref)]
            if mine or p.status.followups:
                _source(row, "recorded")
            items += mine
        if tip and target is not None and (not target.github or target.github.lower() == ref.repo.lower()):
            merge = next((r.merge_commit for r in [row.pr, *row.refs] if r is not None and r.ref == str(ref)), None)
            try:
                items += fu.commit_mentions(repo, ref.repo, ref.number, merge_commit=merge, since=base, tip=tip)
                _source(row, "commits")
            except Exception as exc:
                row.notes.append(f"history of {row.target}: {exc}")
        found += items
    merged = fu.merge(found)
    if base and repo is not None:
        for f in merged:
            if f.merge_commit and f.state == "merged":
                try:
                    f.in_base = bool(repo.rev(f.merge_commit)) and repo.is_ancestor(f.merge_commit, base)
                except Exception:
                    f.in_base = None
    row.followups = [{**f.to_json(), "role": next((role for role, r in refs if str(r) == f.of), "")} for f in merged]


def _source(row: StatusRow, what: str) -> None:
    if what not in row.followups_from:
        row.followups_from.append(what)
