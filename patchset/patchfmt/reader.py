"""A streaming reader of unified and git diffs: the files of a body and where each hunk lies in it.

Not ``unidiff`` (still the reference in ``tests/test_diff_reader.py``): it keeps one object per
line, so a 100 MB patch cost about 1.1 GB and 37 s. This reader walks the body once, in bytes, and
keeps per hunk three integers in compact arrays; hunk lines are sliced out of the body when used
(``patchset.patchfmt.filepatch.HunkList``). Its grammar and errors are unidiff's, rule for rule,
and errors carry the 1-based line where reading stopped.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

DEV_NULL = "/dev/null"

# header lines are few: they are read as latin-1 text (one character per byte) with these
_GIT = (
    re.compile(r'^diff --git (?P<source>"?a/[^\t\n]+"?) (?P<target>"?b/[^\t\n]+"?)'),
    re.compile(r"^diff --git (?P<source>.*://[^\t\n]+) (?P<target>.*://[^\t\n]+)"),
    re.compile(r"^diff --git (?P<source>[^\t\n]+) (?P<target>[^\t\n]+)"),
)
_NEW_FILE = re.compile(r"^new file mode (\d+)$")
_DELETED_FILE = re.compile(r"^deleted file mode (\d+)$")
_OLD_MODE = re.compile(r"^old mode (\d+)$")
_NEW_MODE = re.compile(r"^new mode (\d+)$")
_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+ (\d+)$")
_SOURCE = re.compile(r'^--- (?P<name>"?[^\t\n]*"?)(?:\t(?P<stamp>[^\n]+))?')
_TARGET = re.compile(r'^\+\+\+ (?P<name>"?[^\t\n]*"?)(?:\t(?P<stamp>[^\n]+))?')
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))?\ @@[ ]?(.*)")
_MARKER = re.compile(r"^\\ No newline at end of file")
_BINARY = re.compile(
    r"^Binary files? (?P<source>[^\t]+?)(?:\t(?P<source_stamp>[\s0-9:\+-]+))?"
    r"(?: and (?P<target>[^\t]+?)(?:\t(?P<target_stamp>[\s0-9:\+-]+))?)? (differ|has changed)"
)

_SPACE, _MINUS, _PLUS, _BACKSLASH, _LF, _CR = b" -+\\\n\r"
_INDEX_TYPE = "I" if array("I").itemsize >= 4 else "L"  # 4-byte offsets where the body fits


class ReadError(Exception):
    """The body is not a diff this reader accepts; ``line`` is the 1-based line where it stopped."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class HunkIndex:
    """Where each hunk of one file lies in the body, in compact arrays (no object per hunk).

    ``head``: offset of the ``@@`` line; ``stop``: offset just past the hunk's last line;
    ``line``: 1-based line of the ``@@`` line (0 when the hunk read no line, as for
    ``@@ -0,0 +0,0 @@`` at the end of a body); ``marks``: ``\\ No newline`` markers met after the
    complete hunk (they belong to it).
    """

    def __init__(self, size: int) -> None:
        code = _INDEX_TYPE if size < 2**32 else "q"
        self.head = array(code)
        self.stop = array(code)
        self.line = array(code)  # a body has fewer lines than bytes
        self.marks: dict[int, int] = {}  # hunk index -> markers after it (rare)

    def __len__(self) -> int:
        return len(self.head)


@dataclass
class RawFile:
    """One file of the body as read (what unidiff's ``PatchedFile`` held, minus the lines)."""

    info: list[str]  # extended header / preceding text lines (latin-1 text, line endings kept)
    source: str
    target: str
    source_stamp: str | None = None
    target_stamp: str | None = None
    binary: bool = False
    source_mode: str | None = None
    target_mode: str | None = None
    line_no: int = 0  # 1-based: the ``diff --git`` line, a plain diff's ``+++`` line, a binary line
    hunks: HunkIndex = field(default_factory=lambda: HunkIndex(0))
    added: int = 0  # "+" lines
    removed: int = 0  # "-" lines
    plus_bytes: int = 0  # bytes of the "+" lines as written (type byte and newline included)
    minus_bytes: int = 0
    markers: int = 0  # "\\ No newline" lines
    all_old_empty: bool = True  # every hunk is ``-N,0`` (a creation's shape)
    all_new_empty: bool = True  # every hunk is ``+N,0`` (a deletion's shape)
    too_large: tuple[int, int] | None = None  # (number, hunk line) of the first start past 2**63-1


MAX_LINE_NUMBER = 2**63 - 1


