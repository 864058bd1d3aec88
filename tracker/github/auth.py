"""The GitHub token of the tracker's client: where it comes from, and that it never shows.

A token found in the environment or from ``gh auth token`` goes into a ``Secret``, which prints
as ``<token hidden>``, cannot be pickled, and gives its value only to the one place that sends it
(``tracker.github.transport``): so it never reaches a log, the cache, an exception or a report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["Secret", "resolve_token"]


class Secret:
    """A token that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "<token hidden>" if self._value else "<no token>"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a token is not picklable")


def resolve_token(
    token: str | None = None, env: Mapping[str, str] | None = None, gh: str = "gh", host: str | None = None
) -> tuple[str | None, str]:
    """Find a token: the argument, else ``$GITHUB_TOKEN``, else ``gh auth token``. Returns
    ``(token, source)`` with source "argument", "GITHUB_TOKEN", "gh" or "none"."""
    if token:
        return token, "argument"
    env = os.environ if env is None else env
    if env.get("GITHUB_TOKEN"):
        return env["GITHUB_TOKEN"], "GITHUB_TOKEN"
    import shutil
    import subprocess

    exe = shutil.which(gh, path=env.get("PATH")) if gh else None
    if exe:
        cmd = [exe, "auth", "token"] + (["--hostname", host] if host else [])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, env=dict(env), check=False)
        except (OSError, subprocess.SubprocessError):
            return None, "none"
        value = out.stdout.strip()
        if out.returncode == 0 and value and "\n" not in value:
            return value, "gh"
    return None, "none"
