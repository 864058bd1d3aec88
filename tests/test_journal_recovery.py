"""Recovery of real interrupted applies (``patchset.journal.recovery``), byte for byte.

An apply commits a change set that takes every kind of path the journal knows; it is SIGKILLed at
each step of its commit (``tests.support.journal_world``), and what recovery makes of each tree is
compared with the old and new trees laid out by hand: what is restored, what is kept (files the
commit never named, files the user added since), what is refused and what the message says.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from pathlib import Path

import pytest

from patchset.engine import txn
from patchset.errors import EnvironmentFailure, ForeignJournal, UnsafePathError
from patchset.journal.commit import Change
from patchset.journal.txndir import JOURNAL
from tests.support.fuzz import Sentinel
from tests.support.journal_world import NEW, OLD, Interrupted, World, copy_tree, in_child, lay_out
from tests.support.trees import snapshot


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("journal-world"))


@pytest.fixture(scope="module")
def kills(world: World) -> list[Interrupted]:
    """The commit killed at each of its steps: staging, the journal, the renames, the cleanup."""
    found = world.every_kill()
    assert [at.step for at in found] == list(range(1, len(found) + 1))
    return found


def _first(kills: list[Interrupted], journal: bool = True, renamed: bool = False) -> Interrupted:
    return next(at for at in kills if at.journal is journal and at.renamed is renamed)


def _journal_of(tree: Path) -> dict:
    return json.loads((tree / txn.TXN_DIR / JOURNAL).read_bytes())


def test_a_kill_at_any_step_is_finished_by_recovery(world: World, kills: list[Interrupted], tmp_path: Path) -> None:
    """Killed before its journal: the old tree (the staged files go). After it: the new tree. After
    the journal was removed: the new tree (only the staging area is left to clear)."""
    seen = set()
    for at in kills:
        tree = copy_tree(at.root, tmp_path / f"k{at.step}")
        done = txn.recover(tree)
        assert done == ("rolled forward" if at.journal else "discarded"), at
        assert snapshot(tree) == (world.new if at.journal or at.renamed else world.old), at
        assert txn.recover(tree) is None, "a second recovery found something left"
        seen.add((at.journal, at.renamed))
    assert seen == {(False, False), (True, False), (True, True), (False, True)}


def test_recovering_back_restores_the_old_tree_at_any_step(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    for at in kills:
        tree = copy_tree(at.root, tmp_path / f"k{at.step}")
        done = txn.recover(tree, "back")
        if at.journal:
            assert done == "rolled back", at
            assert snapshot(tree) == world.old, at
        else:  # no journal: nothing to undo, the files are what they were when it stopped
            assert done == "discarded", at
            assert snapshot(tree) == (world.new if at.renamed else world.old), at


def test_a_recovery_killed_half_way_is_finished_by_the_next_one(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    """Recovery can itself be killed at any of its steps: run again, forward or back, it finishes."""
    at = _first(kills)
    j = 1
    while True:
        tree = copy_tree(at.root, tmp_path / f"r{j}")
        status = in_child(lambda: txn.recover(tree), j)  # noqa: B023 - run before the next iteration
        if status == 0:
            assert snapshot(tree) == world.new
            break
        assert status == -signal.SIGKILL, j
        back = copy_tree(tree, tmp_path / f"r{j}-back")
        assert txn.recover(back, "back") == "rolled back" and snapshot(back) == world.old, j
        assert txn.recover(tree) == "rolled forward" and snapshot(tree) == world.new, j
        j += 1
    assert j > 5, "the recovery had fewer steps than the change set has files"


def test_recovery_keeps_what_the_user_added_since_the_kill(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    """Files the user wrote after the kill, in the root and in a directory the commit created, are
    not patchset's: rolling back keeps them (and the created directory that holds one)."""
    at = next(at for at in kills if at.journal and (at.root / "deep" / "er").is_dir())
    mine = {"notes.txt": (b"mine\n", 0o600), "deep/er/mine.txt": (b"mine too\n", 0o644)}
    for direction in ("back", "auto"):
        tree = copy_tree(at.root, tmp_path / direction)
        for rel, (data, mode) in mine.items():
            (tree / rel).write_bytes(data)
            os.chmod(tree / rel, mode)
        done = txn.recover(tree, direction)
        if direction == "back":
            assert done == "rolled back"
            expected = snapshot(lay_out(tmp_path / "expected-back", {**OLD, **mine}))
        else:
            assert done == "rolled forward"
            expected = {**world.new, **snapshot(lay_out(tmp_path / "mine", mine))}
        assert snapshot(tree) == expected, direction


