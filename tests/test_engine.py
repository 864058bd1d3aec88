"""Parser (patchset.patchfmt.diffs) and engine (patchset.engine.hunks) behaviour, case by case.

The broad equivalence with GNU patch is in test_engine_differential.py; these pin down the named
rules with small readable cases, several of them checked against the real ``patch`` binary too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from patchset.engine.hunks import apply_file, reverse_file_patch
from patchset.errors import PatchFormatError
from patchset.patchfmt.diffs import files_touched, header_text, parse_patch
from patchset.patchfmt.filepatch import split_lines
from patchset.patchfmt.names import strip_path
from tests.support.diffgen import unified_diff
from tests.support.repo import git_bytes


def nums(*ns: int, extra: dict[int, bytes] | None = None) -> bytes:
    extra = extra or {}
    return b"".join(extra.get(n, b"%d\n" % n) for n in ns)


def gnu(old: bytes | None, patch: bytes, tmp: Path, fuzz: int = 0) -> tuple[int, bytes | None, str]:
    """Run the real GNU patch on one file ``f``; returns (rc, resulting bytes, output)."""
    d = tmp / f"gnu{len(list(tmp.glob('gnu*')))}"
    d.mkdir()
    if old is not None:
        (d / "f").write_bytes(old)
    (d / "p").write_bytes(patch)
    proc = subprocess.run(
        ["patch", "-p1", f"-F{fuzz}", "--forward", "--no-backup-if-mismatch", "-r", "-", "-i", "p"],
        cwd=d,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    out = (d / "f").read_bytes() if (d / "f").exists() else None
    return proc.returncode, out, proc.stdout.decode("latin-1")


needs_gnu = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")


# --------------------------------------------------------------------------- parsing


@pytest.fixture
def format_patch(tmp_path: Path) -> bytes:
    """A real ``git format-patch`` mail: new file (CRLF), mode change + no-newline edit,
    rename, copy, binary deletion, a quoted non-ASCII name."""
    repo = tmp_path / "r"
    repo.mkdir()

    def g(*a: str) -> bytes:
        return git_bytes(repo, *a)

    g("init", "-q")
    (repo / "x").write_bytes(b"a\nb\nc\n")
    (repo / "keep.py").write_bytes(b"".join(b"keep %d\n" % i for i in range(20)))
    (repo / "src.py").write_bytes(b"".join(b"src %d\n" % i for i in range(20)))
    (repo / "z.bin").write_bytes(b"bin\0")
    g("add", "-A")
    g("commit", "-qm", "init")
    g("mv", "keep.py", "kept.py")
    os.chmod(repo / "x", 0o755)
    (repo / "x").write_bytes(b"a\nB\nc")
    (repo / "copy.py").write_bytes((repo / "src.py").read_bytes() + b"one more\n")
    g("rm", "-q", "z.bin")
    (repo / "new file.txt").write_bytes(b"new\r\nfile\r\n")
    (repo / "caf\u00e9.txt").write_bytes(b"accent\n")
    g("add", "-A")
    g("commit", "-qm", "second\n\nBody line.\n--- not a diff start\nUpstream-Status: Pending")
    return g("-c", "core.quotepath=true", "format-patch", "-1", "--stdout", "-M", "-C", "--find-copies-harder")


def test_git_format_patch_is_parsed_with_extended_headers(format_patch: bytes) -> None:
    fps = {fp.new_path or fp.old_path: fp for fp in parse_patch(format_patch)}
    assert fps["new file.txt"].op == "create" and fps["new file.txt"].new_mode == "100644"
    assert fps["new file.txt"].hunks[0].new_lines() == [b"new\r\n", b"file\r\n"]  # CR kept
    x = fps["x"]
    assert x.op == "modify" and (x.old_mode, x.new_mode) == ("100644", "100755")
    assert x.hunks[0].new_lines()[-1] == b"c"  # the no-newline marker removed the \n
    assert b"\\ No newline at end of file\n" in x.hunks[0].lines
    kept = fps["kept.py"]
    assert (kept.op, kept.old_path, kept.similarity, kept.hunks) == ("rename", "keep.py", 100, [])
    cp = fps["copy.py"]
    assert cp.op == "copy" and cp.old_path == "src.py" and len(cp.hunks) == 1
    z = fps["z.bin"]
    assert z.op == "delete" and z.binary
    assert "caf\u00e9.txt" in fps  # git's "caf\303\251.txt" quoting undone
    # the `diff --git a/X b/Y` headers' order, both sides of the copy and the rename, each path once
    assert files_touched(format_patch) == [
        "caf\u00e9.txt",
        "src.py",
        "copy.py",
        "keep.py",
        "kept.py",
        "new file.txt",
        "x",
        "z.bin",
    ]
    touched = files_touched(format_patch)
    assert {"keep.py", "kept.py", "src.py", "copy.py", "x", "z.bin"} <= set(touched)
    assert len(touched) == len(set(touched))


def test_header_text_is_everything_before_the_first_diff(format_patch: bytes) -> None:
    head = header_text(format_patch)
    assert head.startswith(b"From ") and b"Subject: [PATCH] second" in head
    assert b"Upstream-Status: Pending" in head and b"--- not a diff start" in head
    assert b"diff --git" not in head
    assert format_patch.startswith(head)
    assert header_text(b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n") == b""


def test_strip_levels_and_dev_null() -> None:
    body = b"--- /dev/null\n+++ b/deep/dir/f.py\n@@ -0,0 +1 @@\n+x\n"
    assert parse_patch(body, 1)[0].new_path == "deep/dir/f.py"
    assert parse_patch(body, 2)[0].new_path == "dir/f.py"
    assert parse_patch(body, 0)[0].new_path == "b/deep/dir/f.py"
    assert parse_patch(body, 1)[0].op == "create" and parse_patch(body, 1)[0].old_path is None
    with pytest.raises(PatchFormatError, match="fewer than 5"):
        parse_patch(body, 5, source="series/0001.patch")
    assert strip_path("a//b/c", 1) == "b/c"


def test_epoch_timestamp_means_absent_file() -> None:
    body = b"--- a/f\t1970-01-01 00:00:00.000000000 +0000\n+++ b/f\t2026-01-01 10:00:00 +0000\n@@ -0,0 +1 @@\n+x\n"
    assert parse_patch(body)[0].op == "create"


@pytest.mark.parametrize(
    "body, line",
    [
        (b"From: x\n\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n", 7),  # hunk shorter than said
        (b"--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n", 1),  # unreadable hunk header: no hunks
        (b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\nbogus\n", 5),
    ],
)
def test_malformed_patches_name_the_line(body: bytes, line: int) -> None:
    with pytest.raises(PatchFormatError) as exc:
        parse_patch(body, source="0003-x.patch")
    assert f"0003-x.patch:{line}" in str(exc.value)
    assert exc.value.exit_code == 2


def test_no_diff_at_all_is_an_error() -> None:
    with pytest.raises(PatchFormatError, match="no diff found"):
        parse_patch(b"Subject: just a mail\n\nhello\n", source="m.patch")


def test_crlf_patch_headers_strip_crs_like_gnu_patch() -> None:
    body = b"--- a/f\r\n+++ b/f\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+c\r\n"
    fp = parse_patch(body)[0]
    assert fp.hunks[0].old_lines() == [b"a\n", b"b\n"]
    assert apply_file(b"a\nb\n", fp).new == b"a\nc\n"


def test_split_lines_only_on_newline() -> None:
    assert split_lines(b"a\r\nb\rc\x0bd\ne") == [b"a\r\n", b"b\rc\x0bd\n", b"e"]
    assert split_lines(b"") == []
    assert split_lines(b"x\x0by\x1cz\x0c\n\x85q") == [b"x\x0by\x1cz\x0c\n", b"\x85q"]


# --------------------------------------------------------------------------- engine


def test_clean_offset_and_accumulated_offset() -> None:
    old = nums(*range(1, 31))
    new = nums(*range(1, 31), extra={5: b"five\n", 25: b"twenty-five\n"})
    fp = parse_patch(unified_diff(old, new, "f"))[0]
    assert [h.status for h in apply_file(old, fp).hunks] == ["clean", "clean"]
    drifted = b"x\ny\n" + old
    out = apply_file(drifted, fp)
    assert out.ok and out.new == b"x\ny\n" + new
    assert [(h.status, h.offset, h.line) for h in out.hunks] == [("offset", 2, 4), ("offset", 2, 24)]


def test_failed_hunk_reports_nearest_region_and_still_computes_partial() -> None:
    old = nums(*range(1, 41))
    new = nums(*range(1, 41), extra={10: b"ten\n", 30: b"thirty\n"})
    fp = parse_patch(unified_diff(old, new, "f"))[0]
    target = nums(*range(1, 41), extra={29: b"29 changed\n"})
    target = b"pad\n" * 5 + target
    out = apply_file(target, fp)
    assert out.status == "failed" and out.new is None
    assert [h.status for h in out.hunks] == ["offset", "failed"]
    near = out.hunks[1].nearest
    assert near is not None and near.line == 27 + 5 and near.similarity == pytest.approx(6 / 7, 0.01)
    assert "nearest match at line 32" in out.hunks[1].describe()
    assert out.partial is not None and b"ten\n" in out.partial and b"thirty" not in out.partial


def test_already_applied_is_refused_distinctly() -> None:
    old = nums(*range(1, 11))
    new = nums(*range(1, 11), extra={4: b"four\n"})
    fp = parse_patch(unified_diff(old, new, "f"))[0]
    out = apply_file(new, fp)
    assert out.status == "already_applied" and out.new is None
    assert "reversed (or previously applied)" in out.message
    assert [h.status for h in out.hunks] == ["ignored"]
    # and the reversed patch applies to the new file, giving the old one back
    assert apply_file(new, reverse_file_patch(fp)).new == old


def test_crlf_file_needs_a_crlf_patch() -> None:
    old = b"a\r\nb\r\nc\r\n"
    fp = parse_patch(unified_diff(old, b"a\r\nB\r\nc\r\n", "f"))[0]
    assert apply_file(old, fp).new == b"a\r\nB\r\nc\r\n"
    lf = parse_patch(unified_diff(b"a\nb\nc\n", b"a\nB\nc\n", "f"))[0]
    assert apply_file(old, lf).status == "failed"


def test_missing_newline_at_end_of_file() -> None:
    old = b"a\nb"
    fp = parse_patch(unified_diff(old, b"a\nb\nc\n", "f"))[0]
    assert apply_file(old, fp).new == b"a\nb\nc\n"
    assert apply_file(b"a\nb\n", fp).status == "failed"  # "b" is not "b\n"
    fp2 = parse_patch(unified_diff(b"a\nb\n", b"a\nc", "f"))[0]
    assert apply_file(b"a\nb\n", fp2).new == b"a\nc"


def test_create_and_delete() -> None:
    create = parse_patch(unified_diff(None, b"hello\n", "f"))[0]
    assert apply_file(None, create).new == b"hello\n"
    assert apply_file(b"hello\n", create).status == "already_applied"
    assert apply_file(b"other\n", create).status == "failed"
    delete = parse_patch(unified_diff(b"bye\n", None, "f"))[0]
    out = apply_file(b"bye\n", delete)
    assert out.ok and out.new is None and out.message == "deleted"
    assert apply_file(None, delete).status == "failed"  # missing: maybe never there (issue #16)
    assert apply_file(b"bye\nmore\n", delete).status == "failed"


def test_mode_only_and_rename_without_hunks() -> None:
    body = b"diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n"
    fp = parse_patch(body)[0]
    out = apply_file(b"echo\n", fp)
    assert out.ok and out.new == b"echo\n" and out.new_mode == "100755"


def test_dataless_binary_stanza_is_passed_over_like_gnu_patch() -> None:
    # "Binary files ... differ" carries no data: GNU patch (so quilt, dpkg-source) leaves the file
    body = b"diff --git a/b.bin b/b.bin\nindex 1..2 100644\nBinary files a/b.bin and b/b.bin differ\n"
    out = apply_file(b"\0", parse_patch(body)[0])
    assert out.ok and out.new == b"\0"


@needs_gnu
def test_start_and_end_of_file_rules_match_gnu_patch(tmp_path: Path) -> None:
    # less leading than trailing context at line 1: only the start of the file will do
    p_start = unified_diff(nums(*range(1, 11)), nums(*range(1, 11), extra={1: b"A\n"}), "f")
    # less trailing than leading context: only the end of the file will do
    p_end = unified_diff(nums(*range(1, 11)), nums(*range(1, 11), extra={9: b"X\n"}), "f")
    # short context on both sides, mid-file: free to move
    p_mid = unified_diff(b"l1\nl2\nl3\n", b"l1\nX\nl3\n", "f")
    cases = [
        (p_start, b"new\n" + nums(*range(1, 11)), "failed"),
        (p_start, nums(*range(1, 11)) + b"tail\n", "applied"),
        (p_end, nums(*range(1, 11)) + b"more\n", "failed"),
        (p_end, b"head\n" + nums(*range(1, 11)), "applied"),
        (p_mid, b"z1\nz2\nl1\nl2\nl3\nq\n", "applied"),
    ]
    for patch, target, want in cases:
        out = apply_file(target, parse_patch(patch)[0])
        rc, gnu_out, _ = gnu(target, patch, tmp_path)
        assert out.status == want
        assert (rc == 0) == (want == "applied")
        if want == "applied":
            assert out.new == gnu_out


@needs_gnu
def test_fuzz_only_when_asked(tmp_path: Path) -> None:
    old = nums(*range(1, 21))
    fp_body = unified_diff(old, nums(*range(1, 21), extra={10: b"ten\n"}), "f")
    fp = parse_patch(fp_body)[0]
    target = nums(*range(1, 21), extra={7: b"seven\n"})  # first context line differs
    assert apply_file(target, fp).status == "failed"
    out = apply_file(target, fp, fuzz=1)
    assert out.ok and [(h.status, h.fuzz) for h in out.hunks] == [("fuzz", 1)]
    assert b"seven\n" in out.new and b"ten\n" in out.new  # the file's context line is kept
    rc, gnu_out, said = gnu(target, fp_body, tmp_path, fuzz=1)
    assert rc == 0 and gnu_out == out.new and "with fuzz 1" in said


@needs_gnu
def test_hunk_insert_past_end_and_missing_newline_join_like_gnu(tmp_path: Path) -> None:
    # "-3,0" insertion on a 2-line file; "+" after a line without newline
    for target, body in [
        (b"a\na\n", b"--- a/f\n+++ b/f\n@@ -3,0 +4 @@\n+a\n\\ No newline at end of file\n"),
        (b"a\nb", b"--- a/f\n+++ b/f\n@@ -2,0 +3 @@\n+c\n"),
        (b"a\nb", b"--- a/f\n+++ b/f\n@@ -1,0 +2 @@\n+c\n\\ No newline at end of file\n"),
    ]:
        out = apply_file(target, parse_patch(body)[0])
        rc, gnu_out, _ = gnu(target, body, tmp_path)
        assert rc == 0 and out.ok and out.new == gnu_out


def test_several_patches_in_order_on_one_file() -> None:
    v0 = nums(*range(1, 21))
    v1 = nums(*range(1, 21), extra={3: b"three\n"})
    v2 = nums(*range(1, 21), extra={3: b"three\n", 15: b"fifteen\n"})
    p1 = parse_patch(unified_diff(v0, v1, "f"))[0]
    p2 = parse_patch(unified_diff(v1, v2, "f"))[0]
    mid = apply_file(v0, p1)
    assert mid.ok
    assert apply_file(mid.new, p2).new == v2
    assert apply_file(v0, p2).ok  # independent hunks also apply out of order
    assert (p1.op, p1.old_path, p1.new_path, len(p1.hunks)) == ("modify", "f", "f", 1)


def test_outcome_json_is_plain() -> None:
    import json

    old = nums(*range(1, 11))
    fp = parse_patch(unified_diff(old, nums(*range(1, 11), extra={5: b"five\n"}), "f"))[0]
    data = apply_file(b"x\n" + old, fp).to_json()
    assert json.loads(json.dumps(data))["hunks"][0] == {
        "index": 1,
        "status": "offset",
        "offset": 1,
        "fuzz": 0,
        "line": 3,
        "nearest": None,
        "expected_line": 2,
    }


@pytest.mark.parametrize("seed", range(40))
def test_the_line_index_agrees_with_a_plain_split(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_Text`` lists line offsets block by block, on demand; every line it gives must be the
    plain split's, whatever the block size, long lines, CRs or a last line without a newline."""
    import random

    from patchset.engine import hunks

    rnd = random.Random(seed)
    monkeypatch.setattr(hunks, "_BLOCK", rnd.choice([1, 2, 7, 64, 1 << 14]))
    data = b"".join(
        rnd.choice([b"\n", b"x\n", b"\r\n", b"a" * rnd.randint(0, 200) + b"\n", b"tail"])
        for _ in range(rnd.randint(0, 300))
    )
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", data)  # split after each "\n" only: a CR is part of its line
    text = hunks._Text(data)
    assert len(text) == len(lines)
    order = list(range(len(lines) + 1))
    rnd.shuffle(order)  # blocks are listed in any order
    for i in order:
        assert text.start(i) == sum(map(len, lines[:i]))
        if i < len(lines):
            assert text.line(i) == lines[i]
    assert list(text.lines()) == lines


