"""The hunk engine's named rules (patchset.engine.hunks), each held to the real GNU ``patch`` (and
``git apply`` where its rules are the same) on small, real-shaped files: where a failed hunk's
nearest region is reported, misordered hunks, the search order of offsets, the start- and end-of-file
rules, missing final newlines, CRLF, empty files, creations and deletions, outputs large enough
to get their buffer at once. test_engine_differential.py compares broadly at random; these pin the
edges a random case rarely reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.engine.hunks import (
    NEAREST_LIMIT,
    PRESIZE,
    HunkResult,
    NearestRegion,
    apply_file,
    output_bound,
    reverse_file_patch,
)
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import HunkList
from tests.support.diffgen import unified_diff
from tests.support.oracles import git_apply, gnu_patch, needs_binaries
from tests.support.repo import git_bytes


def lines(*words: str | int) -> bytes:
    return b"".join(b"%s\n" % str(w).encode() for w in words)


def numbered(first: int, last: int) -> bytes:
    return lines(*range(first, last + 1))


def edit(data: bytes, changes: dict[int, bytes]) -> bytes:
    """``data`` with its 1-based lines ``changes`` replaced (b"": removed)."""
    rows = data.splitlines(keepends=True)
    return b"".join(changes.get(n, row) for n, row in enumerate(rows, 1))


def one(patch: bytes):
    fps = parse_patch(patch)
    assert len(fps) == 1
    return fps[0]


def agrees_with_gnu(old: bytes | None, patch: bytes, tmp: Path, fuzz: int = 0):
    """Apply with the engine and with GNU patch; the same verdict, bytes and per-hunk offsets."""
    out = apply_file(old, one(patch), fuzz=fuzz)
    said = gnu_patch(old, patch, tmp, fuzz=fuzz)
    assert (said.rc == 0) == out.ok, (out, said.output)
    if out.ok:
        assert said.file == out.new, said.output
    elif out.hunks and out.partial is not None:
        assert said.file == out.partial, said.output
    for r in out.hunks:
        if r.status == "failed":
            assert r.index in said.failed, said.output
        elif r.status != "ignored":
            assert said.offsets.get(r.index, 0) == r.offset, (r, said.output)
    return out, said


# --------------------------------------------------------------------------- where a hunk goes


@needs_binaries
@pytest.mark.parametrize(("above", "below", "picked"), [(4, 4, +4), (4, 5, -4), (5, 4, +4)])
def test_offsets_are_tried_plus_before_minus(tmp_path: Path, above: int, below: int, picked: int) -> None:
    """The hunk's old lines occur ``above`` lines before and ``below`` after where it expects
    them, not there itself: GNU patch tries +1, -1, +2, -2 ..., so the nearer wins and on a tie
    the later place."""
    block = [b"k1\n", b"k2\n", b"k3\n"]
    rows = [b"f%d\n" % i for i in range(40)]
    for start in (11 - above, 11 + below):  # 1-based lines where the copies start
        rows[start - 1 : start + 2] = block
    patch = b"--- a/f\n+++ b/f\n@@ -11,3 +11,3 @@\n k1\n-k2\n+K2\n k3\n"
    out, _ = agrees_with_gnu(b"".join(rows), patch, tmp_path)
    assert out.ok
    assert [(h.status, h.offset, h.line) for h in out.hunks] == [("offset", picked, 11 + picked)]
    assert out.hunks[0].describe() == f"hunk #1 applied at line {11 + picked} (offset {picked:+d} lines)"


@needs_binaries
def test_a_later_hunk_starts_from_the_earlier_ones_offset(tmp_path: Path) -> None:
    """Lines added above move every hunk: the second hunk is searched from the first one's offset,
    so it lands at the copy that offset points to, not at the copy where its header says."""
    old = numbered(1, 40)
    new = old.replace(b"5\n", b"five\n", 1).replace(b"30\n", b"thirty\n", 1)
    patch = unified_diff(old, new, "f")
    target = lines(*[f"top{i}" for i in range(7)]) + old
    out, _ = agrees_with_gnu(target, patch, tmp_path)
    assert out.ok and [(h.status, h.offset) for h in out.hunks] == [("offset", 7), ("offset", 7)]
    # the same in git apply's eyes
    assert git_apply(target, patch, tmp_path).file == out.new


@needs_binaries
def test_a_hunk_is_never_placed_before_what_an_earlier_hunk_changed(tmp_path: Path) -> None:
    """The second hunk's old lines occur both just before the line the first hunk changed
    (nearer its expected place) and far below it: only the place below may be used."""
    block = lines("p", "q", "r")
    target = (
        numbered(1, 4) + block + numbered(8, 12) + lines("x", "y", "z") + numbered(16, 30) + block + numbered(34, 40)
    )
    patch = b"--- a/f\n+++ b/f\n@@ -12,3 +12,3 @@\n 12\n-x\n+X\n y\n@@ -15,3 +15,3 @@\n p\n-q\n+Q\n r\n"
    out, _ = agrees_with_gnu(target, patch, tmp_path)
    assert out.ok
    assert [(h.line, h.offset) for h in out.hunks] == [(12, 0), (31, 16)]
    assert out.new is not None and out.new.count(b"Q\n") == 1 and out.new.index(b"Q\n") > out.new.index(b"X\n")


@needs_binaries
@pytest.mark.parametrize("drop", [0, 1])
def test_short_leading_context_binds_the_hunk_to_line_one(tmp_path: Path, drop: int) -> None:
    """A hunk at line 1 (no leading context, three trailing) matches only at the start of the
    file; with a line removed above it, it still starts at line 1."""
    old = numbered(1, 10)
    patch = unified_diff(old, b"zero\n" + old, "f")
    target = old[len(b"1\n") :] if drop else old
    out, _ = agrees_with_gnu(target, patch, tmp_path)
    assert out.ok == (not drop)
    if not drop:
        assert [(h.status, h.line) for h in out.hunks] == [("clean", 1)]


@needs_binaries
@pytest.mark.parametrize("extra", [0, 1, 2])
def test_short_trailing_context_binds_the_hunk_to_the_end(tmp_path: Path, extra: int) -> None:
    """An append at the end (three leading context lines, none trailing) matches only where the
    file ends: the file lengthened above it moves it; lengthened below it, it fails."""
    old = numbered(1, 10)
    patch = unified_diff(old, old + b"eleven\n", "f")
    above = apply_file(lines("a", "b")[: 2 * extra] + old, one(patch))
    assert above.ok and above.hunks[0].offset == extra
    gnu_above = gnu_patch(lines("a", "b")[: 2 * extra] + old, patch, tmp_path)
    assert gnu_above.rc == 0 and gnu_above.file == above.new
    out, _ = agrees_with_gnu(old + lines("tail")[: 5 * extra], patch, tmp_path)
    assert out.ok == (extra == 0)


@needs_binaries
def test_an_insertion_after_line_n_of_a_pure_addition(tmp_path: Path) -> None:
    """``@@ -N,0 +M @@`` inserts after line N: the old side is empty, so it goes where it says
    shifted by the previous hunk, never searched for."""
    old = numbered(1, 20)
    patch = b"--- a/f\n+++ b/f\n@@ -3,0 +4,2 @@\n+new a\n+new b\n@@ -15,0 +18 @@\n+new c\n"
    out, _ = agrees_with_gnu(old, patch, tmp_path)
    assert out.ok and [(h.line, h.status) for h in out.hunks] == [(4, "clean"), (16, "clean")]
    assert out.new == numbered(1, 3) + b"new a\nnew b\n" + numbered(4, 15) + b"new c\n" + numbered(16, 20)


# --------------------------------------------------------------------------- failed hunks


@needs_binaries
@pytest.mark.parametrize(("expected", "reported"), [(11, 10), (12, 13)])
def test_nearest_region_of_two_equal_places_is_the_closer(tmp_path: Path, expected: int, reported: int) -> None:
    """Two places hold the failed hunk's distinctive lines equally well: the one nearer the line
    the hunk expected is reported, and GNU patch agrees the hunk fails there."""
    target = numbered(1, 9) + lines("alpha", "beta", "gamma") * 2 + numbered(16, 29)
    patch = f"--- a/f\n+++ b/f\n@@ -{expected},3 +{expected},3 @@\n alpha\n-beta\n+BETA\n delta\n".encode()
    out, said = agrees_with_gnu(target, patch, tmp_path)
    assert not out.ok and said.failed == {1}
    near = out.hunks[0].nearest
    assert near == NearestRegion(line=reported, similarity=0.667)
    assert out.hunks[0].to_json() == {
        "index": 1,
        "status": "failed",
        "offset": 0,
        "fuzz": 0,
        "line": None,
        "nearest": {"line": reported, "similarity": 0.667},
        "expected_line": expected,
    }
    assert out.hunks[0].describe() == (
        f"hunk #1 FAILED (expected at line {expected}); nearest match at line {reported} (67% of its old lines)"
    )


def test_nearest_region_at_the_start_of_the_file_counts_its_first_line() -> None:
    """The best place starts at line 1, or would start before it (the hunk's first old lines
    are gone): the region is line 1, its similarity counting line 1 itself."""
    target = lines("one", "two", "three", "four") + numbered(5, 30)
    at_one = b"--- a/f\n+++ b/f\n@@ -3,4 +3,4 @@\n one\n two\n-three\n+THREE\n gone\n"
    near = apply_file(target, one(at_one)).hunks[0].nearest
    assert near == NearestRegion(line=1, similarity=0.75)
    before = b"--- a/f\n+++ b/f\n@@ -3,4 +3,4 @@\n zero\n one\n-two\n+TWO\n missing\n"
    # "one", "two" are at old lines 2 and 3 of the hunk: its alignment starts at line 0
    near = apply_file(target, one(before)).hunks[0].nearest
    assert near == NearestRegion(line=1, similarity=0.5)


@pytest.mark.parametrize(("copies", "votes"), [(64, True), (65, False)])
def test_lines_repeated_more_than_64_times_do_not_vote(copies: int, votes: bool) -> None:
    """A failed hunk whose only known line is a brace found ``copies`` times: up to 64 copies
    still point somewhere (the copy closest to the expected line), beyond that none does."""
    target = b"".join(b"x = %d\n}\n" % i for i in range(copies))
    patch = b"--- a/f\n+++ b/f\n@@ -40,2 +40,2 @@\n }\n-not there\n+replaced\n"
    out = apply_file(target, one(patch))
    assert not out.ok and out.hunks[0].expected_line == 40
    near = out.hunks[0].nearest
    if votes:
        assert near is not None and near.line in (40, 39, 41) and target.splitlines()[near.line - 1] == b"}"
        assert near.similarity == 0.5
    else:
        assert near is None
        assert out.hunks[0].describe() == "hunk #1 FAILED (expected at line 40)"


def test_only_the_first_failed_hunks_get_a_nearest_region() -> None:
    """Each nearest region costs a pass over the file: the first NEAREST_LIMIT failed hunks of a
    file get one, the rest only their expected line."""
    old = b"".join(b"line %d\nctx %d\n" % (i, i) for i in range(NEAREST_LIMIT + 3))
    hunks = b"".join(
        b"@@ -%d,2 +%d,2 @@\n ctx %d\n-gone %d\n+new %d\n" % (2 * i + 2, 2 * i + 2, i, i, i)
        for i in range(NEAREST_LIMIT + 2)
    )
    out = apply_file(old, one(b"--- a/f\n+++ b/f\n" + hunks))
    assert not out.ok and len(out.hunks) == NEAREST_LIMIT + 2
    assert all(h.status == "failed" for h in out.hunks)
    assert [h.nearest is not None for h in out.hunks] == [True] * NEAREST_LIMIT + [False, False]
    assert out.hunks[0].nearest == NearestRegion(line=2, similarity=0.5)
    assert out.message == f"{NEAREST_LIMIT + 2} out of {NEAREST_LIMIT + 2} hunk(s) FAILED"


@needs_binaries
def test_a_failed_hunk_leaves_the_others_applied_in_the_partial(tmp_path: Path) -> None:
    """GNU patch writes the hunks that apply and rejects the one that does not; the engine
    computes that same partial file but writes nothing (the outcome is failed)."""
    old = numbered(1, 30)
    new = old.replace(b"4\n", b"four\n", 1).replace(b"15\n", b"fifteen\n", 1).replace(b"26\n", b"twenty-six\n", 1)
    patch = unified_diff(old, new, "f")
    target = old.replace(b"15\n", b"15 changed here\n")
    out, said = agrees_with_gnu(target, patch, tmp_path)
    assert out.status == "failed" and out.new is None and said.failed == {2}
    assert [h.status for h in out.hunks] == ["clean", "failed", "clean"]
    assert out.partial == said.file and out.message == "1 out of 3 hunk(s) FAILED"
    assert out.to_json()["hunks"][1]["status"] == "failed"


@needs_binaries
def test_hunks_that_overlap_in_reverse_order_are_misordered(tmp_path: Path) -> None:
    """A second hunk that would change a line the first already consumed is refused as
    misordered; GNU patch refuses the same patch ("misordered hunks")."""
    old = numbered(1, 12)
    patch = b"--- a/f\n+++ b/f\n@@ -6,3 +6,3 @@\n 6\n-7\n+SEVEN\n 8\n@@ -5,3 +5,3 @@\n 5\n-6\n+SIX\n 7\n"
    out = apply_file(old, one(patch))
    said = gnu_patch(old, patch, tmp_path)
    assert not out.ok and said.rc != 0 and "misordered" in said.output
    r = out.hunks[1]
    assert (r.status, r.misordered, r.line, r.nearest) == ("failed", True, 5, None)
    assert r.to_json()["misordered"] is True and "misordered" not in out.hunks[0].to_json()
    # touching only the line right after the first hunk's change is in order
    fine = b"--- a/f\n+++ b/f\n@@ -6,3 +6,3 @@\n 6\n-7\n+SEVEN\n 8\n@@ -8,2 +8,2 @@\n-8\n+EIGHT\n 9\n"
    ok, _ = agrees_with_gnu(old, fine, tmp_path)
    assert ok.ok and ok.new == old.replace(b"7\n", b"SEVEN\n", 1).replace(b"8\n", b"EIGHT\n", 1)


# --------------------------------------------------------------------------- already applied


@needs_binaries
def test_only_the_first_hunk_decides_reversed(tmp_path: Path) -> None:
    """GNU patch asks "reversed?" only of the first hunk: already applied there, the file is
    refused whole; already applied in a later hunk only, that hunk just fails."""
    old = numbered(1, 12)
    patch = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+TWO\n 3\n@@ -9,3 +9,3 @@\n 9\n-10\n+TEN\n 11\n"
    first_done = old.replace(b"2\n", b"TWO\n", 1)
    out, said = agrees_with_gnu(first_done, patch, tmp_path)
    assert out.status == "already_applied" and "Reversed" in said.output
    assert [(h.index, h.status) for h in out.hunks] == [(1, "ignored"), (2, "ignored")]
    assert out.hunks[1].describe() == "hunk #2 ignored"
    assert out.hunks[0].to_json() == {
        "index": 1,
        "status": "ignored",
        "offset": 0,
        "fuzz": 0,
        "line": None,
        "nearest": None,
        "expected_line": 0,
    }
    second_done = old.replace(b"10\n", b"TEN\n", 1)
    out, said = agrees_with_gnu(second_done, patch, tmp_path)
    assert out.status == "failed" and [h.status for h in out.hunks] == ["clean", "failed"]
    assert out.hunks[0].describe() == "hunk #1 applied cleanly at line 1"


# --------------------------------------------------------------------------- line ends


@needs_binaries
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"a\nb\nc", b"a\nB\nc"),  # the last line has no newline, on both sides
        (b"a\nb\nc", b"a\nb\nc\n"),  # the newline added
        (b"a\nb\nc\n", b"a\nb\nC"),  # the newline removed with the line changed
        (b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n"),  # CRLF kept
        (b"a\r\nb\r\nc", b"a\r\nb\r\nc\r\nd\r\n"),  # CRLF, no final newline, then appended
    ],
)
def test_line_ends_as_gnu_patch_and_git_apply(tmp_path: Path, old: bytes, new: bytes) -> None:
    patch = unified_diff(old, new, "f")
    out, _ = agrees_with_gnu(old, patch, tmp_path)
    assert out.ok and out.new == new
    assert git_apply(old, patch, tmp_path).file == new


@needs_binaries
def test_lines_added_after_a_last_line_without_newline_get_one(tmp_path: Path) -> None:
    """The file ends without a newline and the hunk's context does not say so (a patch made
    against the file with one): it fails, as in GNU patch; a hunk of its own shape applies."""
    target = b"1\n2\n3"
    patch = unified_diff(b"1\n2\n3\n", b"1\n2\n3\n4\n", "f")
    out, _ = agrees_with_gnu(target, patch, tmp_path)
    assert not out.ok
    fine = b"--- a/f\n+++ b/f\n@@ -3,0 +4 @@\n+4\n"
    out, _ = agrees_with_gnu(target, fine, tmp_path)
    assert out.ok and out.new == b"1\n2\n3\n4\n"


# --------------------------------------------------------------------------- empty, created, deleted


@needs_binaries
def test_creating_over_an_empty_file_fills_it(tmp_path: Path) -> None:
    """GNU patch treats an existing empty file as absent for a creation patch."""
    patch = unified_diff(None, b"made\nnew\n", "f")
    out, said = agrees_with_gnu(b"", patch, tmp_path)
    assert out.ok and out.new == b"made\nnew\n" == said.file
    assert [h.describe() for h in out.hunks] == ["hunk #1 applied cleanly at line 1"]


@needs_binaries
def test_a_zero_line_hunk_on_a_missing_file_creates_it(tmp_path: Path) -> None:
    """A plain ``--- a/f`` diff whose only hunk is ``-0,0`` creates the missing file (GNU patch);
    one inserting after line 5 cannot: the file to patch does not exist."""
    create = b"--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"
    out, said = agrees_with_gnu(None, create, tmp_path)
    assert out.ok and out.new == b"x\ny\n" == said.file
    # only the first hunk must be "-0,0": the next ones insert into what it made
    two = b"--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+x\n@@ -1,0 +2 @@\n+y\n"
    out, said = agrees_with_gnu(None, two, tmp_path)
    assert out.ok and out.new == b"x\ny\n" == said.file
    insert = b"--- a/f\n+++ b/f\n@@ -5,0 +6 @@\n+x\n"
    out = apply_file(None, one(insert))
    assert out.status == "failed" and out.message == "file to patch does not exist"
    assert gnu_patch(None, insert, tmp_path).rc != 0


@needs_binaries
@pytest.mark.parametrize("new_side", [b"/dev/null", b"b/f"])
def test_emptying_an_already_empty_file_is_already_applied(tmp_path: Path, new_side: bytes) -> None:
    """A deletion, or a one-hunk patch that leaves nothing, on an empty file: GNU patch says
    "already empty" and skips it; the engine calls it already applied."""
    patch = b"--- a/f\n+++ " + new_side + b"\n@@ -1,2 +0,0 @@\n-a\n-b\n"
    out = apply_file(b"", one(patch))
    said = gnu_patch(b"", patch, tmp_path)
    assert "already empty" in said.output and said.file == b""
    assert out.status == "already_applied" and out.new is None and "already empty" in out.message


def test_a_change_to_an_empty_file_is_not_already_applied() -> None:
    """A one-line change whose new side is not empty does not apply to an empty file."""
    patch = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    out = apply_file(b"", one(patch))
    assert out.status == "failed" and [h.status for h in out.hunks] == ["failed"]
    assert out.hunks[0].nearest is None


def test_git_deletes_and_renames_without_hunks(tmp_path: Path) -> None:
    """git's diff of deleting an empty file and of a pure rename have no hunks: the empty file is
    deleted (a non-empty one is not), the renamed file keeps its bytes and gets its mode."""
    repo = tmp_path / "r"
    repo.mkdir()
    git_bytes(repo, "init", "-q")
    (repo / "empty").write_bytes(b"")
    (repo / "moved").write_bytes(numbered(1, 10))
    git_bytes(repo, "add", "-A")
    git_bytes(repo, "commit", "-qm", "one")
    git_bytes(repo, "rm", "-q", "empty")
    git_bytes(repo, "mv", "moved", "there")
    (repo / "there").chmod(0o755)
    git_bytes(repo, "add", "-A")
    diff = git_bytes(repo, "diff", "--cached", "-M", "HEAD")
    fps = {fp.old_path: fp for fp in parse_patch(diff)}
    gone = fps["empty"]
    assert gone.op == "delete" and not gone.hunks
    out = apply_file(b"", gone)
    assert out.ok and out.new is None and out.message == "deleted"
    refused = apply_file(b"still here\n", gone)
    assert refused.status == "failed" and "not empty" in refused.message
    moved = fps["moved"]
    assert moved.op == "rename" and not moved.hunks
    out = apply_file(numbered(1, 10), moved)
    assert out.ok and out.new == numbered(1, 10) and out.new_mode == "100755"


@needs_binaries
def test_a_deletion_leaves_nothing_or_fails(tmp_path: Path) -> None:
    old = numbered(1, 5)
    patch = unified_diff(old, None, "f")
    out, said = agrees_with_gnu(old, patch, tmp_path)
    assert out.ok and out.new is None and said.file is None and out.message == "deleted"
    longer = old + b"6\n"
    out = apply_file(longer, one(patch))
    assert out.status == "failed" and out.partial == b"6\n" and "not empty afterwards" in out.message


def test_the_reversed_patch_undoes_creation_and_deletion_and_stays_lazy() -> None:
    create = one(unified_diff(None, b"born\n", "f"))
    undo = reverse_file_patch(create)
    assert (undo.op, undo.old_path, undo.new_path) == ("delete", "f", None)
    assert isinstance(create.hunks, HunkList) and isinstance(undo.hunks, HunkList)
    out = apply_file(b"born\n", undo)
    assert out.ok and out.new is None
    delete = one(unified_diff(b"dies\n", None, "f"))
    assert reverse_file_patch(delete).op == "create"
    assert apply_file(None, reverse_file_patch(delete)).new == b"dies\n"
    modify = one(unified_diff(numbered(1, 9), numbered(1, 9).replace(b"5\n", b"V\n"), "f"))
    back = reverse_file_patch(modify)
    assert back.op == "modify" and apply_file(numbered(1, 9).replace(b"5\n", b"V\n"), back).new == numbered(1, 9)


def test_a_binary_patch_is_refused() -> None:
    body = (
        b"diff --git a/b.bin b/b.bin\nindex 1..2 100644\nGIT binary patch\nliteral 1\n"
        b"Ic${NkV0000\n\nliteral 1\nIc${NkV0000\n\n"
    )
    fp = one(body)
    assert fp.binary
    out = apply_file(b"\0", fp)
    assert out.status == "failed" and out.message == "binary patches are not supported"


# --------------------------------------------------------------------------- fuzz


@needs_binaries
def test_fuzz_is_used_only_as_far_as_needed(tmp_path: Path) -> None:
    """With fuzz 2 allowed, a hunk whose context matches exactly is clean (fuzz 0), one with its
    first context line changed uses fuzz 1 at its place; GNU patch reports the same."""
    old = numbered(1, 20)
    patch = unified_diff(old, old.replace(b"10\n", b"ten\n"), "f")
    out, _ = agrees_with_gnu(old, patch, tmp_path, fuzz=2)
    assert [(h.status, h.fuzz) for h in out.hunks] == [("clean", 0)]
    target = edit(old, {7: b"seven\n"})
    out, said = agrees_with_gnu(target, patch, tmp_path, fuzz=2)
    assert [(h.status, h.fuzz, h.line) for h in out.hunks] == [("fuzz", 1, 7)]
    assert "with fuzz 1" in said.output
    assert out.hunks[0].describe() == "hunk #1 applied at line 7 with fuzz 1 (offset +0 lines)"


# --------------------------------------------------------------------------- large outputs


@needs_binaries
@pytest.mark.parametrize("grow", [False, True])
def test_outputs_past_the_presize_threshold_are_exact(tmp_path: Path, grow: bool) -> None:
    """An output from PRESIZE bytes on gets its buffer in one allocation: its bytes must still be
    GNU patch's, with nothing left over from the presized buffer."""
    count = PRESIZE // 10 + 100
    old = b"".join(b"row %6d\n" % i for i in range(count))
    assert len(old) >= PRESIZE
    new = old.replace(b"row    500\n", b"row 500 changed\n").replace(b"row  50000\n", b"")
    if grow:
        new += b"appended\n" * 1000
    patch = unified_diff(old, new, "f")
    out, said = agrees_with_gnu(old, patch, tmp_path)
    assert out.ok and out.new == new == said.file


