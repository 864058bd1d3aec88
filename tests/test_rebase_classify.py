"""The signals that decide a patch's fate on a new base (``patchset.rebase.classify``), on small real
git repositories: PR merges (recorded, or ``(#N)`` in subjects), patch-ids, reverse applies, the
upstream moves a patch follows and the commits blamed for a conflict (``git log -L`` checked
against what the test knows it committed)."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path

import pytest

from patchset.ledger.model import Origin, Patch, RecordedStatus
from patchset.ledger.model import Upstream as Refs
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.classify import (
    Evidence,
    blame_lines,
    map_line,
    merge_signals,
    moves_for,
    patch_id_signals,
    reverse_apply_signal,
    subject_prs,
    subject_signals,
)
from patchset.rebase.replay import Move
from tests.support.rebase_git import Upstream, numbered
from tests.support.repo import git

BASE = numbered("line")


@pytest.fixture
def up(tmp_path: Path) -> Upstream:
    return Upstream.make(tmp_path / "up", {"a.txt": BASE, "b.txt": numbered("b"), "pkg/util.py": numbered("u", 40)})


def patch(prs=(), ports=(), **status) -> Patch:
    return Patch(
        "p",
        "vllm",
        "t",
        Origin.UPSTREAM,
        upstream=Refs(prs=list(prs), ports=list(ports)),
        status=RecordedStatus(**status),
    )


# --------------------------------------------------------------------------- PR merges


def test_a_recorded_merge_in_the_new_base_is_decisive(up: Upstream) -> None:
    merge = up.advance("Fix it (#12)", {"a.txt": "x\n"})
    later = up.advance("later", {"b.txt": "y\n"})
    repo = up.repo
    (s,) = merge_signals(patch(["#12"]), repo, later, "v2", {"#12": merge[:10]}, ports=False)
    assert (s.name, s.decisive) == (Evidence.PR_MERGED, True)
    assert s.detail == f"PR #12 merged as {merge[:12]} (tracker), which v2 contains"
    (s,) = merge_signals(patch(ports=["#12"]), repo, later, "v2", {"#12": merge}, ports=True)
    assert s.name == Evidence.PORT_MERGED and s.detail.startswith("ported PR #12")
    assert merge_signals(patch(["#12"]), repo, later, "v2", {}, ports=True) == []  # no port named


def test_a_merge_not_yet_in_the_new_base_or_unknown_is_a_note(up: Upstream) -> None:
    first = up.advance("first", {"a.txt": "x\n"})
    merge = up.advance("Fix it (#12)", {"b.txt": "y\n"})
    repo = up.repo
    (s,) = merge_signals(patch(["#12"]), repo, first, "v2", {"#12": merge}, ports=False)
    assert (s.name, s.decisive) == (Evidence.NOTE, False) and s.detail.endswith("not yet in v2")
    (s,) = merge_signals(patch(["#12"]), repo, first, "v2", {"#12": "f" * 40}, ports=False)
    assert (s.name, s.decisive) == (Evidence.NOTE, False) and "not in the local upstream history" in s.detail


def test_the_ledgers_recorded_status_is_the_fallback(up: Upstream) -> None:
    merge = up.advance("Fix it", {"a.txt": "x\n"})
    repo = up.repo
    day = dt.date(2026, 3, 1)
    p = patch(["#7"], pr_state="merged", merge_commit=merge, recorded=day)
    (s,) = merge_signals(p, repo, merge, "v2", {}, ports=False)
    assert s.decisive and s.detail.endswith(f"(ledger status (recorded {day})), which v2 contains")
    (s,) = merge_signals(patch(["#7"], pr_state="merged", merge_commit=merge), repo, merge, "v2", {}, ports=False)
    assert "(ledger status)" in s.detail
    assert merge_signals(patch(["#7"], pr_state="open", merge_commit=merge), repo, merge, "v2", {}, ports=False) == []
    (s,) = merge_signals(patch(["#7"], pr_state="merged"), repo, merge, "v2", {}, ports=False)
    assert (s.name, s.decisive) == (Evidence.NOTE, False) and "no merge commit is recorded" in s.detail
    assert merge_signals(patch(ports=["#7"], pr_state="merged"), repo, merge, "v2", {}, ports=True) == []


def test_pr_numbers_in_subjects_between_the_bases(up: Upstream) -> None:
    up.advance("Old fix (#5)", {"a.txt": "0\n"})
    old = up.new
    first = up.advance("Fix the scheduler (#31000)", {"a.txt": "1\n"})
    up.advance("Two at once (#31001) (#31002)", {"a.txt": "2\n"})
    newest = up.advance("Revert of the scheduler fix (#31000)", {"a.txt": "3\n"})
    up.advance("no number #31003 here", {"a.txt": "4\n"})
    got = subject_prs(up.repo, old, up.new)
    assert set(got) == {31000, 31001, 31002}  # #5 is before the old base; a bare #N is not a subject's PR
    assert got[31000] == (newest, "Revert of the scheduler fix (#31000)")  # the newest commit naming it
    assert got[31002][1] == "Two at once (#31001) (#31002)"
    assert first not in {sha for sha, _ in got.values()}


def test_merge_commits_do_not_name_prs(up: Upstream) -> None:
    git(up.root, "checkout", "-q", "-b", "side", up.old)
    (up.root / "side.txt").write_text("s\n")
    git(up.root, "add", "-A")
    git(up.root, "commit", "-q", "-m", "side work")
    git(up.root, "checkout", "-q", "--detach", up.old)
    (up.root / "main.txt").write_text("m\n")
    git(up.root, "add", "-A")
    git(up.root, "commit", "-q", "-m", "main work")
    git(up.root, "merge", "-q", "--no-ff", "-m", "Merge pull request (#77)", "side")
    new = git(up.root, "rev-parse", "HEAD").strip()
    assert subject_prs(up.repo, up.old, new) == {}


def test_subject_signals_only_count_the_targets_own_repository() -> None:
    commits = {31000: ("a" * 40, "Fix (#31000)")}
    p = patch(["#31000", "vllm-project/vllm#31000", "vllm#31000", "other/fork#31000", "#31001", "#x"])
    got = subject_signals(p, "vllm-project/vllm", commits, "v2", ports=False)
    assert [s.detail.split(" is upstream")[0] for s in got] == [
        "PR #31000",
        "PR vllm-project/vllm#31000",
        "PR vllm#31000",
    ]
    assert all(s.name == Evidence.PR_MERGED and s.decisive for s in got)
    assert got[0].detail == f"PR #31000 is upstream commit {'a' * 12} (Fix (#31000)), which v2 contains"
    assert len(subject_signals(p, "", commits, "v2", ports=False)) == 4  # no repository known: every ref counts
    (s,) = subject_signals(patch(ports=["VLLM-Project/VLLM#31000"]), "vllm-project/vllm", commits, "v2", ports=True)
    assert s.name == Evidence.PORT_MERGED and s.detail.startswith("ported PR ")


# --------------------------------------------------------------------------- patch-id


def test_patch_id_finds_the_upstream_commit_that_made_the_same_change(up: Upstream) -> None:
    change = BASE.replace("line 10\n", "LINE 10\n")
    body = b"Subject: take the fix\n\nWhy.\n\n" + up.diff({"a.txt": change})
    up.advance("unrelated", {"b.txt": "other\n"})
    squash = up.advance("Squash: the fix and more", {"a.txt": change, "pkg/util.py": "more\n"})
    up.advance("later edit of a", {"a.txt": "head\n" + change})
    other = up.diff({"b.txt": numbered("b").replace("b 1\n", "B 1\n")})
    got = patch_id_signals(up.repo, up.old, up.new, {"p": (body, ["a.txt"]), "q": (other, ["b.txt"]), "r": (body, [])})
    assert list(got) == ["p"]
    assert got["p"].name == Evidence.PATCH_ID and got["p"].decisive
    assert f"matches upstream commit {squash[:12]} (Squash: the fix and more)" in got["p"].detail
    assert patch_id_signals(up.repo, up.new, up.new, {"p": (body, ["a.txt"])}) == {}  # no commit between
    up.advance("Revert the fix", {"a.txt": BASE})
    again = up.advance("Reland the fix", {"a.txt": change})
    got = patch_id_signals(up.repo, up.old, up.new, {"q": (other, ["b.txt"]), "p": (body, ["a.txt"])})
    assert list(got) == ["p"] and f"{again[:12]} (Reland the fix)" in got["p"].detail  # the newest of two
    assert re.fullmatch(r"patch-id [0-9a-f]{12} matches upstream commit [0-9a-f]{12} \(.*\)", got["p"].detail)


def test_patch_id_across_many_commits_and_a_one_letter_path(up: Upstream) -> None:
    """Sixteen and more candidates number past one hex digit; a path of one letter is a section too."""
    for i in range(17):
        up.advance(f"edit {i}", {"x": f"{i}\n", "a.txt": BASE + f"tail {i}\n"})
    last = up.new
    body = up.diff({"x": "16\n"}, on=up.repo.resolve(f"{last}~1"))
    got = patch_id_signals(up.repo, up.old, up.new, {"p": (up.diff({"b.txt": "b\n"}), ["a.txt"]), "q": (body, ["x"])})
    assert list(got) == ["q"] and f"{last[:12]} (edit 16)" in got["q"].detail
    assert patch_id_signals(up.repo, up.old, up.new, {"r": (body, [])}) == {}


def test_patch_id_reads_plain_unified_diffs(up: Upstream, tmp_path: Path) -> None:
    """A body written by GNU ``diff -ru`` (dated names, no ``diff --git``), with a creation from
    ``/dev/null``, still has the patch-id of the upstream commit that made the same change."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a/a.txt").write_text(BASE)
    (tmp_path / "b/a.txt").write_text(BASE.replace("line 10\n", "LINE 10\n"))
    plain = subprocess.run(["diff", "-ru", "a", "b"], cwd=tmp_path, capture_output=True).stdout
    assert plain.startswith(b"diff -ru a/a.txt b/a.txt\n--- a/a.txt\t")
    created = b"--- /dev/null\t2026-01-01 00:00:00\n+++ b/new.txt\t2026-01-01 00:00:00\n@@ -0,0 +1 @@\n+n\n"
    c = up.advance("Take it", {"a.txt": BASE.replace("line 10\n", "LINE 10\n"), "new.txt": "n\n"})
    got = patch_id_signals(up.repo, up.old, up.new, {"p": (plain + created, ["a.txt", "new.txt"])})
    assert c[:12] in got["p"].detail
    assert patch_id_signals(up.repo, up.old, up.new, {"p": (plain, ["a.txt", "new.txt"])}) == {}  # half of it
    d = up.advance("Drop it", {"b.txt": None})
    deleted = b"--- a/b.txt\t2026-01-01\n+++ /dev/null\t2026-01-01\n@@ -1,30 +0,0 @@\n" + b"".join(
        b"-" + line.encode() + b"\n" for line in numbered("b").splitlines()
    )
    got = patch_id_signals(up.repo, c, up.new, {"q": (deleted, ["b.txt"])})
    assert d[:12] in got["q"].detail


