"""Transaction journals are replayed only when this installation wrote them (security issue #23).

A build tree, an archive from the index or a cloned ledger can carry ``.patchset-txn/journal.json``
(or ``.patchset/ledger-txn/journal.json``) naming any path. Before the fix every command that
finds one (``apply``, ``recover``, any ledger edit) replayed it: it deleted and created files
anywhere and reported "finished an interrupted earlier apply (rolled forward)". Each test ships
one shape of hostile journal and asserts that nothing outside the tree changed (a
:class:`~tests.support.fuzz.Sentinel` sits where ``../`` lands, and absolute paths point into it),
that the journal was left where it was, and that the command exits 2 saying what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.diffgen import unified_diff
from tests.support.fuzz import Sentinel
from tests.support.trees import snapshot

OLD = b"line1\nline2\nline3\n"
NEW = b"line1\nLINE2\nline3\n"
LEDGER = 'schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\n'
TREE_TXN = ".patchset-txn"
LEDGER_TXN = ".patchset/ledger-txn"


def _entry(path: Any, new: str | None = None, old: str | None = None) -> dict[str, Any]:
    return {"path": path, "new": new, "old": old, "old_mode": None, "new_mode": 0o644 if new else None}


def _journal(entries: list[dict[str, Any]], created: list[str] | None = None) -> dict[str, Any]:
    return {"version": 1, "entries": entries, "created_dirs": created or [], "removed_dirs": []}


def _ship(where: Path, txn: str, journal: dict[str, Any], staged: dict[str, bytes] | None = None) -> Path:
    """Put a journal (and staged ``new/<n>`` files) where patchset keeps its own."""
    d = where / txn
    (d / "new").mkdir(parents=True)
    (d / "old").mkdir()
    for name, data in (staged or {}).items():
        (d / "new" / name).write_bytes(data)
    (d / "journal.json").write_text(json.dumps(journal))
    return d / "journal.json"


@pytest.fixture
def world(tmp_path: Path, run) -> tuple[Path, Path, Sentinel]:
    """A ledger with one patch of ``f.txt``, a tree it applies to, and a sentinel beside them."""
    sentinel = Sentinel(tmp_path)
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(LEDGER)
    (tmp_path / "p.patch").write_bytes(unified_diff(OLD, NEW, "f.txt"))
    r = run("import", tmp_path / "p.patch", cwd=led)
    assert r.code == 0, r
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.txt").write_bytes(OLD)
    return led, tree, sentinel


def _refused(r, journal: Path, text: bytes, sentinel: Sentinel, *names: str) -> None:
    assert r.code == 2, r
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert "not written by this installation" in r.stderr and "by hand" in r.stderr, r.stderr
    for name in names:  # the journal is described by what it names
        assert name in r.stderr, (name, r.stderr)
    assert "rolled forward" not in r.stdout + r.stderr
    assert journal.read_bytes() == text, "the foreign journal was not left alone"
    sentinel.assert_untouched()


def test_apply_refuses_a_shipped_journal_with_an_absolute_entry(world, run) -> None:
    led, tree, sentinel = world
    victim = str(sentinel.root / "victim.txt")
    journal = _ship(tree, TREE_TXN, _journal([_entry(victim), _entry(str(sentinel.root / "etc/passwd"))]))
    text = journal.read_bytes()
    r = run("apply", "--tree", tree, cwd=led)
    _refused(r, journal, text, sentinel, victim)
    assert (tree / "f.txt").read_bytes() == OLD


def test_apply_refuses_a_shipped_journal_with_a_dotdot_entry(world, run) -> None:
    led, tree, sentinel = world
    journal = _ship(tree, TREE_TXN, _journal([_entry("../sentinel/victim.txt"), _entry("sub/../../sentinel/etc")]))
    text = journal.read_bytes()
    r = run("apply", "--tree", tree, cwd=led)
    _refused(r, journal, text, sentinel, "../sentinel/victim.txt")
    assert (tree / "f.txt").read_bytes() == OLD


def test_apply_refuses_a_shipped_journal_creating_directories_outside(world, run, tmp_path: Path) -> None:
    led, tree, sentinel = world
    created = ["../sentinel/made", str(sentinel.root / "made2"), "../outside", "../outside/deeper"]
    journal = _ship(
        tree,
        TREE_TXN,
        _journal([_entry("../sentinel/planted.txt", new="0"), _entry("../outside/x", new="1")], created),
        {"0": b"planted\n", "1": b"x\n"},
    )
    text = journal.read_bytes()
    r = run("apply", "--tree", tree, cwd=led)
    _refused(r, journal, text, sentinel, "../sentinel/made")
    assert not (tmp_path / "outside").exists()
    assert sorted(p.name for p in (tree / TREE_TXN / "new").iterdir()) == ["0", "1"]


def test_recover_refuses_a_journal_shipped_inside_a_tree(world, run) -> None:
    led, tree, sentinel = world
    journal = _ship(tree, TREE_TXN, _journal([_entry("../sentinel/victim.txt")], ["../sentinel/made"]))
    text = journal.read_bytes()
    for args in (["recover", "--tree", tree], ["recover", "--tree", tree, "--back"]):
        _refused(run(*args, cwd=led), journal, text, sentinel, "../sentinel/victim.txt")


def test_a_forged_owner_is_refused(world, run) -> None:
    led, tree, sentinel = world
    forged = dict(_journal([_entry("../sentinel/victim.txt")]), owner="0" * 64)
    journal = _ship(tree, TREE_TXN, forged)
    text = journal.read_bytes()
    _refused(run("recover", "--tree", tree, cwd=led), journal, text, sentinel)


def test_target_add_refuses_a_shipped_ledger_edit_journal(world, run) -> None:
    led, _tree, sentinel = world
    before = (led / "patches.toml").read_bytes()
    journal = _ship(led, LEDGER_TXN, _journal([_entry("../sentinel/victim.txt")], ["../sentinel/made"]))
    text = journal.read_bytes()
    r = run("target", "add", "foo", "--upstream", "https://example.invalid/foo.git", cwd=led)
    _refused(r, journal, text, sentinel, "../sentinel/victim.txt")
    assert (led / "patches.toml").read_bytes() == before
    # the read-only commands name it, and recover refuses it the same way
    v = run("validate", "--json", cwd=led)
    assert v.code == 1 and any("not written by this installation" in p for p in json.loads(v.stdout)["problems"])
    _refused(run("recover", cwd=led), journal, text, sentinel)


def test_leftovers_whose_staging_directory_is_a_link_are_left_alone(world, run) -> None:
    """No journal, but ``new/`` links out of the tree: clearing "our" staged files would empty the target."""
    led, tree, sentinel = world
    (tree / TREE_TXN).mkdir()
    os.symlink(sentinel.root / "etc", tree / TREE_TXN / "new")
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 2 and "by hand" in r.stderr, r
    sentinel.assert_untouched()
    assert (tree / TREE_TXN / "new").is_symlink() and (tree / "f.txt").read_bytes() == OLD


def test_a_linked_transaction_directory_is_left_alone(world, run) -> None:
    led, tree, sentinel = world
    os.symlink(sentinel.root, tree / TREE_TXN)
    r = run("recover", "--tree", tree, cwd=led)
    assert r.code == 2 and "by hand" in r.stderr, r
    sentinel.assert_untouched()
    assert (tree / TREE_TXN).is_symlink()


@pytest.mark.parametrize("where", [".", "..", ".patchset/sub"])
def test_apply_refuses_the_ledger_directory_as_its_tree(world, run, tmp_path: Path, where: str) -> None:
    led, _tree, sentinel = world
    (led / "f.txt").write_bytes(OLD)
    (led / ".patchset" / "sub").mkdir(parents=True)
    (led / ".patchset" / "sub" / "f.txt").write_bytes(OLD)
    before = snapshot(tmp_path)
    r = run("apply", "--tree", led / where, cwd=led)
    assert r.code == 2, r
    assert "ledger" in r.stderr and "not a build tree" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before
    sentinel.assert_untouched()


@pytest.mark.parametrize("name", [".patchset/x", ".PATCHSET/applying/x.json", ".patchset-txn/journal.json"])
def test_a_patch_may_not_write_patchset_state(tmp_path: Path, run, name: str) -> None:
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(LEDGER)
    (tmp_path / "p.patch").write_bytes(unified_diff(b"", b"hello\n", name))
    assert run("import", tmp_path / "p.patch", cwd=led).code == 0
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.txt").write_bytes(OLD)
    before = snapshot(tree)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 2 and "Traceback" not in r.stderr, r
    assert "patchset" in r.stderr.lower() and name.split("/")[0] in r.stderr, r.stderr
    assert snapshot(tree) == before


def test_our_own_journal_is_confined_too(world, run) -> None:
    """A journal sealed by this installation that names ``../`` (a bug, or a damaged file) is still refused."""
    from patchset.engine import txn

    led, tree, sentinel = world
    j = txn.journal(tree)
    body = _journal([_entry("../sentinel/victim.txt")], ["../sentinel/made"])
    _ship(tree, TREE_TXN, j.seal(body))
    r = run("recover", "--tree", tree, cwd=led)
    assert r.code == 2 and "../sentinel/victim.txt" in r.stderr and "Traceback" not in r.stderr, r
    sentinel.assert_untouched()


def test_a_copy_of_our_own_interrupted_tree_still_recovers(world, tmp_path: Path, run) -> None:
    """Ownership is this installation's seal, not the tree's path: a copy (or a moved tree) of a
    tree an apply was killed in recovers like the original (the crash tests recover copies)."""
    led, tree, sentinel = world
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="2")  # 1 staged file, then the journal
    argv = [sys.executable, "-c", "from patchset.cli import main; main()", "-C", led, "apply", "--tree", tree]
    r = subprocess.run([str(a) for a in argv], env=env, capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert (tree / TREE_TXN / "journal.json").exists()
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    r2 = run("recover", "--tree", copy, cwd=led)
    assert r2.code == 0 and "rolled forward" in r2.stdout, r2
    assert (copy / "f.txt").read_bytes() == NEW and not (copy / TREE_TXN).exists()
    r3 = run("recover", "--tree", tree, "--back", cwd=led)
    assert r3.code == 0 and "rolled back" in r3.stdout, r3
    assert (tree / "f.txt").read_bytes() == OLD
    sentinel.assert_untouched()


def test_nothing_is_written_through_a_ledger_state_directory_that_links_out(world, run) -> None:
    """A cloned ledger whose ``.patchset`` is a link: apply writes its note nowhere (before, the note
    and its directory landed in the link's target), and a ledger edit refuses to stage through it."""
    led, tree, sentinel = world
    os.symlink(sentinel.root, led / ".patchset")
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / "f.txt").read_bytes() == NEW
    sentinel.assert_untouched()
    r = run("target", "add", "foo", "--upstream", "https://example.invalid/foo.git", cwd=led)
    assert r.code == 2 and "symbolic link" in r.stderr and "by hand" in r.stderr, r
    sentinel.assert_untouched()
