"""The parsed form of a patch: ``FilePatch`` (one file) and its hunks, byte-exact and lazy.

The apply engine must reproduce GNU patch byte for byte, so the parsed form keeps every content
byte of every hunk line: CR before LF, a missing newline at end of file, non-UTF-8 text. Hunk
lines are slices of the body, made when a hunk is used (``HunkList``), never all at once, so a
100 MB body stays about its own size in memory; the engine reads a hunk as a view of the body
(``HunkSpan``), without a bytes object per line. ``patchset.patchfmt.diffs`` makes these from a
body; the engine and the rebase read them.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, overload

from patchset.patchfmt.reader import HUNK_HEADER, RawFile

Op = Literal["create", "delete", "modify", "rename", "copy"]

NO_NEWLINE_MARKER = b"\\ No newline at end of file\n"


@dataclass
class Hunk:
    """One ``@@`` hunk. ``lines`` are the hunk's lines in diff form, one ``bytes`` each:
    the type byte (`` ``, ``-``, ``+``) followed by the exact file content including its line
    ending, or the exact ``\\ No newline at end of file`` marker line after a line that lacks one.
    """

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[bytes]
    section: str = ""
    line_no: int = 0  # 1-based line of the ``@@`` header in the patch body
    _body: list[tuple[str, bytes]] | None = field(default=None, repr=False, compare=False)

    def body(self) -> list[tuple[str, bytes]]:
        """``(kind, content)`` pairs, kind in `` -+``; content is exactly what the file holds
        (a line followed by the no-newline marker has its ``\\n`` removed)."""
        if self._body is None and not any(raw[:1] == b"\\" for raw in self.lines):
            self._body = [(chr(raw[0]), raw[1:]) for raw in self.lines]  # no marker: one pass
        if self._body is None:
            out: list[tuple[str, bytes]] = []
            for raw in self.lines:
                if raw.startswith(b"\\"):
                    if out:
                        kind, content = out[-1]
                        if content.endswith(b"\n"):
                            out[-1] = (kind, content[:-1])
                    continue
                out.append((chr(raw[0]), raw[1:]))
            self._body = out
        return self._body

    def old_lines(self) -> list[bytes]:
        return [c for k, c in self.body() if k != "+"]

    def new_lines(self) -> list[bytes]:
        return [c for k, c in self.body() if k != "-"]

    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@"

    def reversed(self) -> Hunk:
        """The hunk that undoes this one (old and new sides swapped)."""
        return Hunk(
            self.new_start, self.new_len, self.old_start, self.old_len, _swap(self.lines), self.section, self.line_no
        )


_SWAP = {43: b"-", 45: b"+"}


@dataclass(frozen=True)
class HunkSpan:
    """A hunk's numbers and its lines in diff form as one buffer (``b"".join(lines)``; a view of
    the body when the body holds them as they are): what the engine walks, so a hunk of a
    million lines costs a few arrays, not a bytes object per line."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    text: bytes | memoryview  # ``\\`` lines are no-newline markers, as in ``Hunk.lines``
    marks: int = 0  # no-newline markers after the last line of ``text``
    swapped: bool = False  # "+" and "-" lines read the other way round (a reversed hunk)


def span_of(hunk: Hunk) -> HunkSpan:
    return HunkSpan(hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len, b"".join(hunk.lines))


def _swap(lines: list[bytes]) -> list[bytes]:
    return [_SWAP[raw[0]] + raw[1:] if raw[:1] in (b"+", b"-") else raw for raw in lines]


T = TypeVar("T")


