"""Cached, conditional REST reads: what the client asks GitHub for over REST, kept on disk.

A GET is answered from the on-disk cache (``tracker.github.httpcache``) when the client is offline or
the URL names something that cannot change (a commit by its full sha); otherwise it is asked
with ``If-None-Match``, and a 304 (which costs no rate limit with a token) serves the cached
copy. Only a 200 with a readable body is kept, so a broken answer is never served again. A list
endpoint is read page by page (``Link: rel="next"``) with one cap on the pages together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from patchset.tracker.github.failures import Failure
from patchset.tracker.github.httpcache import CacheEntry, HttpCache
from patchset.tracker.github.transport import JSON, Resp, Transport, failure, where
from patchset.upstream import net
from patchset.upstream.net import ENV_MAX_JSON
from patchset.upstream.refs import MALFORMED, OFFLINE, RowError

__all__ = ["FULL_SHA", "Reads"]

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")  # a commit named this way: its answers never change


class Reads:
    """GETs through ``transport``, kept in ``cache``. Raises only ``Failure``."""

    def __init__(self, transport: Transport, cache: HttpCache) -> None:
        self.transport = transport
        self.cache = cache

    def get(
        self,
        path_or_url: str,
        accept: str = JSON,
        params: Mapping[str, Any] | None = None,
        immutable: bool = False,
        want_json: bool = True,
    ) -> Resp:
        """A cached, conditional GET. ``immutable``: a cached copy is served without asking
        (the URL names a commit by its full sha, so its answer never changes)."""
        offline = self.transport.offline
        url = self.transport.absolute(path_or_url, params)
        entry = self.cache.get("GET", url, accept)
        if entry is not None and (offline or immutable):
            return _from_cache(entry)
        if offline:
            raise Failure(RowError(OFFLINE, "offline, no cached data"))
        cap = net.JSON if want_json else net.BODY
        resp = self.transport.send("GET", url, accept, entry.conditional_headers() if entry else None, cap=cap)
        if resp.status == 304 and entry is not None:
            return _from_cache(self.cache.revalidated(entry, resp.headers))
        if resp.status != 200:
            raise failure(resp)
        if want_json:
            resp.json()  # raises MALFORMED: a broken body is never cached
        self.cache.put("GET", url, accept, b"", resp.status, resp.headers, resp.body)
        return resp

    def get_all(self, path: str, accept: str = JSON) -> tuple[list[Any], bool]:
        """Every page of a list endpoint (following ``Link: rel="next"``); returns the items and
        whether every page came from the cache."""
        items: list[Any] = []
        url: str | None = self.transport.absolute(path, {"per_page": 100})
        all_cached = True
        pages = 0
        held, cap = 0, net.limits().max_json  # the pages together, not only each one
        while url:
            resp = self.get(url, accept)
            held += len(resp.body)
            if held > cap:
                raise Failure(
                    RowError(
                        MALFORMED,
                        f"{where(path)}: the pages together run past the {cap} bytes patchset keeps in memory "
                        f"({ENV_MAX_JSON}); refused",
                    )
                )
            page = resp.json()
            if not isinstance(page, list):
                raise Failure(RowError(MALFORMED, f"{where(url)}: expected a list", status=resp.status))
            items.extend(page)
            all_cached = all_cached and resp.cached
            url = _next_link(resp.headers.get("link", ""))
            pages += 1
            if pages > 100:
                raise Failure(RowError(MALFORMED, f"{where(path)}: more than 100 pages"))
        return items, all_cached


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


def _from_cache(entry: CacheEntry) -> Resp:
    return Resp(entry.status, dict(entry.headers), entry.body, cached=True, age_s=round(entry.age(), 3))
