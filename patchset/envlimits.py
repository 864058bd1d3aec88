"""The ``PATCHSET_*`` variables that set a limit, read by one set of rules.

Unset or blank is the default; seconds are a decimal number (``inf`` lifts the limit; zero only
where it means something); sizes and counts are whole numbers with an optional K/M/G/T suffix in
powers of 1024 (``2GiB`` and ``2gb`` read the same); anything else is an ``EnvironmentFailure``
naming the variable. Read when used, so a bad value fails only the commands that use it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from patchset.errors import EnvironmentFailure

__all__ = ["seconds", "size"]

_SIZE = r"(\d+)\s*([kmgt]?)(?:i?b)?"  # compiled on first use (re's cache), not with every command
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _raw(name: str, env: Mapping[str, str] | None) -> str:
    return (os.environ if env is None else env).get(name, "").strip()


def seconds(name: str, default: float, env: Mapping[str, str] | None = None, *, zero: bool = False) -> float:
    """The seconds ``$name`` sets (``env``: default the process environment); ``zero``: 0 is allowed."""
    raw = _raw(name, env)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value >= 0 if zero else value > 0):  # NaN fails both
        what = "a number of seconds (0 or more)" if zero else "a positive number of seconds"
        raise EnvironmentFailure(
            f"{name}={raw!r} is not {what}",
            hint=f"unset it (default {default:g}) or give e.g. {default:g}; 'inf' lifts the limit",
        )
    return value


def size(name: str, default: int, env: Mapping[str, str] | None = None, *, unit: str = "bytes") -> int:
    """The size (or, with ``unit`` other than bytes, the count) ``$name`` sets."""
    raw = _raw(name, env)
    if not raw:
        return default
    m = re.fullmatch(_SIZE, raw, re.IGNORECASE)
    if not m or int(m.group(1)) <= 0:
        example = "a size such as 65536, 500M or 2G (K, M, G, T: powers of 1024)" if unit == "bytes" else "a count"
        raise EnvironmentFailure(
            f"{name}={raw!r} is not a positive number of {unit}",
            hint=f"unset it (default {default}) or give {example}",
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]
