"""The GitHub client of the tracker: upstream PR/issue state in one request per repository,
PR and commit diffs, file contents; cached on disk, honest about failures.

Every request goes through PyGithub's ``Requester.requestJson`` (auth header, user agent, base
URL and GraphQL URL, a debug log with the token masked) over a connection object of this module
(``_Wire``, on the client's own ``requests`` session with its retries and timeout), because
PyGithub's own connection decodes bodies to text and follows a 301 without its query string. On
top of it this module adds what PyGithub lacks: exact bytes, redirects followed with the full URL
(same origin only), conditional requests with a disk cache (``tracker.httpcache``; a 304 costs no
rate limit with a token), an offline mode, one batched GraphQL query per repository that passes
GitHub's validation rules, the refused-diff fallbacks, and a classification of every failure into
a ``RowError`` so one bad row never hides the others; every state read (from GitHub or from the
cache) is checked field by field (``tracker.payloads``), so one malformed value marks its own
row. What it asks GitHub for, and what that costs: docs/github.md.

    client = GitHubClient()                             # token: arg, $GITHUB_TOKEN, `gh auth token`
    states = client.pull_states([PRRef.parse("vllm#57632"), PRRef.parse("nccl#2334", kind="issue")])
    diff = client.pr_diff(PRRef.parse("vllm#58704"))    # bytes

The token is held in a ``_Secret`` and never printed, logged, cached or put in an exception.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

from patchset.tracker.followups import TIMELINE, parse_timeline
from patchset.tracker.httpcache import CacheEntry, HttpCache, default_cache_dir, log
from patchset.tracker.payloads import (
    Unreadable,
    file_entry,
    issue_from_rest,
    pr_from_graphql,
    pull_from_rest,
    recorded_state,
)
from patchset.upstream import net
from patchset.upstream.refs import (
    AUTH,
    DEFAULT_ALIASES,
    FORBIDDEN,
    GRAPHQL,
    HTTP,
    MALFORMED,
    NETWORK,
    NO_NETWORK,
    NOT_FOUND,
    OFFLINE,
    RATE_LIMIT,
    SERVER,
    TIMEOUT,
    FetchError,
    PRRef,
    PRState,
    RowError,
)

if TYPE_CHECKING:  # PyGithub, requests and urllib3 load on the first request, not on import
    import requests
    from github import Github

__all__ = [
    "DEFAULT_ALIASES",
    "FetchError",
    "GitHubClient",
    "PRDiff",
    "PRRef",
    "PRState",
    "RateInfo",
    "RowError",
    "resolve_token",
]


PUBLIC_API = "https://api.github.com"
AUTH_NOTICE = (
    "no GitHub token (GITHUB_TOKEN or `gh auth token`): unauthenticated requests are limited to 60 an "
    "hour, and GitHub's GraphQL API refuses them, so states are read one REST request at a time, without "
    "review decisions, CI states or follow-ups"
)
JSON = "application/vnd.github+json"
DIFF = "application/vnd.github.diff"
PATCH = "application/vnd.github.patch"
RAW = "application/vnd.github.raw+json"  # GitHub's documented raw media type for the contents API
API_VERSION = "2022-11-28"  # sent as X-GitHub-Api-Version on every request
MAX_REDIRECTS = 5
PR_COMMIT_CAP = 250  # GitHub lists at most this many commits of a pull request
MAX_ALIASES = 100  # refs per GraphQL request; a repository with more is split into several
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class RateInfo:
    """GitHub's rate-limit headers of the last response."""

    resource: str
    limit: int
    remaining: int
    reset: int
    used: int

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "limit": self.limit,
            "remaining": self.remaining,
            "reset": self.reset,
            "used": self.used,
        }


@dataclass
class PRDiff:
    """A PR's diff and how it was obtained: ``source`` is "diff" (GitHub's diff media type),
    "files" (rebuilt from the per-file patches after a 406 "too large") or "commits" (the PR's
    commits as ``git format-patch`` text, when the file list lacks patches)."""

    ref: PRRef
    data: bytes
    source: str
    cached: bool = False
    age_s: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        import hashlib

        return {
            "ref": self.ref.to_json(),
            "source": self.source,
            "bytes": len(self.data),
            "sha256": hashlib.sha256(self.data).hexdigest(),
            "cached": self.cached,
            "age_s": self.age_s,
            "note": self.note,
        }


