"""The GitHub client of the tracker: upstream PR/issue state in one request per repository,
PR and commit diffs, file contents; cached on disk, honest about failures.

This module is the client's face; modules outside the package import only it (an import-linter
contract). Every state read is checked field by field (``payloads``), so one malformed value marks
its own row; the token lives in an ``auth.Secret`` and is never printed, logged or cached. What
it asks GitHub for, and what that costs: docs/github.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from patchset.tracker.github.auth import Secret, resolve_token
from patchset.tracker.github.failures import Failure
from patchset.tracker.github.graphql import MAX_ALIASES, fetch_states
from patchset.tracker.github.httpcache import HttpCache, log
from patchset.tracker.github.payloads import Unreadable, issue_from_rest, pull_from_rest
from patchset.tracker.github.prdiff import PRDiff, pr_diff_detail
from patchset.tracker.github.reads import FULL_SHA, Reads
from patchset.tracker.github.statecache import StateRecords, state_key
from patchset.tracker.github.transport import DIFF, JSON, PUBLIC_API, RAW, RateInfo, Transport, short
from patchset.upstream import net
from patchset.upstream.cache import subdir
from patchset.upstream.refs import DEFAULT_ALIASES, MALFORMED, OFFLINE, FetchError, PRRef, PRState, RowError

__all__ = ["AUTH_NOTICE", "GitHubClient", "PRDiff"]

AUTH_NOTICE = (
    "no GitHub token (GITHUB_TOKEN or `gh auth token`): unauthenticated requests are limited to 60 an "
    "hour, and GitHub's GraphQL API refuses them, so states are read one REST request at a time, without "
    "review decisions, CI states or follow-ups"
)


def _of_transport(name: str) -> Any:
    """A read-only attribute of the client that is its transport's (``Transport``)."""
    return property(lambda client: getattr(client._wire, name))


