"""Advisory locks between patchset processes: one tree, one ledger, one writer at a time.

An ``flock`` on a directory: it writes nothing (a dry run can hold it) and dies with the process
(no stale lock file). Re-entrant inside one process (``apply --update-lock`` on a tree that is the
ledger's directory). A second process says once that it waits and gives up after
``PATCHSET_LOCK_TIMEOUT`` seconds (default 300) with exit 2.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from patchset import envlimits
from patchset.errors import EnvironmentFailure

DEFAULT_TIMEOUT = 300.0
_POLL = 0.05

_held: dict[str, list[int]] = {}  # realpath -> [fd, depth]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# Where the "waiting" line goes; the CLI may point it at its own console.
on_wait: Callable[[str], None] = _say


def timeout_seconds() -> float:
    """``$PATCHSET_LOCK_TIMEOUT`` (``patchset.envlimits``'s rules; 0: do not wait)."""
    return envlimits.seconds("PATCHSET_LOCK_TIMEOUT", DEFAULT_TIMEOUT, zero=True)


@contextmanager
def hold(directory: Path, what: str) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (``what`` names it in messages) for the block."""
    key = os.path.realpath(directory)
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise EnvironmentFailure(f"{key}: cannot open to lock it: {exc.strerror}") from None
    try:
        _acquire(fd, what)
    except BaseException:
        os.close(fd)
        raise
    _held[key] = [fd, 1]
    try:
        yield
    finally:
        del _held[key]
        os.close(fd)  # closing the descriptor releases the flock


def _locked(fd: int, what: str) -> bool:
    """Take the lock if no one holds it: True when taken, False when another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise EnvironmentFailure(f"{what}: cannot lock: {exc.strerror}") from None
        return False


def _acquire(fd: int, what: str) -> None:
    if _locked(fd, what):
        return
    limit = timeout_seconds()
    on_wait(f"another patchset is working on {what}, waiting (up to {limit:g} s; PATCHSET_LOCK_TIMEOUT)")
    deadline = time.monotonic() + limit
    while not _locked(fd, what):
        if time.monotonic() >= deadline:
            raise EnvironmentFailure(
                f"another patchset is still working on {what} after {limit:g} s; nothing was changed",
                hint="wait for it to finish and run the command again (PATCHSET_LOCK_TIMEOUT sets the wait)",
            )
        time.sleep(_POLL)


def tree_lock(root: Path) -> AbstractContextManager[None]:
    """The lock of a build tree: held from an apply's first read to its last write."""
    return hold(root, f"the tree {root}")


def ledger_lock(ledger_path: Path) -> AbstractContextManager[None]:
    """The lock of a ledger (its directory: ledger, lock and bodies change together)."""
    return hold(Path(ledger_path).parent, f"the ledger {ledger_path}")