def diff_start(body: bytes) -> tuple[int, int]:
    """(byte offset, 0-based line index) of the first line that belongs to a diff, ``(len(body),
    lines)`` if none: a ``diff --git`` line, or a ``---`` line followed by ``+++`` (with a plain
    ``diff ...``, ``Index:`` or ``=====`` line directly above it counted in)."""
    pos, index = 0, 0
    above: list[tuple[int, bytes]] = []  # offsets and text of the lines directly above, newest last
    size = len(body)
    while pos < size:
        nl = body.find(b"\n", pos)
        end = size if nl < 0 else nl + 1
        if body.startswith(b"diff --git ", pos):
            return pos, index
        if body.startswith(b"--- ", pos) and body.startswith(b"+++ ", end):
            j = len(above)
            while j > 0 and above[j - 1][1].startswith((b"diff ", b"Index: ", b"=" * 10)):
                j -= 1
            back = len(above) - j
            return (above[j][0] if back else pos), index - back
        if body.startswith((b"diff ", b"Index: ", b"=" * 10), pos):
            above.append((pos, body[pos : min(end, pos + 10)]))
        else:
            above.clear()
        pos, index = end, index + 1
    return size, index


def read(body: bytes, pos: int = 0, first_line: int = 1) -> list[RawFile]:
    """Every file diff in ``body`` from offset ``pos`` (whose line is ``first_line``).

    Raises ``ReadError`` with unidiff's message and the line where reading stopped."""
    files: list[RawFile] = []
    cur: RawFile | None = None
    info: list[str] | None = None
    source: str | None = None  # a "---" line waiting for its "+++"
    source_stamp: str | None = None
    size = len(body)
    no = first_line - 1
    while pos < size:
        nl = body.find(b"\n", pos)
        end = size if nl < 0 else nl + 1
        no += 1
        line = body[pos:end].decode("latin-1")
        start, pos = pos, end
        c = line[0]  # each header form starts with its own character: try only the forms that can match

        m = (_GIT[0].match(line) or _GIT[1].match(line) or _GIT[2].match(line)) if c == "d" else None
        if m:
            info = [line]
            cur = RawFile(info, m["source"], m["target"], line_no=no, hunks=HunkIndex(size))
            files.append(cur)
            continue
        if c in "dnoi" and _extended(line, c, cur, info, no):
            continue
        m = _SOURCE.match(line) if c == "-" else None
        if m:
            source, source_stamp = m["name"], m["stamp"]
            # a "---" starts a new file unless it restates the source inside a git header
            if cur is not None and info is None:
                cur = None
            elif cur is not None:
                cur.source_stamp = source_stamp
            continue
        m = _TARGET.match(line) if c == "+" else None
        if m:
            if cur is not None and cur.target != m["name"]:
                raise ReadError(f"Target without source: {line}", no)
            if cur is None:
                if source is None:
                    raise ReadError(f"Target without source: {line}", no)
                cur = RawFile(
                    info or [], source, m["name"], source_stamp, m["stamp"], line_no=no, hunks=HunkIndex(size)
                )
                files.append(cur)
                info, source, source_stamp = None, None, None
            else:
                cur.target_stamp = m["stamp"]
            continue
        m = HUNK_HEADER.match(line) if c == "@" else None
        if m:
            info = None
            if cur is None:
                raise ReadError(f"Unexpected hunk found: {line}", no)
            pos, no = _hunk(body, start, pos, no, m, cur)
            continue
        if c == "\\" and _MARKER.match(line):
            _marker(line, cur, no)
            continue
        if line == "\n" and cur is not None and len(cur.hunks):
            continue  # a blank line after a hunk
        if info is None:  # anything else is header text (a commit message, an "Index:" line ...)
            cur = None
            info = []
        m = _BINARY.match(line) if c == "B" else None
        if m or line == "GIT binary patch\n":
            _binary(line, m, cur, info, files, no)
            source = m["source"] if m else source
            info, cur = None, None
            continue
        info.append(line)
    return files


