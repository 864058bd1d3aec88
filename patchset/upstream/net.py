"""The one way patchset speaks HTTP: every request gets a connect timeout, a per-read timeout, a
total deadline, a share of its command's network budget, and a cap on what it keeps in memory.

Why it exists (security issue #23): per-read timeouts alone let a server that sends its headers
and then one byte every few seconds hold ``status --refresh`` or ``apply --from-index`` forever,
since every single read succeeds in time. Here a request is a *scope* with a deadline:

* the body is read chunk by chunk (``read1``: what has arrived, never "wait for 64 KiB") and the
  deadline is checked after each chunk;
* a watchdog timer shuts the request's sockets down when the deadline passes, so a read that
  blocks inside ``requests``, ``urllib3`` or PyGithub (headers sent byte by byte, retries, a
  redirect chain) returns at once; the sockets are the ones the scope's own connections opened
  (this module's adapter registers each connection when it sends a request);
* each deadline is ``min(the request's own, what is left of the command's budget)``; the budget
  (``command_budget``, opened once per CLI command by ``patchset.cli.guarded``) is the network
  time all requests of one command may spend together. Outside a command only the per-request
  deadlines apply.

A request that runs out raises ``DeadlineExceeded``; an answer larger than its cap raises
``TooLarge``; both are ``EnvironmentFailure`` (exit 2) whose message names what was fetched, the
host, the limit and the ``PATCHSET_NET_*`` variable that raises it. Transport errors stay
``requests`` exceptions, for each caller to word (``no_network_reason`` says in a few words when
one means there is no network: a failed DNS lookup, a refused or unreachable connection).

No network is said once. The first request of a command that fails that way marks its host
down for the rest of the command (``CommandBudget.down``); every later request to that host
raises ``Unreachable`` at once, without a connection attempt, a retry or a wait, so a command
with forty sources stops after the first. ``retry()`` is the urllib3 retry policy that does not
retry such a failure either. ``notice`` (set by the CLI) hears network work that runs longer
than ``SLOW_S`` seconds, for a progress line. The limits (docs/security.md):

==================================  ==========  =============================================
variable                            default     what it bounds
==================================  ==========  =============================================
``PATCHSET_NET_CONNECT_TIMEOUT``    10 s        opening one connection
``PATCHSET_NET_READ_TIMEOUT``       30 s        one read of the socket (silence)
``PATCHSET_NET_REQUEST_DEADLINE``   120 s       one API request, whole (GitHub, index listing)
``PATCHSET_NET_DOWNLOAD_DEADLINE``  3600 s      one release file download, whole (a ~50 MB
                                                sdist at 15 KB/s)
``PATCHSET_NET_COMMAND_DEADLINE``   7200 s      every request of one command together
``PATCHSET_NET_MAX_JSON``           64 MiB      a JSON answer held in memory
``PATCHSET_NET_MAX_BODY``           512 MiB     a diff or file held in memory
==================================  ==========  =============================================

Seconds may be fractional; ``inf`` lifts a deadline. Sizes are bytes.
"""

from __future__ import annotations

import contextvars
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from patchset.errors import EnvironmentFailure

if TYPE_CHECKING:  # requests loads with the first request, not with this module
    import requests

ENV_CONNECT = "PATCHSET_NET_CONNECT_TIMEOUT"
ENV_READ = "PATCHSET_NET_READ_TIMEOUT"
ENV_REQUEST = "PATCHSET_NET_REQUEST_DEADLINE"
ENV_DOWNLOAD = "PATCHSET_NET_DOWNLOAD_DEADLINE"
ENV_COMMAND = "PATCHSET_NET_COMMAND_DEADLINE"
ENV_MAX_JSON = "PATCHSET_NET_MAX_JSON"
ENV_MAX_BODY = "PATCHSET_NET_MAX_BODY"

API = "api"  # a request whose whole answer is small: GitHub's REST and GraphQL, an index listing
DOWNLOAD = "download"  # a release file streamed to disk

JSON = "json"  # caps: what an answer may weigh in memory
BODY = "body"

