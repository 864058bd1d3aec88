"""Drift of a verbatim upstream patch (``patchset.tracker.drift.analyse``): the vendored head against
the PR's, and the PR's current diff against the body by patch id. The ledger and bodies are real
files; the client is a double with the one method drift calls (``pr_diff``, as
``tracker.github.GitHubClient.pr_diff``: the PR's unified diff, or ``FetchError``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from patchset.tracker.drift import analyse
from patchset.tracker.report import (
    HEAD_MOVED,
    MERGED_AS_VENDORED,
    MERGED_WITH_CHANGES,
    REVISED,
    UNCHANGED,
    UNKNOWN,
    RefRow,
    StatusRow,
)
from patchset.upstream.refs import NO_NETWORK, OFFLINE, FetchError, RowError

OURS = b"--- a/pkg/f.py\n+++ b/pkg/f.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
OTHER = b"--- a/pkg/g.py\n+++ b/pkg/g.py\n@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z\n"
REVISED_BODY = b"--- a/pkg/f.py\n+++ b/pkg/f.py\n@@ -1,3 +1,3 @@\n a\n-b\n+BEE\n c\n"


class Client:
    def __init__(self, diff: bytes | Exception) -> None:
        self.diff = diff

    def pr_diff(self, ref):
        if isinstance(self.diff, Exception):
            raise self.diff
        return self.diff


def _ledger(tmp_path: Path, strip: int = 1, source: str = "", body: bytes = OURS, head: str = "abc1234"):
    d = tmp_path / "led"
    (d / "patchset/series/vllm").mkdir(parents=True)
    (d / "patchset/series/vllm/p.patch").write_bytes(body)
    (d / "patches.toml").write_text(
        f'schema = 1\n[targets.vllm]\nupstream = "u"\ngithub = "vllm-project/vllm"\nstrip = {strip}\n\n'
        f'[[patch]]\nid = "p"\ntarget = "vllm"\ntitle = "t"\norigin = "upstream"\n'
        f'[patch.upstream]\nprs = ["vllm-project/vllm#1"]\n[patch.status]\nhead = "{head}"\n{source}'
    )
    led = load_ledger(d / "patches.toml")
    return led, led.get("p")


def _row(p, state: str = "open", head: str = "def5678", source: str = "network") -> StatusRow:
    pr = RefRow("vllm-project/vllm#1", "prs", state=state, head=head, source=source)
    return StatusRow(1, p.id, p.target, p.title, p.origin, p.state, pr=pr)


@pytest.mark.parametrize(
    ("state", "diff", "drift"),
    [
        ("open", OURS + OTHER, UNCHANGED),  # the PR also touches a file the body does not: filtered out
        ("open", REVISED_BODY, REVISED),
        ("merged", OURS, MERGED_AS_VENDORED),
        ("merged", REVISED_BODY, MERGED_WITH_CHANGES),
    ],
)
def test_a_moved_head_is_compared_by_patch_id(tmp_path: Path, state: str, diff: bytes, drift: str) -> None:
    led, p = _ledger(tmp_path)
    row = _row(p, state)
    analyse(led, p, row, Client(diff), "live")
    assert (row.vendored_head, row.head_moved, row.drift) == ("abc1234", True, drift)


def test_the_head_prefix_either_way_is_the_same_head(tmp_path: Path) -> None:
    led, p = _ledger(tmp_path, head="abc1234")
    for head in ("abc1234ffff", "abc12"):
        row = _row(p, head=head)
        analyse(led, p, row, Client(AssertionError("not read")), "live")
        assert (row.head_moved, row.drift) == (False, UNCHANGED)


def test_the_targets_strip_applies(tmp_path: Path) -> None:
    body = OURS.replace(b"a/pkg", b"a/x/pkg").replace(b"b/pkg", b"b/x/pkg")
    led, p = _ledger(tmp_path, strip=2, body=body)
    row = _row(p)
    analyse(led, p, row, Client(OURS.replace(b"a/pkg", b"a/y/pkg").replace(b"b/pkg", b"b/y/pkg")), "live")
    assert row.drift == UNCHANGED  # x/ and y/ both stripped: the same change


@pytest.mark.parametrize(
    ("client", "note"),
    [
        (None, "upstream diff not read (no live or cached state)"),
        (Client(FetchError(RowError(OFFLINE, "not cached"), "diff")), "upstream diff not cached"),
        (Client(FetchError(RowError(NO_NETWORK, "down"), "diff")), "upstream diff not read: no network"),
        (Client(b"not a diff\n"), "nothing to compare"),
        (Client(b"--- a/pkg/f.py\n+++ b/pkg/f.py\n@@ -1,3 +1,3 @@\n a\n"), "cannot compare diffs"),
    ],
)
def test_a_diff_that_cannot_be_read_says_why(tmp_path: Path, client, note: str) -> None:
    led, p = _ledger(tmp_path)
    row = _row(p)
    analyse(led, p, row, client, "live")
    assert row.drift == HEAD_MOVED and any(n.startswith(note) for n in row.notes), row.notes


def test_a_recorded_state_is_not_compared(tmp_path: Path) -> None:
    led, p = _ledger(tmp_path)
    row = _row(p, source="recorded")
    analyse(led, p, row, Client(OURS), "live")
    assert row.drift == HEAD_MOVED and row.notes[0].startswith("upstream diff not read")


def test_without_a_vendored_head_nothing_moved_is_claimed(tmp_path: Path) -> None:
    led, p = _ledger(tmp_path, head="")
    row = _row(p)
    analyse(led, p, row, Client(b"not a diff\n"), "live")
    assert (row.vendored_head, row.head_moved, row.drift) == (None, None, UNKNOWN)


def test_a_pr_source_filters_upstream_by_its_globs(tmp_path: Path) -> None:
    """``[patch.source] kind = "pr"``: upstream's diff is cut by the source's include/exclude globs
    (what ``fetch`` vendored), not by the files the body touches."""
    source = '[patch.source]\nkind = "pr"\nref = "vllm-project/vllm#1"\ninclude = ["pkg/g.py"]\n'
    led, p = _ledger(tmp_path, source=source, body=OTHER)
    row = _row(p)
    analyse(led, p, row, Client(OURS + OTHER), "live")
    assert row.drift == UNCHANGED
    led, p = _ledger(tmp_path / "2", source=source.replace("pkg/g.py", "pkg/*"), body=OTHER)
    row = _row(p)
    analyse(led, p, row, Client(OURS + OTHER), "live")
    assert row.drift == REVISED  # both files pass the glob: not the vendored change
