"""Recorded state is trusted only when this installation wrote it (security issue #23).

A ledger repository can be committed and cloned with whatever its ``.patchset/`` holds: a rebase
stopped at a conflict (``rebase/state.json`` and its ``backup/``), a rebase killed while writing
(``rebase/commit.json`` naming new bytes and a backup under ``rebase-backups/``), a gate state.
Before the fix ``rebase --continue`` wrote the bytes a cloned ``commit.json`` named into the
ledger's files, ``rebase --abort`` restored a shipped backup over them and then deleted the
directory the journal named as its backup (anywhere: ``../``), and ``gate`` answered "nothing to
do" (exit 0) for a commit a shipped state claimed was judged green. Each test clones a real git
repository carrying the state, runs the command, and checks that the ledger and a Sentinel
beside the clone are untouched, that the state is left where it was, and that the command exits 2
naming the file and what to do.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from patchset.errors import ForeignJournal, ForeignState
from patchset.journal.commit import Journal
from tests.support.fuzz import Sentinel, snapshot
from tests.support.rebase_demo import build
from tests.support.repo import git

pytestmark = pytest.mark.timeout(120)

EVIL = b"# replaced by the clone's rebase state\nschema = 1\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _backup(where: Path, files: dict[str, bytes]) -> None:
    """A backup as patchset wrote them before it sealed its manifests: a tar and a manifest."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "previous.tar").write_bytes(_tar(files))
    (where / "manifest.json").write_text(json.dumps({rel: _sha(data) for rel, data in files.items()}))


def _clone(tmp_path: Path, ship) -> tuple[Path, Sentinel]:
    """A demo ledger committed with what ``ship(root, sentinel)`` puts into it, cloned beside a
    Sentinel. Returns the clone and the sentinel (snapshot taken after the shipping)."""
    sentinel = Sentinel(tmp_path)
    demo = build(tmp_path / "orig", ["p-clean"])
    ship(demo.root, sentinel)
    git(demo.root, "init", "-q", "-b", "main")
    git(demo.root, "add", "-A", "-f")
    git(demo.root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "ledger")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(demo.root), str(clone))
    assert (clone / ".patchset").is_dir()
    sentinel.before = snapshot(sentinel.root)
    return clone, sentinel


def _ledger_files(root: Path) -> dict[str, tuple[str, str]]:
    return {k: v for k, v in snapshot(root).items() if not k.startswith(".git/") and k != ".git"}


