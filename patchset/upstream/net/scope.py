"""A request's scope: its deadline, and a watchdog that stops it there.

Per-read timeouts alone let a server that sends its headers and then one byte every few seconds
hold a command forever, since every single read succeeds in time. A ``Scope`` is one request as
the user sees it (redirects, retries and PyGithub's own re-asks included): its deadline is
``min(the request's own, what is left of the command's budget)`` (``budget``), and a
watchdog timer shuts the sockets of the scope's own connections down when it passes (they
register with ``watch`` as they send, see ``session``), so a read that blocks inside
``requests``, ``urllib3`` or PyGithub returns at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from patchset.upstream.net.budget import SLOW_S, current_budget, slow_notice
from patchset.upstream.net.limits import (
    API,
    DOWNLOAD,
    ENV_COMMAND,
    ENV_DOWNLOAD,
    ENV_REQUEST,
    DeadlineExceeded,
    TooLarge,
    hint,
    host_of,
    limits,
    printable,
)

__all__ = ["Scope", "scope", "watch"]

_local = threading.local()


class Scope:
    """One request as the user sees it (redirects, retries and PyGithub's own re-asks included):
    its deadline, the connections it used, and a watchdog that shuts them down at the deadline."""

    def __init__(
        self, url: str, what: str, kind: str = API, *, seconds: float | None = None, knob: str = "", charge: bool = True
    ) -> None:
        lim = limits()
        self.host = host_of(url)
        self.what = printable(what)
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
                    hint=hint(ENV_COMMAND),
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
            slow_notice(self.budget, self)
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
        return DeadlineExceeded(text, hint=hint(self.variable), host=self.host, variable=self.variable)

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
            slow_notice(self.budget, self, force=True)

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


def _shut(conn: Any) -> None:
    import socket  # loaded when a watchdog fires, not with every command

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


def watch(conn: Any) -> None:
    """A connection of this thread's open scope, about to send: the watchdog will stop it."""
    s: Scope | None = getattr(_local, "scope", None)
    if s is not None:
        s.watch(conn)
