"""A local GitHub-shaped HTTP server for tests and benchmarks (this machine never reaches GitHub).

``FakeHub`` is a real ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port by default) that
answers the REST and GraphQL requests the tracker makes, and the pull request / issue writes of
``ci/scripts/github_report.py``, the way GitHub's API does: documented
JSON shapes (``tracker.fakehub_shapes``), the diff/patch/raw media types, ``Link`` pagination,
weak ETags with ``If-None-Match`` → 304, the ``X-RateLimit-*`` headers and 403 on exhaustion,
GitHub's error bodies, and a GraphQL endpoint that really parses queries
(``tracker.fakehub_graphql``). Tests drive it in Python (mutations, injected faults, request
counts); other processes can drive it over ``/_fakehub/*`` admin endpoints.

Use::

    with FakeHub(data) as hub:                      # data: dict, HubState, path to JSON, or None
        client = GitHubClient(base_url=hub.base_url, token="t")
        hub.force_push("vllm-project/vllm", 57632, new_diff)
        hub.inject("/repos/*/pulls/1/files", status=502, times=1)
        assert hub.count("POST /graphql") == 1

    python -m tests.support.fakehub --port 8765 --data state.json

Where this server knowingly differs from GitHub (each also noted at the spot):
- Only the endpoints the tracker and the CI scripts use exist; anything else is a GitHub-shaped 404.
- ETags hash the body and media type only (GitHub's also vary with the token).
- Tokens: with no ``tokens`` list in the state any token is accepted as user "octocat".
- One rate-limit bucket per resource for all tokens; unauthenticated REST has its own 60/h bucket.
- GraphQL costs 1 point per query (GitHub computes a cost from the requested connections).
- Mergeability is computed at once (GitHub answers ``mergeable: null`` until a background job ran).
- ``Link`` URLs use ``/repos/{owner}/{repo}/…`` (GitHub often uses ``/repositories/{id}/…``).
- Blob ids of files in PR/commit file lists are derived from the diff text, not real blobs.
- A 502 is a short HTML page, like GitHub's load balancer sends; the exact page differs.
- Writes (GET/POST ``/repos/{o}/{r}/pulls``, PATCH ``…/pulls/{n}``, GET/POST ``…/issues``, PATCH
  ``…/issues/{n}``, POST ``…/issues/{n}/comments``): any accepted token may write (GitHub checks
  the token's permissions; without a token it is 401 here too); a pull request's head branch need
  not exist (its head commit is made up, with no diff); labels need not exist beforehand (GitHub
  creates missing ones too, for users with push access); list filters are ``state``, ``head``,
  ``base`` (pulls) and ``state``, ``labels`` (issues) only, newest first; PATCH ``…/issues/{n}``
  edits issues, not pull requests; every write is made as "octocat". Issues and pull requests
  share one number sequence, as on GitHub.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import ipaddress
import json
import logging
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from patchset.errors import InputError
from tests.support.fakehub import shapes
from tests.support.fakehub.graphql import ArgumentError, NotFound, Obj, execute
from tests.support.fakehub.state import HubState, Issue, Pull, Repo, as_bytes
from tests.support.fakehub.validation import DocumentValidator

log = logging.getLogger(__name__)

REST_PREFIX = "/api/v3"
CONTENTS_JSON_LIMIT = 1024 * 1024  # the contents API's JSON media type refuses larger files (403 too_large)
GRAPHQL_PATH = "/api/graphql"
DOC_RATE = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
DOC_GRAPHQL_AUTH = "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql"


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    media: str = "json"
    last_modified: str | None = None  # ISO time; becomes a Last-Modified header on 200s


@dataclass
class Fault:
    """An injected failure for requests whose path matches ``path`` (a glob).

    ``status``: answer with GitHub's error body for that status (401, 403, 404, 5xx).
    ``delay``: sleep this long before answering (the answer is otherwise normal): a timeout.
    ``malformed``: answer 200 with the real JSON body cut in half.
    ``secondary``: a 403 secondary rate limit; ``status=429`` is one too. ``retry_after``: its
    ``Retry-After`` header (None: none, as GitHub sometimes sends).
    ``times``: how many matching requests to affect (None: all).
    """

    path: str
    status: int | None = None
    delay: float = 0.0
    malformed: bool = False
    secondary: bool = False
    times: int | None = None
    method: str | None = None
    hits: int = 0
    retry_after: int | None = 60  # the Retry-After of a secondary limit (None: no header, as GitHub may)

    def matches(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method:
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        rel = path[len(REST_PREFIX) :] if path.startswith(REST_PREFIX + "/") else path
        return fnmatch.fnmatchcase(path, self.path) or fnmatch.fnmatchcase(rel, self.path)


@dataclass
class RequestRecord:
    method: str
    path: str
    endpoint: str
    status: int
    media: str
    authenticated: bool
    conditional: bool
    at: float
    query: str = ""  # the raw query string
    accept: str = ""  # the Accept header as sent
    api_version: str | None = None  # X-GitHub-Api-Version as sent
    content_type: str = ""  # of the reply
    body: bytes | None = None  # the reply's body, kept only when ``FakeHub.keep_bodies``


@dataclass
class Bucket:
    limit: int
    remaining: int
    reset: int
    used: int = 0

    def refresh(self, now: float) -> None:
        if now >= self.reset:
            self.remaining, self.used, self.reset = self.limit, 0, int(now) + 3600


_Route = tuple[str, "re.Pattern[str]", str, str]
_ROUTES: list[_Route] = [
    ("GET", re.compile(r"^/rate_limit$"), "GET /rate_limit", "_rate_limit_json"),
    ("GET", re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)$"), "GET /repos/{owner}/{repo}", "_get_repo"),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls/(?P<n>\d+)$"),
        "GET /repos/{owner}/{repo}/pulls/{number}",
        "_get_pull",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls/(?P<n>\d+)/files$"),
        "GET /repos/{owner}/{repo}/pulls/{number}/files",
        "_get_pull_files",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls/(?P<n>\d+)/commits$"),
        "GET /repos/{owner}/{repo}/pulls/{number}/commits",
        "_get_pull_commits",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/commits/(?P<ref>[^/]+)$"),
        "GET /repos/{owner}/{repo}/commits/{ref}",
        "_get_commit",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/issues/(?P<n>\d+)$"),
        "GET /repos/{owner}/{repo}/issues/{number}",
        "_get_issue",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/contents/(?P<path>.+)$"),
        "GET /repos/{owner}/{repo}/contents/{path}",
        "_get_contents",
    ),
    # writes (and the lists a writer reads first): handlers take the JSON body instead of the media
    ("GET", re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls$"), "GET /repos/{owner}/{repo}/pulls", "_list_pulls"),
    (
        "POST",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls$"),
        "POST /repos/{owner}/{repo}/pulls",
        "_create_pull",
    ),
    (
        "PATCH",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/pulls/(?P<n>\d+)$"),
        "PATCH /repos/{owner}/{repo}/pulls/{number}",
        "_update_pull",
    ),
    (
        "GET",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/issues$"),
        "GET /repos/{owner}/{repo}/issues",
        "_list_issues",
    ),
    (
        "POST",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/issues$"),
        "POST /repos/{owner}/{repo}/issues",
        "_create_issue",
    ),
    (
        "PATCH",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/issues/(?P<n>\d+)$"),
        "PATCH /repos/{owner}/{repo}/issues/{number}",
        "_update_issue",
    ),
    (
        "POST",
        re.compile(r"^/repos/(?P<o>[^/]+)/(?P<r>[^/]+)/issues/(?P<n>\d+)/comments$"),
        "POST /repos/{owner}/{repo}/issues/{number}/comments",
        "_create_comment",
    ),
]


def media_of(accept: str) -> str:
    """GitHub's media-type selection: json, diff, patch, raw, sha or object."""
    for part in (accept or "").split(","):
        mt = part.split(";")[0].strip().lower()
        m = re.match(r"^application/vnd\.github(?:\.v3)?(?:\.([a-z]+))?(?:\+json)?$", mt)
        if m and m.group(1) in ("diff", "patch", "raw", "sha", "object", "html", "text", "full"):
            return m.group(1)  # application/vnd.github.raw+json is raw too, as GitHub documents
    return "json"


