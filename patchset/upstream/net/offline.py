"""No network is said once: a failure that means the host cannot be reached is recognised,
not retried, and remembered for the rest of the command.

``no_network_reason`` says in a few words when a transport error means there is no network (a
failed DNS lookup, a refused or unreachable connection). The first request of a command that
fails that way marks its host down (``mark_down``, in ``CommandBudget.down``); every later
request to that host raises ``Unreachable`` at once, without a connection attempt, a retry or a
wait, so a command with forty sources stops after the first. ``retry()`` is the urllib3 retry
policy that does not retry such a failure either.
"""

from __future__ import annotations

from typing import Any

from patchset.errors import EnvironmentFailure
from patchset.upstream.net.budget import current_budget
from patchset.upstream.net.limits import host_of

__all__ = ["Unreachable", "down", "mark_down", "no_network_reason", "retry"]


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
    import socket  # loaded on a failure, not with every command (the CLI opens a budget for each)

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


def mark_down(url_or_host: str, reason: str) -> None:
    """Remember for the rest of the command that the host of ``url_or_host`` cannot be reached."""
    b = current_budget()
    if b is not None:
        b.down.setdefault(host_of(url_or_host) if "://" in url_or_host else url_or_host, reason)


def down(url: str) -> str | None:
    """Why the host of ``url`` cannot be reached, when an earlier request of this command found so."""
    b = current_budget()
    return b.down.get(host_of(url)) if b is not None else None
