"""An on-disk HTTP response cache for GitHub API reads: ETag / Last-Modified, body, and age.

GitHub answers an authenticated conditional request with a 304 that costs no rate limit, and
PyGithub keeps no cache: each body is stored here with its validators, which go back on the next
read; offline the stored body is served with its age. It wraps the client's own connection, not
PyGithub's process-wide ``injectConnectionClasses``, so caching stays local to one client.

Layout: ``<root>/<key[:2]>/<key>.json`` (metadata, written last, with the body's sha256, so a torn
pair is a miss) and ``<key>.body``; ``key`` hashes method, URL (before redirects), Accept header
and body. Request headers, and so tokens, are never stored.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset import atomic


def log(name: str = __name__):  # -> logging.Logger; logging loads when something is logged, not at start-up
    import logging

    return logging.getLogger(name)


# Response headers worth keeping: what pagination and media handling need later.
KEPT_HEADERS = ("content-type", "link", "x-github-media-type")


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

    def age(self) -> float:
        """Seconds since the server last confirmed this body."""
        return max(0.0, time.time() - self.validated_at)

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

    def get(self, method: str, url: str, accept: str = "") -> CacheEntry | None:
        if not self.root.is_dir():
            return None  # no cache yet: a miss, without hashing anything
        import hashlib
        import json

        key = self.key(method, url, accept)
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
            # no fsync: an entry lost in a crash reads as a miss (the sha256 check in ``get``)
            atomic.write_bytes(body_path, entry.body, mode=0o600, durable=False)
            atomic.write_bytes(meta_path, json.dumps(meta, sort_keys=True).encode("utf-8"), mode=0o600, durable=False)
        except OSError as exc:  # the cache is best-effort: an unwritable one must not fail a read
            log().warning("cannot write the GitHub cache at %s (%s); continuing without it", self.root, exc.strerror)