def test_the_output_bound_is_never_below_the_result() -> None:
    """``output_bound`` sizes the output buffer in one allocation; the writer trims it, so the
    bound may be high but never low, whatever the patch adds, removes, or does at a missing final
    newline; and it is high by at most a byte per changed line, two per no-newline marker (and
    one), or the buffer wastes what presizing saves."""
    base = numbered(1, 60)
    variants = [
        edit(base, {7: b"seven and more\n", 8: b"8\n8\n"}),  # grows
        base.replace(b"17\n", b"").replace(b"33\n", b""),  # shrinks
        base[:-1],  # the final newline removed
        base.replace(b"60\n", b"60"),
        b"",  # everything removed
        base.replace(b"2\n", b"2\r\n"),
        edit(base, {n: b"" for n in range(10, 50)}),  # a block removed
    ]
    for new in variants:
        fp = one(unified_diff(base, new, "f"))
        out = apply_file(base, fp)
        assert out.ok and (out.new or b"") == new
        bound = output_bound(len(base), fp.hunks)
        assert bound >= len(new), new
        kinds = [raw[:1] for h in fp.hunks for raw in h.lines]
        slack = kinds.count(b"+") + kinds.count(b"-") + 2 * kinds.count(b"\\") + 1
        assert bound <= len(new) + slack, new
    # a line added after a last line without newline: the writer inserts one (the tightest case)
    open_end = b"--- a/f\n+++ b/f\n@@ -60,0 +61 @@\n+61\n"
    out = apply_file(base[:-1], one(open_end))
    assert out.ok and out.new == base + b"61\n"
    assert output_bound(len(base) - 1, one(open_end).hunks) >= len(out.new)
    removal = one(unified_diff(base, base.replace(b"40\n", b""), "f"))
    assert output_bound(len(base), removal.hunks) < len(base)
    assert output_bound(len(base), list(removal.hunks)) == 0  # not the lazy list: unknown


