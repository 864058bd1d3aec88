"""Where patchset keeps downloaded releases and the git histories built from them.

One place decides the cache root so every command (apply --from-index, rebase, gate) shares the
same downloads: ``$PATCHSET_CACHE`` when set and non-empty, else ``$XDG_CACHE_HOME/patchset`` (the
XDG base directory a user already sets for every tool; a relative value is ignored, as the
specification says), else ``~/.cache/patchset``. ``ci/setup_*.sh`` ask this module too
(``python -m patchset.upstream.cache`` prints the root), so the shell scripts cannot drift from it.
"""

from __future__ import annotations

import os
from pathlib import Path

from patchset.errors import EnvironmentFailure

ENV_VAR = "PATCHSET_CACHE"
XDG_ENV = "XDG_CACHE_HOME"


def cache_dir(create: bool = True) -> Path:
    """The cache root (``$PATCHSET_CACHE``, ``$XDG_CACHE_HOME/patchset`` or ``~/.cache/patchset``),
    created when asked."""
    raw = os.environ.get(ENV_VAR, "").strip()
    xdg = os.environ.get(XDG_ENV, "").strip()
    if raw:
        root = Path(raw).expanduser()
    elif xdg and Path(xdg).is_absolute():
        root = Path(xdg) / "patchset"
    else:
        root = Path.home() / ".cache" / "patchset"
    if create:
        _mkdir(root)
    return root


def subdir(name: str, create: bool = True) -> Path:
    """A named directory under the cache root (``dist``, ``index``, ``history`` ...)."""
    path = cache_dir(create) / name
    if create:
        _mkdir(path)
    return path


def dist_dir(create: bool = True) -> Path:
    """Downloaded release files: ``<cache>/dist/<filename>``."""
    return subdir("dist", create)


def index_dir(create: bool = True) -> Path:
    """Cached package-index listings: ``<cache>/index/<index digest>/<project>.json``."""
    return subdir("index", create)


def history_dir(create: bool = True) -> Path:
    """Git histories built from releases: ``<cache>/history/<project>.git``."""
    return subdir("history", create)


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentFailure(
            f"cannot create cache directory {path}: {exc.strerror or exc}",
            hint=f"set {ENV_VAR} to a writable directory",
        ) from exc


if __name__ == "__main__":  # for the shell scripts in ci/: print the root, create nothing
    print(cache_dir(create=False))
