"""Real upstream releases from the package index: find, download once, verify, unpack.

vLLM's and FlashInfer's complete source trees are on the Python package index as sdists, which is
the only upstream these machines can reach. This module speaks the index's JSON simple API
(PEP 691), keeps every downloaded file once in ``<cache>/dist/`` (verified against the sha256 the
index publishes, written atomically) and unpacks sdists and wheels safely (see ``archives``).
Which indexes are asked (``PATCHSET_INDEX_URL``, else pip's settings, else PyPI) is decided in
``indexes``; the main index is asked first, then the extra ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.tags import sys_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from patchset import atomic
from patchset.confine import confine
from patchset.errors import EnvironmentFailure, HashMismatch, InputError, UnsafePathError
from patchset.ledger.lock import sha256_file
from patchset.progress import Progress
from patchset.text import Word
from patchset.upstream import cache, net
from patchset.upstream.indexes import INDEX_ENV, index_urls, shown, skipped_indexes

if TYPE_CHECKING:  # requests is imported where it is used: start-up stays fast
    import requests

__all__ = [
    "DistFile",
    "ReleaseSpec",
    "cached_path",
    "download",
    "index_url",
    "is_spec_like",
    "list_versions",
    "parse_spec",
    "probe_index",
    "release_files",
    "select_file",
    "verify_file",
]

log = logging.getLogger(__name__)

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
KINDS = ("sdist", "wheel")
_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s=<>!~,;]+)\s*$")
_SPEC_LIKE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*==")


@dataclass(frozen=True)
class ReleaseSpec:
    """An exact release of a project, e.g. ``vllm==0.30.0``."""

    project: str
    version: str

    @property
    def name(self) -> str:
        """The canonical project name (PEP 503): ``flashinfer-python``."""
        return canonicalize_name(self.project)

    @property
    def tag(self) -> str:
        """The git tag a release history uses for this release: ``v0.30.0``."""
        return f"v{self.version}"

    def __str__(self) -> str:
        return f"{self.project}=={self.version}"


class DistKind(Word):
    """A release file: the source distribution or a wheel."""

    SDIST = "sdist"
    WHEEL = "wheel"


@dataclass(frozen=True)
class DistFile:
    """One file of a release as the index lists it."""

    filename: str
    url: str
    sha256: str
    size: int | None
    kind: DistKind
    version: str
    yanked: bool = False
    platforms: tuple[str, ...] = ()  # wheel platform tags ("any", "manylinux_2_28_x86_64" ...)
    index: str = ""  # the simple-API base URL of the index that lists it

    @property
    def pure(self) -> bool:
        return self.platforms == ("any",)


def parse_spec(text: str) -> ReleaseSpec:
    """Parse ``project==version``; anything else is an InputError with an example."""
    m = _SPEC.match(text or "")
    if not m:
        raise InputError(
            f"not a release spec: {text!r}",
            hint="pin one exact release as PROJECT==VERSION, for example vllm==0.30.0",
        )
    project, version = m.group(1), m.group(2)
    try:
        Version(version)
    except InvalidVersion:
        raise InputError(
            f"{text!r}: {version!r} is not a valid version",
            hint="use a version as published on the index, for example vllm==0.30.0",
        ) from None
    return ReleaseSpec(project, version)


def is_spec_like(text: str) -> bool:
    """True when ``text`` starts as ``PROJECT==``: it is meant as a release spec, not a commit,
    tag or path (``parse_spec`` then says whether it is a valid one)."""
    return bool(_SPEC_LIKE.match(text))


def as_spec(spec: ReleaseSpec | str) -> ReleaseSpec:
    return spec if isinstance(spec, ReleaseSpec) else parse_spec(spec)


def index_url() -> str:
    """The main index's simple-API base URL (``patchset.upstream.indexes``)."""
    return index_urls()[0]


# -- the index -----------------------------------------------------------------------------

_session: requests.Session | None = None


def _http() -> requests.Session:
    """The session of every index request; ``patchset.upstream.net`` bounds each one (deadline,
    the command's budget, the size of a listing) and says which variable raises the limit."""
    global _session
    if _session is None:
        _session = net.session(user_agent="patchset (+release downloader)")
    return _session


def probe_index(timeout: float = 5.0) -> str | None:
    """None when the index answers; else a short reason (for tests to skip with)."""
    import requests

    base = index_url()
    url = f"{base}/pip/"
    try:
        ans = net.request(
            _http(), "GET", url, what="a probe of the package index", headers={"Accept": JSON_ACCEPT}, timeout=timeout
        )
    except (requests.RequestException, net.NetLimit) as exc:
        return f"package index {shown(base)} unreachable: {type(exc).__name__}"
    return f"package index {shown(base)} answered HTTP {ans.status}" if ans.status >= 500 else None


