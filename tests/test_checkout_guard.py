"""The session check that tests leave the checkout as they found it (tests/support/checkout.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.checkout import checkout_state, example_copy
from tests.support.repo import REPO_ROOT, new_repo


def test_a_write_outside_the_declared_caches_is_seen(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    new_repo(repo, {"a.txt": "a\n", ".gitignore": ".patchset/\n__pycache__/\n"})
    assert checkout_state(repo) == {}
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    (repo / "pkg.egg-info").mkdir()
    assert checkout_state(repo) == {}  # declared caches
    (repo / ".patchset").mkdir()
    (repo / ".patchset" / "verify-proofs.json").write_text("{}")  # ignored, but state: seen
    (repo / "a.txt").write_text("changed\n")
    state = checkout_state(repo)
    assert state is not None and set(state) == {".patchset/", "a.txt"}
    assert state["a.txt"][0] == " M" and state[".patchset/"][0] == "!!"
    before = state["a.txt"]
    (repo / "a.txt").write_text("changed again, longer\n")  # already dirty: a second write still counts
    assert checkout_state(repo)["a.txt"] != before
    assert checkout_state(tmp_path) is None  # not a checkout: nothing to compare


def test_example_copy_leaves_state_behind(tmp_path: Path) -> None:
    out = example_copy("verify-kv", tmp_path)
    assert (out / "patches.toml").read_bytes() == (REPO_ROOT / "examples/verify-kv/patches.toml").read_bytes()
    assert not (out / ".patchset").exists()