@pytest.mark.parametrize(("expected", "nearest"), [(11, 10), (12, 13)])
def test_nearest_region_tie_goes_to_the_closest(expected: int, nearest: int) -> None:
    """Two regions match a failed hunk equally well (2 of its 3 old lines): the one closest to
    where the hunk expected to be is reported."""
    target = nums(*range(1, 10)) + b"alpha\nbeta\ngamma\n" * 2 + nums(*range(16, 30))
    patch = f"--- a/f\n+++ b/f\n@@ -{expected},3 +{expected},3 @@\n alpha\n-beta\n+BETA\n delta\n".encode()
    out = apply_file(target, parse_patch(patch)[0])
    assert out.status == "failed"
    near = out.hunks[0].nearest
    assert near is not None and (near.line, near.similarity) == (nearest, pytest.approx(2 / 3, abs=0.001))


def test_misordered_hunks_are_refused() -> None:
    """A hunk that would change a line before one an earlier hunk changed is refused (GNU patch's
    "misordered hunks"), never applied out of order into garbled output."""
    old = nums(*range(1, 11))
    patch = b"--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n 5\n-6\n+SIX\n 7\n@@ -2,3 +2,3 @@\n 2\n-3\n+THREE\n 4\n"
    out = apply_file(old, parse_patch(patch)[0])
    assert not out.ok and out.new is None
    assert [(h.status, h.misordered) for h in out.hunks] == [("clean", False), ("failed", True)]
    assert "misordered hunks" in out.hunks[1].describe()
    # hunks that touch only each other's context are in order
    ok = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+FIVE\n 6\n@@ -5,3 +5,3 @@\n 5\n-6\n+SIX\n 7\n"
    out = apply_file(old, parse_patch(ok)[0])
    assert out.ok and out.new == old.replace(b"5\n", b"FIVE\n", 1).replace(b"6\n", b"SIX\n", 1)


