"""The dashboard's action per row (``patchset.tracker.actions.decide``): a held or dropped patch keeps
its own state whatever upstream did later; upstream's follow-ups, reverts and reverted reverts
change an active patch's action."""

from __future__ import annotations

import pytest

from patchset.ledger.model import Patch
from patchset.tracker.actions import decide
from patchset.tracker.report import DROP, DROPPED, FOLLOW_UP, HELD, NOTHING, REVERTED_UP, UPSTREAM_IT, StatusRow

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
