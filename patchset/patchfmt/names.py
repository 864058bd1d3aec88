"""What a file name in a diff header means: quoting, the strip level, timestamps, ``/dev/null``.

Names are read as latin-1 text (a 1:1 byte mapping, so ``\\r`` and any non-UTF-8 byte survive) and
turned into paths only at the end (``to_path``). The rules are git's C-style quoting and GNU
patch's: ``-p`` strip levels, the name/timestamp split outside git diffs (a name ends at the first
whitespace unless a tab separates it from the timestamp), and the Epoch timestamp (``diff -N``)
that says a file does not exist. ``patchset.patchfmt.diffs`` applies them to each file header.
"""

from __future__ import annotations

import re

from patchset.errors import Location, PatchFormatError

_STAMP = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))?"
    r"(?:\s+(?P<zone>[+-]\d{4}))?\s*$"
)
_CTIME_EPOCH = re.compile(r"^(Thu Jan  1 (\d\d):00:00 1970|Wed Dec 31 (\d\d):00:00 1969)\s*$")


_UNQUOTE = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "a": "\a", "b": "\b", "f": "\f", "r": "\r", "v": "\v"}


def _unquote(name: str) -> str:
    """Undo git's C-style quoting (``"a/caf\\303\\251"``); ``name`` is latin-1 text."""
    if not (len(name) >= 2 and name[0] == '"' and name[-1] == '"'):
        return name
    s = name[1:-1]
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if re.match(r"[0-7]{3}", s[i + 1 : i + 4]):
                out.append(chr(int(s[i + 1 : i + 4], 8)))
                i += 4
                continue
            out.append(_UNQUOTE.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def to_path(latin: str) -> str:
    """latin-1 text (raw bytes) -> str path, UTF-8 with surrogateescape for other bytes."""
    return latin.encode("latin-1").decode("utf-8", "surrogateescape")


def strip_path(path: str, strip: int, *, where: Location | None = None) -> str:
    """GNU ``-pN``: remove N leading components (runs of slashes count as one separator)."""
    if strip <= 0:
        return path
    rest = path
    for _ in range(strip):
        idx = rest.find("/")
        if idx < 0:
            raise PatchFormatError(
                f"path {path!r} has fewer than {strip} leading component(s) to strip",
                where=where,
                hint="check the strip level (-p) of this patch",
            )
        rest = rest[idx + 1 :].lstrip("/")
    return rest


def is_epoch(timestamp: str | None) -> bool:
    """Does a ``---``/``+++`` timestamp say "this file does not exist" (``diff -N``)?

    GNU patch's rule: the Epoch; a time without a zone is local time, and POSIX allows a local
    offset anywhere in -25:00..+26:00, so any whole hour in that range matches
    (``1969-12-31 19:00:00`` is the Epoch in New York). With a zone the instant must be the Epoch.
    """
    if not timestamp:
        return False
    ts = timestamp.strip()
    if _CTIME_EPOCH.match(ts):
        return True
    m = _STAMP.match(ts)
    if not m or m["m"] != "00" or m["s"] != "00" or (m["frac"] and m["frac"].strip("0")):
        return False
    day = {"1969-12-31": -24, "1970-01-01": 0, "1970-01-02": 24}.get(m["date"])
    if day is None:
        return False
    hours = day + int(m["h"])
    if m["zone"]:
        zone = (1 if m["zone"][0] == "+" else -1) * (int(m["zone"][1:3]) + int(m["zone"][3:5]) / 60)
        return hours - zone == 0
    return -25 <= hours <= 26


def gnu_split(raw: str, timestamp: str | None, git: bool) -> tuple[str, str | None]:
    """GNU patch's file name rule for a ``---``/``+++`` line outside a git diff.

    unidiff splits name and timestamp at a tab only. GNU patch allows spaces inside a name only when
    a tab separates the name from the timestamp; without a tab the name ends at the first
    whitespace and the rest is the timestamp (``--- a/x.py 1970-01-01 00:00:00 +0000``). Verified
    with GNU patch 2.7.6: ``+++ b/dir one/x.rst`` patches ``dir``; with ``<TAB>date`` it patches
    ``dir one/x.rst``. git diffs keep the whole name (git writes no timestamps).
    """
    name = raw.rstrip("\r\n")
    if git or timestamp is not None or name.startswith('"'):
        return raw, timestamp
    parts = name.split(None, 1)
    if len(parts) == 2:
        return parts[0], parts[1]
    return raw, timestamp


def clean_name(name: str) -> str:
    return _unquote(name.rstrip("\r\n"))
