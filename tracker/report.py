"""The dashboard's records: one row per patch, one per upstream ref, and the page as a whole.

``status`` fills them, ``views`` and ``html`` render them, the gate's report carries their JSON.
They also hold the dashboard's vocabulary: the drift classes (what a vendored PR became
upstream) and the actions (what to do about a patch), and say in words how old each state is
and why a read failed.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from patchset.commands.interrupted import Interruption
from patchset.ledger.model import Origin, PatchState, PullState
from patchset.text import json_fields
from patchset.upstream.refs import NO_NETWORK, OFFLINE

__all__ = ["RefRow", "StatusReport", "StatusRow", "age_seconds", "error_text"]

# drift classes
UNCHANGED = "unchanged"
REVISED = "revised"
MERGED_AS_VENDORED = "merged-as-vendored"
MERGED_WITH_CHANGES = "merged-with-changes"
MERGED = "merged"  # merged, the diff could not be compared
CLOSED_UNMERGED = "closed-unmerged"
HEAD_MOVED = "head-moved"  # open, head moved, diff not compared
UNKNOWN = "unknown"
NA = "n/a"

# actions
DROP = "drop-at-rebase"
REFRESH = "refresh"
UPSTREAM_IT = "upstream"
HELD = "held"
NOTHING = "nothing"
DROPPED = "dropped"
CHECK = "unknown"
FOLLOW_UP = "follow-up"  # upstream fixed it again: take the follow-up
REVERTED_UP = "reverted"  # upstream reverted the PR the patch carries


@dataclass
class RefRow:
    """One upstream ref of a patch as the dashboard shows it. ``source`` says where the state
    came from: network, cache (``age_s`` old), recorded (the ledger, on ``recorded``) or none."""

    ref: str
    role: str
    kind: str = "pr"
    state: PullState = PullState.UNKNOWN
    title: str = ""
    author: str | None = None
    merged_at: str | None = None
    merge_commit: str | None = None
    head: str | None = None
    updated_at: str | None = None
    review: str | None = None
    ci: str | None = None
    url: str | None = None
    source: str = "none"
    age_s: float | None = None
    recorded: str | None = None
    error: dict[str, Any] | None = None
    created_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def known(self) -> bool:
        return self.state != "unknown"


@dataclass
class StatusRow:
    """One patch on the dashboard."""

    order: int
    id: str
    target: str
    title: str
    origin: Origin
    state: PatchState
    optional: bool = False
    files: list[str] = field(default_factory=list)  # the files the ledger says the patch touches
    pr: RefRow | None = None
    refs: list[RefRow] = field(default_factory=list)
    drift: str = NA
    head_moved: bool | None = None
    vendored_head: str | None = None
    in_base: bool | None = None
    in_main: bool | None = None
    first_release: str | None = None
    action: str = NOTHING
    action_text: str = ""
    notes: list[str] = field(default_factory=list)
    # later upstream work naming the patch's PRs (``tracker.followups.FollowUp.to_json()``)
    followups: list[dict[str, Any]] = field(default_factory=list)
    followups_from: list[str] = field(default_factory=list)  # what was read: timeline, commits, recorded

    @property
    def upstream_state(self) -> str:
        return self.pr.state if self.pr else "none"

    @property
    def data(self) -> str:
        """Where this row's upstream state came from, in words."""
        return "" if self.pr is None else _data_words(self.pr)

    @property
    def error(self) -> str | None:
        return error_text(self.pr.error) if self.pr is not None and self.pr.error else None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("pr", "refs")}
        out["upstream_state"] = self.upstream_state
        out["pr"] = self.pr.to_json() if self.pr else None
        out["refs"] = [r.to_json() for r in self.refs]
        out["data"] = self.data
        out["error"] = self.error
        return out