def test_results_read_back_as_they_were_recorded() -> None:
    """The arrays behind a file's hunk results give back each field: line None stays None,
    fuzz only where it was used."""
    old = numbered(1, 30)
    patch = unified_diff(old, edit(old, {5: b"five\n", 25: b"x\n"}), "f")
    out = apply_file(b"head\n" + edit(old, {25: b"25 changed\n"}), one(patch))
    first, second = out.hunks
    assert first == HunkResult(1, "offset", offset=1, line=3, expected_line=2)
    assert (second.status, second.line, second.fuzz, second.expected_line) == ("failed", None, 0, 23)
    assert "HunkResult(index=2" in repr(out.hunks)


@needs_binaries
@pytest.mark.parametrize("moved", [-3, 0, 4])
def test_a_hunk_whose_context_ends_the_file_is_found_at_its_last_lines(tmp_path: Path, moved: int) -> None:
    """The last place a hunk can start is where its old lines end the file: lines added (or
    removed) above move the hunk there by that offset, as far as the file's last line."""
    old = numbered(1, 20)
    patch = b"--- a/f\n+++ b/f\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"
    target = lines(*[f"new {i}" for i in range(moved)]) + old if moved >= 0 else old[len(numbered(1, -moved)) :]
    out, _ = agrees_with_gnu(target, patch, tmp_path)
    assert out.ok and out.hunks[0].offset == moved and out.new is not None
    assert out.new.endswith(b"17\neighteen\n19\n20\n")


