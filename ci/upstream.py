"""Where the gate reads upstream from, and the few questions it asks of it.

Three kinds, one interface: the release history built from the package index (``releases``:
one commit per release, ``--latest`` is the newest release the index lists), a local git
repository (``repo``: the target's ``upstream`` when it is a path, or ``--upstream PATH``), and a
clone of a real upstream (``clone``: ``--upstream URL``, fetched for ``--latest`` and for a commit
it does not have yet). Each gives the gate a git repository, commit shas with a label, the
commits between two of them (oldest first, first parent only; for the release history, the
releases between two releases by version, however the history was built) and a plain file tree
of any commit (``git archive``).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from patchset.errors import EnvironmentFailure, InputError
from patchset.ledger.model import Target
from patchset.text import Word
from patchset.upstream import releases
from patchset.upstream.bases import local_repo, version_like
from patchset.upstream.clone import UpstreamClone
from patchset.upstream.git import popen_git
from patchset.upstream.history import ReleaseHistory
from patchset.upstream.indexes import index_urls, shown
from patchset.upstream.releases import is_spec_like
from patchset.upstream.repo import GitRepo

_PR = re.compile(r"\(#(\d+)\)")


@dataclass(frozen=True)
class Commit:
    """One upstream commit as the report names it."""

    sha: str
    subject: str
    release: str = ""  # the release tag on it, if any (v0.33.0 -> "0.33.0")

    @property
    def pr(self) -> int | None:
        """The pull request number GitHub's squash merges put at the end of the subject: ``(#12345)``."""
        found = _PR.findall(self.subject)
        return int(found[-1]) if found else None

    def to_json(self) -> dict:
        return {"sha": self.sha, "subject": self.subject, "pr": self.pr, "release": self.release}


def is_release(ref: str) -> bool:
    """``vllm==0.31.0``, ``0.31.0`` and ``v0.31.0`` name releases; a sha or a branch does not."""
    return bool(is_spec_like(ref) or version_like(ref))


class UpstreamKind(Word):
    """Where the history the gate judges comes from."""

    RELEASES = "releases"
    REPO = "repo"
    CLONE = "clone"