class LazySequence(Sequence[T]):
    """A read-only sequence whose items are built on access (``_make``) from compact storage,
    never kept: ``HunkList`` here, ``hunks.HunkResults`` in the engine. Compares equal to any
    sequence of equal items (a plain list included)."""

    __slots__ = ()

    def _make(self, k: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._make(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._make(i)

    def __iter__(self) -> Iterator[T]:
        for k in range(len(self)):
            yield self._make(k)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class HunkList(LazySequence[Hunk]):
    """The hunks of one file patch, made one at a time from the body when used.

    A ``HunkIndex`` holds a few integers per hunk, so 400,000 small hunks cost a few MB. Each access
    builds a fresh, equal ``Hunk``; nothing is cached, so a walk keeps one hunk's lines alive."""

    __slots__ = ("_body", "_crlf", "_fallback_line", "_index", "_reverse", "added", "removed", "sizes")

    def __init__(self, body: bytes, raw: RawFile, *, crlf: bool, fallback_line: int) -> None:
        self._body = body
        self._index = raw.hunks
        self._crlf = crlf  # strip a CR before each line's LF (GNU patch, CRLF file headers)
        self._reverse = False
        self._fallback_line = fallback_line  # a hunk that read no line is numbered by its file
        self.added = raw.added  # line counts of the whole file patch, from the reader
        self.removed = raw.removed
        # bytes of the "+" and "-" lines as written and the number of no-newline markers: what
        # the engine needs to size its output buffer once (``hunks.output_bound``)
        self.sizes = (raw.plus_bytes, raw.minus_bytes, raw.markers)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"HunkList({len(self)} hunks)"

    def reversed(self) -> HunkList:
        """The same hunks with old and new sides swapped (``reverse_file_patch``), just as lazy."""
        other = copy.copy(self)
        other._reverse = not self._reverse
        other.added, other.removed = self.removed, self.added
        other.sizes = (self.sizes[1], self.sizes[0], self.sizes[2])
        return other

    def _make(self, k: int) -> Hunk:
        body, ix = self._body, self._index
        head, stop = ix.head[k], ix.stop[k]
        m = _HUNK_HEADER_BYTES.match(body, head)  # the reader found this header there
        assert m is not None
        first = min(m.end() + 1, stop)
        region = body[first:stop]
        lines = split_lines(region)
        if region[:1] in _ODD or b"\n\\" in region or b"\n\n" in region or b"\n\r" in region:
            lines = [_normal(ln) for ln in lines]
        marks = ix.marks.get(k)
        if marks:
            lines.extend([NO_NEWLINE_MARKER] * marks)
        if self._crlf:
            lines = [ln[:-2] + b"\n" if ln.endswith(b"\r\n") else ln for ln in lines]
        hunk = Hunk(
            int(m[1]),
            int(m[2]) if m[2] is not None else 1,
            int(m[3]),
            int(m[4]) if m[4] is not None else 1,
            lines,
            m[5].decode("latin-1"),
            ix.line[k] or self._fallback_line,
        )
        return hunk.reversed() if self._reverse else hunk

    def span(self, k: int) -> HunkSpan:
        """Hunk ``k`` as a ``HunkSpan`` over the body itself, no copy; a hunk whose lines the body
        does not hold as they are (blank context lines, CRLF headers) is normalized first."""
        body, ix = self._body, self._index
        head, stop = ix.head[k], ix.stop[k]
        m = _HUNK_HEADER_BYTES.match(body, head)
        assert m is not None
        first = min(m.end() + 1, stop)
        odd = body[first : first + 1] in (b"\n", b"\r") or body.find(b"\n\n", first, stop) >= 0
        if self._crlf or odd or body.find(b"\n\r", first, stop) >= 0:
            return span_of(self._make(k))
        nums = (int(m[1]), int(m[2]) if m[2] is not None else 1, int(m[3]), int(m[4]) if m[4] is not None else 1)
        if self._reverse:
            nums = (nums[2], nums[3], nums[0], nums[1])
        return HunkSpan(*nums, memoryview(body)[first:stop], ix.marks.get(k, 0), self._reverse)


# the reader's HUNK_HEADER in bytes (same grammar: ``\d`` and ``.`` mean the same on latin-1 text),
# without its "^": ``match(body, pos)`` anchors at ``pos``, where "^" would not match
_HUNK_HEADER_BYTES = re.compile(HUNK_HEADER.pattern.removeprefix("^").encode("latin-1"))
_ODD = (b"\\", b"\n", b"\r")  # how lines whose form in ``Hunk.lines`` is not the body's start
_BLANK = re.compile(rb"[\r\n]{1,2}")


def _normal(line: bytes) -> bytes:
    """A hunk line as ``Hunk.lines`` holds it: any ``\\`` line is the no-newline marker; a blank
    line is a context line (of its first one or two CR/LF bytes, as unidiff reads it)."""
    c = line[0]
    if c == 92:
        return NO_NEWLINE_MARKER
    if c == 10 or c == 13:
        m = _BLANK.match(line)
        assert m is not None
        return b" " + m.group()
    return line


@dataclass
class FilePatch:
    """Everything one patch says about one file. Paths are already stripped (``-p``);
    ``None`` stands for ``/dev/null``. Modes are git octal strings such as ``"100755"``."""

    old_path: str | None
    new_path: str | None
    op: Op
    old_mode: str | None = None
    new_mode: str | None = None
    hunks: Sequence[Hunk] = field(default_factory=list)
    binary: bool = False
    similarity: int | None = None
    git: bool = False
    line_no: int = 0  # 1-based line in the body where this file's diff starts

    @property
    def path(self) -> str:
        """The path this patch reads (for create: writes)."""
        p = self.old_path if self.op != "create" else self.new_path
        assert p is not None
        return p

    @property
    def target(self) -> str | None:
        """The path the result is written to (``None`` for a deletion)."""
        if self.op == "delete":
            return None
        if self.op in ("rename", "copy", "create") or self.git:
            return self.new_path
        return self.old_path

    def line_counts(self) -> tuple[int, int]:
        """(added, removed) lines, without building the hunks when the reader counted them."""
        if isinstance(self.hunks, HunkList):
            return self.hunks.added, self.hunks.removed
        lines = [ln for h in self.hunks for ln in h.lines]
        return sum(1 for ln in lines if ln[:1] == b"+"), sum(1 for ln in lines if ln[:1] == b"-")

    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for p in (self.old_path, self.new_path) if p is not None))


# --------------------------------------------------------------------------- helpers


def split_lines(data: bytes) -> list[bytes]:
    """Split on ``\\n`` only (``bytes.splitlines`` would also split on ``\\r``, ``\\x0b`` ...),
    keeping line endings; a final line without newline is kept as is."""
    if not data:
        return []
    if b"\r" not in data:  # then bytes.splitlines (\n, \r, \r\n) splits the same, faster
        return data.splitlines(keepends=True)
    parts = data.split(b"\n")
    last = parts.pop()
    lines = [p + b"\n" for p in parts]
    if last:
        lines.append(last)
    return lines


def creates_missing(fp: FilePatch) -> bool:
    """A plain diff whose only hunks are ``@@ -0,0 +1,N @@``: on a tree that lacks the file it is a
    creation (GNU patch creates the file), whatever its ``---`` line says."""
    return fp.op == "modify" and bool(fp.hunks) and all(h.old_len == 0 for h in fp.hunks)


def as_creation(fp: FilePatch) -> FilePatch:
    """``fp`` read as the creation of its target (see ``creates_missing``)."""
    return dataclasses.replace(fp, op="create", old_path=None, new_path=fp.target or fp.path, old_mode=None)