def _second_after_eleven(old_at: int, header_at: int) -> bytes:
    """A patch of ``numbered(1, 30)``: the first hunk changes line 11, the second has three
    context lines from ``old_at`` (where they are), a change, three more, and says ``header_at``."""
    first = b"@@ -10,3 +10,3 @@\n 10\n-11\n+ELEVEN\n 12\n"
    c = old_at
    second = b"@@ -%d,7 +%d,7 @@\n" % (header_at, header_at) + b"".join(b" %d\n" % n for n in (c, c + 1, c + 2))
    second += b"-%d\n+CHANGED\n" % (c + 3) + b"".join(b" %d\n" % n for n in (c + 4, c + 5, c + 6))
    return b"--- a/f\n+++ b/f\n" + first + second


@needs_binaries
@pytest.mark.parametrize("back", [0, 1, 2, 3])
@pytest.mark.parametrize("offset", [-1, -2, -3, -4])
def test_a_hunks_context_reaches_back_over_the_previous_change_only_from_at_or_before_it(
    tmp_path: Path, offset: int, back: int
) -> None:
    """GNU patch 2.7.6 never lets a hunk start before the line after the previous hunk's last
    change (line 12 here), with one exception its search order makes: when the expected line is
    at or before that line, it also tries lines as far before the expected line as the expected
    line is before line 12. So the second hunk, its context starting ``back`` lines before line 12
    and found at ``offset``, applies when it starts at line 12, or when ``back >= 2 * -offset``
    (offset -1 from line 10 or 9); every other placement is refused (issue #35). git apply
    refuses them all: it never lets a hunk's context share a line an earlier hunk matched."""
    old = numbered(1, 30)
    c = 12 - back
    patch = _second_after_eleven(c, c - offset)
    out, said = agrees_with_gnu(old, patch, tmp_path)
    applies = back == 0 or back >= -2 * offset
    assert out.ok == applies
    if applies:
        assert [(h.offset, h.line) for h in out.hunks] == [(0, 10), (offset, c)]
        assert out.new == edit(old, {11: b"ELEVEN\n", c + 3: b"CHANGED\n"})
    else:
        assert [(h.status, h.misordered) for h in out.hunks] == [("clean", False), ("failed", False)]
        assert said.failed == {2} and out.partial == edit(old, {11: b"ELEVEN\n"})
    assert git_apply(old, patch, tmp_path).rc != 0


