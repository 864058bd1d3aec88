"""What every workflow script shares: GitHub step outputs and error handling without tracebacks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from patchset.errors import EXIT_INPUT, PatchsetError
from patchset.text import terminal


def set_output(name: str, value: str) -> None:
    """A step output (``$GITHUB_OUTPUT``) when running under GitHub Actions; nothing otherwise."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        if "\n" in value:
            marker = f"EOF_{os.urandom(8).hex()}"
            fh.write(f"{name}<<{marker}\n{value}\n{marker}\n")
        else:
            fh.write(f"{name}={value}\n")


def main_guard(fn: Callable[[], int]) -> None:
    """Run ``fn``; a domain error is one line on stderr and exit 2, never a traceback."""
    try:
        code = fn()
    except PatchsetError as exc:
        print(f"error: {terminal(exc.render(), block=True)}", file=sys.stderr)
        code = exc.exit_code
    except OSError as exc:
        print(terminal(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")), file=sys.stderr)
        code = EXIT_INPUT
    sys.exit(code)
