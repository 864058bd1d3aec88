"""The dashboard's action per row (``patchset.tracker.actions.decide``): a held or dropped patch keeps
its own state whatever upstream did later; upstream's follow-ups, reverts and reverted reverts
change an active patch's action."""

from __future__ import annotations

import pytest

from patchset.ledger.model import Patch
from patchset.tracker.actions import decide
from patchset.tracker.report import (
    DROP,
    DROPPED,
    FOLLOW_UP,
    HELD,
    NOTHING,
    REVERTED_UP,
    UPSTREAM_IT,
    RefRow,
    StatusRow,
)

FOLLOWUPS = {
    "follow-up": [{"role": "prs", "class": "follow-up-merged", "ref": "vllm-project/vllm#2", "in_base": False}],
    "reverted": [{"role": "prs", "class": "reverted", "ref": "vllm-project/vllm#3", "merged_at": "2026-11-02T00:00"}],
    "revert-reverted": [
        {"role": "reverts", "class": "reverted", "of": "vllm-project/vllm#4", "ref": "vllm-project/vllm#5"}
    ],
}


def _row(p: Patch, followups: list[dict]) -> StatusRow:
    return StatusRow(1, p.id, p.target, p.title, p.origin, p.state, followups=followups)


@pytest.mark.parametrize("kind", sorted(FOLLOWUPS))
@pytest.mark.parametrize(("state", "action"), [("held", HELD), ("dropped", DROPPED)])
def test_follow_ups_never_override_a_held_or_dropped_patch(kind: str, state: str, action: str) -> None:
    p = Patch("a", "vllm", "t", "ours", state=state, reason="waits for the 0.31 rebase")
    row = _row(p, FOLLOWUPS[kind])
    decide(p, row)
    assert (row.action, row.action_text) == (action, "waits for the 0.31 rebase")


def test_follow_ups_change_an_active_patch() -> None:
    p = Patch("a", "vllm", "t", "ours")
    expected = {"follow-up": FOLLOW_UP, "reverted": REVERTED_UP, "revert-reverted": DROP}
    for kind, followups in FOLLOWUPS.items():
        row = _row(p, followups)
        decide(p, row)
        assert row.action == expected[kind], kind
    row = _row(p, FOLLOWUPS["reverted"])
    decide(p, row)
    assert row.action_text.startswith("upstream reverted it: vllm#3 on 2026-11-02")
    row = _row(p, [{**FOLLOWUPS["follow-up"][0], "in_base": True}])  # already in the base: nothing left to take
    decide(p, row)
    assert row.action == UPSTREAM_IT


def test_held_and_dropped_without_a_reason_say_so() -> None:
    for state, action in (("held", HELD), ("dropped", DROPPED)):
        p = Patch("a", "vllm", "t", "upstream", state=state)
        row = _row(p, [])
        decide(p, row)
        assert (row.action, row.action_text) == (action, "no reason recorded")
    p = Patch("a", "vllm", "t", "upstream")
    row = _row(p, [])
    decide(p, row)
    assert (row.action, row.action_text) == (NOTHING, "no upstream PR to follow")


def _decided(p: Patch, followups: list[dict] | None = None, **row) -> StatusRow:
    r = StatusRow(1, p.id, p.target, p.title, p.origin, p.state, followups=followups or [], **row)
    decide(p, r)
    return r


def test_upstream_it_names_whom_to_ask() -> None:
    assert _decided(Patch("a", "vllm", "t", "ours")).action_text == "no upstream PR"
    assert _decided(Patch("a", "vllm", "t", "port", authors=["ann", "bo"])).action_text == (
        "no upstream PR; or ask ann, bo"
    )
    assert _decided(Patch("a", "vllm", "t", "port")).action_text == "no upstream PR; or ask the author"


def test_an_unknown_or_open_pr_says_what_is_known() -> None:
    p = Patch("a", "vllm", "t", "upstream")
    r = _decided(p, pr=RefRow("vllm-project/vllm#1", "prs", error={"error": "rate_limited", "message": "slow down"}))
    assert r.action_text == "upstream state unknown (rate_limited: slow down): retry `patchset status --refresh`"
    r = _decided(p, pr=RefRow("vllm-project/vllm#1", "prs"))
    assert r.action_text == "upstream state unknown: retry `patchset status --refresh`"
    r = _decided(p, pr=RefRow("vllm-project/vllm#1", "prs", state="open", review="CHANGES_REQUESTED", ci="SUCCESS"))
    assert (r.action, r.action_text) == (NOTHING, "PR open (changes requested, CI success)")
    assert _decided(p, pr=RefRow("vllm-project/vllm#1", "prs", state="open")).action_text == "PR open"


def _merged(n: int) -> dict:
    return {"role": "prs", "class": "follow-up-merged", "ref": f"vllm-project/vllm#{n}"}


def _open(n: int) -> dict:
    return {"role": "prs", "class": "follow-up-open", "ref": f"vllm-project/vllm#{n}", "title": "Fix more"}


@pytest.mark.parametrize(
    ("count", "tail"),
    [(3, "vllm#1, vllm#2, vllm#3"), (4, "vllm#1, vllm#2, vllm#3 and 1 more"), (6, "vllm#1, vllm#2, vllm#3 and 3 more")],
)
def test_follow_ups_are_named_three_at_most(count: int, tail: str) -> None:
    r = _decided(Patch("a", "vllm", "t", "ours"), [_merged(n) for n in range(1, count + 1)])
    assert (r.action, r.action_text) == (FOLLOW_UP, f"upstream fixed it again: take {tail} (no upstream PR)")
    r = _decided(Patch("a", "vllm", "t", "ours"), [_open(n) for n in range(1, count + 1)])
    assert r.action_text == "no upstream PR; follow-up open upstream: vllm#1, vllm#2, vllm#3"


def test_the_first_revert_is_named() -> None:
    p = Patch("a", "vllm", "t", "ours")
    two = [{"role": "prs", "class": "reverted", "ref": f"vllm-project/vllm#{n}"} for n in (7, 8)]
    assert _decided(p, two).action_text.startswith("upstream reverted it: vllm#7;")
    undone = [
        {"role": "reverts", "class": "reverted", "of": f"vllm-project/vllm#{n}", "ref": f"vllm-project/vllm#{n + 10}"}
        for n in (7, 8)
    ]
    assert _decided(p, undone).action_text == "upstream reverted vllm#7 too (vllm#17): drop it at that rebase"
    # a revert PR that upstream merely followed up is not an undone revert
    r = _decided(p, [{"role": "reverts", "class": "follow-up-open", "of": "x#1", "ref": "vllm-project/vllm#9"}])
    assert r.action == UPSTREAM_IT
