"""Read-side git queries over a repository: resolve refs, read blobs, list files, logs, renames.

Shared by the release histories built from the package index (``history``) and by real upstream
clones (``clone``): the rebaser and the gate ask the same questions of both. Reads go through
one persistent ``git cat-file --batch`` per repository; rename detection ranks git's own choice,
the same path, and a same-named added file by how much content each kept.
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream.git import ls_tree_blobs, popen_git, run_git

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")  # a commit named by its whole id


@dataclass(frozen=True)
class RenameCandidate:
    """Where an old path's content may live in the new commit.

    ``similarity`` is a percentage of content kept: git's own rename score when ``how`` is
    ``"git"``, else the same measure computed here (bytes of shared lines / larger file).
    ``how``: ``"same-path"`` (the path still exists), ``"git"`` (git's rename detection chose
    it), ``"same-name"`` (an added file with the same file name, scored here).
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


class GitRepo:
    """Read-side helpers over a (bare) git repository, shared by release histories and clones."""

    #: Whether git here may read the user's configuration (a clone that reaches the network does).
    user_config = False

    def __init__(self, git_dir: Path | str) -> None:
        self.git_dir = Path(git_dir)
        self._batch: subprocess.Popen[bytes] | None = None
        self._batch_lock = threading.Lock()
        self._diff_cache: dict[tuple[str, str, int], _NameStatus] = {}

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

    def __enter__(self) -> GitRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def rev(self, ref: str) -> str | None:
        """The commit sha ``ref`` names, or None."""
        proc = self.git("rev-parse", "-q", "--verify", "--end-of-options", f"{ref}^{{commit}}", check=False)
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
        sha = self.resolve(commit)
        return ls_tree_blobs(self.git("ls-tree", "-r", "-z", "--full-tree", sha).stdout)

    def list_files(self, commit: str, prefix: str | None = None) -> list[str]:
        """Every file path at ``commit`` (sorted as git sorts), optionally under ``prefix``."""
        sha = self.resolve(commit)
        args = ["ls-tree", "-r", "-z", "--name-only", "--full-tree", sha]
        if prefix:
            args += ["--", prefix.strip("/")]
        out = self.git(*args).stdout
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

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
        entries = []
        for entry in out.split("\0"):
            entry = entry.strip("\n")
            if entry:
                sha, ts, subject = entry.split("\x1f", 2)
                entries.append(LogEntry(sha, int(ts), subject))
        return entries

    def renames(
        self,
        old: str,
        new: str,
        paths: Iterable[str] | None = None,
        *,
        threshold: int = 50,
        max_candidates: int = 5,
    ) -> dict[str, list[RenameCandidate]]:
        """Where each old path went between ``old`` and ``new``.

        Per path (default: every path deleted or renamed) the candidates, best first: the path itself
        (``same-path``), git's rename pick (``git diff -M<threshold>% -l0``), added files of the same name
        scoring at least ``threshold``. Empty: the content is gone. ``ambiguous(candidates)`` says whether
        a human must choose."""
        so, sn = self.resolve(old), self.resolve(new)
        ns = self._name_status(so, sn, threshold)
        wanted = sorted(ns.gone) if paths is None else [p.strip("/") for p in paths]
        result: dict[str, list[RenameCandidate]] = {}
        new_by_name: dict[str, list[str]] | None = None
        for path in wanted:
            if path not in ns.gone:
                old_blob = self.read_blob(so, path)
                new_blob = self.read_blob(sn, path)
                if new_blob is None:
                    result[path] = []
                elif old_blob is None:
                    result[path] = [RenameCandidate(path, 100, "same-path")]
                else:
                    result[path] = [RenameCandidate(path, similarity(old_blob, new_blob), "same-path")]
                continue
            cands: dict[str, RenameCandidate] = {}
            if path in ns.renamed:
                dst, score = ns.renamed[path]
                cands[dst] = RenameCandidate(dst, score, "git")
            if new_by_name is None:
                new_by_name = {}
                for added in ns.added:
                    new_by_name.setdefault(added.rsplit("/", 1)[-1], []).append(added)
            base = path.rsplit("/", 1)[-1]
            same_name = [p for p in new_by_name.get(base, []) if p not in cands]
            if same_name:
                old_blob = self.read_blob(so, path) or b""
                for cand in same_name:
                    score = similarity(old_blob, self.read_blob(sn, cand) or b"")
                    if score >= threshold:
                        cands[cand] = RenameCandidate(cand, score, "same-name")
            ranked = sorted(cands.values(), key=lambda c: (-c.similarity, c.how != "git", c.path))
            result[path] = ranked[:max_candidates]
        return result

    def _name_status(self, so: str, sn: str, threshold: int) -> _NameStatus:
        key = (so, sn, threshold)
        if key in self._diff_cache:
            return self._diff_cache[key]
        out = self.git("diff-tree", "-r", "-z", "--name-status", f"-M{threshold}%", "-l0", so, sn).stdout.decode(
            "utf-8", "surrogateescape"
        )
        fields = out.split("\0")
        ns = _NameStatus()
        i = 0
        while i < len(fields) and fields[i]:
            status = fields[i]
            if status[0] in "RC":
                src, dst = fields[i + 1], fields[i + 2]
                if status[0] == "R":
                    ns.renamed[src] = (dst, int(status[1:] or 100))
                    ns.gone.add(src)
                ns.added.add(dst)
                i += 3
                continue
            path = fields[i + 1]
            if status == "D":
                ns.gone.add(path)
            elif status == "A":
                ns.added.add(path)
            i += 2
        self._diff_cache[key] = ns
        return ns


@dataclass
class _NameStatus:
    """``git diff-tree --name-status -M`` between two commits, parsed."""

    renamed: dict[str, tuple[str, int]] = field(default_factory=dict)  # old -> (new, score)
    gone: set[str] = field(default_factory=set)  # deleted or renamed away
    added: set[str] = field(default_factory=set)  # added or renamed to


# -- release histories ---------------------------------------------------------------------
