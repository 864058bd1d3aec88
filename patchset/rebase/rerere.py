"""Recorded conflict resolutions in git's rerere format, kept in the ledger's repository.

When a human resolves a rebase conflict, the conflicted text (``preimage``) and the resolution
(``postimage``) are stored under ``patchset/rr-cache/<conflict id>/`` exactly as ``git rerere``
stores them in ``.git/rr-cache``: the id is the SHA-1 of each conflict's two sides (ordered, NUL
terminated, the common-ancestor section dropped) and the preimage is the file with its conflict
markers normalised. The next rebase that meets the same conflict replays the resolution.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from patchset import atomic

RR_CACHE = "patchset/rr-cache"
MARKER = 7


def _is_marker(line: bytes, ch: bytes, size: int = MARKER) -> bool:
    """git's is_cmarker: ``size`` marker chars, then whitespace (a space required after < and >)."""
    if not line.startswith(ch * size):
        return False
    rest = line[size : size + 1]
    if ch in (b"<", b">") and rest != b" ":
        return False
    return rest in (b" ", b"\t", b"\n", b"\r", b"\v", b"\f")


@dataclass
class Normalized:
    """A conflicted text reduced to the id its recorded resolution is keyed on (None: no conflict)."""

    conflict_id: str | None  # None: the text holds no conflict
    preimage: bytes


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def normalize(data: bytes) -> Normalized:
    """The rerere id and normalised preimage of a file with conflict markers."""
    lines = _lines(data)
    out: list[bytes] = []
    h = hashlib.sha1()
    found = False
    i = 0
    while i < len(lines):
        if _is_marker(lines[i], b"<"):
            conflict, i, ok = _conflict(lines, i + 1, h)
            if not ok:
                return Normalized(None, data)  # unbalanced markers: git gives up too
            out.append(conflict)
            found = True
        else:
            out.append(lines[i])
            i += 1
    return Normalized(h.hexdigest() if found else None, b"".join(out))


def _conflict(lines: list[bytes], i: int, h: hashlib._Hash | None) -> tuple[bytes, int, bool]:
    one: list[bytes] = []
    two: list[bytes] = []
    side = 1
    while i < len(lines):
        line = lines[i]
        if _is_marker(line, b"<"):
            nested, i, ok = _conflict(lines, i + 1, None)
            if not ok:
                return b"", i, False
            (one if side == 1 else two).append(nested)
            continue
        if _is_marker(line, b"|"):
            if side != 1:
                return b"", i, False
            side = 0  # the common ancestor: discarded
        elif _is_marker(line, b"="):
            if side not in (0, 1):
                return b"", i, False
            side = 2
        elif _is_marker(line, b">"):
            if side != 2:
                return b"", i, False
            a, b = b"".join(one), b"".join(two)
            if a > b:
                a, b = b, a
            if h is not None:
                h.update(a + b"\0")
                h.update(b + b"\0")
            text = b"<" * MARKER + b"\n" + a + b"=" * MARKER + b"\n" + b + b">" * MARKER + b"\n"
            return text, i + 1, True
        elif side == 1:
            one.append(line)
        elif side == 2:
            two.append(line)
        i += 1
    return b"", i, False


def has_markers(data: bytes) -> int:
    """1-based line of the first conflict marker left in ``data`` (0: none)."""
    for n, line in enumerate(_lines(data), start=1):
        if any(_is_marker(line, c) for c in (b"<", b">")) or line.rstrip(b"\r\n") == b"=" * MARKER:
            return n
    return 0


class RRCache:
    """``patchset/rr-cache`` under the ledger's directory."""

    def __init__(self, root: Path) -> None:
        self.dir = root / RR_CACHE

    def record(self, conflicted: bytes, resolved: bytes) -> str | None:
        """Store a resolution; returns its id (None when ``conflicted`` has no conflict)."""
        n = normalize(conflicted)
        if n.conflict_id is None:
            return None
        d = self.dir / n.conflict_id
        atomic.write_many({d / "preimage": n.preimage, d / "postimage": resolved})
        return n.conflict_id

    def resolve(self, conflicted: bytes, merge3) -> tuple[str, bytes] | None:
        """A recorded resolution of ``conflicted`` as ``(id, resolved bytes)``, or None.

        ``merge3(base, ours, theirs) -> (bytes, conflicts)`` merges the recorded postimage into
        this conflict when the text around it moved (git rerere does the same 3-way merge).
        """
        n = normalize(conflicted)
        if n.conflict_id is None:
            return None
        d = self.dir / n.conflict_id
        pre, post = d / "preimage", d / "postimage"
        if not (pre.is_file() and post.is_file()):
            return None
        preimage, postimage = pre.read_bytes(), post.read_bytes()
        if preimage == n.preimage:
            return n.conflict_id, postimage
        data, conflicts = merge3(preimage, n.preimage, postimage)
        if conflicts:
            return None
        return n.conflict_id, data
