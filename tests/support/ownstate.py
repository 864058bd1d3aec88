"""The test session on its own state: patchset's cache and state, and the XDG directories, are the
session's, never the user's.

What a user's earlier runs left behind (release histories built from other releases, index
listings, gate states, proofs, the journal key) must not change what a test sees, and no test may
write into them. ``redirect`` points ``PATCHSET_CACHE``, ``PATCHSET_STATE`` and ``XDG_CACHE_HOME``,
``XDG_STATE_HOME``, ``XDG_CONFIG_HOME``, ``XDG_DATA_HOME`` at directories under the session's temporary
base; subprocesses the tests start inherit them. What is shared, and why each is safe:

* **downloaded release files** (``<cache>/dist/``): immutable, and checked twice. A file of the
  user's ``dist/`` is hard-linked (copied across file systems) into the session's only when its
  size and sha256 equal what a package-index listing in the user's cache publishes for that file
  name; and ``patchset.upstream.releases.download`` re-checks every cached file against the
  session's own listing before use, replacing (never writing through) one that differs. The
  product never writes a cached download in place, and ``check_shared`` fails the session if a
  test did (size, mtime and inode of every link are compared at the end).
* **the engine venvs** ``ci/setup_engine.sh`` and ``ci/setup_vllm_tests.sh`` made
  (``PATCHSET_ENGINE_VENV``, ``PATCHSET_VLLM_TESTS_VENV``): resolved from the user's cache before it
  is redirected and exported, so the engine tiers find what CI set up.
* **the tests' own third-party material** (GitHub's API descriptions, PyGithub's recordings, Debian
  sources, lint tools, the models the engine tests serve): ``material_root`` stays the user's cache
  root (``PATCHSET_TEST_MATERIAL``), where ``.ci/run`` fetches it before the tests; it is fetched by
  the registries' own clients (npm, pip and apt verify what they download) or built from such a
  download, and it is input to the tests, never patchset state.
* **the user's pip configuration** in ``$XDG_CONFIG_HOME/pip/pip.conf``, which the redirect would
  hide: named in ``PIP_CONFIG_FILE``, so the network tests ask the index the user's pip asks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # models.py imports this module inside the engine venv, which has no pytest
    import pytest

MATERIAL_ENV = "PATCHSET_TEST_MATERIAL"
XDG_DIRS = ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


def material_root() -> Path:
    """Where the tests keep third-party material they fetch for themselves (not patchset state):
    the user's cache root as it was before the session redirected patchset's."""
    raw = os.environ.get(MATERIAL_ENV, "").strip()
    if raw:
        return Path(raw)
    from patchset.upstream.cache import cache_dir

    return cache_dir(create=False)


@dataclass
class Shared:
    """The downloads linked from the user's cache: ``{session path: (size, mtime_ns, inode)}``."""

    links: dict[Path, tuple[int, int, int]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # user files not linked, and why


def redirect(base: Path, mp: pytest.MonkeyPatch) -> Shared:
    """Point patchset's cache and state and the XDG directories at ``base``; share only what the
    module docstring names. Undone with ``mp``."""
    from patchset.upstream import cache

    user_cache = cache.cache_dir(create=False)
    for var, name in (("PATCHSET_ENGINE_VENV", "engine-venv"), ("PATCHSET_VLLM_TESTS_VENV", "vllm-tests-venv")):
        mp.setenv(var, os.environ.get(var, "").strip() or str(user_cache / name))
    mp.setenv(MATERIAL_ENV, os.environ.get(MATERIAL_ENV, "").strip() or str(user_cache))
    _keep_pip_index(mp)
    for var in XDG_DIRS:
        d = base / "xdg" / var.removeprefix("XDG_").lower()
        d.mkdir(parents=True, exist_ok=True)
        mp.setenv(var, str(d))
    mp.setenv("PATCHSET_CACHE", str(base / "cache"))
    mp.setenv("PATCHSET_STATE", str(base / "state"))
    return share_downloads(user_cache, cache.dist_dir())


def _keep_pip_index(mp: pytest.MonkeyPatch) -> None:
    """The user's own pip.conf lives under ``XDG_CONFIG_HOME``: name it in ``PIP_CONFIG_FILE`` (pip
    reads that file after its others), so pip, and patchset asking pip, still see it."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    conf = (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config") / "pip" / "pip.conf"
    if conf.is_file() and not os.environ.get("PIP_CONFIG_FILE"):
        mp.setenv("PIP_CONFIG_FILE", str(conf))


def published(user_cache: Path) -> dict[str, tuple[str, int | None]]:
    """``{file name: (sha256, size)}`` of every file the package-index listings cached in
    ``user_cache`` publish (``<cache>/index/**/<project>.json``, PEP 691 records)."""
    out: dict[str, tuple[str, int | None]] = {}
    for listing in sorted((user_cache / "index").glob("**/*.json")):
        try:
            files = json.loads(listing.read_bytes())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for f in files if isinstance(files, list) else []:
            try:
                name, sha = f["filename"], f["hashes"]["sha256"]
            except (KeyError, TypeError):
                continue
            if isinstance(name, str) and isinstance(sha, str):
                size = f.get("size")
                out[name] = (sha.lower(), size if isinstance(size, int) else None)
    return out


def share_downloads(user_cache: Path, dist: Path) -> Shared:
    """Link each of the user's downloaded release files whose size and sha256 match a cached index
    listing into the session's ``dist`` (a copy when a hard link cannot be made)."""
    shared = Shared()
    source = user_cache / "dist"
    if not source.is_dir() or source.resolve() == dist.resolve():
        return shared
    listed = published(user_cache)
    for f in sorted(source.iterdir()):
        if f.name.startswith(".") or f.is_symlink() or not f.is_file():
            continue  # a download in progress (.name.part), or not a plain file
        want = listed.get(f.name)
        if want is None:
            shared.refused.append(f"{f.name}: no cached index listing publishes it")
            continue
        sha, size = want
        if size is not None and f.stat().st_size != size:
            shared.refused.append(f"{f.name}: {f.stat().st_size} bytes, the index lists {size}")
            continue
        if _sha256(f) != sha:
            shared.refused.append(f"{f.name}: its sha256 is not the one the index lists")
            continue
        dest = dist / f.name
        try:
            os.link(f, dest)
        except OSError:
            shutil.copyfile(f, dest)
            continue  # a copy is the session's own: nothing to guard
        st = dest.stat()
        shared.links[dest] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return shared


def check_shared(shared: Shared) -> list[str]:
    """Links into the user's downloads that a test wrote through (the same inode, changed): each one
    changed a file of the user's cache."""
    bad = []
    for path, (size, mtime, ino) in shared.links.items():
        try:
            st = path.stat()
        except FileNotFoundError:
            continue  # replaced or removed: the user's file was not touched
        if st.st_ino == ino and (st.st_size, st.st_mtime_ns) != (size, mtime):
            bad.append(str(path))
    return bad


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
