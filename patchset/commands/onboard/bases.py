"""``patchset base find``: the releases a target's series applies to with zero fuzz, newest first.

A repository people onboard builds on a main commit, a fork or a custom image: the release its
changes fit is unknown. The series is applied in memory (zero fuzz) to releases from the index,
galloping from the newest until one fits, then bisecting each edge of the run that fits (a series
fits a contiguous run of releases; the releases between two that fit are taken to fit). Verdicts
are cached per series digest and release, so asking again downloads nothing. Given an upstream
clone, the candidates are its commits instead (first parent, newest first), read from git.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from packaging.version import InvalidVersion, Version

from patchset import atomic
from patchset.commands.apply.target import series_files
from patchset.errors import InputError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Target
from patchset.upstream import cache
from patchset.upstream.git import run_git
from patchset.upstream.releases import list_versions
from patchset.upstream.stock import open_stock

DEFAULT_WINDOW = 12  # the newest releases searched when --since does not say
COMMIT_WINDOW = 500  # the newest commits of a clone searched when --since does not say
MAX_COMMITS = 20000


@dataclass
class Find:
    """One search: the series, the releases (newest first) and what was learnt of each."""

    ledger: Ledger
    target: Target
    versions: list[str]
    digest: str = ""
    verdicts: dict[str, bool] = field(default_factory=dict)  # this search's probes
    known: dict[str, bool] = field(default_factory=dict)  # the cache: "digest version" -> fits
    cached: int = 0
    heard: Callable[[str, bool], None] | None = None  # told each release checked (progress)
    clone: Path | None = None  # with a clone, ``versions`` are its commits (full shas)

    def to_json(self) -> dict[str, object]:
        fit = fitting(self)
        return {
            "target": self.target.name,
            "kind": "commits" if self.clone is not None else "releases",
            "fits": fit,
            "newest": fit[0] if fit else None,
            "searched": len(self.versions),
            "checked": {v: self.verdicts[v] for v in self.versions if v in self.verdicts},
            "from_cache": self.cached,
        }


def series_digest(ledger: Ledger, t: Target) -> str:
    parts = [
        f"{p.id} {sha256_bytes(ledger.body_file(p).read_bytes())}"
        for p in ledger.series(t.name)
        if ledger.body_file(p).is_file()
    ]
    if not parts:
        raise InputError(f"target {t.name} has no patch with a body to try", hint="import its patches first")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _cache_file() -> Path:
    return cache.subdir("base-find") / "verdicts.json"


def _load_cache() -> dict[str, bool]:
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, bool)}


def fits(f: Find, i: int) -> bool:
    """Does the series apply to ``f.versions[i]`` with zero fuzz?"""
    v = f.versions[i]
    if v in f.verdicts:
        return f.verdicts[v]
    key = f"{f.digest} {v}"
    if key in f.known:
        f.cached += 1
        ok = f.known[key]
    else:
        with _files_of(f, v) as stock:  # its errors are errors
            try:
                series_files(f.ledger, f.target, stock.read)
                ok = True
            except InputError:  # a patch that does not apply there, named by series_files
                ok = False
        f.known[key] = ok
    f.verdicts[v] = ok
    if f.heard is not None:
        f.heard(v, ok)
    return ok


@contextmanager
def _files_of(f: Find, v: str) -> Iterator[SimpleNamespace]:
    """The files of candidate ``v``: a release from the index, or a commit of the clone."""
    if f.clone is None:
        with open_stock(f.ledger.root, f.target, f"{f.target.package}=={v}") as stock:
            yield SimpleNamespace(read=stock.read)
        return
    clone = f.clone

    def read(path: str) -> bytes | None:
        proc = run_git(["cat-file", "blob", f"{v}:{path}"], cwd=clone, check=False)
        return proc.stdout if proc.returncode == 0 else None

    yield SimpleNamespace(read=read)


def commits(clone: Path, since: str | None) -> list[str]:
    """The clone's first-parent commits from ``since`` (a commit) to HEAD, newest first (the
    newest ``COMMIT_WINDOW`` when ``since`` does not say)."""
    head = run_git(["rev-parse", "--verify", "HEAD^{commit}"], cwd=clone, check=False)
    if head.returncode != 0:
        raise InputError(f"--upstream {clone}: not a git repository with commits", hint="give a clone of upstream")
    args = ["rev-list", "--first-parent", f"--max-count={MAX_COMMITS if since else COMMIT_WINDOW}", "HEAD"]
    if since is not None:
        floor = run_git(["rev-parse", "--verify", "--end-of-options", f"{since}^{{commit}}"], cwd=clone, check=False)
        if floor.returncode != 0:
            raise InputError(f"--since {since!r}: not a commit of {clone}", hint="a sha or a ref of the clone")
        sha = floor.stdout.decode().strip()
        args += [f"^{sha}^@"]
    found = run_git(args, cwd=clone).stdout.decode().split()
    if since is not None and sha not in found:
        raise InputError(
            f"--since {since!r}: not on the first-parent history of HEAD", hint="a commit HEAD descends from"
        )
    return found


def _edge(f: Find, good: int, bad: int) -> int:
    """The index next to ``bad`` that still fits, between ``good`` (fits) and ``bad`` (does not)."""
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if fits(f, mid):
            good = mid
        else:
            bad = mid
    return good


def _gallop(f: Find, start: int, direction: int) -> tuple[int, int | None]:
    """From ``start`` (fits), the farthest fitting probe and the first failing one in ``direction``."""
    good, step = start, 1
    last = len(f.versions) - 1 if direction > 0 else 0
    while good != last:
        k = max(0, min(len(f.versions) - 1, good + direction * step))
        if not fits(f, k):
            return good, k
        good, step = k, step * 2
    return good, None


def _gaps(f: Find) -> int | None:
    """The middle of the widest stretch of releases not yet probed, again and again, until one fits
    (a narrow run between the gallop's probes) or every release was checked: None."""
    while True:
        probed = [k for k, v in enumerate(f.versions) if v in f.verdicts]
        gaps = [(b - a, a, b) for a, b in itertools.pairwise(probed) if b - a > 1]
        if not gaps:
            return None
        _, a, b = max(gaps)
        if fits(f, (a + b) // 2):
            return (a + b) // 2


def fitting(f: Find) -> list[str]:
    """The releases the series fits, newest first (the run found by the search)."""
    hits = [i for i, v in enumerate(f.versions) if f.verdicts.get(v)]
    return f.versions[min(hits) : max(hits) + 1] if hits else []


def search(f: Find) -> Find:
    """Fill ``f.verdicts``: the first fitting release by galloping from the newest, then both edges."""
    f.digest = f.digest or series_digest(f.ledger, f.target)
    f.known = _load_cache()
    n = len(f.versions)
    if not n:
        raise InputError(f"no release of {f.target.package} to search", hint="widen --since")
    i, step, first = 0, 1, None
    while first is None:
        if fits(f, i):
            first = i
        elif i == n - 1:
            first = _gaps(f)  # the gallop stepped over the run, if there is one
            break
        else:
            i, step = min(n - 1, i + step), step * 2
    if first is not None:
        newer = max((k for k in range(first) if f.verdicts.get(f.versions[k]) is False), default=None)
        if newer is not None:
            _edge(f, first, newer)
        far, bad = _gallop(f, first, +1)
        if bad is not None:
            _edge(f, far, bad)
    atomic.write_text(_cache_file(), json.dumps(f.known, indent=0, sort_keys=True))
    return f


def releases(t: Target, since: str | None) -> list[str]:
    """The final releases of ``t``'s package to search, newest first."""
    if not t.package:
        raise InputError(f"target {t.name} has no package on the index", hint="`patchset target set NAME --package P`")
    found = [str(v) for v in reversed(list_versions(t.package))]
    if since is None:
        return found[:DEFAULT_WINDOW]
    try:
        floor = Version(since)
    except InvalidVersion:
        raise InputError(f"--since {since!r} is not a version", hint="e.g. --since 0.30.0") from None
    return [v for v in found if Version(v) >= floor]
