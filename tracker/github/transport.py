"""The wire to GitHub: one request in, one ``Resp`` (exact bytes) or one ``Failure`` out.

Requests go through PyGithub's ``Requester.requestJson`` over ``Wire``, this module's connection
on ``patchset.upstream.net``, because PyGithub's own decodes bodies to text and follows a 301
without its query string. ``Transport.send`` follows redirects itself (same origin only: the
token stays with the API), keeps the rate-limit headers, remembers an unreachable host and turns
every transport error into a ``Failure``. The tests' other side is ``tests/support/fakehub``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlsplit

from patchset.tracker.github.auth import Secret
from patchset.tracker.github.failures import Failure, classify, error_codes
from patchset.tracker.github.httpcache import log
from patchset.upstream import net
from patchset.upstream.net import host_of, no_network_reason, retry
from patchset.upstream.refs import HTTP, MALFORMED, NETWORK, NO_NETWORK, OFFLINE, SERVER, TIMEOUT, RowError

if TYPE_CHECKING:  # PyGithub, requests and urllib3 load on the first request, not on import
    import requests
    from github import Github

__all__ = ["API_VERSION", "LOG", "PUBLIC_API", "RateInfo", "Resp", "Transport", "Wire", "failure"]

LOG = "patchset.tracker.github"  # one logger for the whole client (as before it was split into modules)
PUBLIC_API = "https://api.github.com"
JSON = "application/vnd.github+json"
DIFF = "application/vnd.github.diff"
PATCH = "application/vnd.github.patch"
RAW = "application/vnd.github.raw+json"  # GitHub's documented raw media type for the contents API
API_VERSION = "2022-11-28"  # sent as X-GitHub-Api-Version on every request
MAX_REDIRECTS = 5


@dataclass
class RateInfo:
    """GitHub's rate-limit headers of the last response."""

    resource: str
    limit: int
    remaining: int
    reset: int
    used: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Wire:
    """One HTTP exchange in the shape PyGithub's ``requestJson(cnx=...)`` expects, over the
    transport's session and ``patchset.upstream.net``. PyGithub's own connection would turn a
    non-UTF-8 byte of a diff into U+FFFD and follow a 301 without its query string: here the body
    stays the exact bytes and a redirect's ``Location`` is hidden, for the transport to follow."""

    def __init__(self, session: requests.Session, origin: str, timeout: float, cap: str = net.JSON) -> None:
        self.session = session
        self.origin = origin  # scheme://host[:port] of the base URL
        self.timeout = timeout
        self.cap = cap
        self.response: net.Answer | None = None
        self.location: str | None = None

    def request(self, verb: str, url: str, input: Any, headers: dict[str, str], stream: bool = False) -> None:
        self._args = (verb, url, input, headers)

    def getresponse(self) -> Wire:
        verb, url, data, headers = self._args
        self.response = net.request(
            self.session,
            verb,
            self.origin + url,
            what=f"{verb} {where(url)}",
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
        return self.response.body.decode("latin-1")  # lossless; the transport reads ``response.body``

    def close(self) -> None:
        pass


@dataclass
class Resp:
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
            raise Failure(RowError(MALFORMED, f"response is not valid JSON ({exc})", status=self.status)) from None


def failure(resp: Resp) -> Failure:
    """The ``Failure`` of an answer that is not a 200 (or a 304 the cache answers)."""
    return Failure(classify(resp.status, resp.headers, resp.body), error_codes(resp.body))


class Transport:
    """Requests to one GitHub API (``base_url``), with ``token``; ``offline``: none at all.

    ``retries`` on 5xx and connection errors only, ``backoff`` apart. Kept for the caller:
    ``round_trips``, ``rate`` (per resource), ``down`` (unreachable hosts) and ``redirects``."""

    def __init__(
        self, base_url: str, token: Secret, *, offline: bool, timeout: float, retries: int, backoff: float
    ) -> None:
        self.base_url = base_url
        self.token = token
        self.offline = offline
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.round_trips = 0
        self.rate: dict[str, RateInfo] = {}
        self.down: dict[str, str] = {}
        self.redirects: list[tuple[str, str]] = []
        self._gh: Github | None = None
        self._http: requests.Session | None = None

    def close(self) -> None:
        if self._gh is not None:
            self._gh.close()
            self._gh = None
        if self._http is not None:
            self._http.close()
            self._http = None

    def requester(self) -> Any:
        if self._gh is None:
            from github import Auth, Github

            value = self.token.reveal()
            self._gh = Github(
                base_url=self.base_url,
                auth=Auth.Token(value) if value else None,
                timeout=max(1, round(self.timeout)),  # PyGithub takes whole seconds (its own connection is never used)
                per_page=100,
                seconds_between_requests=None,
                seconds_between_writes=None,
            )
        return self._gh.requester

    def session(self) -> requests.Session:
        if self._http is None:
            policy = retry(
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
            self._http = net.session(retries=policy, trust_env=False)
        return self._http

    def absolute(self, path_or_url: str, params: Mapping[str, Any] | None = None) -> str:
        url = path_or_url if "://" in path_or_url else self.base_url + path_or_url
        if params:
            url += ("&" if "?" in url else "?") + urlencode(sorted(params.items()))
        return url

    def same_origin(self, url: str) -> bool:
        a, b = urlsplit(url), urlsplit(self.base_url)
        return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)

    def send(
        self,
        method: str,
        url: str,
        accept: str | None = None,
        headers: Mapping[str, str] | None = None,
        payload: Any = None,
        cap: str = net.JSON,
    ) -> Resp:
        """One request, following same-origin redirects with the full URL (path and query) the
        server named; a redirect to another origin is refused (the token would go with it).
        ``cap``: how much of an answer is kept in memory (``net.JSON`` or ``net.BODY``).
        Never raises anything but ``Failure``."""
        if self.offline:
            raise Failure(RowError(OFFLINE, "offline, no cached data"))
        host = host_of(url)
        if host in self.down:  # no network: said by the first request, not asked again
            raise Failure(RowError(NO_NETWORK, f"{host}: {self.down[host]}"))
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
            if not self.same_origin(target):
                there = urlsplit(target)
                raise Failure(
                    RowError(
                        HTTP,
                        f"{where(start)}: {resp.status} moved to another host ({there.scheme}://{there.netloc}); "
                        "not followed, so the token stays with the configured API: if the API itself moved, "
                        "point PATCHSET_GITHUB_API (or GITHUB_API_URL) there",
                        status=resp.status,
                    )
                )
            if method != "GET" and resp.status not in (307, 308):
                raise Failure(
                    RowError(HTTP, f"{where(start)}: {resp.status} redirect of a {method}", status=resp.status)
                )
            log(LOG).info("%s: %s, following to %s", where(url), resp.status, where(target))
            self.redirects.append((start, target))
            url = target
        raise Failure(RowError(HTTP, f"{where(start)}: more than {MAX_REDIRECTS} redirects"))

    def _once(
        self, method: str, url: str, hdrs: Mapping[str, str], payload: Any, cap: str = net.JSON
    ) -> tuple[Resp, str | None]:
        """One round trip through PyGithub's requester (auth, user agent, masked debug log) over
        this transport's own session (``Wire``: exact bytes, redirects left to ``send``). One
        deadline (``net.scope``) covers all of it, PyGithub's own re-asks and sleeps included."""
        import requests
        from github import GithubException

        wire = Wire(self.session(), _origin(self.base_url), self.timeout, cap)
        self.round_trips += 1
        try:
            with net.scope(url, f"{method} {where(url)}"):
                status, rhdrs, _text = self.requester().requestJson(
                    method, url, headers=dict(hdrs), input=payload, cnx=wire
                )
        except net.DeadlineExceeded as exc:
            raise Failure(RowError(TIMEOUT, exc.message)) from None
        except net.Unreachable as exc:
            self.down.setdefault(exc.host, exc.reason)
            raise Failure(RowError(NO_NETWORK, f"{exc.host}: {exc.reason}")) from None
        except net.TooLarge as exc:
            raise Failure(RowError(MALFORMED, exc.message)) from None
        except requests.exceptions.Timeout:
            raise Failure(RowError(TIMEOUT, f"no answer within {self.timeout:g}s from {where(url)}")) from None
        except requests.exceptions.RetryError:
            raise Failure(RowError(SERVER, f"{where(url)} kept failing after {self.retries} retries")) from None
        except requests.exceptions.ConnectionError as exc:
            if _is_timeout(exc):  # urllib3 wraps a read timeout it will not retry in MaxRetryError
                raise Failure(RowError(TIMEOUT, f"no answer within {self.timeout:g}s from {where(url)}")) from None
            reason = no_network_reason(exc)
            if reason:
                host = host_of(url)
                self.down.setdefault(host, reason)
                raise Failure(RowError(NO_NETWORK, f"{host}: {reason}")) from None
            raise Failure(RowError(NETWORK, f"cannot reach {where(url)} ({short(exc)})")) from None
        except requests.exceptions.RequestException as exc:
            raise Failure(RowError(NETWORK, f"request to {where(url)} failed ({short(exc)})")) from None
        except GithubException as exc:
            raise Failure(RowError(HTTP, f"{where(url)}: {exc.status} {short(exc)}", status=exc.status)) from None
        except (RuntimeError, ValueError, UnicodeDecodeError) as exc:
            raise Failure(RowError(MALFORMED, f"unreadable response from {where(url)} ({short(exc)})")) from None
        lower = {str(k).lower(): str(v) for k, v in rhdrs.items()}
        self._note_rate(lower)
        body = wire.response.body if wire.response is not None else b""
        return Resp(status, lower, body), wire.location

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


def where(url: str) -> str:
    """The path of ``url``, for a message."""
    return urlsplit(url).path or url


def short(exc: BaseException) -> str:
    """The first line of ``exc``, at most 200 characters, for a message."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
