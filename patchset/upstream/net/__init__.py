"""The one way patchset speaks HTTP: every request gets a connect timeout, a per-read timeout, a
total deadline, a share of its command's network budget, and a cap on what it keeps in memory.

Per-read timeouts alone let a server that sends one byte every few seconds hold a command forever
(security issue #23). So the body is read chunk by chunk with the deadline checked after each, a
watchdog shuts the request's own sockets down when the deadline passes (also inside ``requests``
or PyGithub), and each deadline is at most what is left of the command's budget
(``command_budget``, opened by ``patchset.cli.guarded``). Running out raises ``DeadlineExceeded``,
too large an answer ``TooLarge`` (both ``NetLimit``, exit 2); a host found unreachable raises
``Unreachable`` without being asked again; transport errors stay ``requests`` exceptions.

This module is the package's face (an import-linter contract): ``limits``, ``scope`` and
``session`` here name functions (``net.limits()``, ``net.scope(…)``), not the modules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from patchset.upstream.net.budget import CommandBudget, command_budget, current_budget
from patchset.upstream.net.limits import (
    API,
    BODY,
    DOWNLOAD,
    ENV_COMMAND,
    ENV_CONNECT,
    ENV_DOWNLOAD,
    ENV_MAX_BODY,
    ENV_MAX_JSON,
    ENV_READ,
    ENV_REQUEST,
    JSON,
    DeadlineExceeded,
    Limits,
    NetLimit,
    TooLarge,
    host_of,
    limits,
)
from patchset.upstream.net.offline import Unreachable, down, mark_down, no_network_reason, retry
from patchset.upstream.net.scope import Scope, scope
from patchset.upstream.net.session import session

if TYPE_CHECKING:  # requests loads with the first request, not with this module
    import requests

__all__ = [
    "API",
    "BODY",
    "DOWNLOAD",
    "ENV_COMMAND",
    "ENV_CONNECT",
    "ENV_DOWNLOAD",
    "ENV_MAX_BODY",
    "ENV_MAX_JSON",
    "ENV_READ",
    "ENV_REQUEST",
    "JSON",
    "Answer",
    "CommandBudget",
    "DeadlineExceeded",
    "Limits",
    "NetLimit",
    "Scope",
    "Stream",
    "TooLarge",
    "Unreachable",
    "command_budget",
    "content_length",
    "current_budget",
    "host_of",
    "limits",
    "no_network_reason",
    "request",
    "retry",
    "scope",
    "session",
    "stream",
]

_CHUNK = 1 << 16


class Answer(NamedTuple):
    """A whole answer: status, headers (case-insensitive), the exact bytes, the final URL."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str
    reason: str = ""


class Stream:
    """An answer whose body is read chunk by chunk (``chunks()``) within the scope's deadline."""

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
        size = content_length(self.headers)
        if max_bytes is not None and size is not None and size > max_bytes:
            raise self.scope.too_large(max_bytes, variable, size)
        reader = getattr(raw, "read1", None)
        if reader is not None:
            pieces = iter(lambda: reader(_CHUNK, decode_content=True), b"")
        else:
            pieces = raw.stream(_CHUNK, decode_content=True)
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


def content_length(headers: Mapping[str, str]) -> int | None:
    """The ``Content-Length`` an answer announces; None when it is absent or not a size."""
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


# stream and request keep requests' own shape (method, url, keyword options, the rest passed on):
# every keyword is optional and named where it is used, so a dataclass would only wrap the same words
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
    ``requests``. An uncharged request (to an engine the command runs) is not the network: its
    refusal means "not up yet" or "died", which the caller judges, so it marks no host down."""
    import requests

    why = down(url) if charge else None
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
                reason = no_network_reason(exc) if charge else None
                if reason:
                    mark_down(url, reason)
                raise
            s.check()
            yield Stream(resp, s)
        finally:
            if resp is not None:
                resp.close()


def request(http: requests.Session, method: str, url: str, *, what: str, cap: str = JSON, **kwargs: Any) -> Answer:
    """One whole request (the other arguments are ``stream``'s): the body is read within the
    deadline and refused past its cap (``JSON``: ``$PATCHSET_NET_MAX_JSON``; ``BODY``:
    ``$PATCHSET_NET_MAX_BODY``)."""
    lim = limits()
    max_bytes, variable = (lim.max_body, ENV_MAX_BODY) if cap == BODY else (lim.max_json, ENV_MAX_JSON)
    with stream(http, method, url, what=what, **kwargs) as st:
        body = st.read(max_bytes, variable)
        return Answer(st.status, st.headers, body, st.url, str(getattr(st.response, "reason", "") or ""))