def _json(obj: Any, status: int = 200, **kw: Any) -> Reply:
    return Reply(status, json.dumps(obj, indent=None, separators=(",", ":")).encode("utf-8"), **kw)


def _err(status: int, message: str, doc: str = shapes.DOCS, **extra: Any) -> Reply:
    return _json(shapes.error(message, status, doc, **extra), status)


def _not_found() -> Reply:
    return _err(404, "Not Found", shapes.DOCS)


def _invalid(resource: str, field: str, code: str = "missing_field", message: str = "") -> Reply:
    """GitHub's 422 for a write: one error naming the field (or a custom message)."""
    err = (
        {"resource": resource, "code": "custom", "message": message}
        if message
        else {"resource": resource, "field": field, "code": code}
    )
    return _err(422, "Validation Failed", errors=[err])


def _diff_refusal(p: Pull) -> Reply | None:
    """GitHub's answers when it will not produce a pull request's diff: 406 ``too_large`` (over
    20,000 lines or 300 files) and 422 ``not_available`` (the diff took too long to generate)."""
    if p.diff_too_large:
        return _err(
            406,
            "Sorry, the diff exceeded the maximum number of lines (20000). Consider using "
            "'List pull requests files' API or locally cloning the repository instead.",
            "https://docs.github.com/rest/pulls/pulls#list-pull-requests-files",
            errors=[{"resource": "PullRequest", "field": "diff", "code": "too_large"}],
        )
    if p.diff_unavailable:
        return _err(
            422,
            "Sorry, this diff is taking too long to generate.",
            "https://docs.github.com/rest/pulls/pulls#get-a-pull-request",
            errors=[{"resource": "PullRequest", "field": "diff", "code": "not_available"}],
        )
    return None


def _query_of(body: bytes) -> str:
    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return ""
    return doc.get("query", "") if isinstance(doc, dict) and isinstance(doc.get("query"), str) else ""


def _json_object(body: bytes) -> dict[str, Any] | None:
    """A write's JSON body (none: ``{}``); None when it is not a JSON object."""
    try:
        data = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


