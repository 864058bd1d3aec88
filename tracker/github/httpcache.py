"""An on-disk HTTP response cache for GitHub API reads: ETag / Last-Modified, body, and age.

PyGithub keeps no response cache, yet GitHub answers a conditional request (``If-None-Match``)
with a 304 that costs no rate limit (when the request is authenticated; an anonymous 304 counts). The tracker therefore stores each response body with its
validators here, sends them back on the next read, and serves the stored body on a 304; offline
it serves the stored body and says how old it is.

Why a thin layer and not PyGithub's transport: PyGithub's only hook for its HTTP connection is
``Requester.injectConnectionClasses``, a process-wide class attribute meant for its own replay
tests; a cache installed there would silently apply to every ``Github`` object in the process.
The client instead calls ``Requester.requestJson`` with a connection object of its own (PyGithub's
auth and base_url; the client's session, retries and timeout) and wraps it with this cache, which
keeps caching explicit and local to one client. An entry is keyed by the URL asked for: a read
that was redirected (a moved repository) is stored under the original URL, body of the target.

Layout: ``<root>/<key[:2]>/<key>.json`` (metadata) and ``<key>.body`` (exact bytes), where ``key``
hashes the method, URL, Accept header and request body. Writes are atomic renames (metadata last, and it
records the body's sha256, so a torn pair reads as a miss). Request headers, and so tokens, are
never stored.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.upstream.cache import subdir


def log(name: str = __name__):  # -> logging.Logger; logging loads when something is logged, not at start-up
    import logging

    return logging.getLogger(name)


# Response headers worth keeping: what pagination and media handling need later.
KEPT_HEADERS = ("content-type", "link", "x-github-media-type")


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename). No fsync: this is a cache, and
    an entry lost in a crash reads as a miss (see the sha256 check in ``get``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_cache_dir() -> Path:
    """``$PATCHSET_CACHE/github`` (default ``~/.cache/patchset/github``)."""
    return subdir("github", create=False)


@dataclass
class CacheEntry:
    """One cached HTTP response: status, kept headers, body and when it was stored."""

    key: str
    method: str
    url: str
    accept: str
    status: int
    etag: str | None
    last_modified: str | None
    stored_at: float  # when this body was received
    validated_at: float  # last time the server confirmed it (200 or 304)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def age(self, now: float | None = None) -> float:
        """Seconds since the server last confirmed this body."""
        return max(0.0, (time.time() if now is None else now) - self.validated_at)

    def conditional_headers(self) -> dict[str, str]:
        """Headers that make the next request conditional on this entry."""
        out = {}
        if self.etag:
            out["If-None-Match"] = self.etag
        if self.last_modified:
            out["If-Modified-Since"] = self.last_modified
        return out


class HttpCache:
    """Responses on disk, keyed by method + URL + Accept (+ request body for POST)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @staticmethod
    def key(method: str, url: str, accept: str = "", body: bytes = b"") -> str:
        import hashlib  # OpenSSL loads only when the cache is used (status on a machine without one never)

        h = hashlib.sha256()
        for part in (method.upper(), url, accept, hashlib.sha256(body).hexdigest()):
            h.update(part.encode("utf-8"))
            h.update(b"\0")
        return h.hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.json", d / f"{key}.body"

    def get(self, method: str, url: str, accept: str = "", body: bytes = b"") -> CacheEntry | None:
        if not self.root.is_dir():
            return None  # no cache yet: a miss, without hashing anything
        import hashlib
        import json

        key = self.key(method, url, accept, body)
        meta_path, body_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            data = body_path.read_bytes()
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("body_sha256"):
            return None  # torn or foreign entry: a miss, never wrong bytes
        try:
            return CacheEntry(
                key=key,
                method=meta["method"],
                url=meta["url"],
                accept=meta["accept"],
                status=int(meta["status"]),
                etag=meta.get("etag"),
                last_modified=meta.get("last_modified"),
                stored_at=float(meta["stored_at"]),
                validated_at=float(meta["validated_at"]),
                headers=dict(meta.get("headers") or {}),
                body=data,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def put(
        self, method: str, url: str, accept: str, request_body: bytes, status: int, headers: dict[str, Any], body: bytes
    ) -> CacheEntry:
        lower = {k.lower(): str(v) for k, v in headers.items()}
        now = time.time()
        entry = CacheEntry(
            key=self.key(method, url, accept, request_body),
            method=method.upper(),
            url=url,
            accept=accept,
            status=status,
            etag=lower.get("etag"),
            last_modified=lower.get("last-modified"),
            stored_at=now,
            validated_at=now,
            headers={k: lower[k] for k in KEPT_HEADERS if k in lower},
            body=body,
        )
        self._write(entry)
        return entry

    def revalidated(self, entry: CacheEntry, headers: dict[str, Any] | None = None) -> CacheEntry:
        """The server said 304: the body stands; record when, and any new validators."""
        lower = {k.lower(): str(v) for k, v in (headers or {}).items()}
        entry.validated_at = time.time()
        entry.etag = lower.get("etag", entry.etag)
        entry.last_modified = lower.get("last-modified", entry.last_modified)
        self._write(entry)
        return entry

    def _write(self, entry: CacheEntry) -> None:
        import hashlib
        import json

        meta_path, body_path = self._paths(entry.key)
        meta = asdict(entry)
        del meta["body"]
        meta["body_sha256"] = hashlib.sha256(entry.body).hexdigest()
        try:
            _replace(body_path, entry.body)
            _replace(meta_path, json.dumps(meta, sort_keys=True).encode("utf-8"))
        except OSError as exc:  # the cache is best-effort: an unwritable one must not fail a read
            log().warning("cannot write the GitHub cache at %s (%s); continuing without it", self.root, exc.strerror)

    def clear(self) -> None:
        if not self.root.is_dir():
            return
        for p in self.root.glob("*/*"):
            if p.suffix in (".json", ".body", ".tmp"):
                p.unlink(missing_ok=True)
