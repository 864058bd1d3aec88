"""Real git repositories and file-tree digests for tests: one git runner, isolated from user config.

Every test that needs git goes through ``git``/``git_bytes`` here: a fixed identity and date (the same
test builds the same commits) and no system or global configuration (a user's config cannot change
what a test sees).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# A fixed identity and date: the same test builds the same commits.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git_bytes(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    """Run git with a fixed identity and no system/global config (so a user's config cannot change
    what a test sees); return stdout as bytes."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env, input=input).stdout


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return git_bytes(cwd, *args, input=input).decode()


def commit_files(repo: Path, message: str, files: Mapping[str, str | bytes] | None = None) -> str:
    """Write ``files`` (relative path -> text or bytes) into the work tree of ``repo``, commit every
    change of the tree, and return the new commit's sha."""
    for rel, data in (files or {}).items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def new_repo(root: Path, files: Mapping[str, str | bytes], message: str = "base") -> str:
    """A new git repository at ``root`` (branch ``main``) whose first commit holds ``files``;
    returns that commit's sha."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    return commit_files(root, message, files)


def release_history(project: str, versions: list[str]):
    """The release history of ``project`` with ``versions`` imported (downloaded once into the
    cache, ``$PATCHSET_CACHE``); skips the test, saying why, when the package index is unreachable."""
    from patchset.upstream import releases
    from patchset.upstream.history import ReleaseHistory, build_history

    reason = releases.probe_index()
    if reason:
        pytest.skip(f"network test: {reason}")
    build_history(project, versions)
    return ReleaseHistory.for_project(project)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root (relative paths), to prove a command left files untouched."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".git" not in p.relative_to(root).parts:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
