"""Where a rebase finds the old base and the new base of a target, as two commits in one git repo.

A base can be a commit, tag or branch of a local upstream repository, a release (``vllm==0.31.0``
or a bare version, imported into the cached release history), or a plain directory of files (a
throwaway history is made from the old and the new directory). Whatever the kind, the rebaser
gets a ``GitRepo`` and two full commit shas, and a ``location`` it can store to reopen the same
bases after an interrupted (``--interactive``) rebase.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from patchset.errors import InputError
from patchset.ledger.model import Target
from patchset.progress import Progress
from patchset.text import Word, json_fields
from patchset.upstream.dirhistory import import_directories
from patchset.upstream.history import ReleaseHistory
from patchset.upstream.nightly import parse_metadata
from patchset.upstream.releases import is_spec_like, parse_spec
from patchset.upstream.repo import GitRepo


class BaseKind(Word):
    """Where the old and new base come from: a local repository, release archives or two directories."""

    REPO = "repo"
    RELEASES = "releases"
    DIRS = "dirs"


@dataclass
class Bases(AbstractContextManager["Bases"]):
    """The old and new base of one target as commits of ``repo``."""

    repo: GitRepo
    kind: BaseKind
    old: str
    new: str
    old_ref: str  # the base as the ledger recorded it
    onto: str  # the new base as the user named it
    new_label: str  # what the ledger's ``base`` becomes
    new_version: str = ""  # what ``base_version`` becomes ("" leaves it)
    location: dict[str, Any] = field(default_factory=dict)
    _tmp: str | None = None

    def record(self) -> dict[str, Any]:
        """What a stopped rebase keeps to ``reopen`` these bases."""
        return json_fields(self, "onto old_ref old new new_label new_version location")

    def close(self) -> None:
        self.repo.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __exit__(self, *exc: object) -> None:
        self.close()


def version_like(ref: str) -> str | None:
    """A ref that names a release by its version: ``"0.31.0"`` or ``"v0.31.0"`` -> ``"0.31.0"``
    (normalized); anything else (a sha, a branch, a spec) -> None."""
    text = ref[1:] if ref.startswith("v") else ref
    if not re.match(r"^\d+(\.\d+)+", text):
        return None
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def local_repo(path: str | Path) -> Path | None:
    """``path`` (or a ``file://`` URL) when it is a local git repository, working tree or bare;
    else None."""
    text = str(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    p = Path(text).expanduser()
    if p.is_dir() and ((p / ".git").exists() or (p / "HEAD").is_file()):
        return p
    return None


def _dir_arg(root: Path, ref: str) -> Path | None:
    dirs = (cand for cand in (Path(ref).expanduser(), root / ref) if cand.is_dir() and local_repo(cand) is None)
    return next((cand.resolve() for cand in dirs), None)


def _resolve_in_repo(repo: GitRepo, ref: str, what: str) -> tuple[str, str]:
    """(sha, label to record) for a ref of a plain repository; release specs map to tags."""
    tries = [ref]
    if is_spec_like(ref):
        version = parse_spec(ref).version
        tries = [f"refs/tags/v{version}", f"refs/tags/{version}"]
    elif version_like(ref):
        tries += [f"refs/tags/v{version_like(ref)}"]
    for t in tries:
        sha = repo.rev(t)
        if sha:
            full = repo.git("rev-parse", "--symbolic-full-name", t, check=False).stdout.decode().strip()
            moves = full.startswith(("refs/heads/", "refs/remotes/")) or ref == "HEAD"
            # a branch moves: record the commit it points at now (and a sha as the full sha)
            return sha, sha if moves or re.fullmatch(r"[0-9a-f]{4,40}", ref) else ref
    raise InputError(
        f"{what} {ref!r} is not a commit, tag or branch of {repo.git_dir}",
        hint="check the name with `git -C <repo> rev-parse <ref>`",
    )


def open_bases(
    root: Path,
    target: Target,
    onto: str,
    *,
    repo: Path | str | None = None,
    old_base: str | None = None,
    paths: list[str] | None = None,
    download_progress: Progress | None = None,
) -> Bases:
    """Resolve the target's recorded base (or ``old_base``) and ``onto`` to commits.

    ``paths`` (the files the series touches) lets a plain-directory history import only what a
    rebase reads. ``download_progress`` hears the bytes of a release that must be downloaded."""
    old_ref = old_base if old_base is not None else target.base
    if not onto or not onto.strip():
        raise InputError("--onto needs a commit, tag, branch, PROJECT==VERSION or a directory")
    if not old_ref:
        raise InputError(
            f"target {target.name!r} records no base to rebase from",
            hint=f"record the base the series applies to: patchset target set {target.name} --base REF "
            "(a release PROJECT==VERSION, a commit, a directory)",
        )
    new_dir = _dir_arg(root, onto) if repo is None else None
    if new_dir is not None:
        old_dir = _dir_arg(root, old_ref)
        if old_dir is None:
            raise InputError(
                f"--onto {onto} is a directory, but the old base {old_ref!r} of target "
                f"{target.name!r} is not a directory",
                hint="a plain-directory rebase needs the old base files as a directory too",
            )
        return _dirs(old_dir, new_dir, old_ref, onto, paths)
    local = local_repo(repo) if repo is not None else local_repo(target.upstream)
    if repo is not None and local is None:
        raise InputError(f"{repo} is not a git repository")
    if local is not None:
        g = GitRepo(local)
        old, _ = _resolve_in_repo(g, old_ref, "the old base")
        new, label = _resolve_in_repo(g, onto, "--onto")
        version = parse_spec(onto).version if is_spec_like(onto) else (version_like(onto) or "")
        return Bases(
            g,
            BaseKind.REPO,
            old,
            new,
            old_ref,
            onto,
            label,
            version,
            {"kind": BaseKind.REPO, "path": str(local.resolve())},
        )
    return _releases(target, old_ref, onto, download_progress)


def _as_spec(project: str, ref: str) -> str | None:
    if is_spec_like(ref):
        return ref
    v = version_like(ref)
    return f"{project}=={v}" if v else None


def _releases(target: Target, old_ref: str, onto: str, progress: Progress | None = None) -> Bases:
    project = parse_spec(onto).project if is_spec_like(onto) else target.package
    if not project:
        raise InputError(
            f"cannot find {onto!r}: target {target.name!r} has no local upstream repository "
            "and no package on the index",
            hint="pass the path of a local clone (--repo), or set `package` on the target",
        )
    if target.package and canonicalize_name(target.package) != canonicalize_name(project):
        raise InputError(
            f"{onto!r} is a release of {project!r}, but target {target.name!r} is the package {target.package!r}"
        )
    new_spec = _as_spec(project, onto)
    old_spec = _as_spec(project, old_ref)
    if new_spec is None or old_spec is None:
        bad = onto if new_spec is None else old_ref
        raise InputError(
            f"{bad!r} is not a release of {project} and target {target.name!r} has no local "
            "upstream repository to look it up in",
            hint=f"pass a local clone holding that commit (--repo PATH), or rebase between releases ({project}==X.Y.Z)",
        )
    history = ReleaseHistory.for_project(project)
    old = history.resolve(old_spec, progress=progress)
    new = history.resolve(new_spec, progress=progress)
    spec = parse_spec(new_spec)
    return Bases(
        history,
        BaseKind.RELEASES,
        old,
        new,
        old_ref,
        onto,
        f"{spec.project}=={spec.version}",
        spec.version,
        {"kind": "releases", "project": project, "old": old_spec, "new": new_spec},
    )


def dir_identity(path: Path) -> tuple[str, str]:
    """(base label, version) to record for a base directory: its absolute path, never the path as
    typed (which means nothing from another working directory), so the next rebase finds it again;
    and the version an unpacked source distribution declares (``PKG-INFO``), recorded as
    ``base_version``."""
    info = path / "PKG-INFO"
    version = (parse_metadata(info.read_bytes()) or "") if info.is_file() else ""
    return str(path.resolve()), version


def _dirs(old_dir: Path, new_dir: Path, old_ref: str, onto: str, paths: list[str] | None) -> Bases:
    tmp = tempfile.mkdtemp(prefix="patchset-dirs-")
    try:
        old, new = import_directories(Path(tmp) / "dirs.git", [("old", old_dir), ("new", new_dir)], paths)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    label, version = dir_identity(new_dir)
    return Bases(
        GitRepo(Path(tmp) / "dirs.git"),
        BaseKind.DIRS,
        old,
        new,
        old_ref,
        onto,
        label,
        version,
        {"kind": "dirs", "old": str(old_dir), "new": str(new_dir), "old_ref": old_ref},
        _tmp=tmp,
    )


def reopen(recorded: Mapping[str, Any], paths: list[str] | None = None) -> Bases:
    """The same bases again (after ``--interactive`` stopped; ``recorded`` holds ``Bases.record``),
    checked to be the same commits."""
    location, old, new = recorded["location"], recorded["old"], recorded["new"]
    old_ref, onto, new_label, new_version = (recorded[k] for k in ("old_ref", "onto", "new_label", "new_version"))
    kind = location.get("kind")
    if kind == "repo":
        b = Bases(
            GitRepo(Path(location["path"])), BaseKind.REPO, old, new, old_ref, onto, new_label, new_version, location
        )
    elif kind == "releases":
        h = ReleaseHistory.for_project(location["project"])
        b = Bases(
            h,
            BaseKind.RELEASES,
            h.resolve(location["old"]),
            h.resolve(location["new"]),
            old_ref,
            onto,
            new_label,
            new_version,
            location,
        )
    elif kind == "dirs":
        b = _dirs(Path(location["old"]), Path(location["new"]), location["old_ref"], onto, paths)
        b.new_label, b.new_version = new_label, new_version
    else:
        raise InputError(f"unknown base kind {kind!r} in the rebase state")
    if (b.old, b.new) != (old, new):
        b.close()
        raise InputError(
            f"the bases of the rebase in progress changed since it stopped (old {old[:12]} / new {new[:12]})",
            hint="run `patchset rebase --abort` and start again",
        )
    return b
