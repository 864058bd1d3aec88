"""Units of the gate's bisection (``patchset.ci.bisect``): ``first_bad`` and ``newest_clean`` against a
table of which commit breaks which patch (the probe a replay would answer), at the edges of the range."""

from __future__ import annotations

from pathlib import Path

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


# ---- the same, replayed for real: a git upstream in a tmp dir and the rebaser's dry run ---------


def _real(tmp_path, world: str = "transient", base_index: int = 0):
    """``(upstream, prober, shas, ledger path)``: the ledger of patches A and B on a real upstream, probed by the
    rebaser's in-memory replay (``Prober``), as the gate probes it."""
    from patchset.ci.bisect import Prober
    from patchset.ci.upstream import open_upstream
    from patchset.ledger.store import load_ledger
    from tests.support.gateworld import build_upstream, gate_ledger, transient_upstream

    (tmp_path / "up").mkdir()
    repo, c = transient_upstream(tmp_path / "up") if world == "transient" else build_upstream(tmp_path / "up")
    ledger_path = gate_ledger(tmp_path / "proj", repo, c[base_index])
    ledger = load_ledger(ledger_path)
    up = open_upstream(ledger.root, ledger.targets["demo"])
    return up, Prober(ledger_path, "demo", up), c, ledger_path


def test_a_real_first_bad_at_the_range_first_commit_names_the_lower_bound(tmp_path) -> None:
    up, probe, c, _ = _real(tmp_path, "squash", base_index=3)  # B breaks at c4, the first commit after c3
    commits = up.commits(c[3], c[9])
    assert [x.sha for x in commits] == c[4:]
    got = first_bad(["B"], c[3], commits, probe)["B"]
    assert (got.commit.sha, got.commit.pr, got.last_good, got.range_size) == (c[4], 104, c[3], 6)
    assert c[9] not in got.probes and got.probes[-1] == c[4]  # the judged commit is never replayed
    assert probe.seen[c[4]]["B"] == CONFLICT and probe.seen[c[4]]["A"] == "already-upstream"
    up.close()


def test_a_real_newest_safe_commit_is_the_range_first(tmp_path) -> None:
    """From c1 (clean), B breaks at c5 and A conflicts on c3 and c4: the newest commit the whole
    series replays onto is c2, the first commit of the range c2..c6."""
    up, probe, c, ledger_path = _real(tmp_path)
    commits = up.commits(c[1], c[6])
    found = first_bad(["B"], c[1], commits, probe)
    assert found["B"].commit.sha == c[5] and found["B"].last_good == c[4]
    safe = newest_clean(c[1], commits, found, probe)
    assert (safe.index, safe.sha) == (0, c[2])
    assert safe.probes[0] == c[4] and c[3] in safe.probes and c[2] in safe.probes
    assert len(safe.probes) == len(set(safe.probes))  # each commit replayed (and counted) once
    written = sorted(str(p.relative_to(ledger_path.parent)) for p in ledger_path.parent.rglob("*") if p.is_file())
    assert written == ["patches.toml", "patchset/series/demo/A.patch", "patchset/series/demo/B.patch"]  # dry runs
    up.close()


def test_a_real_bisection_after_upstream_rewrote_history_starts_at_the_base(tmp_path) -> None:
    """The last clean commit is gone from upstream's history (reset and rebuilt): the range from
    the base holds only the new commits, and the first bad one is found among them, the base
    being its lower bound when the first new commit breaks the patch."""
    from tests.support.gateworld import PATCH_B
    from tests.support.repo import commit_files, git

    up, probe, c, _ = _real(tmp_path, "squash", base_index=1)
    repo = Path(up.location)
    git(repo, "reset", "-q", "--hard", c[1])
    core = (repo / "pkg/core.py").read_text().replace(PATCH_B[1], "def limit_5(x, cap=None):\n    return cap\n")
    rework = commit_files(repo, "[Core] limit_5 rewritten (#301)", {"pkg/core.py": core})
    head = commit_files(repo, "Docs (#302)", {"README": "rewritten\n"})
    assert not up.is_ancestor(c[3], head)  # the old clean commit is not below the new head
    commits = up.commits(c[1], head)
    assert [x.sha for x in commits] == [rework, head]
    got = first_bad(["B"], c[1], commits, probe)["B"]
    assert (got.commit.sha, got.last_good, got.range_size) == (rework, c[1], 2)
    safe = newest_clean(c[1], commits, {"B": got}, probe)
    assert (safe.index, safe.sha, safe.probes) == (-1, c[1], [])  # nothing newer than the base carries
    up.close()


def test_a_real_probe_replays_each_commit_once_and_says_which(tmp_path) -> None:
    from patchset.ci.bisect import Prober

    up, _, c, ledger_path = _real(tmp_path)
    said: list[tuple[str, int, int | None]] = []
    probe = Prober(ledger_path, "demo", up, lambda what, done, total: said.append((what, done, total)))
    assert probe(c[3]) == {"A": CONFLICT, "B": "carried"} and probe(c[3]) is probe.seen[c[3]]
    assert said == [(f"replay onto {c[3][:12]}", 0, None)]  # once, named as the log names commits; no step counted
    up.close()