@needs_binaries
def test_a_hunk_expected_where_it_would_end_the_file_still_reaches_back(tmp_path: Path) -> None:
    """The same reach back (offset -1 from line 10) when the expected place is also the last one
    the hunk fits at (its seven lines would end the file there): no positive offset is left, and
    GNU patch still tries the lines before it."""
    old = numbered(1, 16)
    out, _ = agrees_with_gnu(old, _second_after_eleven(9, 10), tmp_path)
    assert out.ok and [(h.offset, h.line) for h in out.hunks] == [(0, 10), (-1, 9)]
    assert out.new == edit(old, {11: b"ELEVEN\n", 12: b"CHANGED\n"})


@needs_binaries
def test_a_misordered_hunk_still_moves_the_offset_of_the_next(tmp_path: Path) -> None:
    """A hunk found where it would change a line an earlier hunk changed is refused as
    misordered, but GNU patch has already taken its offset: the next hunk is searched from
    there (-1), and of two copies of its lines picks the one above, not the one below."""
    old = edit(numbered(1, 40), {24: b"p\n", 25: b"q\n", 26: b"p\n", 27: b"q\n", 28: b"p\n"})
    first = b"@@ -10,3 +10,3 @@\n 10\n-11\n+ELEVEN\n 12\n"
    misordered = b"@@ -10,3 +10,3 @@\n 9\n-10\n+TEN\n 11\n"  # found at line 9: its change is line 10
    third = b"@@ -25,3 +25,3 @@\n p\n-q\n+Q\n p\n"  # "p q p" at lines 24 and 26
    out, said = agrees_with_gnu(old, b"--- a/f\n+++ b/f\n" + first + misordered + third, tmp_path)
    assert "misordered" in said.output and said.failed == {2}
    assert [(h.status, h.misordered, h.offset, h.line) for h in out.hunks] == [
        ("clean", False, 0, 10),
        ("failed", True, 0, 9),
        ("offset", False, -1, 24),
    ]
    assert out.partial == edit(old, {11: b"ELEVEN\n", 25: b"Q\n"})


@needs_binaries
def test_a_hunk_that_fuzz_leaves_no_line_of_matches_where_gnus_search_starts(tmp_path: Path) -> None:
    """With fuzz 1 the second hunk (one context line, an addition) has no line left to compare,
    so it matches the first place GNU tries: expected at line 2, ten lines before the line after
    the first hunk's change, that is line -8. It is misordered there and refused, not added after
    line 12 where a search that skipped the lines before the file would have put it."""
    old = numbered(1, 30)
    patch = b"--- a/f\n+++ b/f\n@@ -10,3 +10,3 @@\n 10\n-11\n+ELEVEN\n 12\n@@ -2,1 +2,2 @@\n 2\n+ADDED\n"
    out, said = agrees_with_gnu(old, patch, tmp_path, fuzz=1)
    assert "misordered" in said.output and said.failed == {2}
    assert [(h.status, h.misordered, h.line) for h in out.hunks] == [("clean", False, 10), ("failed", True, -8)]
    assert out.partial == edit(old, {11: b"ELEVEN\n"})