def test_a_body_ending_in_a_removed_dashes_line_is_read_as_it_is(up: Upstream) -> None:
    """A removed line ``-- end`` reads ``--- end``: the last line of the body, not a file header."""
    text = BASE + "-- end\n"
    up.advance("a file ending in dashes", {"a.txt": text})
    c = up.advance("drop the dashes", {"a.txt": BASE})
    body = up.diff({"a.txt": BASE}, on=up.repo.resolve(f"{c}~1"))
    assert body.endswith(b"\n--- end\n")
    got = patch_id_signals(up.repo, f"{c}~1", c, {"p": (body, ["a.txt"])})
    assert c[:12] in got["p"].detail


# --------------------------------------------------------------------------- reverse apply


def test_reverse_apply_where_the_patch_would_be_replayed(up: Upstream) -> None:
    change = BASE.replace("line 10\n", "LINE 10\n")
    diff = up.diff({"a.txt": change, "b.txt": numbered("b").replace("b 3\n", "B 3\n")})
    files = parse_patch(diff)
    _, new = up.trees()
    assert reverse_apply_signal(files, new, lambda p: Move(None), "v2") is None
    up.advance("upstream takes a", {"a.txt": change})
    assert reverse_apply_signal(files, up.trees()[1], lambda p: Move(None), "v2") is None  # b.txt is not upstream
    up.advance("and b", {"b.txt": numbered("b").replace("b 3\n", "B 3\n")})
    s = reverse_apply_signal(files, up.trees()[1], lambda p: Move(None), "v2")
    assert s is not None and s.name == Evidence.REVERSE_APPLY
    assert s.detail == "the patch reverse-applies with zero fuzz on v2 (a.txt, b.txt)"