def _ship_commit_journal(root: Path, sentinel: Sentinel) -> None:
    """``commit.json`` naming new bytes for the ledger and a file beside it, and a backup in the sentinel."""
    _backup(sentinel.root / "bk", {"patches.toml": EVIL})
    files = {"patches.toml": EVIL, "run-me.sh": b"#!/bin/sh\necho owned\n"}
    state = root / ".patchset" / "rebase"
    state.mkdir(parents=True)
    doc = {"backup": "../sentinel/bk", "files": {k: base64.b64encode(v).decode() for k, v in files.items()}}
    (state / "commit.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("how", ["--continue", "--abort"])
def test_a_cloned_rebase_journal_is_refused_not_replayed(tmp_path: Path, run, how: str) -> None:
    """Before: ``--continue`` wrote EVIL into patches.toml and created run-me.sh; ``--abort``
    restored EVIL from the sentinel's backup and deleted the sentinel's ``bk`` directory."""
    clone, sentinel = _clone(tmp_path, _ship_commit_journal)
    before = _ledger_files(clone)
    r = run("rebase", how, cwd=clone)
    assert r.code == 2, r
    text = r.stderr
    assert "commit.json" in text and "not written by this installation" in text, text
    assert "'patches.toml'" in text and "'run-me.sh'" in text  # what it names, quoted
    assert "by hand" in text and "Traceback" not in text
    assert _ledger_files(clone) == before
    sentinel.assert_untouched()


def _ship_stopped(root: Path, sentinel: Sentinel) -> None:
    """A rebase "stopped at a conflict" whose backup restores EVIL over the ledger."""
    state = root / ".patchset" / "rebase"
    _backup(state / "backup", {"patches.toml": EVIL, "run-me.sh": b"echo owned\n"})
    doc = {"version": 1, "onto": "v2\x1b[2J", "stopped_at": "p-clean", "work": ["../../sentinel/victim.txt"]}
    (state / "state.json").write_text(json.dumps(doc))


def test_a_cloned_stopped_rebase_is_refused_by_abort_continue_and_skip(tmp_path: Path, run) -> None:
    """Before: ``--abort`` restored the shipped backup (EVIL into patches.toml, run-me.sh created)."""
    clone, sentinel = _clone(tmp_path, _ship_stopped)
    before = _ledger_files(clone)
    for how in ("--abort", "--continue", "--skip"):
        r = run("rebase", how, cwd=clone)
        assert r.code == 2, (how, r)
        assert "not written by this installation" in r.stderr and "by hand" in r.stderr, (how, r)
        assert "\x1b" not in r.stderr and "Traceback" not in r.stderr
        assert _ledger_files(clone) == before, how
    r = run("rebase", "--onto", "v2", cwd=clone)
    assert r.code == 2 and "not written by this installation" in r.stderr, r
    assert _ledger_files(clone) == before
    sentinel.assert_untouched()


def test_validate_and_status_report_a_cloned_rebase_state_as_foreign(tmp_path: Path, run) -> None:
    clone, sentinel = _clone(tmp_path, _ship_commit_journal)
    r = run("validate", "--json", cwd=clone)
    found = json.loads(r.stdout)
    said = " ".join(found["problems"] + found["warnings"])
    assert "not written by this installation" in said and "rebase --continue" not in said, found
    sentinel.assert_untouched()


def test_a_state_directory_that_links_out_is_never_cleared(tmp_path: Path, run) -> None:
    """A cloned ledger whose ``.patchset`` links to another directory holding a stale ``rebase/``:
    before, the next rebase "cleared the stale state", i.e. renamed and deleted the link target's
    ``rebase`` directory."""
    sentinel = Sentinel(tmp_path)
    (sentinel.root / "rebase" / "blobs").mkdir(parents=True)
    (sentinel.root / "rebase" / "blobs" / "keep").write_text("mine\n")
    sentinel.before = snapshot(sentinel.root)
    demo = build(tmp_path / "d", ["p-clean"])
    os.symlink(sentinel.root, demo.root / ".patchset")
    r = run("rebase", "--onto", "v2", "--dry-run", cwd=demo.root)
    assert r.code == 2, r
    assert "symbolic link" in r.stderr and "Traceback" not in r.stderr
    sentinel.assert_untouched()


def test_a_journal_seal_that_is_not_ascii_is_foreign_not_a_crash(tmp_path: Path) -> None:
    """Found while sealing recorded state: ``hmac.compare_digest`` raises TypeError for a
    non-ASCII string, so a journal whose ``owner`` was ``"é"`` was an internal error."""
    root = tmp_path / "tree"
    txn = root / ".patchset-txn"
    (txn / "new").mkdir(parents=True)
    (txn / "old").mkdir()
    body = {"version": 1, "entries": [], "created_dirs": [], "removed_dirs": [], "owner": "é"}
    (txn / "journal.json").write_text(json.dumps(body))
    with pytest.raises(ForeignJournal, match="seal"):
        Journal(root, txn).recover()
    assert json.loads((txn / "journal.json").read_text()) == body


def test_foreign_state_is_an_input_error_exit_2() -> None:
    assert ForeignState("x").exit_code == 2


def test_a_shipped_gate_state_cannot_turn_a_red_commit_green(tmp_path: Path, upstream) -> None:
    """A gate state that says "judged green" for the very commit and series the gate is asked about.
    Before: ``nothing to do`` (status unchanged, exit 0) for a commit whose replay conflicts."""
    from patchset.ci.gate import GateRun, run_gate
    from tests.support.gateworld import gate_ledger

    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    r = run_gate(GateRun(ledger, artifacts=tmp_path / "a1", latest=True))
    assert (r.status, r.exit_code) == ("red", 1)
    path = ledger.parent / ".patchset" / "gate-state.json"
    doc = json.loads(path.read_text())
    doc.pop("owner", None)  # what a clone carries: someone else's state, not sealed here
    doc["targets"]["demo"].update(verdict="green", failing=[], judged_label="v9\x1b[31m")
    path.write_text(json.dumps(doc))
    shipped = path.read_bytes()
    r = run_gate(GateRun(ledger, artifacts=tmp_path / "a2", latest=True))
    assert (r.status, r.exit_code) == ("error", 2), r.to_json()
    assert "gate-state.json" in r.errors[0] and "not written by this installation" in r.errors[0]
    assert "'demo'" in r.errors[0] and "\x1b" not in r.errors[0]
    assert path.read_bytes() == shipped  # left alone


def test_abort_restores_a_backup_only_for_a_session_of_this_installation(tmp_path: Path, run) -> None:
    """Found by the fuzz tier: a foreign ``state.json`` beside a backup this installation sealed
    (a session of ours, its state.json replaced). Before: ``--abort`` restored the backup and
    cleared the foreign session without looking at it."""
    from tests.support.rebase_demo import ALL

    demo = build(tmp_path / "d", [p for p in ALL if p in ("p-clean", "p-conflict")])
    r = run("rebase", "--onto", "v2", "--interactive", cwd=demo.root)
    assert r.code == 1 and "stopped" in r.stdout, r
    session = demo.root / ".patchset" / "rebase" / "state.json"
    doc = json.loads(session.read_text())
    doc.pop("owner")
    session.write_text(json.dumps(doc))
    before = snapshot(demo.root / ".patchset")
    r = run("rebase", "--abort", cwd=demo.root)
    assert r.code == 2 and "not written by this installation" in r.stderr, r
    assert snapshot(demo.root / ".patchset") == before
