"""A local upstream git history, built from release archives.

These machines cannot reach GitHub, but the package index has every vLLM release as a source tree.
``ReleaseHistory`` makes them one commit per release, streamed into ``git fast-import`` (blobs an
earlier release stored are referenced, not sent again), deterministic for the same archive on the
same parent. A commit id hashes its parent, so what names a release beyond one history is
``ReleaseId``: its spec and its tree id, a function of the archive alone (``release_id``,
``find``). Within a history the chain is kept in version order, so ``old..new`` is the releases
between.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.progress import Progress
from patchset.upstream import cache
from patchset.upstream.archives import DIR, FILE, HARDLINK, SYMLINK, ArchiveReader
from patchset.upstream.git import fast_import_path, popen_git, run_git
from patchset.upstream.releases import ReleaseSpec, as_spec, download, is_spec_like
from patchset.upstream.repo import GitRepo

_HEXISH = re.compile(r"^[0-9a-f]{4,40}$")
IMPORT_EMAIL = "releases@patchset.invalid"
FAST_IMPORT_COMPRESSION = 1  # zlib level for imported packs: 2x faster than 6, ~10% larger


_RELEASE_TRAILER = re.compile(r"^Release: (\S+==\S+)$", re.M)


@dataclass(frozen=True)
class ReleaseId:
    """A release as every history knows it: ``vllm==0.31.0`` and the id of its tree (the archive's
    files, modes and links), whichever synthetic commit one history holds it in."""

    spec: str
    tree: str

    def __str__(self) -> str:
        return f"{self.spec} (tree {self.tree[:12]})"


def spec_from_archive(archive: Path) -> tuple[ReleaseSpec, str]:
    """``(spec, kind)`` read from a release file name (``vllm-0.30.0.tar.gz``, ``x-1.0-py3-none-any.whl``)."""
    name = archive.name
    try:
        if name.endswith(".whl"):
            project, version, _, _ = parse_wheel_filename(name)
            return ReleaseSpec(str(project), str(version)), "wheel"
        project, version = parse_sdist_filename(name)
        return ReleaseSpec(str(project), str(version)), "sdist"
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion) as exc:
        raise InputError(
            f"cannot tell the release from the file name {name!r}: {exc}",
            hint="name it PROJECT-VERSION.tar.gz (sdist) or as a wheel, or pass a spec instead",
        ) from None


class ReleaseHistory(GitRepo):
    """A bare git repository holding one commit per imported release (tags ``v<version>``).

    Create it with ``ReleaseHistory.for_project("vllm")`` (``<cache>/history/vllm.git``) or on
    any directory; it is initialised on first use. Imports are serialised by a lock file.
    """

    def __init__(self, repo_dir: Path | str, project: str | None = None) -> None:
        super().__init__(repo_dir)
        if not (self.git_dir / "HEAD").exists():
            if self.git_dir.exists() and any(self.git_dir.iterdir()):
                raise InputError(
                    f"{self.git_dir} exists and is not a git repository",
                    hint="point the release history at a new or empty directory",
                )
            self.git_dir.mkdir(parents=True, exist_ok=True)
            run_git(["init", "-q", "--bare", "--initial-branch=main", str(self.git_dir)])
            self.git("config", "gc.auto", "0")
        stored = self.git("config", "--get", "patchset.project", check=False).stdout.decode().strip()
        if project is not None:
            name = canonicalize_name(project)
            if stored and stored != name:
                raise InputError(
                    f"{self.git_dir} holds releases of {stored!r}, not {name!r}",
                    hint="use one history repository per project",
                )
            if not stored:
                self.git("config", "patchset.project", name)
                stored = name
        self.project: str | None = stored or None

    @classmethod
    def for_project(cls, project: str) -> ReleaseHistory:
        """The cached history of ``project``: ``<cache>/history/<project>.git``."""
        name = canonicalize_name(project)
        return cls(cache.history_dir() / f"{name}.git", project=name)

    # -- queries -------------------------------------------------------------------------------
    def releases(self) -> list[tuple[str, str]]:
        """``[(version, commit sha)]`` of every imported release tag ``v<version>``, by version."""
        out = self.git(
            "for-each-ref", "--format=%(refname:strip=2) %(*objectname) %(objectname)", "refs/tags/v*"
        ).stdout.decode()
        found: list[tuple[Version, str, str]] = []
        for line in out.splitlines():
            parts = line.split()
            tag, sha = parts[0], parts[-2] if len(parts) == 3 else parts[-1]
            try:
                found.append((Version(tag[1:]), tag[1:], sha))
            except InvalidVersion:
                continue
        found.sort()
        return [(v, sha) for _, v, sha in found]

    def resolve(self, ref: str | ReleaseSpec, *, import_missing: bool = True, progress: Progress | None = None) -> str:
        """A commit sha for a sha, tag, branch, ``PROJECT==VERSION`` (or a bare version).

        A missing release is imported (downloaded if needed): on ``main`` when newer than every imported
        one, else on ``releases/<version>`` from the closest older release."""
        if isinstance(ref, ReleaseSpec) or (isinstance(ref, str) and is_spec_like(ref)):
            spec = as_spec(ref)
            self._check_project(spec)
            sha = self.rev(f"refs/tags/{spec.tag}")
            if sha:
                return sha
            if not import_missing:
                raise InputError(f"{spec} is not imported into {self.git_dir}")
            return self._import_missing(spec, progress)
        sha = self.rev(ref) if ref else None
        if sha is None and ref and not _HEXISH.match(ref):
            sha = self.rev(f"refs/tags/v{ref}")
        return sha if sha is not None else super().resolve(ref)

    def release_id(self, ref: str) -> ReleaseId | None:
        """The release ``ref`` (a sha, tag or spec of this history) is, or None when it names a
        commit that is no imported release. The same release gives the same ``ReleaseId`` in every
        history, though its commit sha differs with the releases imported below it."""
        sha = self.rev(f"refs/tags/{as_spec(ref).tag}") if is_spec_like(ref) else self.rev(ref)
        if sha is None:
            return None
        found = _RELEASE_TRAILER.search(self.git("log", "-1", "--format=%B", sha).stdout.decode("utf-8", "replace"))
        tree = self.rev(sha, "tree")
        if found is None or tree is None:
            return None
        return ReleaseId(found.group(1), tree)

    def find(self, release: ReleaseId) -> str | None:
        """The commit that holds ``release`` in this history (its tag, with the very same tree), or None."""
        if not is_spec_like(release.spec):
            return None
        sha = self.rev(f"refs/tags/{as_spec(release.spec).tag}")
        return sha if sha is not None and self.rev(sha, "tree") == release.tree else None

    def _check_project(self, spec: ReleaseSpec) -> None:
        if self.project is None:
            self.git("config", "patchset.project", spec.name)
            self.project = spec.name
        elif spec.name != self.project:
            raise InputError(
                f"{spec} does not belong in the history of {self.project!r} at {self.git_dir}",
                hint=f"use ReleaseHistory.for_project({spec.project!r})",
            )

    def _import_missing(self, spec: ReleaseSpec, progress: Progress | None = None) -> str:
        """Import ``spec`` in version order: its parent is the closest older release (never a newer
        one); it extends ``main`` when it is the newest, else starts ``releases/<version>``."""
        new = Version(spec.version)
        imported = [(Version(v), sha) for v, sha in self.releases()]
        older = [(v, sha) for v, sha in imported if v < new]
        if all(v < new for v, _ in imported) and (
            self.branch_tip("main") is None or (older and self.branch_tip("main") == older[-1][1])
        ):
            return self.import_release(spec, progress=progress)
        parent = older[-1][1] if older else None
        return self.import_release(spec, parent=parent, branch=f"releases/{spec.version}", progress=progress)

    # -- import --------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.git_dir / "patchset-import.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed, whatever happens
            yield

    def import_release(
        self,
        source: ReleaseSpec | str | Path,
        *,
        parent: str | None = None,
        branch: str = "main",
        progress: Progress | None = None,
    ) -> str:
        """Import one release as one commit on ``branch``; return the commit sha.

        ``source`` is a spec (downloaded through the cache) or a release archive's path. The parent is
        ``parent``, else the tip of ``branch``; the tree is the archive's (top directory stripped,
        executable bits and symlinks kept). The tag (``v<version>``, ``v<version>-wheel`` for a wheel
        archive) makes it idempotent."""
        archive: Path | None = None
        kind = "sdist"
        if isinstance(source, ReleaseSpec) or (isinstance(source, str) and is_spec_like(source)):
            spec = as_spec(source)
        else:
            archive = Path(source)
            if not archive.is_file():
                raise InputError(f"release archive not found: {archive}")
            spec, kind = spec_from_archive(archive)
        tag = spec.tag if kind == "sdist" else f"{spec.tag}-wheel"
        self._check_project(spec)
        with self._locked():
            existing = self.rev(f"refs/tags/{tag}")
            if existing:
                return existing
            if archive is None:
                archive = download(spec, progress=progress)
            parent_sha = self._parent_for(branch, parent)
            self._fast_import(archive, spec, branch, parent_sha, tag, kind == "sdist", progress)
            sha = self.rev(f"refs/tags/{tag}")
            if sha is None:
                raise EnvironmentFailure(f"git fast-import finished but tag {tag} is missing in {self.git_dir}")
            return sha

    def _parent_for(self, branch: str, parent: str | None) -> str | None:
        tip = self.branch_tip(branch)
        if parent is None:
            return tip
        parent_sha = self.resolve(parent)
        if tip is not None and not self.is_ancestor(tip, parent_sha):
            raise InputError(
                f"branch {branch!r} is at {tip[:12]}, which is not an ancestor of parent {parent!r}",
                hint="import onto another branch, or leave parent unset to extend the branch",
            )
        return parent_sha

    def _known_blobs(self) -> set[bytes]:
        out = self.git(
            "cat-file", "--batch-all-objects", "--unordered", "--batch-check=%(objecttype) %(objectname)"
        ).stdout
        return {line[5:] for line in out.splitlines() if line.startswith(b"blob ")}

    def _fast_import(
        self,
        archive: Path,
        spec: ReleaseSpec,
        branch: str,
        parent: str | None,
        tag: str,
        strip_top: bool,
        progress: Progress | None,
    ) -> None:
        what, total, done = f"import {archive.name}", archive.stat().st_size, 0

        def on_bytes(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(what, done, total)

        reader = ArchiveReader(archive, strip_top=strip_top, on_bytes=on_bytes)
        known = self._known_blobs()
        errlog = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
        try:
            proc = self._start_fast_import(errlog)
        except EnvironmentFailure:
            errlog.close()
            raise
        assert proc.stdin is not None
        write = proc.stdin.write
        ok = False
        try:
            entries, date = self._stream_blobs(reader, archive, known, write)
            message = (
                f"{spec.name} {spec.version}\n\n"
                f"Imported from {archive.name} by patchset.\n\n"
                f"Release: {spec.name}=={spec.version}\n"
                f"Archive-Sha256: {reader.sha256}\n"
            ).encode()
            ident = f"{spec.name} release <{IMPORT_EMAIL}> {int(date)} +0000".encode()
            out = [
                b"commit refs/heads/%s\nmark :1\nauthor %s\ncommitter %s\ndata %d\n%s\n"
                % (branch.encode(), ident, ident, len(message), message)
            ]
            if parent:
                out.append(b"from %s\n" % parent.encode())
            out.append(b"deleteall\n")
            out += [b"M %s %s %s\n" % (mode, ref, fast_import_path(path)) for path, (mode, ref) in entries.items()]
            out.append(b"\nreset refs/tags/%s\nfrom :1\n\ndone\n" % tag.encode())
            write(b"".join(out))
            proc.stdin.close()
            ok = proc.wait() == 0
        except BrokenPipeError:
            ok = False
        finally:
            if not proc.stdin.closed:
                try:
                    proc.stdin.close()  # without "done": fast-import discards everything
                except BrokenPipeError:
                    pass
            proc.wait()
            errlog.seek(0)
            err = errlog.read().decode(errors="replace").strip()
            errlog.close()
            for crash in self.git_dir.glob("fast_import_crash_*"):
                crash.unlink(missing_ok=True)
        if not ok:
            raise EnvironmentFailure(f"git fast-import failed importing {archive} into {self.git_dir}: {err[-2000:]}")

    def _start_fast_import(self, errlog: IO[bytes]) -> subprocess.Popen[bytes]:
        """``git fast-import`` reading our stream, its messages into ``errlog``."""
        proc = popen_git(
            [
                "-c",
                f"pack.compression={FAST_IMPORT_COMPRESSION}",
                "-c",
                f"core.compression={FAST_IMPORT_COMPRESSION}",
                "fast-import",
                "--quiet",
                "--done",
                "--depth=0",
            ],
            cwd=self.git_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            bufsize=1 << 20,
        )
        assert proc.stdin is not None
        try:  # a bigger pipe means fewer context switches between us and fast-import (Linux)
            fcntl.fcntl(proc.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except OSError:
            pass
        return proc

    def _stream_blobs(
        self, reader: ArchiveReader, archive: Path, known: set[bytes], write: Callable[[bytes], object]
    ) -> tuple[dict[str, tuple[bytes, bytes]], int]:
        """Send new blobs to fast-import; return ``({path: (mode, dataref)}, newest file mtime)``.

        A blob git already has (from an earlier release) is referenced by id, not sent again.
        """
        entries: dict[str, tuple[bytes, bytes]] = {}
        newest = 0
        sent: dict[bytes, bytes] = {}
        mark = 1  # :1 is the commit
        for m in reader:
            if m.kind == DIR:
                continue  # the reader refused .git, .patchset and escaping paths already
            if m.kind == HARDLINK:
                target = entries.get(m.link)
                if target is None or target[0] == b"120000":
                    raise UnsafePathError(
                        f"{archive}: hard link {m.path!r} -> {m.link!r} does not name an earlier file"
                    )
                entries[m.path] = target
                continue
            if m.kind == SYMLINK:
                data, mode = m.link.encode("utf-8", "surrogateescape"), b"120000"
            else:
                data, mode = m.data, (b"100755" if m.executable else b"100644")
            oid = None
            if known:  # hashing only pays when earlier releases may already hold the blob
                h = hashlib.sha1(b"blob %d\0" % len(data))
                h.update(data)
                oid = h.hexdigest().encode()
            ref = sent.get(oid) if oid else None
            if ref is None:
                if oid in known:
                    ref = oid
                else:
                    mark += 1
                    ref = b":%d" % mark
                    write(b"blob\nmark %s\ndata %d\n" % (ref, len(data)))
                    write(data)
                    write(b"\n")
                if oid:
                    sent[oid] = ref
            entries[m.path] = (mode, ref)
            if m.kind == FILE:
                newest = max(newest, m.mtime)
        return entries, newest


def build_history(
    project: str,
    versions: list[str],
    *,
    progress: Progress | None = None,
    history: ReleaseHistory | None = None,
) -> list[tuple[str, str]]:
    """Import ``versions`` of ``project``: ``[(version, sha)]`` in the order given.

    Idempotent. Releases go in version order, each on the closest older release, so they make a
    straight line on ``main`` whatever order they are listed in.
    ``progress`` hears each download and import (``vllm 2/3: download vllm-0.31.0.tar.gz``)."""
    history = history or ReleaseHistory.for_project(project)
    order = sorted(versions, key=Version)
    shas: dict[str, str] = {}
    for i, version in enumerate(order, start=1):
        step = _prefixed(progress, f"{project} {i}/{len(order)}:") if progress is not None else None
        shas[version] = history.resolve(ReleaseSpec(project, version), progress=step)
    return [(version, shas[version]) for version in versions]


def _prefixed(progress: Progress, prefix: str) -> Progress:
    def report(what: str, done: int, total: int | None) -> None:
        progress(f"{prefix} {what}", done, total)

    return report


# -- a real upstream -----------------------------------------------------------------------