BIG = b"".join(b"row %d\n" % i for i in range(300))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"a\nb\nc\n", b"a\nB\nc\n"),  # one changed line
        (b"a\nb", b"a\nb\nc\n"),  # a missing final newline gained
        (b"a\nb\n", b"a\nc"),  # and lost
        (b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n"),  # CRLF lines, bytes kept
        (BIG, BIG.replace(b"row 1", b"ROW 1")),  # many hunks
        (BIG, b"".join(b"row %d\n" % i if i % 4 else b"new %d\n" % i for i in range(300))),  # one spanning all
        (b"x\n\n\ny\n", b"x\n\n\nz\n"),  # blank context lines
        (None, b"hello\n"),  # created
        (b"bye\n", None),  # deleted
    ],
)
def test_a_hashed_apply_gives_the_sha256_of_the_full_result(old: bytes | None, new: bytes | None) -> None:
    """What a lock proof relies on: ``digest_only`` hashes exactly the bytes a full apply makes."""
    fp = parse_patch(unified_diff(old, new, "f"))[0]
    full, hashed = apply_file(old, fp), apply_file(old, fp, digest_only=True)
    assert full.ok and hashed.ok and hashed.new is None and full.new == new
    assert hashed.sha256 == (hashlib.sha256(new).hexdigest() if new is not None else None)
    assert list(hashed.hunks) == list(full.hunks)


def test_a_hashed_apply_that_fails_keeps_nothing_and_says_so() -> None:
    fp = parse_patch(unified_diff(b"a\nb\nc\n", b"a\nB\nc\n", "f"))[0]
    full, hashed = apply_file(b"x\ny\nz\n", fp), apply_file(b"x\ny\nz\n", fp, digest_only=True)
    assert hashed.status == full.status == "failed" and hashed.message == full.message
    assert full.partial == b"x\ny\nz\n" and hashed.partial is None and hashed.sha256 is None
    assert [h.status for h in hashed.hunks] == ["failed"]
