"""Test helper: build unified diffs from two byte strings, with ``\\ No newline`` markers.

``difflib.unified_diff`` emits no ``\\ No newline at end of file`` marker and works on text, so
diffs of real files (CRLF, missing final newline) come out malformed. This writes the same
hunks from ``difflib.SequenceMatcher`` opcodes, byte-exact, in the format GNU diff uses.
"""

from __future__ import annotations

import difflib

from patchset.patchfmt.filepatch import split_lines

MARKER = b"\\ No newline at end of file\n"


def _range(start: int, stop: int) -> bytes:
    begin = start + 1
    length = stop - start
    if length == 1:
        return str(begin).encode()
    if not length:
        begin -= 1
    return f"{begin},{length}".encode()


def _line(prefix: bytes, content: bytes) -> list[bytes]:
    if content.endswith(b"\n"):
        return [prefix + content]
    return [prefix + content + b"\n", MARKER]


def unified_diff(old: bytes | None, new: bytes | None, name: str, context: int = 3) -> bytes:
    """A ``-p1`` unified diff turning ``old`` into ``new`` (``None``: the file is absent)."""
    a = split_lines(old or b"")
    b = split_lines(new or b"")
    src = b"/dev/null" if old is None else b"a/" + name.encode()
    dst = b"/dev/null" if new is None else b"b/" + name.encode()
    out = [b"--- " + src + b"\n", b"+++ " + dst + b"\n"]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in sm.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(b"@@ -" + _range(i1, i2) + b" +" + _range(j1, j2) + b" @@\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                for ln in a[x1:x2]:
                    out += _line(b" ", ln)
                continue
            for ln in a[x1:x2]:
                out += _line(b"-", ln)
            for ln in b[y1:y2]:
                out += _line(b"+", ln)
    return b"".join(out)
