"""The patchset CLI as a separate process that the tests signal (real concurrency, real signals).

A shell started in the background (``nohup ... &``, a job without a terminal) hands its children
SIGINT ignored, and an ignored signal stays ignored across ``exec`` (POSIX): Python then installs
no KeyboardInterrupt handler, and a child the tests interrupt (``PATCHSET_TEST_CRASH_SIGNAL=INT``,
``send_signal(SIGINT)``) would never see it. ``subprocess``'s ``restore_signals`` resets only
SIGPIPE, SIGXFZ and SIGXFSZ, so every child started here gets the default dispositions back
first, as if it were started from a terminal. The product keeps the POSIX convention: a CLI
started with SIGINT ignored goes on ignoring it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

_RESET = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def default_signals() -> None:
    """``preexec_fn``: the signals a test may send back at their default disposition (the child
    is forked, not yet exec'd, so only async-signal-safe work belongs here: ``signal`` is)."""
    for sig in _RESET:
        signal.signal(sig, signal.SIG_DFL)


def cli_argv(*args: object) -> list[str]:
    """The argv of the patchset CLI in a fresh interpreter."""
    return [sys.executable, "-c", "from patchset.cli import main; main()", *map(str, args)]


def run_cli(*args: object, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the CLI to the end (text output captured), with default signal dispositions."""
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, env=env, timeout=timeout, preexec_fn=default_signals
    )


def popen_cli(*args: object, env: dict | None = None) -> subprocess.Popen:
    """Start the CLI (bytes on pipes), with default signal dispositions, to signal it while it runs."""
    return subprocess.Popen(
        cli_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=default_signals
    )