class GitHubClient:
    """Reads upstream state from GitHub (or a GitHub-compatible ``base_url``).

    ``cache_dir``: where responses are kept (default ``$PATCHSET_CACHE/github``); ``offline``: serve
    from the cache only, with its age; ``timeout``: seconds one read may wait (each request as a
    whole is bounded by ``patchset.upstream.net``); ``max_age``: how long a GraphQL state is served
    from the cache (GraphQL has no conditional requests; REST reads are revalidated instead);
    ``retries``: on 5xx and connection errors only."""

    # keyword options with defaults, as PyGithub's and requests' clients take them: callers name the
    # one or two they set (27 call sites), which an options object would only make longer
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        offline: bool = False,
        timeout: float | None = None,
        *,
        max_age: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        aliases: Mapping[str, str] | None = None,
        gh: str = "gh",
    ) -> None:
        base_url = (base_url or PUBLIC_API).rstrip("/")
        read_timeout = net.limits().read if timeout is None else float(timeout)
        self.max_age = max_age
        self.aliases = dict(DEFAULT_ALIASES if aliases is None else aliases)
        self.cache = HttpCache(Path(cache_dir) if cache_dir is not None else subdir("github", create=False))
        host = urlsplit(base_url).hostname
        if offline:
            secret, self.auth_source = Secret(token), ("argument" if token else "none")
        else:
            value, self.auth_source = resolve_token(token, gh=gh, host=None if base_url == PUBLIC_API else host)
            secret = Secret(value)
            if not value:  # said once, by the command (``auth_notice``), not by the log as well
                log(__name__).info(AUTH_NOTICE)
        self._wire = Transport(
            base_url,
            secret,
            offline=offline,
            timeout=read_timeout,
            retries=retries,
            backoff=backoff,
        )
        self._reads = Reads(self._wire, self.cache)
        self._states = StateRecords(self.cache, base_url)

    # what the transport is and saw, for the caller to report
    base_url: str = _of_transport("base_url")
    offline: bool = _of_transport("offline")
    timeout: float = _of_transport("timeout")
    _token: Secret = _of_transport("token")
    round_trips: int = _of_transport("round_trips")
    rate: dict[str, RateInfo] = _of_transport("rate")
    redirects: list[tuple[str, str]] = _of_transport("redirects")  # (asked, followed to)

    def __repr__(self) -> str:
        return (
            f"GitHubClient(base_url={self.base_url!r}, auth={self.auth_source}, token={self._token!r}, "
            f"offline={self.offline}, cache={str(self.cache.root)!r})"
        )

    @property
    def authenticated(self) -> bool:
        return bool(self._token)

    @property
    def auth_notice(self) -> str | None:
        """The one notice a command prints about the token: what reading without one costs; None
        with a token (or offline, where no request is made)."""
        return None if self.authenticated or self.offline else AUTH_NOTICE

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- public API ----------------------------------------------------------------------
    def pull_states(self, refs: Iterable[PRRef], *, max_age: float | None = None) -> dict[PRRef, PRState | RowError]:
        """State of every ref: one GraphQL request per repository (for up to 100 refs), or none
        when every ref of a repository was fetched less than ``max_age`` seconds ago."""
        max_age = self.max_age if max_age is None else max_age
        by_repo: dict[str, list[PRRef]] = {}
        for ref in refs:
            group = by_repo.setdefault(ref.repo, [])
            if ref not in group:
                group.append(ref)
        out: dict[PRRef, PRState | RowError] = {}
        for repo, group in by_repo.items():
            loaded = self._states.load(repo)
            record: dict[str, Any] = {} if isinstance(loaded, RowError) else loaded
            need: list[PRRef] = []
            now = time.time()
            for ref in group:
                saved = self._states.recorded(ref, record)
                if isinstance(saved, PRState) and (self.offline or now - saved.fetched_at <= max_age):
                    saved.source, saved.age_s = "cache", round(max(0.0, now - saved.fetched_at), 3)
                    out[ref] = saved
                elif self.offline:
                    fallback = loaded if isinstance(loaded, RowError) else RowError(OFFLINE, "offline, no cached data")
                    out[ref] = saved if isinstance(saved, RowError) else fallback
                else:
                    need.append(ref)  # not recorded, too old, or unreadable: ask again
            for start in range(0, len(need), MAX_ALIASES):
                chunk = need[start : start + MAX_ALIASES]
                fresh = (
                    fetch_states(self._wire, repo, chunk) if self.authenticated else _rest_states(self._reads, chunk)
                )
                out.update(fresh)
                got = {state_key(r): s.to_json() for r, s in fresh.items() if isinstance(s, PRState)}
                if got:
                    record.update(got)
                    self._states.save(repo, record)
        return {ref: out[ref] for grp in by_repo.values() for ref in grp}

    def pr_diff(self, ref: PRRef) -> bytes:
        """The PR's diff as bytes (see ``pr_diff_detail`` for how it was obtained)."""
        return self.pr_diff_detail(ref).data

    def pr_diff_detail(self, ref: PRRef) -> PRDiff:
        """GitHub's diff of the PR, as the exact bytes GitHub sent, or rebuilt when GitHub
        refuses it (``tracker.github.prdiff``)."""
        return pr_diff_detail(self._reads, ref)

    def commit_diff(self, repo: str, sha: str, *, revalidate: bool = False) -> bytes:
        """One commit's diff (GitHub's diff media type). A full sha is served from the cache once
        seen (its answer cannot change); ``revalidate`` asks the server anyway (a conditional GET:
        a 304 costs no rate limit), to notice a commit that is gone upstream."""
        try:
            return self._reads.get(
                f"/repos/{repo}/commits/{sha}",
                DIFF,
                immutable=bool(FULL_SHA.match(sha)) and not revalidate,
                want_json=False,
            ).body
        except Failure as f:
            raise FetchError(f.row, f"diff of {repo}@{sha}") from None

    def file_at(self, repo: str, ref: str, path: str, *, revalidate: bool = False) -> bytes:
        """The bytes of ``path`` at ``ref`` (contents API, base64; exact bytes). Over 1 MB GitHub
        answers the JSON media type with 403 ``too_large``: the raw media type is asked instead.
        At a full sha it is served from the cache once seen, unless ``revalidate`` (see
        ``commit_diff``)."""
        url = f"/repos/{repo}/contents/{quote(path.lstrip('/'))}"
        immutable = bool(FULL_SHA.match(ref)) and not revalidate
        get = self._reads.get
        try:
            try:
                doc = get(url, JSON, {"ref": ref}, immutable=immutable).json()
            except Failure as f:
                if f.row.status == 403 and "too_large" in f.codes:
                    return get(url, RAW, {"ref": ref}, immutable=immutable, want_json=False).body
                raise
            if not isinstance(doc, dict) or doc.get("type") != "file":
                raise Failure(RowError(MALFORMED, f"{path} is not a file at {ref}"))
            if doc.get("encoding") == "base64":
                import base64

                try:
                    return base64.b64decode(doc.get("content") or "", validate=False)
                except ValueError:  # binascii.Error is one
                    raise Failure(RowError(MALFORMED, "content is not valid base64")) from None
            # encoding "none" (a 1-100 MB file through the object media type): no content; ask raw.
            return get(url, RAW, {"ref": ref}, immutable=immutable, want_json=False).body
        except Failure as f:
            raise FetchError(f.row, f"{repo}:{path}@{ref}") from None


def _rest_states(reads: Reads, refs: list[PRRef]) -> dict[PRRef, PRState | RowError]:
    """The state of each ref over REST, one read each, for a client without a token (GitHub's
    GraphQL API refuses unauthenticated requests). Each read is cached and conditional
    (``reads``): a revalidated answer costs nothing, but there is no review decision, CI rollup
    or timeline on this path. A failed read is that row's error."""
    out: dict[PRRef, PRState | RowError] = {}
    for ref in refs:
        try:
            if ref.kind == "pr":
                out[ref] = pull_from_rest(ref, reads.get(f"/repos/{ref.repo}/pulls/{ref.number}").json())
            else:
                out[ref] = issue_from_rest(ref, reads.get(f"/repos/{ref.repo}/issues/{ref.number}").json())
        except Failure as f:
            out[ref] = f.row
        except Unreadable as bad:
            out[ref] = bad.row()
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            out[ref] = RowError(MALFORMED, f"unexpected REST shape ({short(exc)})")
    return out