@pytest.mark.parametrize("damaged", [["mod.py"], ["d", "deep/er/new.txt"]])
def test_a_damaged_staged_file_is_refused_forward_and_rolled_back_otherwise(
    world: World, kills: list[Interrupted], tmp_path: Path, damaged: list[str]
) -> None:
    """A staged file that never reached the disk (a power cut after a non-durable apply) is never
    installed: ``forward`` refuses and changes nothing, ``auto`` rolls back and says why. Every
    staged file is checked, past those already in place (the second case is killed right after
    ``mod.py`` was renamed)."""
    if damaged == ["mod.py"]:
        at = _first(kills)
    else:
        at = next(k for k in kills if (k.root / "mod.py").read_bytes() == NEW["mod.py"][0])
    tree = copy_tree(at.root, tmp_path / "tree")
    for e in _journal_of(tree)["entries"]:
        if e["path"] in damaged:
            (tree / txn.TXN_DIR / "new" / e["new"]).write_bytes(b"")
    before = snapshot(tree)
    with pytest.raises(EnvironmentFailure) as refused:
        txn.recover(tree, "forward")
    names = ", ".join(damaged)
    assert refused.value.message == (
        f"{tree}: the staged new content of {names} is damaged (a power cut before it reached the disk?)"
    )
    assert (
        refused.value.hint == f"roll back instead: `patchset recover --tree {tree} --back`, then run the command again"
    )
    assert snapshot(tree) == before
    assert txn.recover(tree) == f"rolled back (staged {names} damaged, e.g. by a power cut)"
    assert snapshot(tree) == world.old


def test_a_tampered_journal_is_refused_and_left_alone(kills: list[Interrupted], tmp_path: Path) -> None:
    """Our journal, edited after it was sealed so that recovery would delete a file the commit never
    named: refused in either direction, the tree and the journal left byte for byte."""
    tree = copy_tree(_first(kills).root, tmp_path / "tree")
    journal = _journal_of(tree)
    [gone] = [e for e in journal["entries"] if e["path"] == "gone.txt"]
    gone["path"] = "keep.txt"
    (tree / txn.TXN_DIR / JOURNAL).write_text(json.dumps(journal))
    before = snapshot(tree)
    for direction in ("auto", "back"):
        with pytest.raises(ForeignJournal) as refused:
            txn.recover(tree, direction)
        assert "does not carry this installation's seal" in refused.value.message
        assert "'keep.txt'" in refused.value.message and "nothing was changed" in refused.value.message
        assert snapshot(tree) == before, direction


def test_a_journal_of_another_installation_is_refused(
    kills: list[Interrupted], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree interrupted under another user's state directory (another key): never replayed."""
    tree = copy_tree(_first(kills, renamed=True).root, tmp_path / "tree")
    before = snapshot(tree)
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "another-user"))
    with pytest.raises(ForeignJournal, match="not written by this installation"):
        txn.recover(tree)
    assert snapshot(tree) == before


