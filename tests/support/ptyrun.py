"""Run a command with its stdout on a real pseudo-terminal, as a person's shell would.

Output meant for a terminal (colours, table layout) is only produced when stdout is a terminal;
``run_in_pty`` gives the child one (raw mode: the line discipline adds no ``\\r`` to newlines, so
the bytes read are the bytes the program wrote) and returns everything it wrote there.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import tempfile
import time
import tty
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_in_pty(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None, timeout: float = 60.0
) -> tuple[int, bytes, bytes]:
    """``(exit code, what reached the terminal, stderr)``; the child is killed after ``timeout``."""
    with tempfile.TemporaryFile() as errfile:  # a file, not a pipe: a chatty stderr cannot block the child
        master, slave = pty.openpty()
        tty.setraw(slave)
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=slave, stderr=errfile, env=dict(env), cwd=cwd
        )
        os.close(slave)
        try:
            out = _drain(master, proc, time.monotonic() + timeout, argv[0])
            code = proc.wait(timeout=5)
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        errfile.seek(0)
        return code, out, errfile.read()


def _drain(master: int, proc: subprocess.Popen[bytes], deadline: float, name: str) -> bytes:
    """Everything written to the terminal until the child closes it (EIO) or exits."""
    out = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{name} did not finish in time")
        ready, _, _ = select.select([master], [], [], min(left, 0.5))
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return bytes(out)
