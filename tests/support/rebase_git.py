"""A small real upstream for the rebase's units: an old base, commits up to a new base, patches made
by ``git diff`` (never by the code under test) and the oracles git itself gives (``git merge-file``,
``git apply``). The units read it through the product's own ``GitRepo``/``BlobStore``/``Tree``."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.replay import BlobStore, Merger, Move, PatchReplay, Tree, replay_patch
from patchset.upstream.repo import GitRepo
from tests.support.repo import git, git_bytes, new_repo

Files = Mapping[str, str | bytes | None]  # path -> content (None: delete it)


def numbered(prefix: str, n: int = 30) -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


@dataclass
class Upstream:
    """A git repository with an ``old`` base; ``advance`` commits on towards the ``new`` base."""

    root: Path
    old: str
    new: str

    @classmethod
    def make(cls, root: Path, files: Files) -> Upstream:
        sha = new_repo(root, {k: v for k, v in files.items() if v is not None})
        git(root, "tag", "old")
        return cls(root, sha, sha)

    @property
    def repo(self) -> GitRepo:
        return GitRepo(self.root)

    def _write(self, files: Files, message: str) -> str:
        for rel, data in files.items():
            if data is None:
                (self.root / rel).unlink()
        for rel, data in files.items():
            if data is not None:
                (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
                (self.root / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.root, "rev-parse", "HEAD").strip()

    def advance(self, message: str, files: Files) -> str:
        """One upstream commit on top of ``new``; ``new`` moves to it."""
        git(self.root, "checkout", "-q", "--detach", self.new)
        self.new = self._write(files, message)
        return self.new

    def rename(self, message: str, src: str, dst: str, edits: Files | None = None) -> str:
        git(self.root, "checkout", "-q", "--detach", self.new)
        (self.root / dst).parent.mkdir(parents=True, exist_ok=True)
        git(self.root, "mv", src, dst)
        self.new = self._write(dict(edits or {}), message)
        return self.new

    def diff(
        self, files: Files, *, on: str | None = None, renames: bool = False, executable: tuple[str, ...] = ()
    ) -> bytes:
        """``git diff`` of ``files`` written on ``on`` (default: the old base), from a side commit;
        ``executable`` paths get mode 100755; binary changes are written in full (``--binary``)."""
        start = on or self.old
        git(self.root, "checkout", "-q", "--detach", start)
        for rel in executable:
            (self.root / rel).chmod(0o755)
        side = self._write(files, "side")
        git(self.root, "checkout", "-q", "--detach", self.new)
        return git_bytes(self.root, "diff", "--binary", "-M" if renames else "--no-renames", start, side)

    def read(self, ref: str, path: str) -> bytes | None:
        proc = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=self.root, capture_output=True)
        return proc.stdout if proc.returncode == 0 else None

    def trees(self) -> tuple[Tree, Tree]:
        repo = self.repo
        return Tree(BlobStore(repo, self.old)), Tree(BlobStore(repo, self.new))

    def replay(
        self, diff: bytes, moves: Mapping[str, str] | None = None, trees: tuple[Tree, Tree] | None = None
    ) -> PatchReplay:
        """The patch replayed from the old base onto the new one (``moves``: old path -> new path)."""
        old, new = trees or self.trees()
        merger = Merger()
        try:
            return replay_patch(
                parse_patch(diff),
                old,
                new,
                lambda p: Move((moves or {}).get(p)),
                merger,
                ("upstream new", "patch p"),
            )
        finally:
            merger.close()


def merge_file(tmp: Path, base: bytes, ours: bytes, theirs: bytes) -> tuple[bytes, int]:
    """The oracle: ``git merge-file -p`` itself, with the labels the replay writes."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
    proc = subprocess.run(
        ["git", "merge-file", "-p", "-L", "upstream new", "-L", "old base", "-L", "patch p", "ours", "base", "theirs"],
        cwd=tmp,
        capture_output=True,
    )
    return proc.stdout, proc.returncode


def git_apply(tmp: Path, content: bytes, path: str, diff: bytes) -> bytes | None:
    """The oracle for a direct apply: ``git apply`` (whole context, offsets allowed) on one file."""
    work = tmp / "apply"
    work.mkdir(parents=True, exist_ok=True)
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_bytes(content)
    proc = subprocess.run(["git", "apply", "-"], cwd=work, input=diff, capture_output=True)
    return (work / path).read_bytes() if proc.returncode == 0 else None
