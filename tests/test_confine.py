"""The confinement helper: every path from data resolves under its root or is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchset.confine import check_relative, confine, is_within
from patchset.errors import UnsafePathError


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "C:/x",
        "\\\\host\\x",
        "a\\b",
        "../x",
        "a/../../x",
        "a/..",
        ".",
        "a\x00b",
        "a\nb",
        ".patchset-txn/journal.json",
        ".PATCHSET/ledger-txn/x",
        "sub/.git/config",
        ".Git/HEAD",
    ],
)
def test_refused_textually(name: str) -> None:
    with pytest.raises(UnsafePathError) as err:
        check_relative(name, what="test data")
    assert "test data" in err.value.message


def test_normalised() -> None:
    assert check_relative("a//./b/", what="x") == "a/b"
    assert check_relative(".patchset/x", what="x", allow_state=True) == ".patchset/x"


def test_link_chain_leaving_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    os.symlink("..", root / "sub" / "l2")  # resolves to the tree itself: inside
    os.symlink("sub/l2/..", root / "evil")  # resolves to the tree's parent: outside
    assert confine(root, "sub/l2/x", what="t") == Path(os.path.realpath(root)) / "sub/l2/x"
    with pytest.raises(UnsafePathError, match="leaves"):
        confine(root, "evil/x", what="t")
    with pytest.raises(UnsafePathError, match="leaves"):
        confine(root, "evil", what="t")


def test_absolute_link_out(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    os.symlink(str(tmp_path), root / "out")
    with pytest.raises(UnsafePathError):
        confine(root, "out/secret", what="t")
    assert is_within(root / "x", root)
    assert not is_within(root / "out", root)


def test_resolve_links_through_a_lookup() -> None:
    """The in-memory variant: links described by a callable (the apply engine's state)."""
    from patchset.confine import resolve_links

    links = {"sub/l2": "..", "evil": "sub/l2/..", "alias": "sub", "loop": "loop", "abs": "/r/tree/sub"}
    look = links.get
    assert resolve_links("sub/l2/x", look, what="t") == "x"
    assert resolve_links("alias/f", look, what="t") == "sub/f"
    assert resolve_links("evil", look, what="t", follow_last=False) == "evil"
    assert resolve_links("abs/f", look, what="t", root="/r/tree") == "sub/f"
    with pytest.raises(UnsafePathError, match="through symlink 'evil'"):
        resolve_links("evil/x", look, what="t")
    with pytest.raises(UnsafePathError, match="too many levels"):
        resolve_links("loop", look, what="t")
    with pytest.raises(UnsafePathError, match="absolute"):
        resolve_links("abs/f", look, what="t")


# --- edges the mutation tier (bench/mutation.py) found untested ---------------------------------


def test_delete_is_a_control_character() -> None:
    with pytest.raises(UnsafePathError, match="control character"):
        check_relative("a\x7fb", what="test data")


def test_messages_name_the_reason() -> None:
    with pytest.raises(UnsafePathError, match="empty path"):
        check_relative("", what="t")
    with pytest.raises(UnsafePathError, match=r"state directory \.patchset-txn$"):
        check_relative(".patchset-txn/journal.json", what="t")


def test_defaults_refuse_state_and_git(tmp_path: Path) -> None:
    for name in (".patchset/x", "a/.git/config"):
        with pytest.raises(UnsafePathError):
            check_relative(name, what="t")
        with pytest.raises(UnsafePathError):
            confine(tmp_path, name, what="t")
    assert check_relative(".patchset/x", what="t", allow_state=True) == ".patchset/x"
    assert check_relative("a/.git/config", what="t", allow_git=True) == "a/.git/config"


def test_a_sibling_sharing_the_prefix_is_outside(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree-evil").mkdir()
    assert is_within(tmp_path / "tree", tmp_path / "tree")
    assert is_within(tmp_path / "tree" / "a", tmp_path / "tree")
    assert not is_within(tmp_path / "tree-evil" / "a", tmp_path / "tree")
    os.symlink("../tree-evil", tmp_path / "tree" / "out")
    with pytest.raises(UnsafePathError, match="leaves"):
        confine(tmp_path / "tree", "out/f", what="t")
    os.symlink(str(tmp_path / "tree-evil"), tmp_path / "tree" / "abs")
    with pytest.raises(UnsafePathError, match="leaves"):
        confine(tmp_path / "tree", "abs/f", what="t")


def test_a_link_below_a_real_directory_is_checked(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "d" / "in").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink("../../outside", root / "d" / "evil")
    with pytest.raises(UnsafePathError, match="leaves"):
        confine(root, "d/evil/x", what="t")
    os.symlink("in", root / "d" / "alias")
    assert confine(root, "d/alias/x", what="t") == Path(os.path.realpath(root)) / "d/alias/x"


def test_an_absolute_target_into_a_sibling_prefix_is_refused() -> None:
    from patchset.confine import resolve_links

    links = {"a": "/r/tree-evil/x", "b": "/r/tree/sub", "c": "/r/tree"}
    look = links.get
    with pytest.raises(UnsafePathError, match="absolute"):
        resolve_links("a/f", look, what="t", root="/r/tree")
    assert resolve_links("b/f", look, what="t", root="/r/tree") == "sub/f"
    assert resolve_links("c/f", look, what="t", root="/r/tree") == "f"
    with pytest.raises(UnsafePathError, match="empty or malformed"):
        resolve_links("e/f", {"e": ""}.get, what="t")


def test_the_link_limit_is_exact() -> None:
    from patchset.confine import MAX_LINKS, resolve_links

    def chain(n: int):
        return {f"l{i}": f"l{i + 1}" if i + 1 < n else "end" for i in range(n)}.get

    assert resolve_links("l0", chain(3), what="t", max_links=3) == "end"
    with pytest.raises(UnsafePathError, match="too many levels"):
        resolve_links("l0", chain(4), what="t", max_links=3)
    assert MAX_LINKS == 40  # Linux's MAXSYMLINKS
    assert resolve_links("l0", chain(40), what="t") == "end"
    with pytest.raises(UnsafePathError, match="too many levels"):
        resolve_links("l0", chain(41), what="t")
    assert resolve_links("l0", chain(1), what="t") == "end"  # the last component is followed by default


def test_regular_file(tmp_path: Path) -> None:
    from patchset.confine import regular_file

    (tmp_path / "f").write_text("x")
    os.symlink("f", tmp_path / "l")
    assert regular_file(tmp_path / "f")
    assert not regular_file(tmp_path / "l")
    assert not regular_file(tmp_path / "missing")
    assert not regular_file(str(tmp_path / "a\0b"))  # ValueError, not raised


def test_real_directories(tmp_path: Path) -> None:
    from patchset.confine import real_directories

    (tmp_path / ".patchset" / "rebase").mkdir(parents=True)
    assert real_directories(tmp_path, ".patchset/rebase/new", what="t") == tmp_path / ".patchset/rebase/new"
    assert real_directories(tmp_path, "missing/x", what="t") == tmp_path / "missing/x"
    os.symlink(tmp_path / ".patchset", tmp_path / "link")
    with pytest.raises(UnsafePathError, match="a symbolic link"):
        real_directories(tmp_path, "link/rebase", what="t")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePathError, match="not a directory"):
        real_directories(tmp_path, "file/x", what="t")
    (tmp_path / ".patchset" / "rebase" / "inner").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="a symbolic link"):
        real_directories(tmp_path, ".patchset/rebase/inner", what="t")
    with pytest.raises(UnsafePathError, match="cannot be read"):
        real_directories(tmp_path, "n" * 300, what="t")