@dataclass
class Upstream:
    """The upstream the gate judges: where its history comes from (releases, a repo, a clone) and the repository."""

    kind: UpstreamKind
    repo: GitRepo
    location: str  # shown in reports; part of the gate state key
    branch: str = "main"
    project: str = ""

    @property
    def key(self) -> str:
        return f"releases:{self.project}" if self.kind == "releases" else self.location

    @property
    def git_dir(self) -> Path:
        return self.repo.git_dir

    def close(self) -> None:
        self.repo.close()

    # -- refs ----------------------------------------------------------------------------------
    def resolve(self, ref: str) -> tuple[str, str]:
        """``(sha, label)``: the label is what a rebase records as the new base.

        A release (``vllm==0.31.0``, ``0.31.0``, ``v0.31.0``) keeps its spelling as a spec; a
        tag keeps its name; a branch or a sha is recorded as the commit sha (a branch moves).
        """
        if not ref or not ref.strip():
            raise InputError("--onto needs a commit, tag, branch or PROJECT==VERSION")
        ref = ref.strip()
        if self.kind == "releases":
            version = ref.split("==", 1)[1].strip() if is_spec_like(ref) else version_like(ref)
            spec = f"{self.project}=={version}" if version else ref
            return self.repo.resolve(spec), spec
        if isinstance(self.repo, UpstreamClone):
            if not self.repo.cloned:
                self.repo.sync()
            try:
                return self._resolve_git(ref)
            except InputError:  # a commit newer than the clone: fetch once, then ask again
                self.repo.sync()
        return self._resolve_git(ref)

    def _resolve_git(self, ref: str) -> tuple[str, str]:
        if is_release(ref):
            version = ref.split("==", 1)[1].strip() if is_spec_like(ref) else version_like(ref)
            for tag in (f"v{version}", str(version)):
                sha = self.repo.rev(f"refs/tags/{tag}")
                if sha:
                    return sha, f"{self.project}=={version}" if self.project else tag
            raise InputError(
                f"{ref!r}: no tag v{version} in {self.location}", hint="fetch the tags, or name a commit or branch"
            )
        sha = self.repo.rev(ref)
        if sha is None:
            raise InputError(
                f"{ref!r} is not a commit, tag or branch of {self.location}",
                hint=f"check it with `git -C {self.git_dir} rev-parse {ref}`",
            )
        return sha, (ref if self.repo.rev(f"refs/tags/{ref}") else sha)

    def latest(self) -> tuple[str, str]:
        """Fetch upstream and name its newest state: the newest release, or the branch tip."""
        if self.kind == "releases":
            version = newest_release(self.project)
            spec = f"{self.project}=={version}"
            return self.repo.resolve(spec), spec
        if isinstance(self.repo, UpstreamClone):
            self.repo.sync()
        sha = self.repo.rev(f"refs/heads/{self.branch}") or self.repo.rev(f"refs/remotes/origin/{self.branch}")
        if sha:
            return sha, sha
        raise InputError(
            f"{self.location} has no branch {self.branch!r}",
            hint="set `branch` on the target to the branch upstream develops on",
        )

    # -- history -------------------------------------------------------------------------------
    def commits(self, old: str, new: str) -> list[Commit]:
        """Commits in ``old..new`` along the first parent, oldest first, with subjects and release tags.

        Between two releases of the release history: every imported release after ``old`` up to
        ``new``, by version. Its first-parent line holds them only when they were imported oldest
        first; a release imported after a newer one sits on a branch of its own."""
        between = self._releases_between(old, new)
        if between is not None:
            return between
        out = self.repo.git("log", "--first-parent", "--reverse", "-z", "--format=%H%x1f%s", f"{old}..{new}").stdout
        tags = self._release_tags()
        entries = [e.strip("\n") for e in out.decode("utf-8", "replace").split("\0")]
        return [Commit(sha, subject, tags.get(sha, "")) for sha, subject in (e.split("\x1f", 1) for e in entries if e)]

    def _releases_between(self, old: str, new: str) -> list[Commit] | None:
        if self.kind != "releases" or not isinstance(self.repo, ReleaseHistory):
            return None
        tags = self._release_tags()
        if old not in tags or new not in tags:
            return None
        lo, hi = Version(tags[old]), Version(tags[new])
        shas = [(v, sha) for v, sha in self.repo.releases() if lo < Version(v) <= hi]
        if not shas:
            return []
        out = self.repo.git("log", "--no-walk=unsorted", "-z", "--format=%H%x1f%s", *(s for _, s in shas)).stdout
        subjects = dict(e.strip("\n").split("\x1f", 1) for e in out.decode("utf-8", "replace").split("\0") if e.strip())
        return [Commit(sha, subjects.get(sha, ""), tags.get(sha, v)) for v, sha in shas]

    def describe(self, sha: str) -> Commit:
        subject = self.repo.git("log", "-1", "--format=%s", sha).stdout.decode("utf-8", "replace").strip()
        return Commit(sha, subject, self._release_tags().get(sha, ""))

    def _release_tags(self) -> dict[str, str]:
        out = self.repo.git(
            "for-each-ref", "--format=%(refname:strip=2) %(*objectname) %(objectname)", "refs/tags"
        ).stdout.decode()
        found: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if not parts:
                continue
            sha = parts[1] if len(parts) == 3 else parts[-1]
            version = version_like(parts[0])
            if version and sha not in found:
                found[sha] = version
        return found

    def is_ancestor(self, a: str, b: str) -> bool:
        """``a`` is ``b`` or comes before it: for two releases of the release history, by version."""
        if self.kind == "releases":
            tags = self._release_tags()
            if a in tags and b in tags:
                return Version(tags[a]) <= Version(tags[b])
        return self.repo.is_ancestor(a, b)

    def archive(self, sha: str, dest: Path, paths: list[str] | None = None) -> Path:
        """The files of ``sha`` (only ``paths`` that exist there, when given) written under ``dest``
        (``git archive | tar -x``)."""
        dest.mkdir(parents=True, exist_ok=True)
        args = ["--literal-pathspecs", "archive", "--format=tar", sha]
        if paths is not None:
            listed = self.repo.git(
                "--literal-pathspecs", "ls-tree", "-r", "-z", "--name-only", "--full-tree", sha, "--", *paths
            ).stdout
            present = [p.decode("utf-8", "surrogateescape") for p in listed.split(b"\0") if p]
            if not present:
                return dest
            args += ["--", *present]
        git = popen_git(
            args, cwd=self.git_dir, user_config=self.repo.user_config, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=git.stdout, capture_output=True)
        except FileNotFoundError as exc:
            git.kill()
            raise EnvironmentFailure("tar is not installed", hint="install tar") from exc
        assert git.stdout is not None and git.stderr is not None
        git.stdout.close()
        err = git.stderr.read().decode(errors="replace")
        if git.wait() != 0 or tar.returncode != 0:
            raise EnvironmentFailure(
                f"cannot write the tree of {sha[:12]} to {dest}: "
                f"{err.strip() or tar.stderr.decode(errors='replace').strip()}"
            )
        return dest


def newest_release(project: str) -> str:
    """The newest final release of ``project`` with an sdist the package index lists (asks the index)."""
    versions = releases.list_versions(project, kind="sdist", final=True)  # always asks the index
    if not versions:
        where = ", ".join(shown(url) for url in index_urls())
        raise InputError(f"the package index {where} lists no release of {project} with an sdist")
    return str(versions[-1])


def open_upstream(root: Path, target: Target, upstream: str | None = None) -> Upstream:
    """The upstream the gate judges ``target`` against (see the module docstring)."""
    if upstream:
        if "://" in upstream or upstream.startswith("git@"):  # a URL (file:// too) is cloned and fetched
            return Upstream(UpstreamKind.CLONE, UpstreamClone(upstream), upstream, target.branch, target.package)
        local = local_repo(upstream) or local_repo(root / upstream)
        if local is None:
            raise InputError(f"--upstream {upstream}: not a git repository nor a URL")
    else:
        local = (local_repo(target.upstream) or local_repo(root / target.upstream)) if target.upstream else None
    if local is not None:
        return Upstream(
            UpstreamKind.REPO, GitRepo(local.resolve()), str(local.resolve()), target.branch, target.package
        )
    if target.package:
        return Upstream(
            UpstreamKind.RELEASES,
            ReleaseHistory.for_project(target.package),
            f"releases of {target.package}",
            target.branch,
            target.package,
        )
    raise InputError(
        f"target {target.name!r} has no local upstream repository and no package on the index",
        hint="pass --upstream PATH|URL, or set `package` on the target",
    )