def test_reverse_apply_follows_a_move(up: Upstream) -> None:
    change = BASE.replace("line 10\n", "LINE 10\n")
    files = parse_patch(up.diff({"a.txt": change}))
    up.rename("move and take it", "a.txt", "src/a.txt", {"src/a.txt": change})
    new = up.trees()[1]
    s = reverse_apply_signal(files, new, lambda p: Move({"a.txt": "src/a.txt"}.get(p)), "v2")
    assert s is not None and s.detail.endswith("(src/a.txt)")
    assert reverse_apply_signal(files, new, lambda p: Move(None), "v2") is None


def test_reverse_apply_of_creations_deletions_and_binaries(up: Upstream) -> None:
    created = parse_patch(up.diff({"new.txt": "n\n"}))
    deleted = parse_patch(up.diff({"b.txt": None}))
    binary = parse_patch(up.diff({"img.png": b"\0\1\2"}))
    none = lambda p: Move(None)  # noqa: E731
    assert reverse_apply_signal(created, up.trees()[1], none, "v2") is None
    up.advance("upstream creates them, deletes b", {"new.txt": "n\n", "b.txt": None, "img.png": b"\0\1\2"})
    new = up.trees()[1]
    s = reverse_apply_signal(created, new, none, "v2")
    assert s is not None and s.detail.endswith("(new.txt)")
    assert reverse_apply_signal(deleted, new, none, "v2") is None  # the replay says so, as an empty replay
    assert reverse_apply_signal(binary, new, none, "v2") is None
    assert reverse_apply_signal(created + binary, new, none, "v2") is None


