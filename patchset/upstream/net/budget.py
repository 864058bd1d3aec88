"""The command's network budget: the seconds all requests of one command may spend together.

Opened once per CLI command (``patchset.cli.guarded``, or a script's ``main``) with
``command_budget``; every request's deadline is at most what is left of it (``scope``), so
forty slow sources cannot add up to forty deadlines. It also carries what the command learnt
about the network (``down``: hosts that cannot be reached, see ``offline``) and the CLI's
``notice``, told about network work that runs longer than ``SLOW_S`` seconds (a progress line).
Outside a command only the per-request deadlines apply.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from patchset.upstream.net.limits import limits

__all__ = ["SLOW_S", "CommandBudget", "command_budget", "current_budget", "slow_notice"]


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


def slow_notice(budget: CommandBudget, s: Any, force: bool = False) -> None:
    """Tell ``budget.notice`` what the network is doing (``s``: the ``scope.Scope`` at work),
    once the command's network work (or one request) has run for ``SLOW_S`` seconds; at most
    once a second."""
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
