"""The stock files of one target's base: what an overlay file, an edit script or a diff is read against.

``import --overlay``, ``--script`` and the diff-root inference need the base one file at a time,
as a list of paths or as a private tree. A base is a release (from the cached release history), a
commit of an upstream clone, or a plain directory (``--base-tree``; in the installed layout it
answers through the target's path map). Every path read from a directory goes through
``patchset.confine``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import AbstractContextManager
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from patchset.confine import confine, regular_file
from patchset.errors import InputError, UnsafePathError
from patchset.ledger.model import Target
from patchset.text import Word
from patchset.upstream.bases import dir_identity, local_repo, version_like
from patchset.upstream.releases import is_spec_like, parse_spec
from patchset.upstream.repo import GitRepo

MAX_STOCK_FILES = 200_000  # a base directory with more files than this is refused (not a package)


class StockKind(Word):
    RELEASES = "releases"  # a release from the cached release history
    REPO = "repo"  # a commit of a local upstream clone
    DIR = "dir"  # a plain directory


@dataclass(repr=False, eq=False)  # identity, as before: a base is one open reader
class StockBase(AbstractContextManager["StockBase"]):
    """One base, readable file by file. ``label`` is what the ledger records as the target's base;
    a release or a commit is read from ``repo`` at ``commit``, a plain directory from ``directory``."""

    target: Target
    kind: StockKind
    label: str
    version: str = ""
    _: KW_ONLY
    repo: GitRepo | None = None
    commit: str = ""
    directory: Path | None = None
    spec: str = ""
    _files: list[str] | None = field(default=None, init=False)

    def __repr__(self) -> str:
        return f"StockBase({self.kind} {self.label})"

    # -- reading --------------------------------------------------------------------------------
    def _dir_path(self, path: str) -> Path | None:
        """The file of a directory base that holds ``path`` (source layout, else installed)."""
        assert self.directory is not None
        for rel in dict.fromkeys((path, self.target.path_map.to_installed(path))):
            try:
                f = confine(self.directory, rel, what=f"file {rel!r} of the base {self.directory}")
            except UnsafePathError:
                continue
            if regular_file(f):
                return f
        return None

    def read(self, path: str) -> bytes | None:
        """The stock bytes of ``path`` (None: the base has no such file)."""
        if self.directory is not None:
            f = self._dir_path(path)
            return f.read_bytes() if f is not None else None
        assert self.repo is not None
        return self.repo.read_blob(self.commit, path)

    def mode(self, path: str) -> str:
        if self.directory is not None:
            f = self._dir_path(path)
            return "100755" if f is not None and f.stat().st_mode & 0o111 else "100644"
        assert self.repo is not None
        entry = self.repo.git("ls-tree", "-z", self.commit, "--", f":(literal){path}", check=False).stdout
        return entry.split(b" ", 1)[0].decode() if entry[:1] == b"1" else "100644"

    def files(self) -> list[str]:
        """Every file path of the base, in the source layout (installed paths mapped back)."""
        if self._files is None:
            if self.directory is not None:
                found: list[str] = []
                for dirpath, dirnames, filenames in os.walk(self.directory):
                    dirnames[:] = [d for d in dirnames if d != ".git" and not (Path(dirpath) / d).is_symlink()]
                    rel = Path(dirpath).relative_to(self.directory).as_posix()
                    for n in filenames:
                        found.append(self.target.lock_key(n if rel == "." else f"{rel}/{n}"))
                    if len(found) > MAX_STOCK_FILES:
                        raise InputError(
                            f"{self.directory} holds more than {MAX_STOCK_FILES} files: not one package's tree",
                            hint="pass the package's own directory (an unpacked release, a site-packages copy)",
                        )
                self._files = sorted(found)
            else:
                assert self.repo is not None
                self._files = self.repo.list_files(self.commit)
        return self._files

    # -- a whole private copy -----------------------------------------------------------------------
    def materialise(self, dest: Path, layout: str = "source") -> None:
        """Write the whole base into the new directory ``dest`` (in ``layout``: the target's path
        map moves source prefixes to their installed places). Symlinks that leave the tree are not
        copied."""
        if self.directory is not None:
            shutil.copytree(self.directory, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            _drop_escaping_links(dest)
            return
        assert self.repo is not None
        materialise_commit(self.repo, self.commit, dest)
        if layout == "installed":  # each path-map source prefix moves to its installed place
            for src, dst in sorted(self.target.path_map.prefixes, key=lambda p: -len(p[0])):
                s, d = dest / src.strip("/"), dest / dst.strip("/")
                if s.exists() and not d.exists():
                    d.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(s, d)

    def close(self) -> None:
        if self.repo is not None and self.kind == "repo":
            self.repo.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def materialise_commit(repo: GitRepo, commit: str, dest: Path) -> None:
    """Every file of ``commit`` (of a bare or an ordinary clone) written to the new directory ``dest`` by git's own checkout (a
    temporary index; git refuses paths with ``..``, into ``.git`` or through a symlink), then
    symlinks that leave ``dest`` removed."""
    import subprocess

    from patchset.errors import EnvironmentFailure
    from patchset.upstream.git import git_env

    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="patchset-stock-") as tmp:
        env = {**git_env(), "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        base = ["git", "--git-dir", str(repo.repository), "--work-tree", str(dest)]
        for args in (["read-tree", commit], ["checkout-index", "--all", "--quiet"]):
            try:
                proc = subprocess.run([*base, *args], capture_output=True, env=env)
            except FileNotFoundError as exc:
                raise EnvironmentFailure("git is not installed", hint="install git (apt-get install git)") from exc
            if proc.returncode != 0:
                raise EnvironmentFailure(
                    f"git {args[0]} of {commit[:12]} into {dest} failed: {proc.stderr.decode(errors='replace').strip()}"
                )
    _drop_escaping_links(dest)


def _drop_escaping_links(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = Path(dirpath) / name
            if full.is_symlink() and not os.path.realpath(full).startswith(os.path.realpath(root) + os.sep):
                full.unlink()


def open_stock(
    ledger_root: Path,
    target: Target,
    ref: str | None = None,
    tree: Path | None = None,
) -> StockBase:
    """The base ``ref`` (a release spec, a version of the target's package, a commit of its local
    upstream, a directory) or ``tree`` (a directory); the target's recorded base when neither."""
    if tree is not None:
        return _dir_base(target, tree)
    ref = ref if ref is not None else target.base
    if not ref:
        raise InputError(
            f"target {target.name!r} records no base, and none was given",
            hint="pass --base PROJECT==VERSION (a release) or --base-tree DIR (an unpacked tree)",
        )
    for cand in (Path(ref).expanduser(), ledger_root / ref):
        if not is_spec_like(ref) and cand.is_dir() and local_repo(cand) is None:
            return _dir_base(target, cand)
    local = local_repo(target.upstream) if target.upstream else None
    if local is not None and not is_spec_like(ref):
        g = GitRepo(local)
        sha = g.rev(ref) or (g.rev(f"refs/tags/v{version_like(ref)}") if version_like(ref) else None)
        if sha is None:
            g.close()
            raise InputError(f"base {ref!r} is not a commit, tag or branch of {local}")
        return StockBase(target, StockKind.REPO, ref, version_like(ref) or "", repo=g, commit=sha)
    if is_spec_like(ref):
        spec = parse_spec(ref)
    elif version_like(ref) and target.package:
        spec = parse_spec(f"{target.package}=={version_like(ref)}")
    else:
        raise InputError(
            f"base {ref!r} of target {target.name!r} is not a release, a directory or a commit of a local clone",
            hint="pass --base PROJECT==VERSION (e.g. vllm==0.30.0) or --base-tree DIR",
        )
    if target.package and spec.name != parse_spec(f"{target.package}==0").name:
        raise InputError(f"{ref!r} is a release of {spec.project!r}, but target {target.name!r} is {target.package!r}")
    from patchset.upstream.history import ReleaseHistory

    history = ReleaseHistory.for_project(spec.project)
    sha = history.resolve(str(spec))
    return StockBase(target, StockKind.RELEASES, str(spec), spec.version, repo=history, commit=sha, spec=str(spec))


def _dir_base(target: Target, tree: Path) -> StockBase:
    try:
        st = tree.stat()
    except OSError:
        raise InputError(f"base tree {tree}: no such directory") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"base tree {tree}: not a directory")
    label, version = dir_identity(tree)
    return StockBase(target, StockKind.DIR, label, version, directory=Path(label))