@dataclass
class StatusReport:
    """The dashboard: one row per patch, warnings, and how old the data is."""

    ledger: str
    title: str
    mode: str
    generated_at: str
    rows: list[StatusRow]
    targets: dict[str, dict[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)  # ids whose [patch.status] --refresh rewrote
    round_trips: int = 0
    # an apply, rebase or ledger edit left half-done (``patchset.commands.interrupted``, as validate says)
    interrupted: list[Interruption] = field(default_factory=list)

    def by_target(self) -> dict[str, list[StatusRow]]:
        out: dict[str, list[StatusRow]] = {}
        for r in self.rows:
            out.setdefault(r.target, []).append(r)
        return out

    def counts(self, attr: str = "action") -> dict[str, int]:
        return dict(Counter(getattr(r, attr) for r in self.rows))

    def oldest(self) -> str:
        """How old the oldest upstream state on the page is, in words."""
        now = time.time()
        refs = [ref for r in self.rows for ref in ([r.pr] if r.pr else []) + r.refs]
        aged = [(age, ref) for ref in refs if (age := age_seconds(ref, now)) is not None]
        return _data_words(max(aged, key=lambda a: a[0])[1]) if aged else "no upstream data"

    def errors(self) -> list[str]:
        """One line per upstream read that failed; a host that could not be reached at all (no
        network) is one line for all its reads."""
        out = []
        down: dict[str, list[str]] = {}
        for r in self.rows:
            for ref in ([r.pr] if r.pr else []) + r.refs:
                err = ref.error or {}
                if err.get("error") == NO_NETWORK:
                    down.setdefault(str(err.get("message")), []).append(ref.ref)
                elif err and err.get("error") != OFFLINE:
                    out.append(f"{r.id}: {ref.ref}: {error_text(err)}")
        said = [
            f"no network: {where}: {len(refs)} upstream read(s) not made; the rows show what was recorded"
            for where, refs in down.items()
        ]
        return said + out

    @property
    def exit_code(self) -> int:
        """0 when every upstream state could be read (or none was asked for); 2 when some rows
        carry an error (network, auth, rate limit, unreadable upstream data or recorded state
        ...): the page still shows every row; else 1 when an apply, rebase or ledger edit was
        interrupted half-way (a finding, as in validate)."""
        if self.errors():
            return 2
        return 1 if any(i.problem for i in self.interrupted) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "ledger exit_code title mode generated_at"),
            "data_age": self.oldest(),
            **json_fields(self, "warnings interrupted"),
            "errors": self.errors(),
            **json_fields(self, "recorded round_trips targets"),
            "counts": {
                "action": self.counts("action"),
                "drift": self.counts("drift"),
                "upstream_state": self.counts("upstream_state"),
            },
            "rows": [r.to_json() for r in self.rows],
        }


def error_text(err: Mapping[str, Any]) -> str:
    """A row error in words, with when a rate limit resets."""
    kind = "no network" if err.get("error") == NO_NETWORK else err.get("error")
    text = f"{kind}: {err.get('message')}"
    if err.get("reset_at_iso"):
        text += f" (resets at {err['reset_at_iso']})"
    return text


def age_seconds(ref: RefRow, now: float) -> float | None:
    if ref.source in ("network", "cache") and ref.age_s is not None:
        return ref.age_s
    if ref.source == "network":
        return 0.0
    if ref.source == "recorded" and ref.recorded:
        d = dt.date.fromisoformat(ref.recorded)
        return max(0.0, now - dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc).timestamp())
    return None


def _data_words(ref: RefRow) -> str:
    if ref.source == "network":
        return "live"
    if ref.source == "cache":
        return f"cache, {_duration(ref.age_s or 0)} old"
    if ref.source == "recorded":
        if not ref.recorded:
            return "recorded (no date)"
        days = (dt.date.today() - dt.date.fromisoformat(ref.recorded)).days
        return f"recorded {ref.recorded} ({days} day{'s' if days != 1 else ''} ago)"
    return "no data"


def _duration(s: float) -> str:
    if s < 90:
        return f"{int(s)} s"
    if s < 5400:
        return f"{int(s // 60)} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{int(s // 86400)} days"
