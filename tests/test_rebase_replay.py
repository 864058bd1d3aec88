"""The in-memory replay (``patchset.rebase.replay``) on small real git repositories: the blobs it
reads, the trees it stacks, and one patch carried file by file, each outcome checked against git
itself (``git apply`` for a direct apply, ``git merge-file`` for a 3-way merge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure
from patchset.rebase.replay import (
    ALREADY,
    BROKEN,
    CLEAN,
    CONFLICT,
    MERGED,
    OFFSET,
    BlobStore,
    Merger,
    blob_sha,
)
from tests.support.rebase_git import Upstream, git_apply, merge_file, numbered
from tests.support.repo import git

BASE = numbered("line")


@pytest.fixture
def up(tmp_path: Path) -> Upstream:
    return Upstream.make(tmp_path / "up", {"a.txt": BASE, "b.txt": numbered("b"), "dir/c.txt": numbered("c")})


# --------------------------------------------------------------------------- blobs and trees


def test_blob_store_reads_many_files_of_one_commit(tmp_path: Path) -> None:
    files = {
        "x.txt": "x\n" * 7,
        "same.txt": "x\n" * 7,  # the same blob under two names
        "bin.dat": b"\0\n\n\x01 tail without newline",
        "empty": "",
        "sub/deep.py": "print('hi')\n",
    }
    up = Upstream.make(tmp_path / "up", files)
    (up.root / "tool.sh").write_text("#!/bin/sh\n")
    (up.root / "tool.sh").chmod(0o755)
    sha = up.advance("tool", {})
    store = BlobStore(up.repo, sha)
    store.prefetch([*files, "tool.sh", "missing.txt", ""])
    for path, data in files.items():
        want = data if isinstance(data, bytes) else data.encode()
        assert store.get(path) == (want, "100644"), path
    assert store.get("tool.sh") == (b"#!/bin/sh\n", "100755")
    assert store.get("missing.txt") == (None, None)
    assert BlobStore(up.repo, up.old).get("dir/../x.txt") == (None, None)
    lazy = BlobStore(up.repo, up.old)
    assert lazy.get("sub/deep.py") == (b"print('hi')\n", "100644")  # not prefetched: read on demand
    assert lazy.get("tool.sh") == (None, None)  # not in the old base


def test_tree_stacks_changes_over_its_commit(up: Upstream) -> None:
    _, new = up.trees()
    copy = new.copy()
    new.write("a.txt", b"changed\n")
    new.write("b.txt", None)
    new.write("fresh.txt", b"f\n")
    new.write("tool.sh", b"#!\n", "100755")
    assert new.read("a.txt") == b"changed\n" and new.mode("a.txt") == "100644"
    assert new.read("b.txt") is None and new.mode("b.txt") is None
    assert (new.read("fresh.txt"), new.mode("fresh.txt")) == (b"f\n", "100644")
    assert new.mode("tool.sh") == "100755"
    assert new.read("dir/c.txt") == numbered("c").encode()  # untouched: the commit's own
    assert copy.read("a.txt") == BASE.encode() and copy.read("b.txt") is not None  # a copy keeps its own changes


# --------------------------------------------------------------------------- 3-way merge


def test_merger_is_git_merge_file(tmp_path: Path) -> None:
    base = BASE.encode()
    ours = base.replace(b"line 3\n", b"ours 3\n").replace(b"line 20\n", b"ours 20\n")
    theirs = base.replace(b"line 12\n", b"theirs 12\n").replace(b"line 20\n", b"theirs 20\n")
    theirs_clean = base.replace(b"line 12\n", b"theirs 12\n")
    m = Merger()
    try:
        clean = m.merge(base, ours, theirs_clean, ("upstream new", "old base", "patch p"))
        assert (clean.data, clean.conflicts) == merge_file(tmp_path / "1", base, ours, theirs_clean)
        assert clean.conflicts == 0 and b"theirs 12" in clean.data and b"ours 3" in clean.data
        both = m.merge(base, ours, theirs, ("upstream new", "old base", "patch p"))
        assert (both.data, both.conflicts) == merge_file(tmp_path / "2", base, ours, theirs)
        assert both.conflicts == 1 and b"<<<<<<< upstream new\n" in both.data
        assert b">>>>>>> patch p\n" in both.data
    finally:
        m.close()


def test_merger_counts_every_conflict_up_to_gits_cap(tmp_path: Path) -> None:
    """git merge-file exits with the number of conflicts, 127 at most: still a merge, not a failure."""
    lines = [b"%d\n" % i for i in range(1, 700)]
    ours, theirs = list(lines), list(lines)
    for i in range(0, 650, 5):  # 130 separate regions changed on both sides
        ours[i], theirs[i] = b"o%d\n" % i, b"t%d\n" % i
    base = b"".join(lines)
    m = Merger()
    try:
        r = m.merge(base, b"".join(ours), b"".join(theirs), ("upstream new", "old base", "patch p"))
        few = m.merge(base, b"".join(ours[:20] + lines[20:]), b"".join(theirs[:20] + lines[20:]), ("a", "b", "c"))
    finally:
        m.close()
    assert r.conflicts == merge_file(tmp_path / "m", base, b"".join(ours), b"".join(theirs))[1] == 127
    assert r.data.count(b"<<<<<<< ") == 130
    assert few.conflicts == 4


def test_merger_refuses_binary_files_with_an_environment_failure() -> None:
    m = Merger()
    try:
        with pytest.raises(EnvironmentFailure, match="merge-file"):
            m.merge(b"\0a\n", b"\0b\n", b"\0c\n", ("a", "b", "c"))
    finally:
        m.close()


def test_blob_sha_is_gits_blob_id(tmp_path: Path) -> None:
    for data in (b"", b"one\n", bytes(range(256))):
        (tmp_path / "f").write_bytes(data)
        assert blob_sha(data) == git(tmp_path, "hash-object", "f").strip()


# --------------------------------------------------------------------------- one patch, file by file


def test_clean_and_offset_applies_are_what_git_apply_makes(up: Upstream, tmp_path: Path) -> None:
    diff = up.diff({"a.txt": BASE.replace("line 15\n", "LINE 15\n"), "b.txt": numbered("b").replace("b 4\n", "B 4\n")})
    up.advance("two lines on top of a.txt", {"a.txt": "new 1\nnew 2\n" + BASE})
    r = up.replay(diff)
    assert [(f.path, f.how) for f in r.files] == [("a.txt", OFFSET), ("b.txt", CLEAN)]
    assert [h.offset for h in r.files[0].hunks] == [2]
    ours = up.read(up.new, "a.txt")
    assert r.files[0].ours == ours and r.files[0].base == BASE.encode()
    assert r.files[0].result == git_apply(tmp_path, ours, "a.txt", diff.split(b"diff --git a/b.txt")[0])
    assert (r.status, r.how) == ("carried", OFFSET)
    assert all(f.changed and f.moved_from is None for f in r.files)


def test_an_offset_file_ranks_over_a_clean_one_whatever_their_order(up: Upstream) -> None:
    diff = up.diff({"a.txt": BASE.replace("line 15\n", "LINE 15\n"), "b.txt": numbered("b").replace("b 4\n", "B 4\n")})
    up.advance("two lines on top of b.txt", {"b.txt": "new 1\nnew 2\n" + numbered("b")})
    r = up.replay(diff)
    assert [f.how for f in r.files] == [CLEAN, OFFSET] and r.how == OFFSET


def test_a_mode_upstream_changed_is_kept(up: Upstream) -> None:
    diff = up.diff({"b.txt": numbered("b").replace("b 4\n", "B 4\n")})
    (up.root / "b.txt").chmod(0o755)
    up.advance("upstream makes b executable", {})
    (f,) = up.replay(diff).files
    assert (f.how, f.mode) == (CLEAN, "100755")


def test_a_changed_context_is_merged_as_git_merge_file_does(up: Upstream, tmp_path: Path) -> None:
    patched = BASE.replace("line 15\n", "LINE 15\n")
    diff = up.diff({"a.txt": patched})
    ours = BASE.replace("line 17\n", "upstream 17\n")
    up.advance("upstream edits the context", {"a.txt": ours})
    r = up.replay(diff)
    (f,) = r.files
    assert f.how == MERGED and [h.status for h in f.hunks] == ["failed"]
    assert (f.result, 0) == merge_file(tmp_path, BASE.encode(), ours.encode(), patched.encode())
    assert (r.status, r.how) == ("carried", MERGED)


def test_a_multi_file_patch_is_as_bad_as_its_worst_file(up: Upstream) -> None:
    diff = up.diff(
        {
            "a.txt": BASE.replace("line 15\n", "LINE 15\n"),
            "b.txt": numbered("b").replace("b 4\n", "B 4\n"),
            "dir/c.txt": numbered("c").replace("c 9\n", "C 9\n"),
        }
    )
    up.advance(
        "drift",
        {"a.txt": BASE.replace("line 17\n", "upstream 17\n"), "dir/c.txt": "top\n" + numbered("c")},
    )
    r = up.replay(diff)
    assert [f.how for f in r.files] == [MERGED, CLEAN, OFFSET]
    assert r.how == MERGED


def test_the_same_line_changed_on_both_sides_conflicts(up: Upstream, tmp_path: Path) -> None:
    patched = BASE.replace("line 15\n", "patch 15\n")
    diff = up.diff({"a.txt": patched, "b.txt": numbered("b").replace("b 2\n", "B 2\n")})
    ours = BASE.replace("line 15\n", "upstream 15\n")
    up.advance("upstream edits the same line", {"a.txt": ours})
    r = up.replay(diff)
    a, b = r.files
    assert (a.how, b.how, r.status) == (CONFLICT, CLEAN, "conflict")
    assert (a.result, 1) == merge_file(tmp_path, BASE.encode(), ours.encode(), patched.encode())
    assert a.message == "1 conflicting region(s)" and not a.changed
    assert r.how == CLEAN  # a conflict is not a carried file: only b.txt ranks


def test_a_change_upstream_already_has_is_already(up: Upstream) -> None:
    patched = BASE.replace("line 15\n", "LINE 15\n")
    diff = up.diff({"a.txt": patched})
    up.advance("upstream takes the change, and more", {"a.txt": "head\n" + patched})
    r = up.replay(diff)
    assert [f.how for f in r.files] == [ALREADY] and r.status == "empty"
    assert r.files[0].result == ("head\n" + patched).encode()


def test_a_merge_that_keeps_upstreams_text_is_already(up: Upstream) -> None:
    patched = BASE.replace("line 15\n", "LINE 15\n")
    diff = up.diff({"a.txt": patched})
    upstream = patched.replace("line 17\n", "upstream 17\n")  # the change, and its context edited
    up.advance("upstream has it", {"a.txt": upstream})
    r = up.replay(diff)
    assert r.files[0].how == ALREADY and r.status == "empty" and r.files[0].result == upstream.encode()


def test_the_old_world_takes_every_patch(up: Upstream) -> None:
    old, new = up.trees()
    first = up.diff({"a.txt": BASE.replace("line 5\n", "first 5\n"), "gone.txt": "new\n"})
    up.replay(first, trees=(old, new))
    assert old.read("a.txt") == BASE.replace("line 5\n", "first 5\n").encode()
    assert old.read("gone.txt") == b"new\n"
    assert new.changes == {}  # the new world is the caller's to stack
    moved = up.diff({"b.txt": None, "moved/b.txt": numbered("b")}, renames=True)
    r = up.replay(moved, trees=(old, new))
    assert old.read("b.txt") is None and old.read("moved/b.txt") == numbered("b").encode()
    (f,) = r.files
    assert (f.how, f.new_path, f.delete_path) == (CLEAN, "moved/b.txt", "b.txt")
    assert f.changed and r.status == "carried"
    r.apply_to(new)
    assert new.read("b.txt") is None and new.read("moved/b.txt") == numbered("b").encode()
    up.replay(up.diff({"dir/c.txt": None}), trees=(old, new))
    assert old.read("dir/c.txt") is None and new.read("dir/c.txt") is not None


def test_a_body_that_does_not_fit_the_old_base_is_broken(up: Upstream) -> None:
    diff = up.diff({"a.txt": BASE.replace("line 5\n", "X\n")})
    broken = diff.replace(b" line 4\n", b" line four\n")
    r = up.replay(broken)
    assert (r.files[0].how, r.status) == (BROKEN, "broken")
    assert "zero fuzz" in r.files[0].message and r.files[0].new_path is None


# --------------------------------------------------------------------------- creations and deletions


def test_a_created_file(up: Upstream) -> None:
    diff = up.diff({"new.txt": "hello\n"})
    assert [(f.how, f.new_path, f.result) for f in up.replay(diff).files] == [(CLEAN, "new.txt", b"hello\n")]
    up.advance("upstream creates it the same", {"new.txt": "hello\n"})
    r = up.replay(diff)
    assert (r.files[0].how, r.status) == (ALREADY, "empty")
    up.advance("upstream creates it otherwise", {"new.txt": "bye\n"})
    r = up.replay(diff)
    assert r.files[0].how == CONFLICT and b"<<<<<<< upstream new" in (r.files[0].result or b"")
    assert r.files[0].message == "both upstream and the patch create this file"


def test_a_plain_diff_creating_a_file_without_dev_null(up: Upstream) -> None:
    """``diff -ruN`` names the new file on both sides, with a ``-0,0`` hunk: GNU patch creates it."""
    diff = b"--- a/made.txt\n+++ b/made.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    r = up.replay(diff)
    assert [(f.how, f.new_path, f.result) for f in r.files] == [(CLEAN, "made.txt", b"one\ntwo\n")]


def test_an_empty_file_upstream_created_with_content_is_already(up: Upstream) -> None:
    diff = up.diff({"pkg/__init__.py": ""})
    assert b"@@" not in diff  # a creation without a hunk
    up.advance("upstream writes the package", {"pkg/__init__.py": "x = 1\n"})
    (f,) = up.replay(diff).files
    assert (f.how, f.result) == (ALREADY, b"x = 1\n")


def test_a_created_binary_file_upstream_already_has(up: Upstream) -> None:
    up.advance("upstream adds the image", {"img.png": b"\x89PNG\0data"})
    diff = b"diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0000000..1111111\nBinary files differ\n"
    r = up.replay(diff)
    assert r.files[0].how == ALREADY


def test_a_created_file_merged_with_binary_content_conflicts(up: Upstream) -> None:
    up.advance("upstream adds a binary file", {"new.dat": b"\0upstream\n"})
    diff = up.diff({"new.dat": "text\n"})
    r = up.replay(diff)
    assert r.files[0].how == CONFLICT and "binary content" in r.files[0].message
    assert r.files[0].message.startswith("both upstream and the patch create this file; ")
    assert r.files[0].result == b"\0upstream\n"


def test_a_deleted_file(up: Upstream) -> None:
    diff = up.diff({"b.txt": None})
    (f,) = up.replay(diff).files
    assert (f.how, f.new_path, f.delete_path, f.changed) == (CLEAN, None, "b.txt", True)
    up.advance("upstream edits it", {"b.txt": "b edited\n" + numbered("b")})
    (f,) = up.replay(diff).files
    assert (f.how, f.new_path) == (CONFLICT, "b.txt") and "upstream changed it" in f.message
    up.advance("upstream deletes it", {"b.txt": None})
    r = up.replay(diff)
    assert (r.files[0].how, r.files[0].delete_path, r.status) == (ALREADY, None, "empty")


def test_a_file_upstream_deleted_conflicts(up: Upstream) -> None:
    diff = up.diff({"b.txt": numbered("b").replace("b 3\n", "B 3\n")})
    up.advance("upstream drops b", {"b.txt": None})
    r = up.replay(diff)
    assert (r.files[0].how, r.status) == (CONFLICT, "conflict")
    assert r.files[0].message == "the file was deleted upstream and no moved copy was found"


# --------------------------------------------------------------------------- moves and modes


def test_a_file_moved_upstream_is_followed(up: Upstream, tmp_path: Path) -> None:
    patched = BASE.replace("line 15\n", "LINE 15\n")
    diff = up.diff({"a.txt": patched})
    up.rename("move a", "a.txt", "pkg/a.txt", {"pkg/a.txt": BASE.replace("line 28\n", "upstream 28\n")})
    r = up.replay(diff, {"a.txt": "pkg/a.txt"})
    (f,) = r.files
    assert (f.path, f.new_path, f.moved_from, f.how) == ("a.txt", "pkg/a.txt", "a.txt", CLEAN)
    assert f.result == git_apply(tmp_path, up.read(up.new, "pkg/a.txt") or b"", "a.txt", diff)
    assert r.moved == [f] and f.move is not None and f.move.path == "pkg/a.txt"
    _, new = up.trees()
    r.apply_to(new)
    assert new.read("pkg/a.txt") == f.result and new.read("a.txt") is None


def test_a_file_moved_upstream_that_the_patch_deletes(up: Upstream) -> None:
    diff = up.diff({"b.txt": None})
    up.rename("move b", "b.txt", "pkg/b.txt")
    (f,) = up.replay(diff, {"b.txt": "pkg/b.txt"}).files
    assert (f.how, f.delete_path, f.moved_from) == (CLEAN, "pkg/b.txt", "b.txt")


def test_a_mode_change_is_carried(up: Upstream) -> None:
    diff = up.diff({"a.txt": BASE.replace("line 2\n", "LINE 2\n")}, executable=("a.txt",))
    assert b"new mode 100755" in diff
    (f,) = up.replay(diff).files
    assert (f.how, f.mode) == (CLEAN, "100755")
    up.advance("upstream edits c", {"dir/c.txt": "top\n" + numbered("c")})
    diff = up.diff({}, executable=("dir/c.txt",))  # the mode alone: the text is upstream's, the mode is not
    r = up.replay(diff)
    (f,) = r.files
    assert (f.path, f.mode, f.result) == ("dir/c.txt", "100755", up.read(up.new, "dir/c.txt"))
    assert (f.how, f.changed, r.status) == (CLEAN, True, "carried")
    text = numbered("b").replace("b 4\n", "B 4\n")
    diff = up.diff({"b.txt": text}, executable=("b.txt",))
    up.advance("upstream takes the text", {"b.txt": text})
    (f,) = up.replay(diff).files
    assert (f.how, f.mode, f.changed) == (MERGED, "100755", True)  # the text merges away, the mode stays
    _, new = up.trees()
    r.apply_to(new)
    assert new.mode("dir/c.txt") == "100755"
    (up.root / "b.txt").chmod(0o755)
    up.advance("and the mode", {})
    r = up.replay(diff)
    assert (r.files[0].how, r.status) == (ALREADY, "empty")


def test_a_patch_merged_onto_binary_upstream_content_conflicts(up: Upstream) -> None:
    diff = up.diff({"b.txt": numbered("b").replace("b 5\n", "B 5\n")})
    up.advance("upstream makes b binary", {"b.txt": b"\0" + numbered("b").replace("b 5\n", "x 5\n").encode()})
    (f,) = up.replay(diff).files
    assert (f.how, f.message) == (CONFLICT, "binary content: cannot merge line by line")
