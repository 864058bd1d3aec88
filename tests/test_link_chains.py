"""Symlinks a series makes, resolved through the tree as the series leaves it (security issue #23).

A git patch can create symbolic links (mode 120000). Checking each link's target as text is not
enough: ``sub/l2 -> ..`` stays inside the tree and so does the text ``sub/l2/..``, yet a link
``evil -> sub/l2/..`` resolves to the tree's parent, where the ledger lives, and a later hunk
writing ``evil/...`` would write there. The engine resolves every path and every link target
through its in-memory state (links made by earlier hunks and patches, and links on disk), at
each step and once more on the tree as the whole series leaves it, and refuses before anything is
committed: exit 2, a message naming the patch and the link, nothing written inside or outside.
Relative links that stay inside keep working, also when a later hunk writes through one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.errors import UnsafePathError
from tests.support.fuzz import Sentinel, snapshot


def link(path: str, target: str) -> str:
    """A git diff creating the symlink ``path -> target``."""
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def retarget(path: str, old: str, new: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nindex 1111111..2222222 120000\n"
        f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n\\ No newline at end of file\n"
        f"+{new}\n\\ No newline at end of file\n"
    )


def create(path: str, text: str = "planted\n") -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}"


def modify(path: str, old: str, new: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Sentinel]:
    """A tree inside a work directory that also holds a sentinel (where the ledger would be)."""
    work = tmp_path / "work"
    tree = work / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "f.txt").write_text("one\n")
    (tree / "a.txt").write_text("a\n")
    return tree, Sentinel(work)


def _refused(tree: Path, bait: Sentinel, items: list[SeriesItem], *words: str) -> None:
    before = snapshot(tree)
    with pytest.raises(UnsafePathError) as exc:
        apply_series(tree, items)
    assert exc.value.exit_code == 2
    for w in words:
        assert w in exc.value.message, exc.value.message
    assert snapshot(tree) == before, "the tree changed"
    bait.assert_untouched()


def test_chain_in_one_patch_is_refused(world) -> None:
    tree, bait = world
    body = link("sub/l2", "..") + link("evil", "sub/l2/..") + create("evil/sentinel/planted.txt")
    _refused(tree, bait, [SeriesItem("p1", body.encode())], "p1", "evil", "outside")


def test_chain_across_patches_is_refused(world) -> None:
    tree, bait = world
    items = [
        SeriesItem("p1", link("sub/l2", "..").encode()),
        SeriesItem("p2", link("evil", "sub/l2/..").encode()),
        SeriesItem("p3", create("evil/sentinel/planted.txt").encode()),
    ]
    _refused(tree, bait, items, "p2", "evil")


def test_chain_through_a_link_on_disk_is_refused(world) -> None:
    tree, bait = world
    os.symlink("..", tree / "sub" / "l2")
    _refused(tree, bait, [SeriesItem("p1", link("evil", "sub/l2/..").encode())], "evil", "outside")


def test_link_made_harmless_then_turned_out_by_a_later_patch_is_refused(world) -> None:
    """``x -> sub/l/..`` is inside when made (``sub/l`` does not exist yet); a later patch makes
    ``sub/l -> ..`` (inside too, alone): together, ``x`` names the tree's parent."""
    tree, bait = world
    items = [SeriesItem("p1", link("x", "sub/l/..").encode()), SeriesItem("p2", link("sub/l", "..").encode())]
    _refused(tree, bait, items, "x", "outside")


def test_link_on_disk_turned_out_by_the_series_is_refused(world) -> None:
    """A link already in the tree, inside until the series makes a link it passes through."""
    tree, bait = world
    os.symlink("l/..", tree / "sub" / "up")  # sub/l does not exist: sub/up names sub
    _refused(tree, bait, [SeriesItem("p1", link("sub/l", "..").encode())], "sub/up", "outside")


def test_link_on_disk_turned_out_by_removing_a_link_is_refused(world) -> None:
    """``x -> sub/l/../../..`` passes through ``sub/l -> a/b``: the tree. Without ``sub/l`` (the
    series deletes it) the same text names the tree's parent."""
    tree, bait = world
    (tree / "sub" / "a" / "b").mkdir(parents=True)
    os.symlink("a/b", tree / "sub" / "l")
    os.symlink("sub/l/../../..", tree / "x")
    body = (
        "diff --git a/sub/l b/sub/l\ndeleted file mode 120000\nindex 1111111..0000000\n"
        "--- a/sub/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-a/b\n\\ No newline at end of file\n"
    )
    _refused(tree, bait, [SeriesItem("p1", body.encode())], "symlink x", "outside")


def test_retargeted_link_is_checked_too(world) -> None:
    tree, bait = world
    os.symlink("a.txt", tree / "alias")
    _refused(tree, bait, [SeriesItem("p1", retarget("alias", "a.txt", "sub/../..").encode())], "alias")


@pytest.mark.parametrize("target", ["/etc/passwd", "../sentinel/victim.txt", "sub/../../sentinel"])
def test_link_out_textually_is_refused(world, target: str) -> None:
    tree, bait = world
    _refused(tree, bait, [SeriesItem("p1", link("out", target).encode())], "out")


def test_write_through_a_link_the_series_made_lands_inside(world) -> None:
    """A link made by one patch, a file written through it by the next: the file is the link's
    target's (as it will be on disk), not a path under a link the commit has not made yet."""
    tree, bait = world
    items = [
        SeriesItem("p1", link("alias", "pkg").encode()),
        SeriesItem("p2", modify("alias/f.txt", "one", "two").encode()),
        SeriesItem("p3", link("sub/up", "../pkg").encode() + create("sub/up/new.txt").encode()),
    ]
    res = apply_series(tree, items)
    assert res.ok, [p.describe() for p in res.patches]
    assert os.readlink(tree / "alias") == "pkg" and os.readlink(tree / "sub" / "up") == "../pkg"
    assert (tree / "pkg" / "f.txt").read_text() == "two\n"
    assert (tree / "pkg" / "new.txt").read_text() == "planted\n"
    assert sorted(res.files) == ["alias", "pkg/f.txt", "pkg/new.txt", "sub/up"]
    bait.assert_untouched()


def test_relative_links_inside_keep_working(world) -> None:
    tree, bait = world
    os.symlink("..", tree / "sub" / "top")  # on disk: sub/top is the tree itself
    body = link("sub/a", "../a.txt") + link("pkg/loop", "../sub/top/pkg") + link("dangling", "not/yet")
    res = apply_series(tree, [SeriesItem("p1", body.encode())])
    assert res.ok, res.patches[0].describe()
    assert (tree / "sub" / "a").read_text() == "a\n"
    assert os.readlink(tree / "pkg" / "loop") == "../sub/top/pkg"
    bait.assert_untouched()


def test_cli_apply_refuses_the_chain_with_exit_2(world, run, tmp_path: Path) -> None:
    tree, bait = world
    led = tree.parent
    (led / "patches.toml").write_text(
        'schema = 1\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\ngithub = "example/demo"\n'
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "01-chain.patch").write_text(link("sub/l2", "..") + link("evil", "sub/l2/.."))
    (src / "02-plant.patch").write_text(create("evil/sentinel/planted.txt"))
    assert run("import", src / "01-chain.patch", src / "02-plant.patch", cwd=led).code == 0
    before, ledger_before = snapshot(tree), snapshot(led)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 2, r
    assert "01-chain" in r.stderr and "evil" in r.stderr and "outside" in r.stderr, r.stderr
    assert snapshot(tree) == before and snapshot(led) == ledger_before
    bait.assert_untouched()
