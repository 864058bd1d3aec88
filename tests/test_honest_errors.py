"""Honest errors (issue #23): bad input is refused with the file, what is wrong and what to do,
exit 2 (``validate``: a problem, exit 1), no traceback, and nothing written or left behind.

A binary or future-schema ``patches.lock``; a target name that would be a directory outside
``patchset/series/`` (``..``, ``/x``); ``import /dev/zero``, a FIFO, an oversized file; an empty
file or a mail without a diff; an emptied or deleted lock (which would turn every check off);
and ``apply --into`` creating its directory private (0700) instead of with the umask's mode.
"""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest

from tests.support.localindex import LocalIndex
from tests.support.repo import tree_digest
from tests.support.text import udiff

LEDGER = """\
schema = 1

[targets.demo]
upstream = "https://example.invalid/demo.git"
package = "demo"
strip = 1
"""
OLD = "".join(f"line {i}\n" for i in range(10))
NEW = OLD.replace("line 4\n", "line four\n")


def _quiet(r) -> None:
    """A refusal, not a crash."""
    assert "Traceback" not in r.stdout + r.stderr and "internal error" not in r.stderr, r


def _state(led: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(led).items() if not k.startswith(".patchset/")}


@pytest.fixture
def led(tmp_path: Path, run) -> Path:
    """A ledger with one imported patch (``fix``) and its lock."""
    d = tmp_path / "led"
    d.mkdir()
    (d / "patches.toml").write_text(LEDGER)
    (tmp_path / "fix.patch").write_text(udiff("pkg/m.py", OLD, NEW))
    assert run("import", tmp_path / "fix.patch", cwd=d).code == 0
    return d


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    t = tmp_path / "tree"
    (t / "pkg").mkdir(parents=True)
    (t / "pkg/m.py").write_text(OLD)
    return t


# ---- the lock --------------------------------------------------------------------------------------


def test_a_binary_lock_is_named_not_a_crash(run, led: Path, tree: Path) -> None:
    (led / "patches.lock").write_bytes(bytes(range(256)) * 4)
    before, tree_before = _state(led), tree_digest(tree)
    for args in (["validate"], ["apply", "--tree", str(tree)], ["list"]):
        r = run(*args, cwd=led)
        assert r.code == 2, (args, r)
        _quiet(r)
        assert "patches.lock" in r.stderr and "not a lock" in r.stderr and "hint:" in r.stderr, r
    assert _state(led) == before and tree_digest(tree) == tree_before


