"""What a crash or a signal meets in the middle of a commit.

``step`` is the crash-test hook (``PATCHSET_TEST_CRASH_AFTER``, ``PATCHSET_TEST_CRASH_SIGNAL``:
see ``patchset.journal``), called at every step of every journal of the process; and
``signals_deferred`` holds Ctrl-C while the files are between their old and new state.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_steps = 0


def step() -> None:
    """Crash-test hook: count commit steps and signal ourselves at the configured one."""
    global _steps
    target = os.environ.get("PATCHSET_TEST_CRASH_AFTER")
    if not target:
        return
    _steps += 1
    if _steps == int(target):
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("PATCHSET_TEST_CRASH_SIGNAL", "KILL")))


_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C (and TERM/HUP) while the files are between old and new: the signal is delivered
    once every file is in place, so an interrupted commit leaves the new state, not a mixed one.
    (SIGKILL cannot be held: the journal and recovery cover it.) Nests."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
