"""What a failed GitHub answer means: a ``RowError`` of the right kind, and when to ask again.

Every read of the client fails the same way: a ``Failure`` carrying the row to report and the
``errors[].code`` values of GitHub's error body, so a caller can pick a fallback (a refused diff,
a file too large for the JSON media type) and one bad row never hides the others. ``classify``
reads GitHub's status, headers and message as GitHub documents them: a primary rate limit
(remaining 0), a secondary one (the message says so, or ``Retry-After``), a refused token, a
missing item, a server error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from patchset.upstream.refs import AUTH, FORBIDDEN, HTTP, NOT_FOUND, RATE_LIMIT, SERVER, RowError

__all__ = ["Failure", "classify", "error_codes", "reset_of"]


class Failure(Exception):
    """A failed read: the row to report, and the ``errors[].code`` values of GitHub's error body
    (``too_large``, ``not_available``…) so a caller can pick a fallback."""

    def __init__(self, row: RowError, codes: tuple[str, ...] = ()) -> None:
        super().__init__(str(row))
        self.row = row
        self.codes = codes


def classify(status: int, headers: Mapping[str, str], body: bytes) -> RowError:
    """A RowError for a failed HTTP answer, from GitHub's status, headers and error body."""
    doc = _error_body(body)
    message = str(doc.get("message") or "") if isinstance(doc, dict) else ""
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
            return RowError(RATE_LIMIT, text, reset_at=reset_of(headers), status=status)
        return RowError(FORBIDDEN, text, status=status)
    if status == 404:
        return RowError(NOT_FOUND, text, status=status)
    if status >= 500:
        return RowError(SERVER, text, status=status)
    return RowError(HTTP, text, status=status)


def error_codes(body: bytes) -> tuple[str, ...]:
    """The ``errors[].code`` values of a GitHub error body (``too_large``, ``not_available``…)."""
    doc = _error_body(body)
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return ()
    return tuple(str(e["code"]) for e in errors if isinstance(e, dict) and isinstance(e.get("code"), str))


def _error_body(body: bytes) -> object:
    """GitHub's error body as JSON; None when it is not JSON."""
    import json

    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def reset_of(headers: Mapping[str, str]) -> float | None:
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