@pytest.mark.parametrize("version", ["99", "0", "true"])
def test_a_lock_of_an_unknown_schema_version_is_refused(run, led: Path, version: str) -> None:
    lock = led / "patches.lock"
    text = lock.read_text()
    assert "\nschema = 1\n" in text
    lock.write_text(text.replace("\nschema = 1\n", f"\nschema = {version}\n"))
    r = run("validate", cwd=led)
    assert r.code == 2, r
    _quiet(r)
    assert "patches.lock:2" in r.stderr and f"lock schema version {version.capitalize()}" in r.stderr
    assert "this patchset reads schema 1" in r.stderr


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_an_emptied_or_deleted_lock_does_not_turn_checking_off(run, led: Path, tree: Path, how: str) -> None:
    lock = led / "patches.lock"
    if how == "emptied":
        lock.write_bytes(b"")
    else:
        lock.unlink()
    tree_before = tree_digest(tree)
    r = run("validate", cwd=led)
    assert r.code == 1, r
    assert "patches.lock" in r.stdout and ("is empty" if how == "emptied" else "is missing") in r.stdout
    assert "--update-lock" in r.stdout
    for extra in ([], ["--dry-run"]):
        r = run("apply", "--tree", tree, *extra, cwd=led)
        assert r.code == 2, r
        _quiet(r)
        assert "patches.lock" in r.stderr and "no body and no patched file has a hash" in r.stderr
        assert "--update-lock" in r.stderr and "nothing was written" in r.stderr
        assert tree_digest(tree) == tree_before
    assert lock.exists() == (how == "emptied")
    # asked for, the lock is written anew and checking is back on
    r = run("apply", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0, r
    assert run("validate", cwd=led).code == 0
    assert "files" in lock.read_text()


# ---- the ledger: target names ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", "/x", "a/b", ".patchset", "-rf", "x y"])
def test_a_target_name_that_is_no_directory_name_is_refused_at_load(run, tmp_path: Path, name: str) -> None:
    d = tmp_path / "led"
    d.mkdir()
    toml = f'schema = 1\n\n[targets."{name}"]\nupstream = "https://example.invalid/x.git"\n'
    toml += f'\n[[patch]]\nid = "p"\ntarget = "{name}"\ntitle = "p"\norigin = "ours"\n'
    (d / "patches.toml").write_text(toml)
    before = tree_digest(d)
    for args in (["validate"], ["list"], ["apply", "--tree", str(tmp_path)]):
        r = run(*args, cwd=d)
        assert r.code == 2, (args, r)
        _quiet(r)
        assert "patches.toml:3" in r.stderr and f"target name {name!r}" in r.stderr, r
        assert "rename the target" in r.stderr
    assert tree_digest(d) == before
    assert not (tmp_path / "x").exists() and not (d / "patchset").exists()


# ---- import: what is not a patch file -------------------------------------------------------------


def test_import_of_a_device_or_fifo_is_refused_without_reading_it(run, led: Path, tmp_path: Path) -> None:
    before = _state(led)
    fifo = tmp_path / "pipe.patch"
    os.mkfifo(fifo)
    quilt = tmp_path / "q"
    quilt.mkdir()
    (quilt / "zero.patch").symlink_to("/dev/zero")
    (quilt / "series").write_text("zero.patch\n")
    for src in ("/dev/zero", fifo, quilt):
        t0 = time.monotonic()
        r = run("import", src, cwd=led)
        assert time.monotonic() - t0 < 10
        assert r.code == 2, (src, r)
        _quiet(r)
        # a series line through a link out of its directory is refused before the kind of file matters
        refused = "not a regular file" in r.stderr or (src == quilt and "through a symlink" in r.stderr)
        assert refused and ("zero" in r.stderr or "pipe.patch" in r.stderr), r
    assert _state(led) == before


def test_import_of_an_oversized_file_is_refused(run, led: Path, tmp_path: Path, monkeypatch) -> None:
    from patchset.commands import importer

    monkeypatch.setattr(importer, "MAX_PATCH_BYTES", 1 << 10, raising=False)
    big = tmp_path / "big.patch"
    big.write_text(udiff("pkg/m.py", OLD * 40, NEW * 40))
    assert big.stat().st_size > 1 << 10
    before = _state(led)
    r = run("import", big, cwd=led)
    assert r.code == 2, r
    _quiet(r)
    assert "big.patch" in r.stderr and "too large" in r.stderr
    assert _state(led) == before


MAIL = b"From 0000 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.com>\nSubject: [PATCH] words\n\nonly words\n"


@pytest.mark.parametrize("body", [b"", b"\n\n", MAIL], ids=["empty", "blank", "mail-without-diff"])
def test_import_refuses_a_file_without_a_diff(run, led: Path, tmp_path: Path, body: bytes) -> None:
    f = tmp_path / "nothing.patch"
    f.write_bytes(body)
    before = _state(led)
    r = run("import", f, cwd=led)
    assert r.code == 2, r
    _quiet(r)
    assert "nothing.patch" in r.stderr and "not a diff" in r.stderr and "nothing was imported" in r.stderr
    assert _state(led) == before


def test_validate_reports_an_empty_body(run, tmp_path: Path) -> None:
    """An empty body with its hash in the lock (what importing an empty file used to record)."""
    import hashlib

    d = tmp_path / "led"
    (d / "patchset/series/demo").mkdir(parents=True)
    (d / "patchset/series/demo/fix.patch").write_bytes(b"")
    (d / "patches.toml").write_text(
        LEDGER + '\n[[patch]]\nid = "fix"\ntarget = "demo"\ntitle = "fix"\norigin = "ours"\n'
    )
    (d / "patches.lock").write_text(f'schema = 1\n\n[bodies]\nfix = "{hashlib.sha256(b"").hexdigest()}"\n')
    r = run("validate", cwd=d)
    assert r.code == 1, r
    assert "patchset/series/demo/fix.patch is empty" in r.stdout


# ---- apply --into: the mode of the directory it creates ---------------------------------------------


def _sdist(dest: Path, files: dict[str, str]) -> Path:
    dest.mkdir()
    path = dest / "demo-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"demo-1.0/{rel}")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


_umask_lock = threading.Lock()


def _umask() -> int:
    with _umask_lock:
        old = os.umask(0o022)
        os.umask(old)
    return old


def test_apply_into_creates_the_tree_with_the_umask_mode(run, led: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    _sdist(tmp_path / "dists", {"pkg/m.py": OLD})
    into = tmp_path / "out" / "demo-patched"
    with LocalIndex(tmp_path / "dists") as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        r = run("apply", "--from-index", "demo==1.0", "--into", into, "--update-lock", cwd=led)
    assert r.code == 0, r
    assert (into / "pkg/m.py").read_text() == NEW
    assert into.stat().st_mode & 0o777 == 0o777 & ~_umask(), oct(into.stat().st_mode)
    assert not [p for p in into.parent.iterdir() if p.name.startswith(".")]  # no stage left beside it