@pytest.mark.parametrize("where", ["entries", "created_dirs", "removed_dirs"])
def test_a_sealed_journal_naming_a_path_through_a_link_moves_nothing(
    kills: list[Interrupted], tmp_path: Path, where: str
) -> None:
    """Every path of the journal is checked on disk before the first file moves: a journal of ours
    that names a path through a link out of the tree (added to the tree after the kill) leaves
    the tree as it was, not half recovered."""
    sentinel = Sentinel(tmp_path)
    tree = copy_tree(_first(kills).root, tmp_path / "tree")
    os.symlink(sentinel.root, tree / "out")
    body = {k: v for k, v in _journal_of(tree).items() if k != "owner"}
    if where == "entries":
        body["entries"].append({"path": "out/victim.txt", "new": None, "old": None, "old_mode": None, "new_mode": None})
    else:
        body[where].append("out/made")
    (tree / txn.TXN_DIR / JOURNAL).write_text(json.dumps(txn.journal(tree).seal(body)))
    before = snapshot(tree)
    with pytest.raises(UnsafePathError, match="out"):
        txn.recover(tree)
    assert snapshot(tree) == before
    sentinel.assert_untouched()


def test_recovery_waits_for_the_process_that_holds_the_tree(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    tree = copy_tree(_first(kills, renamed=True).root, tmp_path / "tree")
    before = snapshot(tree)
    holder = txn.journal(tree)
    with holder.locked():
        with pytest.raises(EnvironmentFailure) as busy:
            txn.recover(tree)
        assert busy.value.message == f"{tree}: another patchset process is applying to this tree"
        assert busy.value.hint == "wait for it to finish"
        assert snapshot(tree) == before
    assert txn.recover(tree) == "rolled forward" and snapshot(tree) == world.new


def test_a_recovery_that_fails_keeps_the_journal_and_can_be_run_again(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    """A directory the user made where the journal installs a file stops the rename: the error says
    the journal is kept, and once the directory is gone the same recovery finishes the job."""
    tree = copy_tree(_first(kills).root, tmp_path / "tree")
    (tree / "deep/er/new.txt").mkdir(parents=True)
    (tree / "deep/er/new.txt/inside").write_bytes(b"x\n")
    journal = (tree / txn.TXN_DIR / JOURNAL).read_bytes()
    with pytest.raises(EnvironmentFailure) as failed:
        txn.recover(tree)
    assert failed.value.message.startswith(f"{tree}: recovering the interrupted commit failed: ")
    assert "the journal is kept (recovery can be run again)" in (failed.value.hint or "")
    assert (tree / txn.TXN_DIR / JOURNAL).read_bytes() == journal
    shutil.rmtree(tree / "deep/er/new.txt")
    assert txn.recover(tree) == "rolled forward"
    assert snapshot(tree) == world.new


def test_an_apply_killed_right_after_taking_the_lock_leaves_nothing_to_recover(world: World, tmp_path: Path) -> None:
    """The transaction directory exists (the lock is taken on it) but nothing was staged."""
    tree = lay_out(tmp_path / "tree", {"keep.txt": (b"kept\n", 0o644)})
    before = snapshot(tree)

    def lock_and_die() -> None:
        txn.journal(tree).lock()
        os.kill(os.getpid(), signal.SIGKILL)

    assert in_child(lock_and_die, None) == -signal.SIGKILL
    assert (tree / txn.TXN_DIR).is_dir() and txn.pending(tree)
    assert txn.recover(tree) is None
    assert snapshot(tree) == before and not txn.pending(tree)


@pytest.mark.parametrize("direction", ["auto", "back"])
def test_recovery_makes_what_it_moved_durable_before_the_journal_goes(
    kills: list[Interrupted], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direction: str
) -> None:
    """A power cut right after recovery must not bring back a half-moved tree with no journal left:
    every directory whose entries recovery changed is fsynced while the journal still exists."""
    at = _first(kills) if direction == "auto" else [k for k in kills if k.journal][-1]
    tree = copy_tree(at.root, tmp_path / "tree")
    real = Path(os.path.realpath(tree))
    journal = tree / txn.TXN_DIR / JOURNAL
    synced: set[Path] = set()
    fsync = os.fsync

    def recording(fd: int) -> None:
        if journal.exists():
            synced.add(Path(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    assert txn.recover(tree, direction) in ("rolled forward", "rolled back")
    # the directories recovery renamed into or out of, as they are afterwards
    changed = ["", "a", "deep", "deep/er"] if direction == "auto" else ["", "d"]
    missing = sorted(rel for rel in changed if (real / rel) not in synced)
    assert not missing, f"not fsynced before the journal was removed: {missing}"


def test_a_read_only_tree_is_reported_as_such_and_recovery_writes_nothing_there(tmp_path: Path) -> None:
    """A tree on a read-only file system (a mounted image): recovery with nothing pending writes
    nothing and says nothing; a commit fails on its transaction directory, naming the cause."""
    from tests.support import smallfs

    with smallfs.tmpfs(tmp_path / "fs") as fs:
        tree = lay_out(fs / "tree", {"keep.txt": (b"kept\n", 0o644)})
        smallfs.remount_readonly(fs)
        before = snapshot(tree)
        assert txn.recover(tree) is None and txn.recover(tree, "back") is None
        with pytest.raises(EnvironmentFailure) as failed:
            txn.commit(tree, [Change("keep.txt", b"new\n")])
        assert failed.value.message == (
            f"{tree / txn.TXN_DIR}: cannot create the transaction directory: Read-only file system"
        )
        assert failed.value.hint == f"is {tree} writable?"
        assert snapshot(tree) == before


def test_a_ledger_edit_is_durable_against_a_power_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger is the user's record (a tree can be applied again, a lost ledger edit cannot): its
    journaled writes fsync the staged file and the directory it is renamed into, always."""
    from patchset.ledger import store

    led = lay_out(tmp_path / "led", {"patches.toml": (b"schema = 1\n", 0o644)})
    real = Path(os.path.realpath(led))
    synced: list[Path] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    store.write_files(led, {led / "patches.toml": b"schema = 1\n# edited\n"})
    assert (led / "patches.toml").read_bytes() == b"schema = 1\n# edited\n"
    staged = real / store.EDIT_TXN / "new" / "0"
    assert staged in synced, f"the staged file was not fsynced: {synced}"
    assert real in synced[synced.index(staged) :], "the ledger directory was not fsynced after the rename"


def test_the_lock_is_released_whatever_descriptor_it_got(tmp_path: Path) -> None:
    """patchset started with stdin closed (cron, a service) gets descriptor 0 for its lock: unlocking
    releases it. Unlocking again, after a refused lock, or without a lock closes nothing else."""
    tree = lay_out(tmp_path / "tree", {"keep.txt": (b"kept\n", 0o644)})
    first, second, third = txn.journal(tree), txn.journal(tree), txn.journal(tree)
    first.unlock()  # never locked
    saved = os.dup(0)
    os.close(0)
    try:
        first.lock()
        assert stat.S_ISDIR(os.fstat(0).st_mode), "the lock did not take the lowest free descriptor"
        with pytest.raises(EnvironmentFailure, match="another patchset process is applying to this tree"):
            second.lock()
        second.unlock()  # after the refusal: must not release the first one's lock
        with pytest.raises(EnvironmentFailure, match="another patchset process"):
            third.lock()
        first.unlock()
        first.unlock()
        second.lock()  # released: free again
        second.unlock()
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    for fd in (1, 2):
        os.fstat(fd)  # stdout and stderr still open


def test_a_roll_back_stopped_by_an_error_is_finished_by_running_it_again(
    world: World, kills: list[Interrupted], tmp_path: Path
) -> None:
    """Undoing a commit killed after its last rename: a directory the user made where a deleted file
    comes back stops the undo half-way (the files restored before it stay restored, the journal is
    kept); once it is gone, the same undo restores the rest and loses none of the first ones."""
    at = [k for k in kills if k.journal][-1]
    tree = copy_tree(at.root, tmp_path / "tree")
    (tree / "gone.txt").mkdir()
    (tree / "gone.txt" / "mine").write_bytes(b"mine\n")
    with pytest.raises(EnvironmentFailure, match="recovering the interrupted commit failed"):
        txn.recover(tree, "back")
    assert (tree / "mod.py").read_bytes() == OLD["mod.py"][0], "the undo stopped before restoring mod.py"
    shutil.rmtree(tree / "gone.txt")
    assert txn.recover(tree, "back") == "rolled back"
    assert snapshot(tree) == world.old
