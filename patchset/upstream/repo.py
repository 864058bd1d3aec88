"""Read-side git queries over a repository: resolve refs, read blobs, list files, logs.

Shared by the release histories built from the package index (``history``) and by real upstream
clones (``clone``): the rebaser and the gate ask the same questions of both. Reads go through
one persistent ``git cat-file --batch`` per repository. ``RenameCandidate``, ``ambiguous`` and
``similarity`` are the rename ranking the rebaser's move detection uses (``rebase.classify``).
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream.git import ls_tree_blobs, popen_git, run_git

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")  # a commit named by its whole id


@dataclass(frozen=True)
class RenameCandidate:
    """Where an old path's content may live in the new commit.

    ``similarity`` is a percentage of content kept: git's own rename score when ``how`` is
    ``"git"`` (git's rename detection chose it), else the same measure computed here (bytes of
    shared lines / larger file) for ``"same-name"`` (an added file with the same file name).
    """

    path: str
    similarity: int
    how: str


@dataclass(frozen=True)
class LogEntry:
    """One commit of a history: sha, committer time and subject."""

    sha: str
    timestamp: int  # committer date, seconds since the epoch
    subject: str


def ambiguous(candidates: list[RenameCandidate], margin: int = 10) -> bool:
    """True when the best two candidates are within ``margin`` points: a human must choose."""
    return len(candidates) >= 2 and candidates[0].similarity - candidates[1].similarity < margin


def similarity(old: bytes, new: bytes) -> int:
    """Percent of content kept, in the spirit of git's rename score: bytes of lines the two
    share (as multisets) over the size of the larger one."""
    if old == new:
        return 100
    if not old or not new:
        return 0
    shared = Counter(old.splitlines(keepends=True)) & Counter(new.splitlines(keepends=True))
    common = sum(len(line) * n for line, n in shared.items())
    return common * 100 // max(len(old), len(new))


class GitRepo(AbstractContextManager["GitRepo"]):
    """Read-side helpers over a (bare) git repository, shared by release histories and clones."""

    #: Whether git here may read the user's configuration (a clone that reaches the network does).
    user_config = False

    def __init__(self, git_dir: Path | str) -> None:
        self.git_dir = Path(git_dir)
        self._batch: subprocess.Popen[bytes] | None = None
        self._batch_lock = threading.Lock()

    @functools.cached_property
    def repository(self) -> Path:
        """The git directory itself, for ``git --git-dir``: a bare clone is its own, an ordinary
        clone's is its ``.git`` (``git_dir`` is where git runs, and may be the work tree)."""
        return Path(self.git("rev-parse", "--absolute-git-dir").stdout.decode().strip())

    # -- plumbing ------------------------------------------------------------------------------
    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``git <args>`` in this repository; EnvironmentFailure when it fails and ``check``."""
        return run_git(list(args), cwd=self.git_dir, input=input, check=check, user_config=self.user_config)

    def close(self) -> None:
        """Stop the persistent ``git cat-file`` reader, if one runs."""
        with self._batch_lock:
            if self._batch is not None:
                try:
                    if self._batch.stdin:
                        self._batch.stdin.close()
                    self._batch.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    self._batch.kill()
                self._batch = None

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def rev(self, ref: str, kind: str = "commit") -> str | None:
        """The sha of the commit ``ref`` names (``kind="tree"``: of its tree), or None."""
        proc = self.git("rev-parse", "-q", "--verify", "--end-of-options", f"{ref}^{{{kind}}}", check=False)
        out = proc.stdout.decode().strip()
        return out if proc.returncode == 0 and FULL_SHA.match(out) else None

    def resolve(self, ref: str) -> str:
        """A full commit sha for a sha (full or abbreviated), tag, or branch."""
        if isinstance(ref, str) and FULL_SHA.match(ref) and self.rev(ref):
            return ref
        sha = self.rev(ref) if ref else None
        if sha is None:
            raise InputError(
                f"unknown revision {ref!r} in {self.git_dir}",
                hint="use a commit sha, a tag (v0.30.0), a branch, or PROJECT==VERSION",
            )
        return sha

    def branch_tip(self, branch: str) -> str | None:
        return self.rev(f"refs/heads/{branch}")

    # -- content -------------------------------------------------------------------------------
    def read_blob(self, commit: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``commit``; None when the path is absent or not a file."""
        sha = self.resolve(commit)
        if "\n" in path:
            raise InputError(f"path with a newline cannot be read: {path!r}")
        with self._batch_lock:
            if self._batch is None or self._batch.poll() is not None:
                self._batch = popen_git(
                    ["cat-file", "--batch"],
                    cwd=self.git_dir,
                    user_config=self.user_config,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            proc = self._batch
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{sha}:{path.strip('/')}\n".encode("utf-8", "surrogateescape"))
            proc.stdin.flush()
            header = proc.stdout.readline()
            if not header:
                self._batch = None
                raise EnvironmentFailure(f"git cat-file stopped while reading {path} at {sha}")
            parts = header.split()
            if len(parts) != 3:  # "<name> missing" / "ambiguous"
                return None
            size = int(parts[2])
            data = proc.stdout.read(size)
            proc.stdout.read(1)  # trailing LF
            return data if parts[1] == b"blob" else None

    def tree(self, commit: str) -> dict[str, tuple[str, str]]:
        """``{path: (mode, blob sha)}`` for every file (and symlink) at ``commit``."""
        return ls_tree_blobs(self.git("ls-tree", "-r", "-z", "--full-tree", self.resolve(commit)).stdout)

    def list_files(self, commit: str, prefix: str | None = None) -> list[str]:
        """Every file path at ``commit`` (sorted as git sorts), optionally under ``prefix``."""
        sha = self.resolve(commit)
        args = ["ls-tree", "-r", "-z", "--name-only", "--full-tree", sha]
        if prefix:
            args += ["--", prefix.strip("/")]
        return [p.decode("utf-8", "surrogateescape") for p in self.git(*args).stdout.split(b"\0") if p]

    # -- history -------------------------------------------------------------------------------
    def is_ancestor(self, a: str, b: str) -> bool:
        """True when commit ``a`` is ``b`` or one of its ancestors."""
        sa, sb = self.resolve(a), self.resolve(b)
        proc = self.git("merge-base", "--is-ancestor", sa, sb, check=False)
        if proc.returncode in (0, 1):
            return proc.returncode == 0
        raise EnvironmentFailure(f"git merge-base failed: {proc.stderr.decode(errors='replace').strip()}")

    def log_range(self, old: str, new: str, path: str | None = None, *, follow: bool = False) -> list[LogEntry]:
        """Commits in ``old..new`` (newest first), only those touching ``path`` when given."""
        so, sn = self.resolve(old), self.resolve(new)
        args = ["log", "-z", "--format=%H%x1f%ct%x1f%s", f"{so}..{sn}"]
        if follow:
            if not path:
                raise InputError("log_range(follow=True) needs a path")
            args.append("--follow")
        if path:
            args += ["--", path]
        out = self.git(*args).stdout.decode("utf-8", "replace")
        records = (entry.strip("\n").split("\x1f", 2) for entry in out.split("\0") if entry.strip("\n"))
        return [LogEntry(sha, int(ts), subject) for sha, ts, subject in records]