def test_a_mode_change_upstream_lacks_does_not_reverse_apply(up: Upstream) -> None:
    change = numbered("b").replace("b 3\n", "B 3\n")
    files = parse_patch(up.diff({"b.txt": change}, executable=("b.txt",)))
    up.advance("upstream takes the text, not the mode", {"b.txt": change})
    assert reverse_apply_signal(files, up.trees()[1], lambda p: Move(None), "v2") is None
    (up.root / "b.txt").chmod(0o755)
    up.advance("and the mode", {})
    assert reverse_apply_signal(files, up.trees()[1], lambda p: Move(None), "v2") is not None


# --------------------------------------------------------------------------- moves


def test_moves_follow_gits_rename_pick_and_same_named_files(up: Upstream) -> None:
    util = numbered("u", 40)
    up.rename("move util", "pkg/util.py", "lib/util.py", {"lib/util.py": util.replace("u 1\n", "U 1\n")})
    up.advance("a copy elsewhere", {"other/util.py": util.replace("u 2\n", "x\n").replace("u 3\n", "y\n")})
    up.advance("unrelated add", {"c.txt": "c\n"})
    moves = moves_for(up.repo, up.old, up.new, ["pkg/util.py", "a.txt", "gone.txt"])
    assert moves["a.txt"].path is None and moves["gone.txt"].path is None  # still there / never was
    m = moves["pkg/util.py"]
    assert m.path == "lib/util.py"
    assert [(c.path, c.how) for c in m.candidates] == [("lib/util.py", "git"), ("other/util.py", "same-name")]
    assert m.candidates[0].similarity > m.candidates[1].similarity >= 50
    assert m.ambiguous  # within 10 points of each other: a human must choose
    assert moves_for(up.repo, up.old, up.new, []) == {}


def test_a_clear_move_is_not_ambiguous_and_dissimilar_names_are_not_candidates(up: Upstream) -> None:
    util = numbered("u", 40)
    up.rename("move util", "pkg/util.py", "lib/util.py")
    up.advance("an unrelated util", {"tools/util.py": "entirely\ndifferent\n"})
    m = moves_for(up.repo, up.old, up.new, ["pkg/util.py"])["pkg/util.py"]
    assert (m.path, m.ambiguous) == ("lib/util.py", False)
    assert [(c.path, c.similarity, c.how) for c in m.candidates] == [("lib/util.py", 100, "git")]
    assert util  # the content moved whole


def test_a_deleted_file_with_only_a_renamed_namesake_moves_by_name(up: Upstream) -> None:
    """Git's pick needs 50% too; an added file of the same name that keeps half the lines is found."""
    util = numbered("u", 40)
    kept = "".join(line if i % 4 else f"n{i}\n" for i, line in enumerate(util.splitlines(True)))  # 3 of 4 lines kept
    up.advance("rewrite util elsewhere", {"pkg/util.py": None, "core/util.py": kept, "z.txt": "z\n"})
    m = moves_for(up.repo, up.old, up.new, ["pkg/util.py"])["pkg/util.py"]
    assert m.path == "core/util.py" and m.candidates[0].similarity >= 50
    up.advance("only deletions", {"b.txt": None})
    assert moves_for(up.repo, up.new, up.new, ["b.txt"])["b.txt"].path is None


def test_move_candidates_rank_gits_pick_first_and_keep_five(up: Upstream) -> None:
    util = numbered("u", 40)
    copies = {f"d{i}/util.py": util for i in range(6)}
    up.advance("six copies of util, the original gone", {"pkg/util.py": None, **copies})
    m = moves_for(up.repo, up.old, up.new, ["pkg/util.py"])["pkg/util.py"]
    assert len(m.candidates) == 5 and m.ambiguous
    assert m.candidates[0].how == "git" and {c.how for c in m.candidates[1:]} == {"same-name"}
    rest = [c.path for c in m.candidates[1:]]
    assert rest == sorted(rest) and m.path == m.candidates[0].path  # a tie: git's pick, then by path


