"""Tests never write into the repository: a pytest plugin (registered in tests/conftest.py) that
fails the session when ``git status --porcelain --ignored`` of the checkout changed while it ran,
outside the caches the project declares here, and the helper that copies an example ledger for a
test that runs commands in it."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT

# What Python, pytest, hypothesis and setuptools write beside the sources; ignored by .gitignore and
# allowed to appear or change while the suite runs. Anything else a test leaves is a bug.
DECLARED_CACHES = (
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".hypothesis",
    "build",
    "dist",
    "*.egg-info",
    ".mypy_cache",
    ".ruff_cache",
    ".import_linter_cache",
)


def example_copy(name: str, dest: Path) -> Path:
    """A private copy of ``examples/<name>`` under ``dest`` (a test's tmp_path): commands that keep
    state beside a ledger (proofs, caches, locks) write there, never into the checkout."""
    out = dest / name
    if out.is_symlink():  # the link an earlier copy left for this example: now a copy of its own
        out.unlink()
    shutil.copytree(
        REPO_ROOT / "examples" / name, out, symlinks=True, ignore=shutil.ignore_patterns(".patchset", "__pycache__")
    )
    # an example may name a sibling's files (serving-cpu serves ../longctx-cpu/model): the siblings
    # stand beside the copy as links to the checkout, read, never written
    for sibling in (REPO_ROOT / "examples").iterdir():
        if sibling.is_dir() and not (dest / sibling.name).exists():
            (dest / sibling.name).symlink_to(sibling, target_is_directory=True)
    return out


def _declared(path: str) -> bool:
    return any(fnmatch.fnmatch(part, pat) for part in path.rstrip("/").split("/") for pat in DECLARED_CACHES)


def checkout_state(root: Path = REPO_ROOT) -> dict[str, tuple[str, int, int]] | None:
    """{path: (status, size, mtime_ns)} of every changed, untracked or ignored entry outside the
    declared caches; None when ``root`` is not a git checkout (an sdist, the mutation tier's copy)."""
    if not (root / ".git").exists():
        return None
    run = subprocess.run(["git", "status", "--porcelain", "--ignored", "-z"], cwd=root, capture_output=True)
    if run.returncode != 0:
        return None
    out: dict[str, tuple[str, int, int]] = {}
    entries = run.stdout.decode("utf-8", "surrogateescape").split("\0")
    it = iter(entries)
    for entry in it:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            next(it, None)  # the rename's source
        if _declared(path):
            continue
        try:
            st = os.lstat(root / path)
            out[path] = (code, st.st_size, st.st_mtime_ns)
        except OSError:
            out[path] = (code, -1, -1)
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = checkout_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    after = checkout_state() or {}
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if not changed:
        return
    lines = [f"  {after.get(p, ('gone',))[0]} {p}" for p in changed]
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (
        "error: the tests changed the checkout (tests never write into the repository; copy an example "
        "with tests.support.checkout.example_copy, work under tmp_path; or, for a cache, declare it in "
        "tests/support/checkout.py):\n" + "\n".join(lines)
    )
    if tr is not None:
        tr.ensure_newline()
        tr.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[dict | None]()
