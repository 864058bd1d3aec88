"""Units of the gate's bisection (``patchset.ci.bisect``): ``first_bad`` and ``newest_clean`` against a
table of which commit breaks which patch (the probe a replay would answer), at the edges of the range."""

from __future__ import annotations

import pytest

from patchset.ci.bisect import FirstBad, first_bad, newest_clean
from patchset.ci.upstream import Commit
from patchset.rebase.report import CONFLICT

GOOD = "g" * 40
COMMITS = [Commit(f"{i}" * 40, f"commit {i}") for i in range(1, 9)]  # c1 .. c8, oldest first


def prober(broken: dict[str, set[int]]):
    """A probe from a table: patch -> the indexes of COMMITS where it conflicts; records each call."""
    calls: list[str] = []

    def probe(sha: str) -> dict[str, str]:
        calls.append(sha)
        i = next(n for n, c in enumerate(COMMITS) if c.sha == sha)
        return {p: CONFLICT if i in bad else "carried" for p, bad in broken.items()}

    probe.calls = calls  # type: ignore[attr-defined]
    return probe


@pytest.mark.parametrize("first", range(len(COMMITS)))
def test_first_bad_finds_the_first_broken_commit(first: int) -> None:
    probe = prober({"a": set(range(first, len(COMMITS)))})
    got = first_bad(["a"], GOOD, COMMITS, probe)["a"]
    assert got.commit == COMMITS[first]
    assert got.last_good == (COMMITS[first - 1].sha if first > 0 else GOOD)  # at the range's first: the good one
    assert got.range_size == len(COMMITS)
    assert COMMITS[-1].sha not in probe.calls  # the judged commit is known broken
    assert got.probes == probe.calls and len(got.probes) <= 3  # a bisection of 8: at most log2(8) probes


def test_first_bad_of_an_empty_range() -> None:
    assert first_bad(["a", "b"], GOOD, [], prober({})) == {
        "a": FirstBad("a", None, GOOD, 0),
        "b": FirstBad("b", None, GOOD, 0),
    }


def test_newest_clean_below_the_first_bad_commit() -> None:
    probe = prober({"a": set(range(6, 8)), "b": set()})
    found = first_bad(["a"], GOOD, COMMITS, probe)
    safe = newest_clean(GOOD, COMMITS, found, probe)
    assert (safe.index, safe.sha) == (5, COMMITS[5].sha)


def test_newest_clean_is_the_range_first_commit() -> None:
    probe = prober({"a": set(range(1, 8))})
    safe = newest_clean(GOOD, COMMITS, first_bad(["a"], GOOD, COMMITS, probe), probe)
    assert (safe.index, safe.sha) == (0, COMMITS[0].sha)


def test_newest_clean_falls_back_to_good() -> None:
    probe = prober({"a": set(range(8))})
    safe = newest_clean(GOOD, COMMITS, first_bad(["a"], GOOD, COMMITS, probe), probe)
    assert (safe.index, safe.sha) == (-1, GOOD)


def test_a_patch_that_broke_and_healed_lowers_the_bound() -> None:
    # a breaks at c7; b conflicts at c5 and c6 only (healed at c7 by the commit that broke a)
    probe = prober({"a": {6, 7}, "b": {4, 5}})
    safe = newest_clean(GOOD, COMMITS, first_bad(["a"], GOOD, COMMITS, probe), probe)
    assert (safe.index, safe.sha) == (3, COMMITS[3].sha)
    assert safe.probes[0] == COMMITS[5].sha and len(safe.probes) == len(set(safe.probes))


def test_a_first_bad_commit_gone_from_a_rewritten_history_is_ignored() -> None:
    # the recorded first bad commit is not on upstream's history any more (force-pushed): the
    # search starts from the judged commit, not from a stale index
    probe = prober({"a": {7}})
    stale = {"a": FirstBad("a", Commit("f" * 40, "rewritten away"), GOOD, 8)}
    safe = newest_clean(GOOD, COMMITS, stale, probe)
    assert (safe.index, safe.sha) == (6, COMMITS[6].sha)
    assert safe.probes == [COMMITS[6].sha]


def test_short_label_shortens_only_a_full_sha() -> None:
    from patchset.ci.gate.run import short_label

    sha = "0123456789abcdef" * 2 + "01234567"
    assert short_label(sha) == "0123456789ab"
    assert short_label(sha[:39]) == sha[:39]  # not a full sha: kept as written
    assert short_label(sha.upper()) == sha.upper()  # git writes lower-case hex; anything else is a label
    assert short_label("vllm==0.31.0") == "vllm==0.31.0"