_SECONDS = {
    ENV_CONNECT: 10.0,
    ENV_READ: 30.0,
    ENV_REQUEST: 120.0,
    ENV_DOWNLOAD: 3600.0,
    ENV_COMMAND: 7200.0,
}
_BYTES = {ENV_MAX_JSON: 64 << 20, ENV_MAX_BODY: 512 << 20}
_CHUNK = 1 << 16


class Limits(NamedTuple):
    """The limits in force, from the environment (``limits()``)."""

    connect: float
    read: float
    request: float
    download: float
    command: float
    max_json: int
    max_body: int


def _seconds(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return _SECONDS[name]
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:  # also NaN
        raise EnvironmentFailure(
            f"{name}={raw!r} is not a positive number of seconds",
            hint=f"unset it (default {_SECONDS[name]:g}) or give e.g. {_SECONDS[name]:g}; 'inf' lifts the limit",
        )
    return value


def _bytes(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return _BYTES[name]
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value <= 0:
        raise EnvironmentFailure(
            f"{name}={raw!r} is not a positive number of bytes",
            hint=f"unset it (default {_BYTES[name]}) or give a byte count such as {_BYTES[name]}",
        )
    return value


def limits(env: Mapping[str, str] | None = None) -> Limits:
    """The limits from ``env`` (default: the process environment), checked."""
    env = os.environ if env is None else env
    return Limits(
        connect=_seconds(env, ENV_CONNECT),
        read=_seconds(env, ENV_READ),
        request=_seconds(env, ENV_REQUEST),
        download=_seconds(env, ENV_DOWNLOAD),
        command=_seconds(env, ENV_COMMAND),
        max_json=_bytes(env, ENV_MAX_JSON),
        max_body=_bytes(env, ENV_MAX_BODY),
    )


# ---- errors ---------------------------------------------------------------------------------
class NetLimit(EnvironmentFailure):
    """A request was stopped by one of this module's limits (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None, host: str = "", variable: str = "") -> None:
        super().__init__(message, hint=hint)
        self.host = host
        self.variable = variable


class DeadlineExceeded(NetLimit):
    """A request did not finish within its deadline, or its command's budget is spent."""


class Unreachable(EnvironmentFailure):
    """Not asked: an earlier request of this command found the host unreachable (no DNS answer,
    connection refused, network unreachable). Exit 2."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(
            f"no network: {host}: {reason}",
            hint="check the network (or the proxy); patchset stopped asking this host for the rest of the command",
        )
        self.host = host
        self.reason = reason


def no_network_reason(exc: BaseException) -> str | None:
    """A few words when ``exc`` (a ``requests``/``urllib3`` connection error, anything in its
    chain) means the host cannot be reached at all: "DNS lookup failed", "connection refused",
    "network unreachable"; None for anything else (a timeout, a reset, TLS, an HTTP status)."""
    import errno

    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, socket.gaierror) or type(e).__name__ == "NameResolutionError":
            return "DNS lookup failed"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "network unreachable"
        text = str(e)
        if type(e).__name__ == "NewConnectionError":
            for needle, reason in (
                ("Name or service not known", "DNS lookup failed"),
                ("Temporary failure in name resolution", "DNS lookup failed"),
                ("nodename nor servname", "DNS lookup failed"),
                ("Connection refused", "connection refused"),
                ("Network is unreachable", "network unreachable"),
                ("No route to host", "network unreachable"),
            ):
                if needle in text:
                    return reason
        todo += [
            getattr(e, "reason", None),
            e.__cause__,
            e.__context__,
            *[a for a in e.args if isinstance(a, BaseException)],
        ]
    return None


def retry(**kwargs: Any) -> Any:
    """urllib3's ``Retry`` with ``kwargs``, except that a failure meaning there is no network
    (``no_network_reason``) is not retried: the request fails at once."""
    from urllib3.exceptions import MaxRetryError
    from urllib3.util.retry import Retry

    class NoRetryOffline(Retry):
        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
            if error is not None and no_network_reason(error):
                raise MaxRetryError(_pool, url or "", error) from error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return NoRetryOffline(**kwargs)


class TooLarge(NetLimit):
    """An answer is larger than patchset keeps in memory."""


# ---- the command's budget -------------------------------------------------------------------
class CommandBudget:
    """Seconds of network time the requests of one command may spend together. Without
    ``seconds`` the total is read from the environment at the first request (a command that
    makes none never reads it, so a bad value fails only commands that use the network)."""

    def __init__(self, seconds: float | None = None) -> None:
        self._total = None if seconds is None else float(seconds)
        self.spent = 0.0
        self._lock = threading.Lock()
        self.down: dict[str, str] = {}  # host -> why it cannot be reached (no network), for the rest of the command
        self.notice: Any = None  # notice(text): told about network work running longer than SLOW_S
        self.started: float | None = None  # the first request's start
        self.requests = 0

    @property
    def total(self) -> float:
        if self._total is None:
            self._total = limits().command
        return self._total

    def remaining(self) -> float:
        return self.total - self.spent

    def charge(self, seconds: float) -> None:
        with self._lock:
            self.spent += max(0.0, seconds)

    def limit(self, seconds: float) -> None:
        """At most ``seconds`` of network time for this command (``--timeout``)."""
        self._total = min(self.total, float(seconds))


_budget: contextvars.ContextVar[CommandBudget | None] = contextvars.ContextVar("patchset_net_budget", default=None)


@contextmanager
def command_budget(seconds: float | None = None) -> Iterator[CommandBudget]:
    """The budget of the command running in this block (``seconds``: default
    ``$PATCHSET_NET_COMMAND_DEADLINE``). Inside a block that already has one, that one goes on:
    a command run by another command shares its budget."""
    outer = _budget.get()
    if outer is not None:
        yield outer
        return
    budget = CommandBudget(seconds)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


def current_budget() -> CommandBudget | None:
    return _budget.get()


SLOW_S = 2.0  # network work longer than this is shown (``CommandBudget.notice``)


def mark_down(url_or_host: str, reason: str) -> None:
    """Remember for the rest of the command that the host of ``url_or_host`` cannot be reached."""
    b = current_budget()
    if b is not None:
        b.down.setdefault(host_of(url_or_host) if "://" in url_or_host else url_or_host, reason)


def down(url: str) -> str | None:
    """Why the host of ``url`` cannot be reached, when an earlier request of this command found so."""
    b = current_budget()
    return b.down.get(host_of(url)) if b is not None else None


# ---- a request's scope: its deadline and its watchdog ---------------------------------------
_local = threading.local()


def _printable(text: str, limit: int = 200) -> str:
    """``text`` without control characters (it may come from an index answer or a ledger)."""
    out = "".join(ch if ch.isprintable() else "?" for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def host_of(url: str) -> str:
    """The ``host[:port]`` of ``url`` for a message: without the user and password an index URL
    may carry (``https://user:token@mirror/simple``)."""
    try:
        return _printable(urlsplit(url).netloc.rpartition("@")[2] or url)
    except ValueError:
        return _printable(url)


class Scope:
    """One request as the user sees it (redirects, retries and PyGithub's own re-asks included):
    its deadline, the connections it used, and a watchdog that shuts them down at the deadline."""

    def __init__(
        self, url: str, what: str, kind: str = API, *, seconds: float | None = None, knob: str = "", charge: bool = True
    ) -> None:
        lim = limits()
        self.host = host_of(url)
        self.what = _printable(what)
        self.kind = kind
        self.variable = ENV_DOWNLOAD if kind == DOWNLOAD else ENV_REQUEST
        self.seconds = lim.download if kind == DOWNLOAD else lim.request
        if seconds is not None:  # the caller's own bound (e.g. an option of its command)
            self.seconds, self.variable = float(seconds), knob or self.variable
        self.budget = current_budget() if charge else None
        self.by_budget = False
        if self.budget is not None:
            left = self.budget.remaining()
            if left <= 0:
                raise DeadlineExceeded(
                    f"{self.what} from {self.host}: not asked, the command's network budget of "
                    f"{self.budget.total:g} s ({ENV_COMMAND}) is spent; raise {ENV_COMMAND} to allow more",
                    hint=_hint(ENV_COMMAND),
                    host=self.host,
                    variable=ENV_COMMAND,
                )
            if left < self.seconds:
                self.seconds, self.variable, self.by_budget = left, ENV_COMMAND, True
        self.received = 0
        self.started = time.monotonic()
        self.deadline = self.started + self.seconds
        if self.budget is not None:
            self.budget.requests += 1
            if self.budget.started is None:
                self.budget.started = self.started
            _slow_notice(self.budget, self)
        self.fired = threading.Event()
        self._conns: list[Any] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        if self.seconds < threading.TIMEOUT_MAX:  # larger (or inf): no deadline, no watchdog
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        self._slow_timer: threading.Timer | None = None
        if self.budget is not None and self.budget.notice is not None:  # one request that takes long
            self._slow_timer = threading.Timer(SLOW_S, self._slow)
            self._slow_timer.daemon = True
            self._slow_timer.start()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self, slack: float = 0.0) -> bool:
        return self.fired.is_set() or time.monotonic() >= self.deadline - slack

    def check(self) -> None:
        """Raise ``DeadlineExceeded`` when the deadline has passed."""
        if self.expired():
            raise self.exceeded()

    def exceeded(self) -> DeadlineExceeded:
        got = f"{self.received} bytes of the answer received"
        if self.by_budget:
            assert self.budget is not None
            text = (
                f"{self.what} from {self.host}: stopped, the command's network budget of "
                f"{self.budget.total:g} s ({ENV_COMMAND}) ran out ({got}); raise {ENV_COMMAND} to allow more"
            )
        else:
            text = (
                f"{self.what} from {self.host}: no complete answer within {self.seconds:g} s ({got}); "
                f"raise {self.variable} (seconds) to wait longer"
            )
        return DeadlineExceeded(text, hint=_hint(self.variable), host=self.host, variable=self.variable)

    def too_large(self, cap: int, variable: str, size: int | None = None) -> TooLarge:
        said = f"announces {size} bytes, more than" if size is not None else "runs past"
        return TooLarge(
            f"{self.what} from {self.host}: the answer {said} the {cap} bytes patchset keeps "
            f"in memory ({variable}); refused",
            hint=f"raise {variable} (bytes) if an answer that large is expected",
            host=self.host,
            variable=variable,
        )

    def watch(self, conn: Any) -> None:
        """Called by the adapter's connections as each sends a request in this scope."""
        with self._lock:
            self._conns.append(conn)
            late = self.fired.is_set()
        if late:
            _shut(conn)

    def _slow(self) -> None:
        if self.budget is not None:
            _slow_notice(self.budget, self, force=True)

    def _fire(self) -> None:
        self.fired.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _shut(conn)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._slow_timer is not None:
            self._slow_timer.cancel()
        with self._lock:
            self._conns.clear()
        if self.budget is not None:
            self.budget.charge(time.monotonic() - self.started)


def _slow_notice(budget: CommandBudget, s: Scope, force: bool = False) -> None:
    """Tell ``budget.notice`` what the network is doing, once the command's network work (or one
    request) has run for ``SLOW_S`` seconds; at most once a second."""
    notice = budget.notice
    if notice is None or budget.started is None:
        return
    now = time.monotonic()
    if not force and now - budget.started < SLOW_S:
        return
    last = getattr(budget, "_last_notice", 0.0)
    if now - last < 1.0:
        return
    budget._last_notice = now  # type: ignore[attr-defined]
    try:
        notice(f"network: {s.what} from {s.host} (request {budget.requests}, {now - budget.started:.0f} s so far)")
    except Exception:  # a progress line must never fail a request
        pass


def _hint(variable: str) -> str:
    if variable not in _SECONDS:  # a caller's own option
        return f"the server answers too slowly: give {variable} more seconds"
    return (
        f"the server answers too slowly (or the link is slow): set {variable}=SECONDS "
        f"(default {_SECONDS[variable]:g}) to give it longer"
    )


def _shut(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, AttributeError):
        pass


@contextmanager
def scope(
    url: str, what: str, kind: str = API, *, seconds: float | None = None, knob: str = "", charge: bool = True
) -> Iterator[Scope]:
    """The scope of one request (see ``Scope``). Inside an open scope of this thread the open
    one is used: a client's outer scope bounds everything its library does underneath.

    ``seconds``: a deadline of the caller's own instead of the kind's (``knob``: the option that
    sets it, for the message); ``charge=False``: not part of the command's budget (a request to
    an engine the command runs, whose time is computation, not transfer)."""
    outer: Scope | None = getattr(_local, "scope", None)
    if outer is not None:
        yield outer
        return
    s = Scope(url, what, kind, seconds=seconds, knob=knob, charge=charge)
    _local.scope = s
    try:
        yield s
    finally:
        _local.scope = None
        s.close()


def _watch(conn: Any) -> None:
    s: Scope | None = getattr(_local, "scope", None)
    if s is not None:
        s.watch(conn)


# ---- sessions -------------------------------------------------------------------------------
_adapter_cls: Any = None


def _adapter() -> Any:
    """An ``HTTPAdapter`` whose connections register with the open scope when they send."""
    global _adapter_cls
    if _adapter_cls is None:
        from requests.adapters import HTTPAdapter
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class WatchedHTTP(HTTPConnection):
            def putrequest(self, *args: Any, **kwargs: Any) -> None:
                _watch(self)
                super().putrequest(*args, **kwargs)

        class WatchedHTTPS(HTTPSConnection):
            def putrequest(self, *args: Any, **kwargs: Any) -> None:
                _watch(self)
                super().putrequest(*args, **kwargs)

        class HTTPPool(HTTPConnectionPool):
            ConnectionCls = WatchedHTTP

        class HTTPSPool(HTTPSConnectionPool):
            ConnectionCls = WatchedHTTPS

        pools = {"http": HTTPPool, "https": HTTPSPool}

        class WatchedAdapter(HTTPAdapter):
            def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
                super().init_poolmanager(*args, **kwargs)
                self.poolmanager.pool_classes_by_scheme = pools

            def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
                manager = super().proxy_manager_for(proxy, **kwargs)
                if not proxy.lower().startswith("socks"):
                    manager.pool_classes_by_scheme = pools
                return manager

        _adapter_cls = WatchedAdapter
    return _adapter_cls


def session(*, retries: Any = None, trust_env: bool = True, user_agent: str | None = None) -> requests.Session:
    """A ``requests.Session`` whose connections this module can stop. ``retries``: urllib3's
    ``Retry`` (default: none); ``trust_env=False`` ignores proxy settings and ``.netrc``."""
    import requests

    s = requests.Session()
    s.trust_env = trust_env
    if user_agent:
        s.headers["User-Agent"] = user_agent
    cls = _adapter()
    adapter = cls(max_retries=retries) if retries is not None else cls()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


# ---- requests -------------------------------------------------------------------------------
class Answer(NamedTuple):
    """A whole answer: status, headers (case-insensitive), the exact bytes, the final URL."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str
    reason: str = ""


class Stream:
    """An answer whose body is read chunk by chunk (``chunks()``) within the scope's deadline.
    (Plain classes here: the product keeps ``@dataclass`` out of its modules, see test_startup.)"""

    __slots__ = ("headers", "response", "scope", "status", "url")

    def __init__(self, response: Any, scope: Scope) -> None:
        self.response = response  # requests.Response
        self.scope = scope
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self.url: str = response.url

    def chunks(self, max_bytes: int | None = None, variable: str = "") -> Iterator[bytes]:
        """The body as it arrives; ``DeadlineExceeded`` past the deadline, ``TooLarge`` past
        ``max_bytes`` (named ``variable`` in the message)."""
        raw = self.response.raw
        size = _length(self.headers)
        if max_bytes is not None and size is not None and size > max_bytes:
            raise self.scope.too_large(max_bytes, variable, size)
        reader = getattr(raw, "read1", None)
        pieces = _read1_chunks(reader) if reader is not None else raw.stream(_CHUNK, decode_content=True)
        with _as_requests_errors(self.scope):
            for chunk in pieces:
                self.scope.received += len(chunk)
                self.scope.check()
                if max_bytes is not None and self.scope.received > max_bytes:
                    raise self.scope.too_large(max_bytes, variable)
                yield chunk
        self.scope.check()  # a body cut short by the watchdog may look complete

    def read(self, max_bytes: int | None = None, variable: str = "") -> bytes:
        return b"".join(self.chunks(max_bytes, variable))


def _read1_chunks(read1: Any) -> Iterator[bytes]:
    while True:
        chunk = read1(_CHUNK, decode_content=True)
        if not chunk:
            return
        yield chunk


@contextmanager
def _as_requests_errors(s: Scope) -> Iterator[None]:
    """urllib3's errors from a raw read as ``requests`` raises them from ``iter_content``; any
    failure after the deadline (the watchdog shut the socket) as ``DeadlineExceeded``."""
    import requests
    from urllib3 import exceptions as u3

    try:
        yield
    except NetLimit:
        raise
    except (u3.HTTPError, requests.RequestException, OSError) as exc:
        if s.expired(slack=0.25):  # a read timeout cut to the deadline (``_timeout``) ends a hair early
            raise s.exceeded() from None
        if isinstance(exc, u3.ProtocolError):
            raise requests.exceptions.ChunkedEncodingError(exc) from exc
        if isinstance(exc, u3.DecodeError):
            raise requests.exceptions.ContentDecodingError(exc) from exc
        if isinstance(exc, u3.ReadTimeoutError):
            raise requests.exceptions.ConnectionError(exc) from exc
        if isinstance(exc, u3.SSLError):
            raise requests.exceptions.SSLError(exc) from exc
        if isinstance(exc, requests.RequestException):
            raise
        raise requests.exceptions.ConnectionError(exc) from exc


def _length(headers: Mapping[str, str]) -> int | None:
    try:
        value = int(headers.get("Content-Length", ""))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _timeout(s: Scope, timeout: Any) -> tuple[float | None, float | None]:
    lim = limits()
    if isinstance(timeout, tuple):
        connect, read = timeout
    elif timeout is not None:
        connect, read = lim.connect, float(timeout)
    else:
        connect, read = lim.connect, lim.read
    # never wait on one read past the deadline (the watchdog would stop it anyway)
    left = max(0.05, s.remaining())

    def bounded(value: float) -> float | None:
        value = min(value, left)
        return value if value < threading.TIMEOUT_MAX else None  # 'inf': no timeout at all

    return bounded(connect), bounded(read)


@contextmanager
def stream(
    http: requests.Session,
    method: str,
    url: str,
    *,
    what: str,
    kind: str = API,
    timeout: Any = None,
    seconds: float | None = None,
    knob: str = "",
    charge: bool = True,
    **kwargs: Any,
) -> Iterator[Stream]:
    """One request, its body to be read with ``Stream.chunks()``. ``what`` says what is fetched
    (it is in every message); ``kind`` picks the deadline (``API`` or ``DOWNLOAD``);
    ``timeout``: the per-read timeout in seconds, or ``(connect, read)`` (default from the
    environment); ``seconds``, ``knob``, ``charge``: see ``scope``; other arguments go to
    ``requests``."""
    import requests

    why = down(url)
    if why is not None:
        raise Unreachable(host_of(url), why)
    with scope(url, what, kind, seconds=seconds, knob=knob, charge=charge) as s:
        s.check()
        resp = None
        try:
            try:
                with _as_requests_errors(s):
                    resp = http.request(method, url, stream=True, timeout=_timeout(s, timeout), **kwargs)
            except requests.exceptions.ConnectionError as exc:
                reason = no_network_reason(exc)
                if reason:
                    mark_down(url, reason)
                raise
            s.check()
            yield Stream(resp, s)
        finally:
            if resp is not None:
                resp.close()


def request(
    http: requests.Session,
    method: str,
    url: str,
    *,
    what: str,
    cap: str = JSON,
    kind: str = API,
    timeout: Any = None,
    seconds: float | None = None,
    knob: str = "",
    charge: bool = True,
    **kwargs: Any,
) -> Answer:
    """One whole request: the body is read within the deadline and refused past its cap
    (``JSON``: ``$PATCHSET_NET_MAX_JSON``; ``BODY``: ``$PATCHSET_NET_MAX_BODY``)."""
    lim = limits()
    max_bytes, variable = (lim.max_body, ENV_MAX_BODY) if cap == BODY else (lim.max_json, ENV_MAX_JSON)
    with stream(
        http, method, url, what=what, kind=kind, timeout=timeout, seconds=seconds, knob=knob, charge=charge, **kwargs
    ) as st:
        body = st.read(max_bytes, variable)
        return Answer(st.status, st.headers, body, st.url, str(getattr(st.response, "reason", "") or ""))
