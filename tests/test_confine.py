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
