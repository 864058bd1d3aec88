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
import subprocess
import tempfile
from pathlib import Path

from patchset.errors import EnvironmentFailure, InputError
from patchset.history import GitRepo, _fi_path, _git_env, _run_git

_IDENT = b"patchset directory import <dirs@patchset.invalid> 0 +0000"


def _scan(root: Path) -> dict[str, tuple[bytes, bytes]]:
    """``{relative path: (mode, content)}`` for every file and symlink under ``root`` (no .git)."""
    out: dict[str, tuple[bytes, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = (b"120000", os.readlink(full).encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(st.st_mode):
                mode = b"100755" if st.st_mode & 0o111 else b"100644"
                out[rel] = (mode, full.read_bytes())
        for d in list(dirnames):
            if (Path(dirpath) / d).is_symlink():
                full = Path(dirpath) / d
                out[full.relative_to(root).as_posix()] = (b"120000", os.readlink(full).encode())
                dirnames.remove(d)
    return out


def import_directories(git_dir: Path, dirs: list[tuple[str, Path]]) -> list[str]:
    """Make a bare repository at ``git_dir`` with one commit per ``(label, directory)``, in order;
    each commit is tagged ``label``. Returns the commit shas."""
    for label, d in dirs:
        if not Path(d).is_dir():
            raise InputError(f"not a directory: {d}", hint=f"{label} must name an existing directory of files")
    git_dir.mkdir(parents=True, exist_ok=True)
    _run_git(["init", "-q", "--bare", "--initial-branch=main", str(git_dir)])
    stream: list[bytes] = []
    prev: dict[str, tuple[bytes, bytes]] = {}
    for n, (label, d) in enumerate(dirs, start=1):
        files = _scan(Path(d))
        message = f"directory {label}\n\nImported from {d} by patchset.\n".encode()
        stream.append(b"commit refs/heads/main\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n"
                      % (n, _IDENT, _IDENT, len(message), message))
        if n > 1:
            stream.append(b"from :%d\n" % (n - 1))
        for path in sorted(prev):
            if path not in files:
                stream.append(b"D %s\n" % _fi_path(path))
        for path in sorted(files):
            if prev.get(path) == files[path]:
                continue
            mode, data = files[path]
            stream.append(b"M %s inline %s\ndata %d\n" % (mode, _fi_path(path), len(data)))
            stream.append(data)
            stream.append(b"\n")
        stream.append(b"\nreset refs/tags/%s\nfrom :%d\n\n" % (label.encode(), n))
        prev = files
    stream.append(b"done\n")
    with tempfile.TemporaryFile() as err:
        proc = subprocess.run(["git", "fast-import", "--quiet", "--done"], cwd=git_dir, input=b"".join(stream),
                              stdout=subprocess.DEVNULL, stderr=err, env=_git_env())
        if proc.returncode != 0:
            err.seek(0)
            raise EnvironmentFailure(f"git fast-import failed in {git_dir}: {err.read().decode(errors='replace')[-2000:]}")
    repo = GitRepo(git_dir)
    try:
        return [repo.resolve(f"refs/tags/{label}") for label, _ in dirs]
    finally:
        repo.close()