def _extended(line: str, c: str, cur: RawFile | None, info: list[str] | None, no: int) -> bool:
    """A git extended header line (``new file mode``, ``deleted file mode``, ``old mode``, ``new
    mode``, ``index``) taken into ``cur``: False when ``line`` is none of them."""
    m = _NEW_FILE.match(line) if c == "n" else _DELETED_FILE.match(line) if c == "d" else None
    if m:
        if cur is None or info is None:
            raise ReadError(f"Unexpected {'new' if c == 'n' else 'deleted'} file found: {line}", no)
        if c == "n":
            cur.source, cur.target_mode = DEV_NULL, m[1]
        else:
            cur.target, cur.source_mode = DEV_NULL, m[1]
        info.append(line)
        return True
    if cur is None or info is None or c not in "oni":
        return False
    m = _OLD_MODE.match(line)
    if m:
        cur.source_mode = m[1]
    elif m := _NEW_MODE.match(line):
        cur.target_mode = m[1]
    elif m := _INDEX.match(line):
        cur.source_mode = cur.source_mode if cur.source_mode is not None else m[1]
        cur.target_mode = cur.target_mode if cur.target_mode is not None else m[1]
    else:
        return False
    info.append(line)
    return True


def _binary(
    line: str, m: re.Match[str] | None, cur: RawFile | None, info: list[str], files: list[RawFile], no: int
) -> None:
    """A ``Binary files a and b differ`` line (``m``) or git's ``GIT binary patch``: the file it
    belongs to is binary (a ``Binary`` line outside a git header is a file of its own)."""
    if m is None:
        if cur is None:
            raise ReadError(f"Unexpected binary patch marker: {line}", no)
        cur.binary = True
        return
    info.append(line)
    if cur is not None:
        cur.binary = True
    else:
        files.append(RawFile(info, m["source"], m["target"] or m["source"], binary=True, line_no=no))


def _marker(line: str, cur: RawFile | None, no: int) -> None:
    """A ``\\ No newline at end of file`` line: counted against the hunk it follows."""
    if cur is None:
        raise ReadError(f"Unexpected marker: {line}", no)
    n = len(cur.hunks)
    if not n:
        raise ReadError("Unexpected marker: No newline at end of file", no)
    cur.hunks.marks[n - 1] = cur.hunks.marks.get(n - 1, 0) + 1
    cur.markers += 1


def _number(text: str | None, default: int, no: int) -> int:
    if text is None:
        return default
    if len(text) > 30:  # int() refuses 4,300+ digits; anything past 19 is too large anyway
        raise ReadError(f"line number {text[:20]}... is too large (the hunk header's numbers are line numbers)", no)
    return int(text)


def _hunk(body: bytes, head: int, pos: int, no: int, m: re.Match[str], cur: RawFile) -> tuple[int, int]:
    """Read the hunk whose header ``m`` was line ``no`` (from ``head`` to ``pos``): count its lines
    against the header (one byte looked at per line, nothing kept), record where it lies.
    Returns the offset and line number after it."""
    head_no = no
    src_start, tgt_start = _number(m[1], 0, no), _number(m[3], 0, no)
    src_len, tgt_len = _number(m[2], 1, no), _number(m[4], 1, no)
    src_end, tgt_end = src_start + src_len, tgt_start + tgt_len
    src, tgt = src_start, tgt_start
    added = removed = plus_bytes = minus_bytes = markers = 0
    size = len(body)
    read_any = False
    find = body.find
    while pos < size:  # a hunk reads at least one line if there is one (unidiff's rule)
        nl = find(b"\n", pos)
        end = size if nl < 0 else nl + 1
        no += 1
        c = body[pos]
        if c in (_SPACE, _LF, _CR):
            src += 1
            tgt += 1
        elif c == _MINUS:
            src += 1
            removed += 1
            minus_bytes += end - pos
        elif c == _PLUS:
            tgt += 1
            added += 1
            plus_bytes += end - pos
        elif c == _BACKSLASH:
            markers += 1
        else:
            raise ReadError(f"Hunk diff line expected: {body[pos:end].decode('latin-1')}", no)
        read_any = True
        pos = end
        if src > src_end or tgt > tgt_end:
            raise ReadError("Hunk is longer than expected", no)
        if src == src_end and tgt == tgt_end:
            break
    if src < src_end or tgt < tgt_end:
        raise ReadError("Hunk is shorter than expected", no)
    h = cur.hunks
    h.head.append(head)
    h.stop.append(pos)
    h.line.append(head_no if read_any else 0)
    cur.added += added
    cur.removed += removed
    cur.plus_bytes += plus_bytes
    cur.minus_bytes += minus_bytes
    cur.markers += markers
    cur.all_old_empty = cur.all_old_empty and src_len == 0
    cur.all_new_empty = cur.all_new_empty and tgt_len == 0
    if cur.too_large is None:
        big = src_start if src_start > MAX_LINE_NUMBER else tgt_start if tgt_start > MAX_LINE_NUMBER else None
        if big is not None:
            cur.too_large = (big, head_no if read_any else 0)
    return pos, no