def test_a_same_named_file_counts_from_half_its_content(up: Upstream) -> None:
    old = "".join(f"line{i:05d}\n" for i in range(10))  # 100 bytes
    half = old[:50] + "".join(f"xxxx{i:05d}\n" for i in range(5))  # 50 bytes shared of 100: 50%
    under = old[:50] + "".join(f"yyyy{i:05d}\n" for i in range(5)) + "z\n"  # 50 of 102: 49%
    up.advance("a module", {"pkg/mod.py": old})
    start = up.new
    up.advance(
        "moved, with namesakes",
        {"pkg/mod.py": None, "lib/renamed.py": old, "x/mod.py": half, "y/mod.py": under, "a.txt": "edited\n"},
    )
    up.advance("a namesake of a file still there", {"elsewhere/a.txt": "edited\n"})
    moves = moves_for(up.repo, start, up.new, ["pkg/mod.py", "a.txt"])
    m = moves["pkg/mod.py"]
    assert [(c.path, c.similarity, c.how) for c in m.candidates] == [
        ("lib/renamed.py", 100, "git"),
        ("x/mod.py", 50, "same-name"),
    ]
    assert moves["a.txt"].path is None  # changed upstream, not gone: nothing to follow


# --------------------------------------------------------------------------- conflict blame


def test_map_line_follows_unchanged_lines_and_starts_of_changed_regions() -> None:
    src = b"a\nb\nc\nX\nd\ne\n"
    dst = b"a\nb\nc\nY\nZ\nd\ne\n"
    assert [map_line(src, dst, n) for n in range(1, 7)] == [1, 2, 3, 4, 6, 7]  # X's region starts at Y
    inserted = b"a\nb\nP1\nP2\nc\n"  # lines an earlier patch added, which the base lacks
    assert [map_line(inserted, b"a\nb\nc\n", n) for n in range(1, 6)] == [1, 2, 3, 3, 3]
    assert map_line(b"X\na\n", b"P\nQ\nR\na\n", 1) == 1
    assert map_line(b"a\nb\n", b"a\nb\nc\n", 9) == 3  # past the end: the last line
    assert map_line(b"a\nb\n", b"a\n", 2) == 1 and map_line(b"a\n", b"", 1) == 1  # a one-line or empty base
    assert map_line(None, dst, 9) == 9 and map_line(src, None, 9) == 9 and map_line(src, src, 4) == 4


def test_blame_names_the_commits_that_changed_a_conflicting_hunks_lines(up: Upstream) -> None:
    """The conflict's hunk starts on a line an earlier patch changed; upstream changed its last line.

    The window ``map_line`` gives (the hunk's old lines, mapped onto the new base) must still
    cover the line upstream changed, or the report blames nobody."""
    n = 30
    c1 = up.advance("touch line 2", {"a.txt": BASE.replace("line 2\n", "upstream 2\n")})
    c2 = up.advance(
        "change the last line",
        {"a.txt": BASE.replace("line 2\n", "upstream 2\n").replace(f"line {n}\n", "upstream end\n")},
    )
    base_now = up.read(up.new, "a.txt") or b""
    ours = base_now.replace(b"line 27\n", b"earlier patch 27\n")  # the new world: an earlier patch changed line 27
    hunk_start, hunk_lines = 27, 4  # a hunk at the end of the file: lines 27..30, its change on line 30
    start = map_line(ours, base_now, hunk_start)
    end = start + hunk_lines - 1
    got = blame_lines(up.repo, up.old, up.new, "a.txt", start, end)
    assert [b.sha for b in got] == [c2]
    assert [b.subject for b in blame_lines(up.repo, up.old, up.new, "a.txt", 1, 3)] == ["touch line 2"]
    assert [b.sha for b in blame_lines(up.repo, up.old, up.new, "a.txt", 5, 2)] == []  # end before start: one line
    assert [b.sha for b in blame_lines(up.repo, up.old, up.new, "a.txt", 2, 1)] == [c1]
    assert [b.sha for b in blame_lines(up.repo, up.old, up.new, "a.txt", 9, 12)] == []


def test_blame_falls_back_to_the_files_log_when_git_log_l_cannot_run(up: Upstream) -> None:
    c = up.advance("short file", {"b.txt": "one\n"})
    got = blame_lines(up.repo, up.old, up.new, "b.txt", 10, 20)  # past the end: git log -L refuses
    assert [(b.sha, b.subject) for b in got] == [(c, "short file")]
