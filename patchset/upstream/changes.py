"""Which files changed between two releases on the package index: the digests of every file of
each release's sdist, compared.

Why this module exists: the verify planner's cost over a month (``bench/verify.py --simulate``)
is measured on real upstream change, and the index's sdists are the public record of it. The
sdists come through ``patchset.upstream.releases`` (downloaded once, checked against the index's
sha256, cached); their members are read through ``patchset.upstream.archives.ArchiveReader``, which
confines every path and bounds sizes: the same bytes an unpacked tree holds, without writing one.
"""

from __future__ import annotations

import hashlib

from patchset.upstream.archives import FILE, ArchiveReader
from patchset.upstream.releases import download


def release_digests(spec: str) -> dict[str, str]:
    """``{path: sha256}`` of every file of the release's sdist (its top directory stripped)."""
    return {m.path: hashlib.sha256(m.data).hexdigest() for m in ArchiveReader(download(spec)) if m.kind == FILE}


def release_sources(spec: str, paths: set[str]) -> dict[str, bytes]:
    """The content of those files of the release's sdist that it has."""
    return {m.path: m.data for m in ArchiveReader(download(spec)) if m.kind == FILE and m.path in paths}


def changed_files(old: dict[str, str], new: dict[str, str]) -> set[str]:
    """Files added, removed or changed from ``old`` to ``new`` (two ``release_digests``)."""
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}