def _listing_path(name: str, base: str) -> Path:
    """``<cache>/index/<index>/<project>.json``: one listing per index, so that a listing from one
    index never answers for another (``<index>`` is a digest of its URL)."""
    key = hashlib.sha256(base.encode()).hexdigest()[:16]
    return cache.subdir(f"index/{key}") / f"{name}.json"


def _fetch_listing(name: str, base: str) -> dict[str, Any] | None:
    """The listing of ``name`` on the index ``base`` (cached on disk); None when it has no such project."""
    import requests

    url = f"{base}/{name}/"
    try:  # a deadline or an oversized listing raises net.NetLimit (an EnvironmentFailure) as it is
        resp = net.request(
            _http(), "GET", url, what=f"the package index listing of {name}", headers={"Accept": JSON_ACCEPT}
        )
    except requests.RequestException as exc:
        raise EnvironmentFailure(
            f"cannot reach the package index at {shown(url)}: {exc}",
            hint=f"check the network, or point {INDEX_ENV} at a reachable index",
        ) from exc
    if resp.status == 404:
        return None
    if resp.status != 200:
        raise EnvironmentFailure(f"{shown(url)} answered HTTP {resp.status}")
    ctype = resp.headers.get("Content-Type", "")
    if "json" not in ctype:
        raise EnvironmentFailure(
            f"{shown(url)} did not answer with the JSON simple API (Content-Type {ctype!r})",
            hint=f"patchset needs an index that supports PEP 691 ({JSON_ACCEPT}); {INDEX_ENV} names one",
        )
    try:
        doc = json.loads(resp.body)
        files = doc["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvironmentFailure(f"{shown(url)} returned a malformed listing: {exc}") from exc
    for f in files:  # URLs may be relative to the page (PEP 691)
        f["url"] = urljoin(url, f.get("url", ""))
    record = {"index": base, "files": files, "versions": doc.get("versions", [])}
    atomic.write_bytes(_listing_path(name, base), json.dumps(record).encode())
    return record


def _cached_listing(name: str, base: str) -> dict[str, Any] | None:
    # <cache>/index/<project>.json is where listings were kept before there was one folder per
    # index; it is still read (it names its index), so an existing cache keeps working offline
    for path in (_listing_path(name, base), cache.index_dir() / f"{name}.json"):
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("index") == base:
            return record
    return None


def _not_listed(name: str, searched: list[str]) -> InputError:
    where = " nor ".join(shown(b) for b in searched)
    skipped = skipped_indexes()
    hint = f"skipped (not http(s)): {', '.join(shown(b) for b in skipped)}" if skipped else None
    return InputError(f"project {name!r} is not on the package index {where}", hint=hint)


def _to_distfile(entry: dict[str, Any], index: str = "") -> DistFile | None:
    filename = entry.get("filename", "")
    sha = (entry.get("hashes") or {}).get("sha256")
    if not sha:
        return None  # we never take a file we cannot verify
    common = dict(
        filename=filename,
        url=entry["url"],
        sha256=sha.lower(),
        size=entry.get("size"),
        yanked=bool(entry.get("yanked")),
        index=index,
    )
    if filename.endswith(".whl"):
        try:
            _, ver, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        plats = tuple(sorted({t.platform for t in tags}))
        return DistFile(kind=DistKind.WHEEL, version=str(ver), platforms=plats, **common)
    if filename.endswith((".tar.gz", ".zip")):
        try:
            _, ver = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            return None
        return DistFile(kind=DistKind.SDIST, version=str(ver), **common)
    return None


def _matching(record: dict[str, Any], want: Version) -> list[DistFile]:
    listed = (_to_distfile(entry, record.get("index", "")) for entry in record["files"])
    return [df for df in listed if df is not None and Version(df.version) == want]


def release_files(spec: ReleaseSpec | str) -> list[DistFile]:
    """Every verifiable file of the release, from the cached listing or the index.

    The listing is cached per project; it is refetched when it does not know the release yet, so a
    repeated run needs no network at all.
    """
    spec = as_spec(spec)
    want = Version(spec.version)
    bases = list(index_urls())
    listed: list[tuple[str, dict[str, Any]]] = []  # the indexes that know the project
    for base in bases:
        record = _cached_listing(spec.name, base)
        found = _matching(record, want) if record else []
        if not found:
            record = _fetch_listing(spec.name, base)
            found = _matching(record, want) if record else []
        if found:
            return found
        if record:
            listed.append((base, record))
    if not listed:
        raise _not_listed(spec.name, bases)
    base, record = listed[0]
    versions = record.get("versions") or []
    recent = ", ".join(versions[-5:]) if versions else "none listed"
    raise InputError(
        f"{spec}: no such release on {' nor '.join(shown(b) for b, _ in listed)}",
        hint=f"check the version; {shown(base)} lists for {spec.name}: {recent}",
    )


def list_versions(project: str, *, kind: str = "sdist", final: bool = True) -> list[Version]:
    """The versions of ``project`` the index lists with a verifiable, not yanked file of ``kind``
    (``sdist`` or ``wheel``), oldest first; with ``final`` only final releases (no ``1.0rc1``, no
    ``1.0.dev3``). Always asks the index (and refreshes the cached listing); an empty list when it
    lists none. The index is the first (main, then extra ones) that knows the project."""
    if kind not in KINDS:
        raise InputError(f"unknown distribution kind {kind!r}", hint="use 'sdist' or 'wheel'")
    name = parse_spec(f"{project}==0").name  # parse_spec checks the project name
    bases = list(index_urls())
    record = next((r for base in bases if (r := _fetch_listing(name, base)) is not None), None)
    if record is None:
        raise _not_listed(name, bases)
    listed = (_to_distfile(entry) for entry in record["files"])
    found = {Version(df.version) for df in listed if df is not None and df.kind == kind and not df.yanked}
    return sorted(v for v in found if not final or not (v.is_prerelease or v.is_devrelease))


def select_file(files: list[DistFile], kind: str = "sdist", *, platform: str | None = None) -> DistFile:
    """Pick the file to use: the sdist, or a pure wheel, or a platform wheel when asked.

    ``platform`` matters for wheels only: ``None`` accepts only pure (``py3-none-any``) wheels,
    ``"native"`` takes the wheel that best matches this interpreter, any other string is matched
    against the wheel's platform tags (``"x86_64"``, ``"manylinux_2_28_aarch64"``).
    """
    if kind not in KINDS:
        raise InputError(f"unknown distribution kind {kind!r}", hint="use 'sdist' or 'wheel'")
    pool = [f for f in files if f.kind == kind]
    pool = [f for f in pool if not f.yanked] or pool
    if not pool:
        have = ", ".join(sorted(f.filename for f in files)) or "nothing"
        wheels_only = kind == "sdist" and any(f.kind == "wheel" for f in files)
        raise InputError(
            f"the release has no {kind}; the index has: {have}",
            hint="it ships wheels only: read it in the installed layout (`patchset target set NAME --layout installed`, "
            "then `--from-index SPEC --platform native|aarch64|x86_64`)"
            if wheels_only
            else None,
        )
    if kind == "sdist":
        return min(pool, key=lambda f: (not f.filename.endswith(".tar.gz"), f.filename))
    if platform is None:
        pure = [f for f in pool if f.pure]
        if pure:
            return sorted(pure, key=lambda f: f.filename)[0]
        plats = ", ".join(sorted({p for f in pool for p in f.platforms}))
        biggest = max((f.size or 0) for f in pool) / 1e6
        raise InputError(
            f"{pool[0].filename.split('-')[0]} {pool[0].version} has only platform wheels ({plats})",
            hint=f"pass --platform x86_64, aarch64 or native to download one (up to {biggest:.0f} MB)",
        )
    if platform == "native":
        rank: dict[str, int] = {}
        for i, tag in enumerate(sys_tags()):
            rank.setdefault(str(tag), i)
        scored = []
        for f in pool:
            _, _, _, tags = parse_wheel_filename(f.filename)
            best = min((rank.get(str(t), 10**9) for t in tags), default=10**9)
            if best < 10**9:
                scored.append((best, f.filename, f))
        if not scored:
            raise InputError(f"no wheel of {pool[0].version} installs on this interpreter")
        return min(scored)[2]
    matching = [f for f in pool if any(platform in p for p in f.platforms)]
    if not matching:
        plats = ", ".join(sorted({p for f in pool for p in f.platforms}))
        raise InputError(f"no wheel matches platform {platform!r}; available: {plats}")
    return sorted(matching, key=lambda f: f.filename)[-1]


PLATFORMS = ("native", "aarch64", "x86_64")


def download_wheel(spec: ReleaseSpec | str, platform: str | None = None, *, progress: Progress | None = None) -> Path:
    """The release's wheel for an installed-layout tree: its pure wheel when it has one (a
    pure-Python wheel needs no platform, so ``platform`` is not asked for), else the wheel of
    ``platform`` (``native``: this interpreter's, the default; ``aarch64``, ``x86_64``)."""
    if platform is not None and platform not in PLATFORMS:
        raise InputError(f"--platform {platform!r}: one of {', '.join(PLATFORMS)}")
    wheels = [f for f in release_files(spec) if f.kind == "wheel"]
    pure = any(f.pure for f in wheels)
    return download(spec, "wheel", platform=None if pure or not wheels else platform or "native", progress=progress)


# -- downloads -----------------------------------------------------------------------------


def verify_file(path: Path, dist: DistFile) -> bool:
    """True when ``path`` holds exactly the bytes the index describes."""
    try:
        if dist.size is not None and path.stat().st_size != dist.size:
            return False
    except OSError:
        return False
    return sha256_file(path) == dist.sha256


def download(
    spec: ReleaseSpec | str,
    kind: str = "sdist",
    *,
    platform: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Return ``<cache>/dist/<filename>`` for the release, downloading it once.

    ``progress(what, done, total)`` hears the bytes (``total``: the index's size, else the
    Content-Length, else None). A cached file is re-verified against the index's sha256 each time
    (~0.1 s for 45 MB) and downloaded again when corrupt; a mismatching download raises
    HashMismatch and leaves nothing under the final name."""
    spec = as_spec(spec)
    dist = select_file(release_files(spec), kind, platform=platform)
    final = cached_path(dist, spec)
    if final.exists():
        if verify_file(final, dist):
            return final
        log.warning("cached %s does not match the index's sha256; downloading it again", final)
        final.unlink(missing_ok=True)
    try:
        _fetch(dist, final, progress)  # its temporary file is removed whatever happens
    except OSError as exc:  # network errors are domain errors already: this is the cache we write to
        raise _cache_failure(exc, dist, final) from None
    return final


def cached_path(dist: DistFile, spec: ReleaseSpec) -> Path:
    """``<cache>/dist/<filename>`` for ``dist``; the index's ``filename`` is data, so it must be one
    plain name (``patchset.confine``) and the very name its URL ends with, else UnsafePathError."""
    page = shown(f"{dist.index or index_url()}/{spec.name}/")
    named = unquote(urlsplit(dist.url).path.rpartition("/")[2])
    if "/" in dist.filename or "\\" in dist.filename or dist.filename != named:
        raise UnsafePathError(
            f"the package index {page} lists {spec} as file name {dist.filename!r}, "
            f"which is not one plain file name matching its URL ({named!r})",
            hint="the index is misconfigured or hostile; nothing was downloaded, replaced or removed",
        )
    return confine(cache.dist_dir(), dist.filename, what=f"file name listed by the package index {page}")


def _fetch(dist: DistFile, final: Path, progress: Progress | None) -> None:
    import requests

    what = f"download {dist.filename}"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dist.filename}.", suffix=".part", dir=final.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        try:  # past its deadline (or the command's budget) net raises DeadlineExceeded; the finally cleans up
            with net.stream(_http(), "GET", dist.url, what=what, kind=net.DOWNLOAD) as resp:
                if resp.status != 200:
                    raise EnvironmentFailure(
                        f"cannot download {shown(dist.url)}: HTTP {resp.status}",
                        hint="try again later, or check the index URL",
                    )
                total = dist.size if dist.size is not None else net.content_length(resp.headers)
                if progress is not None:
                    progress(what, 0, total)
                with os.fdopen(fd, "wb") as out:
                    fd = -1
                    for chunk in resp.chunks():
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        if dist.size is not None and size > dist.size:
                            raise HashMismatch(
                                f"download of {shown(dist.url)} runs past the {dist.size} bytes the index lists",
                                hint="nothing was kept; try again, and report it if it persists",
                            )
                        if progress is not None:
                            progress(what, size, total)
                    out.flush()
                    os.fsync(out.fileno())
        except requests.RequestException as exc:
            raise EnvironmentFailure(
                f"cannot download {shown(dist.url)}: {exc}",
                hint=f"check the network, or point {INDEX_ENV} at a reachable index",
            ) from exc
        got = digest.hexdigest()
        if got != dist.sha256 or (dist.size is not None and size != dist.size):
            raise HashMismatch(
                f"download of {shown(dist.url)} does not match the index: sha256 {got} ({size} bytes), "
                f"expected {dist.sha256} ({dist.size} bytes)",
                hint="nothing was kept; try again, and report it if it persists",
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)


def _cache_failure(exc: OSError, dist: DistFile, final: Path) -> EnvironmentFailure:
    """A download that could not be written into the cache: which directory, and for a full disk
    the space the file needs and what is free (as ``archives.unpack`` words it)."""
    import errno

    where = final.parent
    what = f"cannot download {dist.filename} into {where}"
    hint = f"nothing was kept; free space under {where}, or point {cache.ENV_VAR} at a larger disk"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        from patchset.upstream.archives import free_space, mib

        need = f"needs {mib(dist.size)}" if dist.size is not None else "needs more space"
        return EnvironmentFailure(
            f"{what}: no space left on the file system of {where} (the download {need}; {free_space(where)})",
            hint=hint,
        )
    return EnvironmentFailure(
        f"{what}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""),
        hint=f"check that {where} is writable; " + hint,
    )