class FakeHub:
    """The server plus its state, faults, rate-limit buckets and request log."""

    def __init__(
        self,
        data: dict[str, Any] | HubState | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        core_limit: int = 5000,
        graphql_limit: int = 5000,
        anon_limit: int = 60,
        graphql_schema: Any = "published",
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise InputError(f"fakehub binds to loopback only, not {host}", hint="use 127.0.0.1")
        if isinstance(data, HubState):
            self.state = data
        elif isinstance(data, (str, Path)):
            self.state = HubState.from_file(Path(data))
        else:
            self.state = HubState.from_json(data or {})
        self.host = host
        self.port = port
        now = int(time.time())
        self.buckets = {
            "core": Bucket(core_limit, core_limit, now + 3600),
            "graphql": Bucket(graphql_limit, graphql_limit, now + 3600),
            "core:anon": Bucket(anon_limit, anon_limit, now + 3600),
        }
        # GraphQL documents are checked with the spec's validation rules against GitHub's published
        # schema (npm @octokit/graphql-schema, when cached), else with the rules that need no schema.
        self.validator = DocumentValidator(graphql_schema)
        self.faults: list[Fault] = []
        self.requests: list[RequestRecord] = []
        self.graphql_documents: list[str] = []  # every GraphQL document received, in order
        self.keep_bodies = False  # keep each reply's body in ``requests`` (conformance tests)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = _Server((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fakehub:{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes slow responses
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as PyGithub's ``base_url``."""
        return self.root_url + REST_PREFIX

    @property
    def graphql_url(self) -> str:
        return self.root_url + GRAPHQL_PATH

    # ---- test controls -------------------------------------------------------------------
    def force_push(self, repo: str, number: int, diff: str, head_sha: str | None = None) -> str:
        return self.state.force_push(repo, number, diff, head_sha)

    def merge(self, repo: str, number: int, merge_commit_sha: str | None = None, merged_at: str | None = None) -> str:
        return self.state.merge(repo, number, merge_commit_sha, merged_at)

    def close(self, repo: str, number: int) -> None:
        self.state.close(repo, number)

    def inject(
        self,
        path: str,
        *,
        status: int | None = None,
        delay: float = 0.0,
        malformed: bool = False,
        secondary: bool = False,
        times: int | None = None,
        method: str | None = None,
        retry_after: int | None = 60,
    ) -> Fault:
        fault = Fault(path, status, delay, malformed, secondary, times, method, retry_after=retry_after)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def set_rate_limit(
        self,
        resource: str = "core",
        *,
        remaining: int | None = None,
        limit: int | None = None,
        reset_in: float | None = None,
    ) -> Bucket:
        with self._lock:
            b = self.buckets[resource]
            if limit is not None:
                b.limit = limit
            if remaining is not None:
                b.remaining = remaining
                b.used = b.limit - remaining
            if reset_in is not None:
                b.reset = int(time.time() + reset_in)
            return b

    def rate(self, resource: str = "core") -> Bucket:
        with self._lock:
            b = self.buckets[resource]
            return Bucket(b.limit, b.remaining, b.reset, b.used)

    def count(
        self,
        endpoint: str | None = None,
        *,
        status: int | None = None,
        method: str | None = None,
        media: str | None = None,
    ) -> int:
        """Requests served (admin calls excluded), filtered by endpoint template, status, method, media."""
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (endpoint is None or r.endpoint == endpoint)
                and (status is None or r.status == status)
                and (method is None or r.method == method)
                and (media is None or r.media == media)
            )

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(r.endpoint for r in self.requests)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.graphql_documents.clear()

    # ---- request handling (transport-free; _Handler does the socket side) -----------------
    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[Reply, float]:
        """Answer one request. Returns the reply and how long to wait before sending it."""
        split = urlsplit(target)
        path = unquote(split.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        if path.startswith("/_fakehub/"):
            return self._admin(method, path, body), 0.0

        auth = headers.get("authorization", "")
        token = auth.split(None, 1)[1].strip() if " " in auth else None
        authenticated = token is not None
        conditional = "if-none-match" in headers or "if-modified-since" in headers
        delay = 0.0
        with self._lock:
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault:
                fault.hits += 1
                delay = fault.delay

        if path == GRAPHQL_PATH:
            endpoint, resource = "POST /graphql", "graphql"
            reply = self._graphql(method, token, body, fault)
        elif path.startswith(REST_PREFIX + "/"):
            reply, endpoint = self._rest(
                method, path[len(REST_PREFIX) :], query, headers, token, fault, body, split.query
            )
            resource = "core" if authenticated else "core:anon"
            if endpoint == "GET /rate_limit":
                resource = ""  # GitHub: calling /rate_limit does not count against the limit
        else:
            reply, endpoint, resource = _not_found(), f"{method} ?", ""

        with self._lock:
            if resource:
                self._account(reply, resource, headers)
            self.requests.append(
                RequestRecord(
                    method,
                    path,
                    endpoint,
                    reply.status,
                    reply.media,
                    authenticated,
                    conditional,
                    time.time(),
                    query=split.query,
                    accept=headers.get("accept", ""),
                    api_version=headers.get("x-github-api-version"),
                    content_type=reply.content_type,
                    body=reply.body if self.keep_bodies else None,
                )
            )
            if path == GRAPHQL_PATH and method == "POST":
                self.graphql_documents.append(_query_of(body))
        return reply, delay

    def _check_token(self, token: str | None) -> Reply | None:
        if token is not None and self.state.tokens is not None and token not in self.state.tokens:
            return _err(401, "Bad credentials")
        return None

    def _fault_reply(self, fault: Fault | None, resource: str) -> Reply | None:
        if fault is None or fault.malformed:
            return None
        if fault.secondary or fault.status == 429:
            # GitHub: a secondary limit is a 403 or a 429, with or without Retry-After.
            r = _err(
                429 if fault.status == 429 else 403,
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
                "If you reach out to GitHub Support for help, please include the request ID 0000:0000.",
                "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            )
            if fault.retry_after is not None:
                r.headers["Retry-After"] = str(fault.retry_after)
            return r
        if fault.status is None:
            return None
        st = fault.status
        if st == 401:
            return _err(401, "Bad credentials")
        if st == 404:
            return _not_found()
        if st == 403:
            return _err(403, "Resource not accessible by integration")
        if st == 502:
            page = b"<html><body><h1>502 Bad Gateway</h1>Server Error</body></html>\n"
            return Reply(502, page, "text/html; charset=utf-8")
        if st == 503:
            return _json(
                {"message": "Service Unavailable", "documentation_url": shapes.DOCS, "code": "unavailable"}, 503
            )
        if st >= 500:
            return _json({"message": "Server Error"}, st)
        return _err(st, "Injected failure")

    def _account(self, reply: Reply, resource: str, headers: dict[str, str]) -> None:
        """Rate-limit bookkeeping and headers. A 304 costs nothing when the request was
        authenticated, as GitHub documents; an unauthenticated 304 counts like any request."""
        b = self.buckets[resource]
        b.refresh(time.time())
        free = reply.status == 304 and not resource.endswith(":anon")
        if not free and reply.headers.get("X-Fakehub-Uncounted") is None and b.remaining > 0:
            b.remaining -= 1
            b.used += 1
        reply.headers.pop("X-Fakehub-Uncounted", None)
        reply.headers.update(
            {
                "X-RateLimit-Limit": str(b.limit),
                "X-RateLimit-Remaining": str(b.remaining),
                "X-RateLimit-Reset": str(b.reset),
                "X-RateLimit-Used": str(b.used),
                "X-RateLimit-Resource": resource.split(":")[0],
            }
        )

    def _exhausted(self, resource: str) -> bool:
        with self._lock:
            b = self.buckets[resource]
            b.refresh(time.time())
            return b.remaining <= 0

    # ---- REST ----------------------------------------------------------------------------
    def _rest(
        self,
        method: str,
        rel: str,
        query: dict[str, str],
        headers: dict[str, str],
        token: str | None,
        fault: Fault | None,
        body: bytes = b"",
        raw_query: str = "",
    ) -> tuple[Reply, str]:
        endpoint = f"{method} ?"
        by_id = re.match(r"^/repositories/(\d+)(/.*)?$", rel)
        if by_id:  # where GitHub's redirects for moved repositories point
            moved_repo = self.state.repo_by_id(int(by_id.group(1)))
            if moved_repo is None:
                return _not_found(), f"{method} /repositories/{{id}}"
            rel = f"/repos/{moved_repo.full_name}{by_id.group(2) or ''}"
        handler: Callable[..., Reply] | None = None
        groups: dict[str, str] = {}
        for m, rx, name, attr in _ROUTES:
            match = rx.match(rel)
            if match and m == method:
                endpoint, handler, groups = name, getattr(self, attr), match.groupdict()
                break
        bad = self._check_token(token)
        if bad:
            return bad, endpoint
        moved = self._moved(rel, raw_query)
        if moved is not None:
            return moved, endpoint
        injected = self._fault_reply(fault, "core")
        if injected:
            return injected, endpoint
        if handler is not None and method != "GET" and token is None:
            return _err(401, "Requires authentication"), endpoint  # every write needs a token
        resource = "core" if token else "core:anon"
        if endpoint != "GET /rate_limit" and self._exhausted(resource):
            who = "user ID 1" if token else "127.0.0.1"
            r = _err(
                403,
                f"API rate limit exceeded for {who}. If you reach out to GitHub Support for help, "
                f"please include the request ID {uuid.uuid4().hex[:16].upper()}.",
                DOC_RATE,
            )
            r.headers["X-Fakehub-Uncounted"] = "1"
            return r, endpoint
        if handler is None:
            return _not_found(), endpoint
        if method == "GET":
            media = media_of(headers.get("accept", ""))
            with self.state.lock:
                reply = handler(groups, query, media)
        else:
            data = _json_object(body)
            if data is None:
                return _err(400, "Problems parsing JSON"), endpoint
            with self.state.lock:
                reply = handler(groups, query, data)
        if fault and fault.malformed and reply.status == 200:
            reply = Reply(
                200,
                reply.body[: max(1, len(reply.body) // 2)],
                reply.content_type,
                reply.headers,
                reply.media,
                reply.last_modified,
            )
        if method == "GET" and reply.status == 200:
            self._conditional(reply, headers)
        return reply, endpoint

    def _moved(self, rel: str, raw_query: str) -> Reply | None:
        """GitHub's 301 for a renamed or transferred repository: ``Location`` names the
        repository by id and keeps the rest of the path and the query string."""
        m = re.match(r"^/repos/([^/]+)/([^/]+)(/.*)?$", rel)
        if not m or self.state.repo(f"{m.group(1)}/{m.group(2)}") is not None:
            return None
        target = self.state.moved.get(f"{m.group(1)}/{m.group(2)}".lower())
        repo = self.state.repo(target[0]) if target else None
        if target is None or repo is None:
            return None
        root = target[1] or self.root_url
        location = f"{root}{REST_PREFIX}/repositories/{repo.id}{m.group(3) or ''}" + (
            f"?{raw_query}" if raw_query else ""
        )
        reply = _json(
            {
                "message": "Moved Permanently",
                "url": location,
                "documentation_url": "https://docs.github.com/rest/guides/best-practices-for-using-the-rest-api#follow-redirects",
            },
            301,
        )
        reply.headers["Location"] = location
        return reply

    @staticmethod
    def _conditional(reply: Reply, headers: dict[str, str]) -> None:
        digest = hashlib.sha256(reply.media.encode() + b"\0" + reply.body).hexdigest()
        etag = f'W/"{digest}"'
        reply.headers["ETag"] = etag
        reply.headers["Cache-Control"] = "private, max-age=60, s-maxage=60"
        reply.headers["Vary"] = "Accept, Authorization, Cookie, X-GitHub-OTP"
        if reply.last_modified:
            reply.headers["Last-Modified"] = _http_date(reply.last_modified)
        inm = headers.get("if-none-match")
        ims = headers.get("if-modified-since")
        fresh = False
        if inm is not None:
            tags = [t.strip() for t in inm.split(",")]
            bare = etag[2:]
            fresh = "*" in tags or any(t in (etag, bare) or t.removeprefix("W/") == bare for t in tags)
        elif ims is not None and reply.last_modified:
            try:
                fresh = parsedate_to_datetime(ims).timestamp() >= _iso_epoch(reply.last_modified)
            except (TypeError, ValueError):
                fresh = False
        if fresh:
            reply.status = 304
            reply.body = b""

    def _repo_or_404(self, g: dict[str, str]) -> Repo | None:
        return self.state.repo(f"{g['o']}/{g['r']}")

    def _urls(self) -> shapes.Urls:
        return shapes.Urls(self.root_url)

    def _rate_limit_json(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        with self._lock:
            res = {}
            for name, key in (("core", "core"), ("graphql", "graphql")):
                b = self.buckets[key]
                b.refresh(time.time())
                res[name] = {"limit": b.limit, "used": b.used, "remaining": b.remaining, "reset": b.reset}
            res["search"] = {"limit": 30, "used": 0, "remaining": 30, "reset": int(time.time()) + 60}
        return _json({"resources": res, "rate": res["core"]})

    def _get_repo(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        return _json(shapes.repository(repo, self._urls()), last_modified=repo.updated_at)

    def _get_pull(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        p = repo.pulls.get(int(g["n"])) if repo else None
        if repo is None or p is None:
            return _not_found()
        if media in ("diff", "patch"):
            refused = _diff_refusal(p)
            if refused is not None:
                return refused
            if media == "diff":
                return Reply(200, as_bytes(p.diff), "application/vnd.github.diff; charset=utf-8", media="diff")
            data = b"".join(shapes.commit_patch(repo.commits[s]) for s in p.commits if s in repo.commits)
            return Reply(200, data, "application/vnd.github.patch; charset=utf-8", media="patch")
        return _json(shapes.pull(repo, p, self._urls()), last_modified=p.updated_at)

    def _paged(self, items: list[Any], q: dict[str, str], rel_url: str, cap: int | None = None) -> Reply:
        try:
            per_page = max(1, min(100, int(q.get("per_page", "30"))))
            page = max(1, int(q.get("page", "1")))
        except ValueError:
            return _err(422, "Validation Failed")
        if cap is not None:
            items = items[:cap]
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        reply = _json(chunk)
        links = []
        base = f"{self.base_url}{rel_url}?per_page={per_page}&page="
        if page < last:
            links += [f'<{base}{page + 1}>; rel="next"', f'<{base}{last}>; rel="last"']
        if page > 1:
            links += [f'<{base}{page - 1}>; rel="prev"', f'<{base}1>; rel="first"']
        if links:
            reply.headers["Link"] = ", ".join(links)
        return reply

    def _get_pull_files(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        p = repo.pulls.get(int(g["n"])) if repo else None
        if repo is None or p is None:
            return _not_found()
        u = self._urls()
        files = [shapes.file_entry(repo, p.head_sha, f, u) for f in shapes.diff_files(p.diff)]
        # GitHub lists at most 3000 files for a pull request.
        return self._paged(files, q, f"/repos/{repo.full_name}/pulls/{p.number}/files", cap=3000)

    def _get_pull_commits(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        p = repo.pulls.get(int(g["n"])) if repo else None
        if repo is None or p is None:
            return _not_found()
        u = self._urls()
        items = [shapes.commit(repo, repo.commits[s], u, with_files=False) for s in p.commits if s in repo.commits]
        # GitHub lists at most 250 commits for a pull request.
        return self._paged(items, q, f"/repos/{repo.full_name}/pulls/{p.number}/commits", cap=250)

    def _get_commit(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        ref = g["ref"]
        c = repo.commits.get(ref)
        if c is None and len(ref) >= 7:
            hits = [x for s, x in repo.commits.items() if s.startswith(ref)]
            c = hits[0] if len(hits) == 1 else None
        if c is None:
            return _err(
                422, f"No commit found for SHA: {ref}", "https://docs.github.com/rest/commits/commits#get-a-commit"
            )
        if media == "diff":
            return Reply(200, as_bytes(c.diff), "application/vnd.github.diff; charset=utf-8", media="diff")
        if media == "patch":
            return Reply(200, shapes.commit_patch(c), "application/vnd.github.patch; charset=utf-8", media="patch")
        if media == "sha":
            return Reply(200, c.sha.encode("ascii"), "application/vnd.github.sha; charset=utf-8", media="sha")
        return _json(shapes.commit(repo, c, self._urls()), last_modified=c.date)

    def _get_issue(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        n = int(g["n"])
        item: Issue | Pull | None = repo.issues.get(n) or repo.pulls.get(n)
        if item is None:
            return _not_found()
        return _json(shapes.issue(repo, item, self._urls()), last_modified=item.updated_at)

    def _get_contents(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        ref = q.get("ref") or repo.default_branch
        files = repo.contents.get(ref)
        if files is None:
            return _err(
                404,
                f"No commit found for the ref {ref}",
                "https://docs.github.com/rest/repos/contents#get-repository-content",
            )
        path = g["path"].strip("/")
        if path not in files:
            return _not_found()
        data = files[path]
        if media == "raw":
            return Reply(200, data, "application/vnd.github.raw; charset=utf-8", media="raw")
        if len(data) > CONTENTS_JSON_LIMIT:
            # GitHub: over 1 MB the JSON representation is refused; the raw media type works.
            return _err(
                403,
                "This API returns blobs up to 1 MB in size. The requested blob is too large to fetch via the "
                "API, but you can use the Git Data API to request blobs up to 100 MB in size.",
                "https://docs.github.com/rest/repos/contents#get-repository-content",
                errors=[{"resource": "Blob", "field": "data", "code": "too_large"}],
            )
        return _json(shapes.content(repo, ref, path, data, self._urls()))

    # ---- REST writes (and the lists a writer reads) ------------------------------------------
    def _list_pulls(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        state = q.get("state", "open")
        items = [
            p
            for p in sorted(repo.pulls.values(), key=lambda p: -p.number)
            if (state == "all" or p.state == state)
            and (not q.get("head") or q["head"] == f"{repo.owner}:{p.head_ref}")
            and (not q.get("base") or q["base"] == p.base_ref)
        ]
        return self._paged([shapes.pull(repo, p, self._urls()) for p in items], q, f"/repos/{repo.full_name}/pulls")

    def _create_pull(self, g: dict[str, str], q: dict[str, str], data: dict[str, Any]) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        for f in ("title", "head", "base"):
            if not data.get(f):
                return _invalid("PullRequest", f)
        head = str(data["head"]).split(":", 1)[-1]
        if any(p.state == "open" and p.head_ref == head and p.base_ref == data["base"] for p in repo.pulls.values()):
            return _invalid("PullRequest", "head", message=f"A pull request already exists for {repo.owner}:{head}.")
        p = self.state.open_pull(
            repo.full_name,
            data["title"],
            head,
            data["base"],
            body=data.get("body") or "",
            draft=bool(data.get("draft")),
        )
        return _json(shapes.pull(repo, p, self._urls()), 201)

    def _update_pull(self, g: dict[str, str], q: dict[str, str], data: dict[str, Any]) -> Reply:
        repo = self._repo_or_404(g)
        n = int(g["n"])
        if repo is None or n not in repo.pulls:
            return _not_found()
        p = self.state.edit_pull(
            repo.full_name,
            n,
            title=data.get("title"),
            body=(data["body"] or "") if "body" in data else None,
            state=data.get("state"),
        )
        return _json(shapes.pull(repo, p, self._urls()))

    def _list_issues(self, g: dict[str, str], q: dict[str, str], media: str) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        state = q.get("state", "open")
        labels = [x for x in q.get("labels", "").split(",") if x]
        items: list[Issue | Pull] = [*repo.issues.values(), *repo.pulls.values()]  # GitHub lists both
        items = [
            i
            for i in sorted(items, key=lambda i: -i.number)
            if (state == "all" or i.state == state) and all(x in i.labels for x in labels)
        ]
        return self._paged([shapes.issue(repo, i, self._urls()) for i in items], q, f"/repos/{repo.full_name}/issues")

    def _create_issue(self, g: dict[str, str], q: dict[str, str], data: dict[str, Any]) -> Reply:
        repo = self._repo_or_404(g)
        if repo is None:
            return _not_found()
        if not data.get("title"):
            return _invalid("Issue", "title")
        i = self.state.open_issue(
            repo.full_name, data["title"], body=data.get("body") or "", labels=list(data.get("labels") or [])
        )
        return _json(shapes.issue(repo, i, self._urls()), 201)

    def _update_issue(self, g: dict[str, str], q: dict[str, str], data: dict[str, Any]) -> Reply:
        repo = self._repo_or_404(g)
        n = int(g["n"])
        if repo is None or n not in repo.issues:
            return _not_found()
        i = self.state.edit_issue(
            repo.full_name,
            n,
            title=data.get("title"),
            body=(data["body"] or "") if "body" in data else None,
            labels=list(data["labels"]) if "labels" in data else None,
            state=data.get("state"),
            state_reason=data.get("state_reason"),
        )
        return _json(shapes.issue(repo, i, self._urls()))

    def _create_comment(self, g: dict[str, str], q: dict[str, str], data: dict[str, Any]) -> Reply:
        repo = self._repo_or_404(g)
        n = int(g["n"])
        if repo is None or (n not in repo.issues and n not in repo.pulls):
            return _not_found()
        if not data.get("body"):
            return _invalid("IssueComment", "body")
        c = self.state.add_comment(repo.full_name, n, data["body"])
        return _json(shapes.issue_comment(repo, n, c, self._urls()), 201)

    # ---- GraphQL -------------------------------------------------------------------------
    def _graphql(self, method: str, token: str | None, body: bytes, fault: Fault | None) -> Reply:
        if method != "POST":
            return _not_found()
        bad = self._check_token(token)
        if bad:
            return bad
        if token is None:
            return _err(401, "This endpoint requires you to be authenticated.", DOC_GRAPHQL_AUTH)
        injected = self._fault_reply(fault, "graphql")
        if injected:
            return injected
        if self._exhausted("graphql"):
            # GitHub answers an exhausted GraphQL limit with 200, an error of type RATE_LIMITED and
            # X-RateLimit-Remaining: 0 (the documented behaviour; recent GitHub may also send 403).
            r = _json(
                {
                    "errors": [
                        {
                            "type": "RATE_LIMITED",
                            "code": "graphql_rate_limit",
                            "message": "API rate limit already exceeded for user ID 1.",
                        }
                    ]
                }
            )
            r.headers["X-Fakehub-Uncounted"] = "1"
            return r
        try:
            req = json.loads(body.decode("utf-8"))
            query = req["query"]
            if not isinstance(query, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return _err(400, "Problems parsing JSON", "https://docs.github.com/graphql")
        problems = self.validator.errors(query)
        if problems:
            # GitHub answers a document that fails the spec's validation rules with 200 and errors only.
            r = _json({"errors": problems})
            r.headers["X-Fakehub-Uncounted"] = "1"
            return r
        variables = req.get("variables") or {}
        with self.state.lock:
            result = execute(query, variables, self._gql_root(), req.get("operationName"))
        reply = _json(result)
        if fault and fault.malformed:
            reply.body = reply.body[: max(1, len(reply.body) // 2)]
        return reply

    def _gql_root(self) -> Obj:
        st = self.state

        def repository(args: dict[str, Any]) -> Obj:
            owner, name = args.get("owner"), args.get("name")
            if owner is None or name is None:
                raise ArgumentError("Field 'repository' is missing required arguments: owner, name")
            repo = st.repo(f"{owner}/{name}")
            moved = st.moved.get(f"{owner}/{name}".lower())
            if repo is None and moved is not None:  # GitHub's GraphQL resolves a renamed repository
                repo = st.repo(moved[0])
            if repo is None:
                raise NotFound(f"Could not resolve to a Repository with the name '{owner}/{name}'.")
            return self._gql_repo(repo)

        def rate_limit(args: dict[str, Any]) -> Obj:
            with self._lock:
                b = self.buckets["graphql"]
                return Obj(
                    "RateLimit",
                    {
                        "limit": b.limit,
                        "cost": 1,
                        "remaining": b.remaining,
                        "used": b.used,
                        "nodeCount": 0,
                        "resetAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(b.reset)),
                    },
                )

        return Obj("Query", {"repository": repository, "rateLimit": rate_limit})

    def _gql_repo(self, repo: Repo) -> Obj:
        h = f"{self.root_url}/{repo.full_name}"

        def number_of(field_name: str, args: dict[str, Any]) -> int:
            n = args.get("number")
            if not isinstance(n, int):
                raise ArgumentError(f"Field '{field_name}' is missing required arguments: number")
            return n

        def pull_request(args: dict[str, Any]) -> Obj:
            n = number_of("pullRequest", args)
            if n not in repo.pulls:
                raise NotFound(f"Could not resolve to a PullRequest with the number of {n}.")
            return self._gql_pull(repo, repo.pulls[n])

        def issue(args: dict[str, Any]) -> Obj:
            n = number_of("issue", args)
            if n not in repo.issues:
                raise NotFound(f"Could not resolve to an Issue with the number of {n}.")
            return self._gql_issue(repo, repo.issues[n])

        def issue_or_pull(args: dict[str, Any]) -> Obj:
            n = number_of("issueOrPullRequest", args)
            if n in repo.pulls:
                return self._gql_pull(repo, repo.pulls[n])
            if n in repo.issues:
                return self._gql_issue(repo, repo.issues[n])
            raise NotFound(f"Could not resolve to an issue or pull request with the number of {n}.")

        owner = Obj(
            "Organization", {"login": repo.owner, "url": f"{self.root_url}/{repo.owner}"}, ("RepositoryOwner", "Actor")
        )
        return Obj(
            "Repository",
            {
                "id": f"R_{repo.id}",
                "name": repo.name,
                "nameWithOwner": repo.full_name,
                "url": h,
                "owner": owner,
                "description": repo.description,
                "isArchived": False,
                "pullRequest": pull_request,
                "issue": issue,
                "issueOrPullRequest": issue_or_pull,
            },
            ("Node",),
        )

    def _actor(self, login: str) -> Obj:
        return Obj("User", {"login": login, "url": f"{self.root_url}/{login}"}, ("Actor", "Node"))

    def _gql_pull(self, repo: Repo, p: Pull) -> Obj:
        rollup = Obj("StatusCheckRollup", {"state": p.ci}) if p.ci else None

        def commit_obj(sha: str) -> Obj:
            c = repo.commits.get(sha)
            return Obj(
                "Commit",
                {
                    "oid": sha,
                    "abbreviatedOid": sha[:7],
                    "statusCheckRollup": rollup if sha == p.head_sha else None,
                    "message": c.message if c else "",
                    "committedDate": c.date if c else p.updated_at,
                },
                ("Node", "GitObject"),
            )

        def commits(args: dict[str, Any]) -> Obj:
            shas = list(p.commits)
            if isinstance(args.get("last"), int):
                shas = shas[-args["last"] :] if args["last"] else []
            if isinstance(args.get("first"), int):
                shas = shas[: args["first"]]
            nodes = [Obj("PullRequestCommit", {"commit": commit_obj(s)}) for s in shas]
            return Obj("PullRequestCommitConnection", {"totalCount": len(p.commits), "nodes": nodes})

        def timeline_items(args: dict[str, Any]) -> Obj:
            return self._gql_timeline(repo, p.number, args)

        state = "MERGED" if p.merged else p.state.upper()
        return Obj(
            "PullRequest",
            {
                "id": f"PR_{p.id}",
                "number": p.number,
                "title": p.title,
                "body": p.body,
                "url": p.html_url or f"{self.root_url}/{repo.full_name}/pull/{p.number}",
                "state": state,
                "isDraft": p.draft,
                "merged": p.merged,
                "mergedAt": p.merged_at,
                "closed": p.state == "closed",
                "closedAt": p.closed_at,
                "createdAt": p.created_at,
                "updatedAt": p.updated_at,
                "author": self._actor(p.author),
                "mergedBy": self._actor(p.merged_by) if p.merged and p.merged_by else None,
                "mergeCommit": commit_obj(p.merge_commit_sha) if p.merge_commit_sha else None,
                "headRefOid": p.head_sha,
                "headRefName": p.head_ref,
                "baseRefName": p.base_ref,
                "baseRefOid": p.base_sha,
                "reviewDecision": p.review_decision,
                "commits": commits,
                "timelineItems": timeline_items,
                "repository": lambda args: self._gql_repo(repo),
            },
            ("Node", "Assignable", "Closable", "Comment", "UniformResourceLocatable"),
        )

    def _gql_issue(self, repo: Repo, i: Issue) -> Obj:
        return Obj(
            "Issue",
            {
                "id": f"I_{i.id}",
                "number": i.number,
                "title": i.title,
                "body": i.body,
                "url": f"{self.root_url}/{repo.full_name}/issues/{i.number}",
                "state": i.state.upper(),
                "stateReason": i.state_reason.upper() if i.state_reason else None,
                "closed": i.state == "closed",
                "closedAt": i.closed_at,
                "createdAt": i.created_at,
                "updatedAt": i.updated_at,
                "author": self._actor(i.author),
                "repository": lambda args: self._gql_repo(repo),
            },
            ("Node", "Assignable", "Closable", "Comment", "UniformResourceLocatable"),
        )

    # ---- timelines ---------------------------------------------------------------------------
    def _gql_timeline(self, repo: Repo, number: int, args: dict[str, Any]) -> Obj:
        """``timelineItems``: the cross-references to ``repo#number``, oldest first, as GitHub
        keeps them (``CROSS_REFERENCED_EVENT``), with ``first``/``last`` as GitHub applies them.

        Where the double differs: GitHub records a cross-reference when a mention is written and
        keeps it; the fake derives them from what the other pull requests and issues say *now*
        (title, body, comments: ``#N`` in the same repository, ``owner/repo#N`` or the URL from
        any), so editing a mention away removes it here and not on GitHub. Only this one event
        type exists here: asked for other item types (or for all), the fake answers the
        cross-references alone; ``totalCount`` counts those."""
        types = args.get("itemTypes")
        if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
            raise ArgumentError("Argument 'itemTypes' on Field 'timelineItems' has an invalid value")
        events = self._cross_references(repo, number)
        if types is not None and "CROSS_REFERENCED_EVENT" not in types:
            events = []
        total = len(events)
        for key in ("first", "last"):
            n = args.get(key)
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= 100):
                raise ArgumentError(f"Argument '{key}' on Field 'timelineItems' must be between 0 and 100")
        if isinstance(args.get("first"), int):
            events = events[: args["first"]]
        if isinstance(args.get("last"), int):
            events = events[-args["last"] :] if args["last"] else []
        return Obj(
            "PullRequestTimelineItemsConnection",
            {"totalCount": total, "filteredCount": total, "pageCount": len(events), "nodes": events},
        )

    def _cross_references(self, repo: Repo, number: int) -> list[Obj]:
        target = f"{repo.full_name}#{number}".lower()
        url_re = re.compile(
            rf"https?://[^/\s]+/{re.escape(repo.full_name)}/(?:pull|issues)/{number}(?!\d)", re.IGNORECASE
        )
        full_re = re.compile(rf"(?<![\w/.-]){re.escape(repo.full_name)}#{number}(?!\d)", re.IGNORECASE)
        short_re = re.compile(rf"(?<![\w/#]){'#'}{number}(?!\d)")
        found: list[tuple[str, Obj]] = []
        for other in list(self.state.repos.values()):
            items: list[tuple[str, Any]] = [("pr", x) for x in other.pulls.values()]
            items += [("issue", x) for x in other.issues.values()]
            for kind, item in items:
                if other is repo and item.number == number:
                    continue
                text = "\n".join([item.title, item.body, *(c.body for c in item.comments)])
                if not (url_re.search(text) or full_re.search(text) or (other is repo and short_re.search(text))):
                    continue
                src = self._gql_pull(other, item) if kind == "pr" else self._gql_issue(other, item)
                closes = kind == "pr" and re.search(
                    rf"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+(?:{re.escape(target)}|#{number})(?!\d)",
                    item.body,
                    re.IGNORECASE,
                )
                event = Obj(
                    "CrossReferencedEvent",
                    {
                        "id": f"CRE_{item.id}_{number}",
                        "createdAt": item.created_at,
                        "referencedAt": item.created_at,
                        "isCrossRepository": other is not repo,
                        "willCloseTarget": bool(closes)
                        and target in {f"{repo.full_name}#{n}".lower() for n in repo.issues},
                        "source": src,
                        "url": f"{self.root_url}/{repo.full_name}/pull/{number}#ref-{kind}-{item.id}",
                        "resourcePath": f"/{repo.full_name}/pull/{number}#ref-{kind}-{item.id}",
                        "actor": self._actor(item.author),
                    },
                    ("Node", "UniformResourceLocatable"),
                )
                found.append((item.created_at, event))
        found.sort(key=lambda x: x[0])
        return [e for _, e in found]

    # ---- admin endpoints (not GitHub's: drive the server from another process) -------------
    def _admin(self, method: str, path: str, body: bytes) -> Reply:
        action = path[len("/_fakehub/") :]
        try:
            args = json.loads(body or b"{}")
            if method == "GET" and action == "requests":
                with self._lock:
                    return _json(
                        {
                            "total": len(self.requests),
                            "by_endpoint": dict(self.counts()),
                            "requests": [{k: v for k, v in asdict(r).items() if k != "body"} for r in self.requests],
                        }
                    )
            if method != "POST":
                return _not_found()
            if action == "reset-counts":
                self.reset_counts()
                return _json({"ok": True})
            if action == "force-push":
                return _json(
                    {"head_sha": self.force_push(args["repo"], int(args["number"]), args["diff"], args.get("head_sha"))}
                )
            if action == "merge":
                return _json(
                    {"merge_commit_sha": self.merge(args["repo"], int(args["number"]), args.get("merge_commit_sha"))}
                )
            if action == "close":
                self.close(args["repo"], int(args["number"]))
                return _json({"ok": True})
            if action == "fault":
                f = self.inject(args.pop("path"), **args)
                return _json(asdict(f))
            if action == "clear-faults":
                self.clear_faults()
                return _json({"ok": True})
            if action == "rate-limit":
                return _json(asdict(self.set_rate_limit(args.pop("resource", "core"), **args)))
        except (KeyError, TypeError, ValueError) as exc:
            return _err(422, f"bad admin request: {exc}")
        return _not_found()


def _iso_epoch(iso: str) -> float:
    return time.mktime(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone


def _http_date(iso: str) -> str:
    try:
        return formatdate(_iso_epoch(iso), usegmt=True)
    except ValueError:
        return formatdate(usegmt=True)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"
    timeout = 30
    # Send status line, headers and body in one segment: with Nagle on and a separate body write,
    # each response would wait for the client's delayed ACK (~40 ms) like no real server does.
    disable_nagle_algorithm = True
    wbufsize = -1

    def version_string(self) -> str:
        return "GitHub.com"  # GitHub's Server header

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            reply, delay = self.hub.handle(self.command, self.path, headers, body)
        except Exception:  # a bug in the fake must show as a 500, not a hung client
            log.exception("fakehub: error answering %s %s", self.command, self.path)
            reply, delay = _json({"message": "Server Error"}, 500), 0.0
        if delay and self.hub._stop.wait(delay):
            return
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("X-GitHub-Media-Type", f"github.v3; format={reply.media}")
            self.send_header("X-GitHub-Request-Id", uuid.uuid4().hex[:20].upper())
            for k, v in reply.headers.items():
                self.send_header(k, v)
            if reply.status != 304:
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if reply.status != 304 and self.command != "HEAD":
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to do

    do_GET = do_POST = do_HEAD = do_PATCH = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fakehub %s - %s", self.address_string(), format % args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.support.fakehub",
        description="Serve a GitHub-shaped API on 127.0.0.1 from a JSON state file.",
    )
    ap.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    ap.add_argument("--data", type=Path, help="JSON state file (repos, pulls, issues, commits, contents)")
    ns = ap.parse_args(argv)
    try:
        hub = FakeHub(ns.data, host=ns.host, port=ns.port).start()
    except InputError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {ns.host}:{ns.port}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"fakehub listening on {hub.base_url} (GraphQL {hub.graphql_url})", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
