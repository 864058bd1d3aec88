"""A throwaway git history made from plain directories (old base files, new base files).

A target that is a plain directory (an unpacked release, a ``site-packages`` copy) has no git
history, yet rebasing needs one: blobs by commit, rename detection, ``log -L``. This module streams
each directory into ``git fast-import`` as one commit on top of the previous one (only the files
that differ are sent), so the rebaser can treat directories exactly like commits. Commits use a
fixed author and date: the same directories always give the same shas.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream.git import fast_import_path, run_git
from patchset.upstream.repo import GitRepo

_IDENT = b"patchset directory import <dirs@patchset.invalid> 0 +0000"


def _listing(root: Path) -> dict[str, Path]:
    """``{relative path: full path}`` of every file and symlink under ``root`` (no .git), unread."""
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            full = Path(dirpath) / d
            if d == ".git":
                dirnames.remove(d)
            elif full.is_symlink():
                out[full.relative_to(root).as_posix()] = full
                dirnames.remove(d)
        for name in filenames:
            full = Path(dirpath) / name
            out[full.relative_to(root).as_posix()] = full
    return out


def _read(full: Path) -> tuple[bytes, bytes] | None:
    st = full.lstat()
    if stat.S_ISLNK(st.st_mode):
        return b"120000", os.readlink(full).encode("utf-8", "surrogateescape")
    if stat.S_ISREG(st.st_mode):
        return (b"100755" if st.st_mode & 0o111 else b"100644"), full.read_bytes()
    return None


def import_directories(git_dir: Path, dirs: list[tuple[str, Path]], paths: Iterable[str] | None = None) -> list[str]:
    """Make a bare repository at ``git_dir`` with one commit per ``(label, directory)``, in order;
    each commit is tagged ``label``. Returns the commit shas.

    With ``paths`` (the files a series touches), only those files and the files that exist in some
    directories but not in others are imported: enough for blobs, rename detection (deleted vs
    added files) and history, and a fraction of a whole source tree to read and compress.
    """
    for label, d in dirs:
        if not Path(d).is_dir():
            raise InputError(f"not a directory: {d}", hint=f"{label} must name an existing directory of files")
    git_dir.mkdir(parents=True, exist_ok=True)
    run_git(["init", "-q", "--bare", "--initial-branch=main", str(git_dir)])
    listings = [_listing(Path(d)) for _, d in dirs]
    if paths is not None:
        common = set.intersection(*(set(x) for x in listings)) if listings else set()
        wanted = set(paths) | (set().union(*(set(x) for x in listings)) - common)
        listings = [{p: f for p, f in x.items() if p in wanted} for x in listings]
    stream: list[bytes] = []
    prev: dict[str, tuple[bytes, bytes]] = {}
    for n, ((label, d), listing) in enumerate(zip(dirs, listings, strict=True), start=1):
        files = {p: got for p, full in sorted(listing.items()) if (got := _read(full)) is not None}
        message = f"directory {label}\n\nImported from {d} by patchset.\n".encode()
        stream.append(
            b"commit refs/heads/main\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n"
            % (n, _IDENT, _IDENT, len(message), message)
        )
        if n > 1:
            stream.append(b"from :%d\n" % (n - 1))
        stream += [b"D %s\n" % fast_import_path(path) for path in sorted(prev) if path not in files]
        for path in sorted(files):
            if prev.get(path) == files[path]:
                continue
            mode, data = files[path]
            stream += [b"M %s inline %s\ndata %d\n" % (mode, fast_import_path(path), len(data)), data, b"\n"]
        stream.append(b"\nreset refs/tags/%s\nfrom :%d\n\n" % (label.encode(), n))
        prev = files
    stream.append(b"done\n")
    proc = run_git(
        ["-c", "pack.compression=1", "-c", "core.compression=1", "fast-import", "--quiet", "--done"],
        cwd=git_dir,
        input=b"".join(stream),
        check=False,
    )
    if proc.returncode != 0:
        raise EnvironmentFailure(f"git fast-import failed in {git_dir}: {proc.stderr.decode(errors='replace')[-2000:]}")
    repo = GitRepo(git_dir)
    try:
        return [repo.resolve(f"refs/tags/{label}") for label, _ in dirs]
    finally:
        repo.close()