class _Secret:
    """A token that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "<token hidden>" if self._value else "<no token>"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a token is not picklable")


class _Failure(Exception):
    """A failed read: the row to report, and the ``errors[].code`` values of GitHub's error body
    (``too_large``, ``not_available``…) so a caller can pick a fallback."""

    def __init__(self, row: RowError, codes: tuple[str, ...] = ()) -> None:
        super().__init__(str(row))
        self.row = row
        self.codes = codes


class _Wire:
    """One HTTP exchange in the shape PyGithub's ``requestJson(cnx=...)`` expects, over the
    client's own ``requests`` session and ``patchset.upstream.net`` (deadlines, a size cap). It
    exists for two things PyGithub's own connection gets wrong for this client: the body is kept
    as the exact bytes received (PyGithub hands back ``response.text``, which turns a non-UTF-8
    byte of a diff into U+FFFD), and a redirect's ``Location`` is hidden from PyGithub (which
    follows a 301 with the path only, dropping the query string, and raises ``RuntimeError`` for
    another host) so the client follows it itself."""

    def __init__(self, session: requests.Session, origin: str, timeout: float, cap: str = net.JSON) -> None:
        self.session = session
        self.origin = origin  # scheme://host[:port] of the base URL
        self.timeout = timeout
        self.cap = cap
        self.response: net.Answer | None = None
        self.location: str | None = None

    def request(self, verb: str, url: str, input: Any, headers: dict[str, str], stream: bool = False) -> None:
        self._args = (verb, url, input, headers)

    def getresponse(self) -> _Wire:
        verb, url, data, headers = self._args
        self.response = net.request(
            self.session,
            verb,
            self.origin + url,
            what=f"{verb} {_where(url)}",
            cap=self.cap,
            data=data,
            headers=headers,
            timeout=self.timeout,
            allow_redirects=False,
        )
        self.location = None
        return self

    @property
    def status(self) -> int:
        assert self.response is not None
        return self.response.status

    def getheaders(self) -> list[tuple[str, str]]:
        assert self.response is not None
        items = list(self.response.headers.items())
        if 300 <= self.status < 400:
            self.location = self.response.headers.get("location")
            items = [(k, v) for k, v in items if k.lower() != "location"]
        return items

    def read(self) -> str:
        assert self.response is not None
        return self.response.body.decode("latin-1")  # lossless; the client reads ``response.body``

    def close(self) -> None:
        pass


@dataclass
class _Resp:
    """One response as the client keeps it (from the network or the cache)."""

    status: int
    headers: dict[str, str]
    body: bytes
    cached: bool = False
    age_s: float | None = None

    def json(self) -> Any:
        import json

        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Failure(RowError(MALFORMED, f"response is not valid JSON ({exc})", status=self.status)) from None


def resolve_token(
    token: str | None = None, env: Mapping[str, str] | None = None, gh: str = "gh", host: str | None = None
) -> tuple[str | None, str]:
    """Find a token: the argument, else ``$GITHUB_TOKEN``, else ``gh auth token``. Returns
    ``(token, source)`` with source "argument", "GITHUB_TOKEN", "gh" or "none"."""
    if token:
        return token, "argument"
    env = os.environ if env is None else env
    if env.get("GITHUB_TOKEN"):
        return env["GITHUB_TOKEN"], "GITHUB_TOKEN"
    import shutil
    import subprocess

    exe = shutil.which(gh, path=env.get("PATH")) if gh else None
    if exe:
        cmd = [exe, "auth", "token"] + (["--hostname", host] if host else [])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, env=dict(env), check=False)
        except (OSError, subprocess.SubprocessError):
            return None, "none"
        value = out.stdout.strip()
        if out.returncode == 0 and value and "\n" not in value:
            return value, "gh"
    return None, "none"


class GitHubClient:
    """Reads upstream state from GitHub (or a GitHub-compatible ``base_url``).

    ``cache_dir``: where responses are kept (default ``$PATCHSET_CACHE/github``).
    ``offline``: never touch the network; serve from the cache and report its age.
    ``timeout``: seconds one read may wait (default ``$PATCHSET_NET_READ_TIMEOUT``); each request
    as a whole is bounded by ``patchset.upstream.net`` (``$PATCHSET_NET_REQUEST_DEADLINE``, the
    command's budget) and so is what it keeps in memory. ``max_age``: how long a PR state fetched by GraphQL is
    served from the cache without asking again (GitHub's GraphQL has no conditional requests;
    REST reads are always revalidated with ``If-None-Match`` instead). ``retries``: retries on
    5xx and connection errors (never on a read timeout, never on a rate limit).
    """

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
        self.base_url = (base_url or PUBLIC_API).rstrip("/")
        self.offline = offline
        self.timeout = net.limits().read if timeout is None else float(timeout)
        self.max_age = max_age
        self.retries = retries
        self.backoff = backoff
        self.aliases = dict(DEFAULT_ALIASES if aliases is None else aliases)
        self.cache = HttpCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
        self.round_trips = 0
        self.rate: dict[str, RateInfo] = {}
        host = urlsplit(self.base_url).hostname
        if offline:
            self._token, self.auth_source = _Secret(token), ("argument" if token else "none")
        else:
            value, self.auth_source = resolve_token(token, gh=gh, host=None if self.base_url == PUBLIC_API else host)
            self._token = _Secret(value)
            if not value:  # said once, by the command (``auth_notice``), not by the log as well
                log(__name__).info(AUTH_NOTICE)
        self._gh: Github | None = None
        self._http: requests.Session | None = None
        self.down: dict[str, str] = {}  # host -> why it cannot be reached: asked no more by this client
        self.redirects: list[tuple[str, str]] = []  # (asked, followed to), for the caller to report

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
        if self._gh is not None:
            self._gh.close()
            self._gh = None
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- transport -----------------------------------------------------------------------
    def _requester(self) -> Any:
        if self._gh is None:
            from github import Auth, Github

            value = self._token.reveal()
            self._gh = Github(
                base_url=self.base_url,
                auth=Auth.Token(value) if value else None,
                timeout=max(1, round(self.timeout)),  # PyGithub takes whole seconds (its own connection is never used)
                per_page=100,
                seconds_between_requests=None,
                seconds_between_writes=None,
            )
        return self._gh.requester

    def _session(self) -> requests.Session:
        if self._http is None:
            retry = net.retry(
                total=self.retries,
                connect=self.retries,
                read=0,
                status=self.retries,
                backoff_factor=self.backoff,
                status_forcelist=(500, 502, 503, 504),
                allowed_methods=frozenset({"GET", "POST"}),
                raise_on_status=False,
                respect_retry_after_header=False,
                redirect=0,
            )
            # no .netrc credentials or proxy settings from the environment
            self._http = net.session(retries=retry, trust_env=False)
        return self._http

    def _absolute(self, path_or_url: str, params: Mapping[str, Any] | None = None) -> str:
        url = path_or_url if "://" in path_or_url else self.base_url + path_or_url
        if params:
            url += ("&" if "?" in url else "?") + urlencode(sorted(params.items()))
        return url

    def _same_origin(self, url: str) -> bool:
        a, b = urlsplit(url), urlsplit(self.base_url)
        return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)

    def _send(
        self,
        method: str,
        url: str,
        accept: str | None = None,
        headers: Mapping[str, str] | None = None,
        payload: Any = None,
        cap: str = net.JSON,
    ) -> _Resp:
        """One request, following same-origin redirects with the full URL (path and query) the
        server named; a redirect to another origin is refused (the token would go with it).
        ``cap``: how much of an answer is kept in memory (``net.JSON`` or ``net.BODY``).
        Never raises anything but ``_Failure``."""
        if self.offline:
            raise _Failure(RowError(OFFLINE, "offline, no cached data"))
        host = net.host_of(url)
        if host in self.down:  # no network: said by the first request, not asked again
            raise _Failure(RowError(NO_NETWORK, f"{host}: {self.down[host]}"))
        hdrs = dict(headers or {})
        if accept:
            hdrs["Accept"] = accept
        hdrs["X-GitHub-Api-Version"] = API_VERSION
        start = url
        for _hop in range(MAX_REDIRECTS + 1):
            resp, location = self._once(method, url, hdrs, payload, cap)
            if resp.status not in (301, 302, 303, 307, 308) or not location:
                return resp
            target = urljoin(url, location)
            if not self._same_origin(target):
                there = urlsplit(target)
                raise _Failure(
                    RowError(
                        HTTP,
                        f"{_where(start)}: {resp.status} moved to another host ({there.scheme}://{there.netloc}); "
                        "not followed, so the token stays with the configured API: if the API itself moved, "
                        "point PATCHSET_GITHUB_API (or GITHUB_API_URL) there",
                        status=resp.status,
                    )
                )
            if method != "GET" and resp.status not in (307, 308):
                raise _Failure(
                    RowError(HTTP, f"{_where(start)}: {resp.status} redirect of a {method}", status=resp.status)
                )
            log(__name__).info("%s: %s, following to %s", _where(url), resp.status, _where(target))
            self.redirects.append((start, target))
            url = target
        raise _Failure(RowError(HTTP, f"{_where(start)}: more than {MAX_REDIRECTS} redirects"))

    def _once(
        self, method: str, url: str, hdrs: Mapping[str, str], payload: Any, cap: str = net.JSON
    ) -> tuple[_Resp, str | None]:
        """One round trip through PyGithub's requester (auth, user agent, masked debug log) over
        this client's own session (``_Wire``: exact bytes, redirects left to ``_send``). One
        deadline (``net.scope``) covers all of it, PyGithub's own re-asks and sleeps included."""
        import requests
        from github import GithubException

        wire = _Wire(self._session(), _origin(self.base_url), self.timeout, cap)
        self.round_trips += 1
        try:
            with net.scope(url, f"{method} {_where(url)}"):
                status, rhdrs, _text = self._requester().requestJson(
                    method, url, headers=dict(hdrs), input=payload, cnx=wire
                )
        except net.DeadlineExceeded as exc:
            raise _Failure(RowError(TIMEOUT, exc.message)) from None
        except net.Unreachable as exc:
            self.down.setdefault(exc.host, exc.reason)
            raise _Failure(RowError(NO_NETWORK, f"{exc.host}: {exc.reason}")) from None
        except net.TooLarge as exc:
            raise _Failure(RowError(MALFORMED, exc.message)) from None
        except requests.exceptions.Timeout:
            raise _Failure(RowError(TIMEOUT, f"no answer within {self.timeout:g}s from {_where(url)}")) from None
        except requests.exceptions.RetryError:
            raise _Failure(RowError(SERVER, f"{_where(url)} kept failing after {self.retries} retries")) from None
        except requests.exceptions.ConnectionError as exc:
            if _is_timeout(exc):  # urllib3 wraps a read timeout it will not retry in MaxRetryError
                raise _Failure(RowError(TIMEOUT, f"no answer within {self.timeout:g}s from {_where(url)}")) from None
            reason = net.no_network_reason(exc)
            if reason:
                host = net.host_of(url)
                self.down.setdefault(host, reason)
                raise _Failure(RowError(NO_NETWORK, f"{host}: {reason}")) from None
            raise _Failure(RowError(NETWORK, f"cannot reach {_where(url)} ({_short(exc)})")) from None
        except requests.exceptions.RequestException as exc:
            raise _Failure(RowError(NETWORK, f"request to {_where(url)} failed ({_short(exc)})")) from None
        except GithubException as exc:
            raise _Failure(RowError(HTTP, f"{_where(url)}: {exc.status} {_short(exc)}", status=exc.status)) from None
        except (RuntimeError, ValueError, UnicodeDecodeError) as exc:
            raise _Failure(RowError(MALFORMED, f"unreadable response from {_where(url)} ({_short(exc)})")) from None
        lower = {str(k).lower(): str(v) for k, v in rhdrs.items()}
        self._note_rate(lower)
        body = wire.response.body if wire.response is not None else b""
        return _Resp(status, lower, body), wire.location

    def _note_rate(self, h: Mapping[str, str]) -> None:
        try:
            res = h.get("x-ratelimit-resource", "core")
            self.rate[res] = RateInfo(
                res,
                int(h["x-ratelimit-limit"]),
                int(h["x-ratelimit-remaining"]),
                int(h["x-ratelimit-reset"]),
                int(h.get("x-ratelimit-used", 0)),
            )
        except (KeyError, ValueError):
            pass

    def _get(
        self,
        path_or_url: str,
        accept: str = JSON,
        params: Mapping[str, Any] | None = None,
        immutable: bool = False,
        want_json: bool = True,
    ) -> _Resp:
        """A cached, conditional GET. ``immutable``: a cached copy is served without asking
        (the URL names a commit by its full sha, so its answer never changes)."""
        url = self._absolute(path_or_url, params)
        entry = self.cache.get("GET", url, accept)
        if entry is not None and (self.offline or immutable):
            return _from_cache(entry)
        if self.offline:
            raise _Failure(RowError(OFFLINE, "offline, no cached data"))
        cap = net.JSON if want_json else net.BODY
        resp = self._send("GET", url, accept, entry.conditional_headers() if entry else None, cap=cap)
        if resp.status == 304 and entry is not None:
            return _from_cache(self.cache.revalidated(entry, resp.headers))
        if resp.status != 200:
            raise _failure(resp)
        if want_json:
            resp.json()  # raises MALFORMED: a broken body is never cached
        self.cache.put("GET", url, accept, b"", resp.status, resp.headers, resp.body)
        return resp

    def _get_all(self, path: str, accept: str = JSON) -> tuple[list[Any], bool]:
        """Every page of a list endpoint (following ``Link: rel="next"``); returns the items and
        whether every page came from the cache."""
        items: list[Any] = []
        url: str | None = self._absolute(path, {"per_page": 100})
        all_cached = True
        pages = 0
        held, cap = 0, net.limits().max_json  # the pages together, not only each one
        while url:
            resp = self._get(url, accept)
            held += len(resp.body)
            if held > cap:
                raise _Failure(
                    RowError(
                        MALFORMED,
                        f"{_where(path)}: the pages together run past the {cap} bytes patchset keeps in memory "
                        f"({net.ENV_MAX_JSON}); refused",
                    )
                )
            page = resp.json()
            if not isinstance(page, list):
                raise _Failure(RowError(MALFORMED, f"{_where(url)}: expected a list", status=resp.status))
            items.extend(page)
            all_cached = all_cached and resp.cached
            url = _next_link(resp.headers.get("link", ""))
            pages += 1
            if pages > 100:
                raise _Failure(RowError(MALFORMED, f"{_where(path)}: more than 100 pages"))
        return items, all_cached

    # ---- public API ----------------------------------------------------------------------
    def parse_ref(self, text: str, kind: str | None = None) -> PRRef:
        return PRRef.parse(text, self.aliases, kind)

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
            loaded = self._load_states(repo)
            record: dict[str, Any] = {} if isinstance(loaded, RowError) else loaded
            need: list[PRRef] = []
            now = time.time()
            for ref in group:
                saved = self._recorded(ref, record)
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
                fresh = self._fetch_states(repo, chunk) if self.authenticated else self._rest_states(chunk)
                out.update(fresh)
                got = {_state_key(r): s.to_json() for r, s in fresh.items() if isinstance(s, PRState)}
                if got:
                    record.update(got)
                    self._save_states(repo, record)
        return {ref: out[ref] for grp in by_repo.values() for ref in grp}

    def pr_diff(self, ref: PRRef) -> bytes:
        """The PR's diff as bytes (see ``pr_diff_detail`` for how it was obtained)."""
        return self.pr_diff_detail(ref).data

    def pr_diff_detail(self, ref: PRRef) -> PRDiff:
        """GitHub's diff of the PR, as the exact bytes GitHub sent. When GitHub will not produce
        it (406 ``too_large``, or 422 ``not_available``: "diff is taking too long to generate")
        it is rebuilt from the per-file patches, or, if some file has no patch there, from the
        PR's non-merge commits as format-patch text."""
        what = f"diff of {ref}"
        try:
            resp = self._get(f"/repos/{ref.repo}/pulls/{ref.number}", DIFF, want_json=False)
            return PRDiff(ref, resp.body, "diff", resp.cached, resp.age_s)
        except _Failure as f:
            if not (_diff_refused(f) or f.row.kind == OFFLINE):
                raise FetchError(f.row, what) from None
            # offline: a refused diff may have been rebuilt from cached file pages before
            refused = f.row.message
        try:
            files, cached = self._get_all(f"/repos/{ref.repo}/pulls/{ref.number}/files")
            data, missing = _diff_from_files(files)
            if not missing and len(files) < 3000:
                note = f"GitHub refused the whole diff ({refused}); rebuilt from {len(files)} per-file patches"
                log(__name__).info("%s: %s", ref, note)
                return PRDiff(ref, data, "files", cached, None, note)
            reason = (
                f"{len(missing)} file(s) have no patch in the file list ({', '.join(missing[:3])})"
                if missing
                else "the file list stops at 3000 files"
            )
            return self._diff_from_commits(ref, f"GitHub refused the whole diff and {reason}")
        except _Failure as f:
            raise FetchError(f.row, what) from None

    def _diff_from_commits(self, ref: PRRef, why: str) -> PRDiff:
        """The PR's commits as concatenated ``git format-patch`` text. Refuses a PR with more
        commits than GitHub lists (250): the body would silently miss the rest. Skips merge
        commits (more than one parent): their patch is the diff against the first parent, which
        carries whatever upstream changes were merged into the branch, not the PR's change."""
        pull = self._get(f"/repos/{ref.repo}/pulls/{ref.number}").json()
        total = pull.get("commits") if isinstance(pull, dict) else None
        commits, _ = self._get_all(f"/repos/{ref.repo}/pulls/{ref.number}/commits")
        if (isinstance(total, int) and total > len(commits)) or len(commits) > PR_COMMIT_CAP:
            raise _Failure(
                RowError(
                    HTTP,
                    f"{why}, and the PR has {total} commits while GitHub lists only the first "
                    f"{PR_COMMIT_CAP}: a body from them would be incomplete; fetch the branch with git "
                    f"(git fetch <remote> pull/{ref.number}/head) and export it instead",
                )
            )
        parts: list[bytes] = []
        merges: list[str] = []
        held, cap = 0, net.limits().max_body  # the patches together, not only each one
        for c in commits:
            sha = c.get("sha") if isinstance(c, dict) else None
            if not isinstance(sha, str):
                raise _Failure(RowError(MALFORMED, "a PR commit without a sha"))
            if not _HEX40.match(sha):  # it goes into the next request's path
                raise _Failure(Unreadable("sha", sha).row())
            parents = c.get("parents")
            if isinstance(parents, list) and len(parents) > 1:
                merges.append(sha)
                continue
            parts.append(
                self._get(
                    f"/repos/{ref.repo}/commits/{sha}", PATCH, immutable=bool(_HEX40.match(sha)), want_json=False
                ).body
            )
            held += len(parts[-1])
            if held > cap:
                raise _Failure(
                    RowError(
                        MALFORMED,
                        f"{why}, and its commit patches together run past the {cap} bytes patchset keeps in "
                        f"memory ({net.ENV_MAX_BODY}); refused",
                    )
                )
        note = f"{why}; concatenated {len(parts)} commit patches"
        if merges:
            note += f", skipped {len(merges)} merge commit(s) ({', '.join(m[:12] for m in merges[:3])})"
        if not parts:
            raise _Failure(RowError(HTTP, f"{why}, and the PR has no commits other than merges"))
        log(__name__).info("%s: %s", ref, note)
        return PRDiff(ref, b"".join(parts), "commits", False, None, note)

    def commit_diff(self, repo: str, sha: str, *, revalidate: bool = False) -> bytes:
        """One commit's diff (GitHub's diff media type). A full sha is served from the cache once
        seen (its answer cannot change); ``revalidate`` asks the server anyway (a conditional GET:
        a 304 costs no rate limit), to notice a commit that is gone upstream."""
        try:
            return self._get(
                f"/repos/{repo}/commits/{sha}",
                DIFF,
                immutable=bool(_HEX40.match(sha)) and not revalidate,
                want_json=False,
            ).body
        except _Failure as f:
            raise FetchError(f.row, f"diff of {repo}@{sha}") from None

    def file_at(self, repo: str, ref: str, path: str, *, revalidate: bool = False) -> bytes:
        """The bytes of ``path`` at ``ref`` (contents API, base64; exact bytes). Over 1 MB GitHub
        answers the JSON media type with 403 ``too_large``: the raw media type is asked instead.
        At a full sha it is served from the cache once seen, unless ``revalidate`` (see
        ``commit_diff``)."""
        what = f"{repo}:{path}@{ref}"
        url = f"/repos/{repo}/contents/{quote(path.lstrip('/'))}"
        immutable = bool(_HEX40.match(ref)) and not revalidate
        try:
            try:
                doc = self._get(url, JSON, {"ref": ref}, immutable=immutable).json()
            except _Failure as f:
                if f.row.status == 403 and "too_large" in f.codes:
                    return self._get(url, RAW, {"ref": ref}, immutable=immutable, want_json=False).body
                raise
            if not isinstance(doc, dict) or doc.get("type") != "file":
                raise _Failure(RowError(MALFORMED, f"{path} is not a file at {ref}"))
            if doc.get("encoding") == "base64":
                import base64
                import binascii

                try:
                    return base64.b64decode(doc.get("content") or "", validate=False)
                except (binascii.Error, ValueError):
                    raise _Failure(RowError(MALFORMED, "content is not valid base64")) from None
            # encoding "none" (a 1-100 MB file through the object media type): no content; ask raw.
            return self._get(url, RAW, {"ref": ref}, immutable=immutable, want_json=False).body
        except _Failure as f:
            raise FetchError(f.row, what) from None

    def rate_limit(self) -> dict[str, RateInfo]:
        """GitHub's ``/rate_limit`` (does not count against the limit)."""
        try:
            resp = self._send("GET", self._absolute("/rate_limit"), JSON)
            if resp.status != 200:
                raise _failure(resp)
            res = resp.json().get("resources", {})
            return {
                k: RateInfo(k, int(v["limit"]), int(v["remaining"]), int(v["reset"]), int(v.get("used", 0)))
                for k, v in res.items()
                if isinstance(v, dict)
            }
        except _Failure as f:
            raise FetchError(f.row, "rate limit") from None
        except (AttributeError, KeyError, TypeError, ValueError):
            raise FetchError(RowError(MALFORMED, "unexpected /rate_limit shape"), "rate limit") from None

    # ---- PR states -----------------------------------------------------------------------
    def _fetch_states(self, repo: str, refs: list[PRRef]) -> dict[PRRef, PRState | RowError]:
        owner, name = repo.split("/", 1)
        try:
            resp = self._send(
                "POST",
                self._requester().graphql_url,
                payload={"query": build_query(refs), "variables": {"owner": owner, "name": name}},
            )
            if resp.status != 200:
                raise _failure(resp)
            doc = resp.json()
            if not isinstance(doc, dict):
                raise _Failure(RowError(MALFORMED, "GraphQL answer is not an object"))
        except _Failure as f:
            return {r: f.row for r in refs}
        return parse_states(repo, refs, doc, resp.headers)

    def _rest_states(self, refs: list[PRRef]) -> dict[PRRef, PRState | RowError]:
        """Without a token GitHub's GraphQL refuses to answer: read each ref over REST
        (cached and conditional). No review decision or CI rollup on this path."""
        out: dict[PRRef, PRState | RowError] = {}
        for ref in refs:
            try:
                if ref.kind == "pr":
                    out[ref] = pull_from_rest(ref, self._get(f"/repos/{ref.repo}/pulls/{ref.number}").json())
                else:
                    out[ref] = issue_from_rest(ref, self._get(f"/repos/{ref.repo}/issues/{ref.number}").json())
            except _Failure as f:
                out[ref] = f.row
            except Unreadable as bad:
                out[ref] = bad.row()
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                out[ref] = RowError(MALFORMED, f"unexpected REST shape ({_short(exc)})")
        return out

    @staticmethod
    def _recorded(ref: PRRef, record: Mapping[str, Any]) -> PRState | RowError | None:
        """The recorded state of ``ref``, checked; a ``RowError`` naming the field when it is
        unreadable; None when nothing is recorded."""
        key = _state_key(ref)
        if key not in record:
            return None
        try:
            return recorded_state(ref, record[key])
        except Unreadable as bad:
            return bad.row("recorded state")

    def _record_name(self, repo: str) -> str:
        return f"states:{self.base_url}:{repo.lower()}"

    def _load_states(self, repo: str) -> dict[str, Any] | RowError:
        """The states recorded for ``repo`` (state key -> ``PRState.to_json()``), unchecked: each
        entry is checked when a ref asks for it (``payloads.recorded_state``), so one bad entry
        marks one row. A record that is not a JSON object is a ``RowError`` for every ref."""
        entry = self.cache.get("STATE", self._record_name(repo))
        if entry is None:
            return {}
        import json

        try:
            raw = json.loads(entry.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raw = None
        if not isinstance(raw, dict):
            return RowError(MALFORMED, f"unreadable recorded state: the record of {repo} is not a JSON object")
        return raw

    def _save_states(self, repo: str, record: Mapping[str, Any]) -> None:
        import json

        body = json.dumps(dict(record), sort_keys=True).encode("utf-8")
        self.cache.put("STATE", self._record_name(repo), "", b"", 200, {}, body)


# ---- pure helpers (tested directly) ---------------------------------------------------------
_PR_FIELDS = (
    "number title url state isDraft merged mergedAt closedAt createdAt updatedAt author { login } "
    "mergeCommit { oid } headRefOid reviewDecision "
    "commits(last: 1) { nodes { commit { oid statusCheckRollup { state } } } } " + TIMELINE
)
# ``state`` is an IssueState on an Issue and a PullRequestState on a PullRequest: selecting both
# under one response key in ``issueOrPullRequest`` breaks the spec's OverlappingFieldsCanBeMerged
# rule, so the issue's is aliased.
_ISSUE_FIELDS = "number title url issueState: state stateReason closedAt createdAt updatedAt author { login }"


def build_query(refs: Iterable[PRRef]) -> str:
    """The one GraphQL document for a repository: an aliased field per ref. Only the fragments
    the document uses are defined: GitHub rejects a document with an unused fragment."""
    lines = []
    used: set[str] = set()
    for ref in refs:
        if ref.kind == "pr":
            lines.append(f"    {ref.alias}: pullRequest(number: {ref.number}) {{ ...PRFields }}")
            used.add("PRFields")
        else:
            lines.append(
                f"    {ref.alias}: issueOrPullRequest(number: {ref.number}) {{ __typename ...IssueFields ...PRFields }}"
            )
            used.update(("PRFields", "IssueFields"))
    fragments = {
        "PRFields": f"fragment PRFields on PullRequest {{ {_PR_FIELDS} }}\n",
        "IssueFields": f"fragment IssueFields on Issue {{ {_ISSUE_FIELDS} }}\n",
    }
    return (
        "query($owner: String!, $name: String!) {\n"
        "  rateLimit { limit remaining resetAt cost }\n"
        "  repository(owner: $owner, name: $name) {\n"
        + "\n".join(lines)
        + "\n  }\n}\n"
        + "".join(text for name, text in fragments.items() if name in used)
    )


def parse_states(
    repo: str, refs: list[PRRef], doc: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> dict[PRRef, PRState | RowError]:
    """Turn one GraphQL answer into a row per ref (a state, or the error that hit that alias)."""
    headers = headers or {}
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        errors = [{"message": str(errors)}]
    by_alias: dict[str, dict[str, Any]] = {}
    general: list[dict[str, Any]] = []
    for e in errors:
        if not isinstance(e, dict):
            continue
        path = e.get("path") or []
        if isinstance(path, list) and len(path) >= 2 and path[0] == "repository":
            by_alias[str(path[1])] = e
        else:
            general.append(e)
    for e in general:
        if e.get("type") == "RATE_LIMITED":
            row = RowError(
                RATE_LIMIT,
                str(e.get("message") or "GraphQL rate limit exceeded"),
                reset_at=_reset_of(headers),
                status=200,
            )
            return {r: row for r in refs}
    data = doc.get("data")
    repo_node = data.get("repository") if isinstance(data, dict) else None
    if repo_node is None:
        e = general[0] if general else {}
        kind = NOT_FOUND if e.get("type") == "NOT_FOUND" else (GRAPHQL if e else MALFORMED)
        msg = str(e.get("message") or f"no data for {repo}")
        return {r: RowError(kind, msg) for r in refs}
    if not isinstance(repo_node, dict):
        return {r: RowError(MALFORMED, "repository is not an object") for r in refs}
    now = time.time()
    out: dict[PRRef, PRState | RowError] = {}
    for ref in refs:
        node = repo_node.get(ref.alias)
        if node is None:
            e = by_alias.get(ref.alias) or (general[0] if general else {})
            kind = NOT_FOUND if e.get("type") == "NOT_FOUND" else (GRAPHQL if e else MALFORMED)
            out[ref] = RowError(
                kind, str(e.get("message") or f"no data for {ref}"), status=404 if kind == NOT_FOUND else None
            )
            continue
        try:
            state = pr_from_graphql(ref, node, now)
        except Unreadable as bad:
            out[ref] = bad.row()
            continue
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            out[ref] = RowError(MALFORMED, f"unexpected GraphQL shape for {ref} ({_short(exc)})")
            continue
        _timeline_into(state, repo, ref, node)
        out[ref] = state
    return out


def _timeline_into(state: PRState, repo: str, ref: PRRef, node: Mapping[str, Any]) -> None:
    """The PR's cross-references (``tracker.followups``, checked item by item) into its state."""
    if state.is_pull and "timelineItems" in node:
        found, notes = parse_timeline(repo, ref.number, node)
        state.followups = [f.to_json() for f in found]
        state.followup_notes = notes


def classify(status: int, headers: Mapping[str, str], body: bytes) -> RowError:
    """A RowError for a failed HTTP answer, from GitHub's status, headers and error body."""
    import json

    message = ""
    try:
        doc = json.loads(body.decode("utf-8"))
        if isinstance(doc, dict):
            message = str(doc.get("message") or "")
    except (ValueError, UnicodeDecodeError):
        message = ""
    if not message:
        message = {
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            406: "Not Acceptable",
            429: "Too Many Requests",
            500: "Server Error",
            502: "Bad Gateway",
            503: "Service Unavailable",
            504: "Gateway Timeout",
        }.get(status, f"HTTP {status}")
    text = f"{status} {message}"
    if status == 401:
        return RowError(AUTH, text + " (the token was refused)", status=status)
    if status in (403, 429):
        # GitHub: a primary limit is a 403/429 with X-RateLimit-Remaining: 0; a secondary limit is
        # a 403 or 429 whose message says so, with or without Retry-After. A 429 is always a limit.
        low = message.lower()
        if (
            status == 429
            or headers.get("x-ratelimit-remaining") == "0"
            or "rate limit" in low
            or "retry-after" in headers
        ):
            return RowError(RATE_LIMIT, text, reset_at=_reset_of(headers), status=status)
        return RowError(FORBIDDEN, text, status=status)
    if status == 404:
        return RowError(NOT_FOUND, text, status=status)
    if status >= 500:
        return RowError(SERVER, text, status=status)
    return RowError(HTTP, text, status=status)


def _diff_refused(f: _Failure) -> bool:
    """GitHub would not produce the whole diff: 406 (too large) or 422 ``not_available`` (taking
    too long to generate). Other 422s (no such commit…) are real failures."""
    if f.row.status == 406:
        return True
    return f.row.status == 422 and ("not_available" in f.codes or "too long" in f.row.message.lower())


def error_codes(body: bytes) -> tuple[str, ...]:
    """The ``errors[].code`` values of a GitHub error body (``too_large``, ``not_available``…)."""
    import json

    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return ()
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return ()
    return tuple(str(e["code"]) for e in errors if isinstance(e, dict) and isinstance(e.get("code"), str))


def _failure(resp: _Resp) -> _Failure:
    return _Failure(classify(resp.status, resp.headers, resp.body), error_codes(resp.body))


def _reset_of(headers: Mapping[str, str]) -> float | None:
    """When to ask again, as GitHub documents it: after ``Retry-After`` seconds; else, when the
    primary limit is spent (remaining 0), at ``X-RateLimit-Reset``; else (a secondary limit
    without Retry-After) in at least a minute."""
    try:
        if "retry-after" in headers:
            return float(int(time.time()) + int(headers["retry-after"]))
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            return float(int(headers["x-ratelimit-reset"]))
    except ValueError:
        return None
    return float(int(time.time()) + 60)


def _diff_from_files(files: list[Any]) -> tuple[bytes, list[str]]:
    """Rebuild a git-style diff from GitHub's per-file entries. Returns the diff and the names of
    files that carry no patch although they changed (binary, or too large for GitHub to show).

    GitHub's file list has no file modes; new and deleted files are written as mode 100644. Every
    field is checked first (``payloads.file_entry``): a name with a newline would write diff
    headers of its own."""
    parts: list[str] = []
    missing: list[str] = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            raise _Failure(RowError(MALFORMED, "a PR file entry without a filename"))
        try:
            new, old, status, patch, changed = file_entry(f)
        except Unreadable as bad:
            raise _Failure(bad.row()) from None
        if patch is None and (changed or status in ("added", "removed", "modified", "changed")):
            missing.append(new)
            continue
        head = [f"diff --git a/{old} b/{new}"]
        if status == "added":
            head.append("new file mode 100644")
        elif status == "removed":
            head.append("deleted file mode 100644")
        elif status == "renamed":
            head += [f"rename from {old}", f"rename to {new}"]
        if patch:
            head.append("--- /dev/null" if status == "added" else f"--- a/{old}")
            head.append("+++ /dev/null" if status == "removed" else f"+++ b/{new}")
            head.append(patch if patch.endswith("\n") else patch + "\n")
            parts.append("\n".join(head))
        else:
            parts.append("\n".join(head) + "\n")
    return "".join(parts).encode("utf-8"), missing


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


def _from_cache(entry: CacheEntry) -> _Resp:
    return _Resp(entry.status, dict(entry.headers), entry.body, cached=True, age_s=round(entry.age(), 3))


def _state_key(ref: PRRef) -> str:
    return f"{ref.kind}:{ref.number}"


def _is_timeout(exc: BaseException) -> bool:
    import urllib3

    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)
    # NewConnectionError (refused, unreachable) subclasses ConnectTimeoutError in urllib3.
    return isinstance(reason, urllib3.exceptions.TimeoutError) and not isinstance(
        reason, urllib3.exceptions.NewConnectionError
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _where(url: str) -> str:
    parts = urlsplit(url)
    return parts.path or url


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
