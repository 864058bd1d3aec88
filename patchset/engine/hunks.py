"""The patch apply engine: old bytes + one file patch -> new bytes, exactly as GNU patch does it.

Pure functions, no file system. The reference is GNU ``patch -p1 -F0 --forward`` (2.7.x), checked
against the real binary by ``tests/test_engine_differential.py``: hunks in order, each searched
outward from its ``@@`` line plus the previous hunk's offset (+0, +1, -1, ...), never over the
last line a previous hunk changed (unless expected at or before it: ``_locate``) nor past the
end; a hunk with less leading (trailing) context than trailing (leading) matches only at the
start (end); bytes compared exactly, line endings included; fuzz only when asked; ``--forward``
refuses a file whose first hunk applies reversed. A failed hunk still yields the partial result
(``FileOutcome.partial``) for comparison, but ``FileOutcome.ok`` is false and nothing is written.

Memory: a file is its bytes plus one integer per line (``_Text``), hunks come one at a time from
the body as offsets into it (``filepatch.HunkSpan``, ``_Prepared``) and the result is one buffer,
so a 100 MB patch on a 100 MB file holds about the body, the old file and the new one; a caller
that needs only the result's sha256 (a lock proof) has it hashed instead (``digest_only``).
"""

from __future__ import annotations

import hashlib
import io
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from patchset.patchfmt.filepatch import FilePatch, Hunk, HunkList, HunkSpan, LazySequence, span_of
from patchset.text import json_fields

HunkStatus = Literal["clean", "offset", "fuzz", "failed", "ignored"]
FileStatus = Literal["applied", "already_applied", "failed"]


@dataclass
class NearestRegion:
    """Where a failed hunk's old lines best match the file now (1-based line, 0..1 share)."""

    line: int
    similarity: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HunkResult:
    """Where (and whether) one hunk applied: offset, fuzz, or the reason it failed."""

    index: int  # 1-based, as GNU patch numbers hunks
    status: HunkStatus
    offset: int = 0  # applied line - expected line (GNU's "offset N lines")
    fuzz: int = 0
    line: int | None = None  # 1-based line in the old file where the hunk's old lines start
    nearest: NearestRegion | None = None
    expected_line: int = 0
    misordered: bool = False  # matched before a line an earlier hunk changed (GNU: "misordered hunks")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nearest"] = self.nearest.to_json() if self.nearest else None
        if not self.misordered:
            del d["misordered"]
        return d

    def describe(self) -> str:
        if self.status == "clean":
            return f"hunk #{self.index} applied cleanly at line {self.line}"
        if self.status == "offset":
            return f"hunk #{self.index} applied at line {self.line} (offset {self.offset:+d} lines)"
        if self.status == "fuzz":
            return (
                f"hunk #{self.index} applied at line {self.line} with fuzz {self.fuzz} (offset {self.offset:+d} lines)"
            )
        if self.status == "ignored":
            return f"hunk #{self.index} ignored"
        if self.misordered:
            return (
                f"hunk #{self.index} FAILED: misordered hunks (it matches at line {self.line}, inside a "
                "region an earlier hunk already changed; the output would be garbled)"
            )
        text = f"hunk #{self.index} FAILED (expected at line {self.expected_line})"
        if self.nearest:
            text += f"; nearest match at line {self.nearest.line} ({self.nearest.similarity:.0%} of its old lines)"
        return text


_STATUSES: tuple[HunkStatus, ...] = ("clean", "offset", "fuzz", "failed", "ignored")
_STATUS_CODE = {s: i for i, s in enumerate(_STATUSES)}


class HunkResults(LazySequence[HunkResult]):
    """The results of a file's hunks, numbered 1, 2, ... in order, kept in arrays (a few bytes
    per hunk; a ``HunkResult`` object each would cost ~250 bytes per hunk, as much as a 100 MB
    patch of small hunks takes to hold itself). Each access builds a fresh ``HunkResult``."""

    __slots__ = ("_expected", "_fuzz", "_line", "_misordered", "_nearest", "_offset", "_status")

    def __init__(self) -> None:
        self._status = array("b")
        self._offset = array("q")
        self._fuzz: dict[int, int] = {}  # hunks applied with fuzz (rare)
        self._line = array("q")  # 0: None
        self._expected = array("q")
        self._misordered: set[int] = set()
        self._nearest: dict[int, NearestRegion] = {}

    def add(
        self,
        status: HunkStatus,
        *,
        offset: int = 0,
        fuzz: int = 0,
        line: int | None = None,
        expected_line: int = 0,
        misordered: bool = False,
        nearest: NearestRegion | None = None,
    ) -> None:
        k = len(self._status)
        self._status.append(_STATUS_CODE[status])
        self._offset.append(offset)
        if fuzz:
            self._fuzz[k] = fuzz
        self._line.append(line or 0)
        self._expected.append(expected_line)
        if misordered:
            self._misordered.add(k)
        if nearest is not None:
            self._nearest[k] = nearest

    def __len__(self) -> int:
        return len(self._status)

    def __repr__(self) -> str:
        return f"HunkResults({list(self)!r})"

    def _make(self, k: int) -> HunkResult:
        return HunkResult(
            index=k + 1,
            status=_STATUSES[self._status[k]],
            offset=self._offset[k],
            fuzz=self._fuzz.get(k, 0),
            line=self._line[k] or None,
            nearest=self._nearest.get(k),
            expected_line=self._expected[k],
            misordered=k in self._misordered,
        )


@dataclass
class FileOutcome:
    """One file patch applied in memory: the new bytes and each hunk's result."""

    status: FileStatus
    new: bytes | None  # resulting bytes; None when the file is deleted or the patch failed
    new_mode: str | None = None
    hunks: Sequence[HunkResult] = field(default_factory=list)
    message: str = ""  # about the file, without its path (the caller names the file)
    partial: bytes | None = None  # what GNU patch would leave on a hunk failure (not written)
    sha256: str | None = None  # of the result, when asked for it alone (``apply_file(digest_only=True)``)

    @property
    def ok(self) -> bool:
        return self.status == "applied"

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "status new_mode message hunks")


# --------------------------------------------------------------------------- the file


_NEWLINE = re.compile(b"\n")
_BLOCK = 1 << 14  # bytes per block of the line index


class _Text:
    """A file's bytes and where its lines start, found only where they are asked for.

    Blocks of about ``_BLOCK`` bytes, cut at line ends, have their newlines counted up front and
    their line offsets listed on first use, so a hunk that applies where its header says touches a
    block or two (``bench/cli.py``). ``start(n)`` is the end of the data."""

    __slots__ = ("_bounds", "_first", "_offsets", "data", "n")

    def __init__(self, data: bytes) -> None:
        self.data = data
        size = len(data)
        bounds, first = [0], [0]  # block b: bytes bounds[b]:bounds[b+1], lines first[b]:first[b+1]
        pos = count = 0
        while pos < size:
            end = data.find(b"\n", min(pos + _BLOCK, size) - 1)
            end = size if end < 0 else end + 1
            count += data.count(b"\n", pos, end)
            if data[end - 1] != 10:
                count += 1  # a last line without a newline
            bounds.append(end)
            first.append(count)
            pos = end
        self.n = count
        self._bounds, self._first = bounds, first
        self._offsets: list[array[int] | None] = [None] * (len(bounds) - 1)

    def __len__(self) -> int:
        return self.n

    def start(self, i: int) -> int:
        """Byte offset where line ``i`` (0-based) starts; ``start(n)`` is the data's length."""
        if i >= self.n:
            return len(self.data)
        b = bisect_right(self._first, i) - 1
        offsets = self._offsets[b]
        if offsets is None:
            lo, hi = self._bounds[b], self._bounds[b + 1]
            offsets = array("q", [lo])
            offsets.extend(map(_END, _NEWLINE.finditer(self.data, lo, hi - 1)))
            self._offsets[b] = offsets
        return offsets[i - self._first[b]]

    def line(self, i: int) -> bytes:
        """Line ``i`` (0-based), its newline included."""
        return self.data[self.start(i) : self.start(i + 1)]

    def lines(self) -> Iterator[bytes]:
        data, pos = self.data, 0
        for _ in range(self.n):
            end = data.find(b"\n", pos) + 1 or len(data)
            yield data[pos:end]
            pos = end


_END = re.Match.end


# --------------------------------------------------------------------------- hunk geometry


class _Prepared:
    """A hunk in the form the search needs (GNU's pch_* accessors), kept as offsets into the
    hunk's text (``HunkSpan``): ``kinds`` has one type byte per line (`` ``, ``-``, ``+``), the old
    lines (context and removed) and the added lines are (start, end) pairs of their content. No
    bytes object per line: a hunk spanning a whole file costs a few bytes per line beside it."""

    __slots__ = ("first", "kinds", "new_at", "new_end", "old_at", "old_end", "prefix", "suffix", "text")

    def __init__(self, span: HunkSpan, reverse: bool = False) -> None:
        text = self.text = memoryview(span.text)
        plus, minus = (45, 43) if span.swapped != reverse else (43, 45)
        kinds = bytearray()
        self.old_at, self.old_end, self.new_at, self.new_end = (array("q") for _ in range(4))
        last: tuple[array[int], array[int]] | None = None  # the arrays that hold the line before
        begin = 0
        for stop in _line_ends(text):
            kind = text[begin]
            if kind == 92:  # a no-newline marker: the line before loses its newline
                _cut(text, last)
            else:
                if kind == plus:
                    kinds.append(43)
                    last = (self.new_at, self.new_end)
                else:
                    kinds.append(45 if kind == minus else kind)
                    last = (self.old_at, self.old_end)
                last[0].append(begin + 1)
                last[1].append(stop)
            begin = stop
        if span.marks:
            _cut(text, last)
        self.kinds = bytes(kinds)
        start, length = (span.new_start, span.new_len) if reverse else (span.old_start, span.old_len)
        self.first = start + 1 if length == 0 else start  # "-N,0": insert after line N
        n = len(kinds)
        self.prefix = n - len(self.kinds.lstrip(b" "))
        self.suffix = self.prefix if self.prefix == n else n - len(self.kinds.rstrip(b" "))

    @property
    def size(self) -> int:
        """Old lines (context and removed): the pattern the file must match."""
        return len(self.old_at)


def _line_ends(text: memoryview) -> Iterator[int]:
    """The offset just past each line of ``text`` (the last one may lack its newline)."""
    stop = 0
    for m in _NEWLINE.finditer(text):
        stop = m.end()
        yield stop
    if stop < len(text):
        yield len(text)


def _cut(text: memoryview, last: tuple[array[int], array[int]] | None) -> None:
    """Drop the newline of the line ``last`` ends with (a no-newline marker follows it)."""
    if last is not None and last[1][-1] > last[0][-1] and text[last[1][-1] - 1] == 10:
        last[1][-1] -= 1


def _match(text: _Text, h: _Prepared, where: int, pfuzz: int, sfuzz: int) -> bool:
    """Do the old lines [pfuzz : size-sfuzz] equal the file lines starting at 1-based
    ``where+pfuzz``? Lines are compared byte for byte, line endings included."""
    lo = where - 1 + pfuzz
    hi = where - 1 + h.size - sfuzz
    if hi <= lo:
        return True  # fuzz left no line to compare: GNU matches anywhere, even before line 1
    if lo < 0 or hi > text.n:
        return False
    data, src, old_at, old_end = text.data, h.text, h.old_at, h.old_end
    at = text.start(lo)
    for j in range(pfuzz, h.size - sfuzz):
        a, b = old_at[j], old_end[j]
        nxt = text.start(lo + j - pfuzz + 1)
        if nxt - at != b - a or not data.startswith(src[a:b], at):
            return False
        at = nxt
    return True


def _locate(lines: _Text, h: _Prepared, fuzz: int, in_offset: int, last_frozen: int) -> int:
    """GNU patch's hunk search; returns the 1-based line where the pattern starts, 0 if none.

    2.7.6's, quirks included: a hunk placed where GNU would refuse it, or where GNU would not
    look first, gives a file that GNU patch (the reference) would not make (issue #35)."""
    input_lines = len(lines)
    first_guess = h.first + in_offset
    pat_lines = h.size
    context = max(h.prefix, h.suffix)
    prefix_fuzz = fuzz + h.prefix - context
    suffix_fuzz = fuzz + h.suffix - context
    max_where = input_lines - (pat_lines - suffix_fuzz) + 1
    min_where = last_frozen + 1  # GNU 2.7.6 (2017, "don't allow hunks to overlap")
    max_pos_offset = max_where - first_guess
    max_neg_offset = first_guess - min_where
    max_offset = max(max_pos_offset, max_neg_offset)

    if not pat_lines:  # an empty old side matches anywhere: the expected line
        return first_guess
    if first_guess <= max_neg_offset:  # never before line 1
        max_neg_offset = first_guess - 1

    if prefix_fuzz < 0 and h.first <= 1:
        # too little leading context: the hunk can only match at the start of the file
        if suffix_fuzz < 0 and (pat_lines != input_lines or h.prefix < last_frozen):
            return 0
        offset = 1 - first_guess
        if (
            last_frozen <= h.prefix
            and offset <= max_pos_offset
            and _match(lines, h, first_guess + offset, 0, max(suffix_fuzz, 0))
        ):
            return first_guess + offset
        return 0
    if prefix_fuzz < 0:
        prefix_fuzz = 0

    if suffix_fuzz < 0:
        # too little trailing context: the hunk can only match at the end of the file
        offset = first_guess - (input_lines - pat_lines + 1)
        if offset <= max_neg_offset and _match(lines, h, first_guess - offset, prefix_fuzz, 0):
            return first_guess - offset
        return 0

    if max_neg_offset < 0 <= max_pos_offset:
        # The expected line is at or before the last line an earlier hunk changed: GNU starts
        # its offsets at max_neg_offset, so it tries min_where once and, as "+offset" places,
        # the lines from as far before first_guess as first_guess is before min_where. Only
        # this lets a hunk start over an earlier change, and only when it was expected there.
        lowest = first_guess + max_neg_offset
        if _match(lines, h, lowest, prefix_fuzz, suffix_fuzz):
            return lowest
        if _match(lines, h, min_where, prefix_fuzz, suffix_fuzz):
            return min_where
        for where in range(max(lowest + 1, 1 - prefix_fuzz), first_guess):
            if _match(lines, h, where, prefix_fuzz, suffix_fuzz):
                return where

    # GNU's order (+0, +1, -1, +2, -2 ...) over the offsets that can match at all: a positive
    # offset only up to ``max_pos_offset``, a negative one only once ``first_guess - offset``
    # is inside the file. Skipping the hopeless ones keeps a far-off hunk number (``@@ -10000000``)
    # linear in the file's length instead of in the number.
    neg_from = max(1, first_guess - max_where)
    offset = 0
    while offset <= max_offset:
        if offset > max_pos_offset and offset < neg_from:
            offset = neg_from
            continue
        if offset <= max_pos_offset and _match(lines, h, first_guess + offset, prefix_fuzz, suffix_fuzz):
            return first_guess + offset
        if 0 < offset <= max_neg_offset and _match(lines, h, first_guess - offset, prefix_fuzz, suffix_fuzz):
            return first_guess - offset
        offset += 1
    return 0


NEAREST_LIMIT = 16  # failed hunks per file that get a nearest region (each costs a pass over the file)


def nearest_region(lines: _Text, hunk: Hunk, expected: int) -> NearestRegion | None:
    """Best alignment of the hunk's old lines in ``lines``: most lines equal at their relative
    place (ties: closest to ``expected``). Lines that occur very often (blank lines, braces)
    do not vote, so a region is found by its distinctive lines."""
    pattern = hunk.old_lines()
    if not pattern or not len(lines):
        return None
    wanted = set(pattern)
    where: dict[bytes, list[int]] = {}
    for i, ln in enumerate(lines.lines()):
        if ln in wanted:
            where.setdefault(ln, []).append(i)
    votes: dict[int, int] = {}
    for j, ln in enumerate(pattern):
        hits = where.get(ln)
        if not hits or len(hits) > 64:
            continue
        for i in hits:
            votes[i - j] = votes.get(i - j, 0) + 1
    if not votes:
        return None
    best = max(votes, key=lambda s: (votes[s], -abs(s + 1 - expected)))
    # exact count at that alignment, frequent lines included
    same = sum(1 for j, ln in enumerate(pattern) if 0 <= best + j < len(lines) and lines.line(best + j) == ln)
    return NearestRegion(line=max(best + 1, 1), similarity=round(same / len(pattern), 3))


# --------------------------------------------------------------------------- output


class _Writer:
    """GNU patch's output state: copies input lines, inserts hunk lines, and adds a newline
    when something follows a line that had none. Copies are slices of the input's bytes
    (through a memoryview: no intermediate copy) written into one buffer, or only hashed
    (``digest``: a caller that needs the result's sha256 alone keeps no copy of it)."""

    def __init__(self, text: _Text, size_hint: int = 0, digest: Any = None) -> None:
        self.text = text
        self.view = memoryview(text.data)
        self.out = io.BytesIO()
        self.digest = digest
        if digest is not None:
            self.write = digest.update
        else:
            self.write = self.out.write
            if size_hint >= PRESIZE:
                # one allocation of the final size: a buffer grown step by step leaves a trail of
                # freed copies behind it (twice the output's size in peak memory)
                self.out.seek(size_hint - 1)
                self.out.write(b"\0")
                self.out.seek(0)
        self.written = 0  # bytes of output so far
        self.after_newline = True
        self.frozen = 0  # input lines consumed (GNU's last_frozen_line)

    def _put(self, data: bytes | memoryview) -> None:
        self.write(data)
        self.written += len(data)

    def emit(self, data: bytes | memoryview) -> None:
        if not len(data):
            return
        if not self.after_newline:
            self._put(b"\n")
        self._put(data)
        self.after_newline = data[-1] == 10

    def copy_till(self, line: int) -> None:
        # past the end of the input there is nothing to copy (GNU: an empty line fetch);
        # every input line but the last ends in "\n", so a span is copied in one go
        if self.frozen < line:
            hi = min(line, self.text.n)
            if hi > self.frozen:
                a, b = self.text.start(self.frozen), self.text.start(hi)
                if not self.after_newline:
                    self._put(b"\n")
                self._put(self.view[a:b])
                self.after_newline = self.text.data[b - 1] == 10
            self.frozen = line

    def misordered(self, h: _Prepared, where: int) -> bool:
        """Would the hunk change lines an earlier hunk already consumed? GNU patch refuses
        that ("misordered hunks! output would be garbled") instead of writing garbage."""
        for old, kind in enumerate(h.kinds):
            if kind in (43, 45):  # only context lines come before the first change
                return self.frozen > where + old - 1
        return False

    def apply(self, h: _Prepared, where: int) -> None:
        old = new = 0  # indexes into the old lines and the added ones
        for kind in h.kinds:
            if kind == 45:  # "-"
                self.copy_till(where + old - 1)
                self.frozen += 1  # drop the input line
                old += 1
            elif kind == 43:  # "+"
                self.copy_till(where + old - 1)
                self.emit(h.text[h.new_at[new] : h.new_end[new]])
                new += 1
            else:
                old += 1

    def finish(self) -> bytes:
        """The output (empty when only hashed)."""
        self.copy_till(self.text.n)
        if self.digest is not None:
            return b""
        self.out.truncate(self.out.tell())
        return self.out.getvalue()  # the buffer itself, not a copy (nothing writes to it after)


PRESIZE = 1 << 20  # outputs from this size on get their buffer in one allocation


def output_bound(old_size: int, hunks: Sequence[Hunk]) -> int:
    """At least the size of the file ``hunks`` make from ``old_size`` bytes when they apply (0:
    unknown). Added: every "+" line as written (its type byte pays for a newline the writer may
    insert after it); removed: every "-" line less its type byte and one byte (a CR stripped, a
    newline a marker removes), less the markers."""
    if not isinstance(hunks, HunkList):
        return 0
    plus, minus, markers = hunks.sizes
    return old_size + plus + 1 - max(0, minus - 2 * hunks.removed - markers)


# --------------------------------------------------------------------------- apply


def _run_hunks(writer: _Writer, fuzz: int, hunks: Sequence[Hunk]) -> tuple[HunkResults, bool]:
    """Apply hunks in order (GNU semantics) through ``writer``. Returns (results, reversed_detected).
    Hunks are taken one at a time: only the current one's arrays are alive."""
    lines = writer.text
    results = HunkResults()
    in_offset = 0
    failures = 0
    for k in range(len(hunks)):
        span = hunks.span(k) if isinstance(hunks, HunkList) else span_of(hunks[k])
        h = _Prepared(span)
        maxfuzz = min(fuzz, max(h.prefix, h.suffix))
        where = 0
        used = 0
        for f in range(0, maxfuzz + 1):
            where = _locate(lines, h, f, in_offset, writer.frozen)
            if not where and k == 0:
                # --forward: does the first hunk apply reversed? then refuse the file
                rev = _Prepared(span, reverse=True)
                if _locate(lines, rev, f, in_offset, writer.frozen):
                    return HunkResults(), True
            if where:
                used = f
                break
        del span
        expected = h.first + in_offset
        if not where:
            failures += 1
            near = nearest_region(lines, hunks[k], expected) if failures <= NEAREST_LIMIT else None
            results.add("failed", line=None, expected_line=expected, nearest=near)
            continue
        offset = where - h.first
        in_offset = offset  # GNU moves it when the hunk is found, misordered or not
        if writer.misordered(h, where):
            results.add("failed", line=where, expected_line=expected, misordered=True)
            continue
        status: HunkStatus = "fuzz" if used else ("offset" if offset else "clean")
        results.add(status, offset=offset, fuzz=used, line=where, expected_line=expected)
        writer.apply(h, where)
    return results, False


def apply_file(old: bytes | None, fp: FilePatch, fuzz: int = 0, *, digest_only: bool = False) -> FileOutcome:
    """Apply one file patch to ``old`` (``None``: the file does not exist).

    Never raises for a patch that does not fit: the outcome says ``failed`` or
    ``already_applied`` with a message and per-hunk results. ``digest_only``: the result is
    hashed as it is made and not kept (``FileOutcome.sha256``; ``new`` and ``partial`` are None),
    for a caller that compares it with a lock: memory stays at the old file and the body.
    """
    new_mode = fp.new_mode
    if fp.binary:
        return FileOutcome("failed", None, message="binary patches are not supported")
    if fp.op == "create":
        if old:  # GNU patch treats an existing empty file as absent
            if old == _create_content(fp):
                return FileOutcome(
                    "already_applied",
                    None,
                    message=(
                        "the patch creates this file and it already exists with the same content (already applied)"
                    ),
                )
            return FileOutcome("failed", None, message="the patch creates this file but it already exists")
        old = b""
    elif old is None:
        if fp.op == "delete":
            # not "already applied": the file may never have existed here (the wrong tree);
            # whether the tree carries the patch is detect_state's question (it reverses it)
            return FileOutcome("failed", None, message="the patch deletes this file but it does not exist")
        if fp.hunks and fp.hunks[0].old_start == 0 and fp.hunks[0].old_len == 0:
            old = b""  # GNU patch: a "-0,0" hunk on a missing file creates it
        else:
            return FileOutcome("failed", None, message="file to patch does not exist")
    elif (
        not old
        and fp.hunks
        and (fp.op == "delete" or (len(fp.hunks) == 1 and fp.hunks[0].new_start == 0 and fp.hunks[0].new_len == 0))
    ):
        return FileOutcome(
            "already_applied",
            None,
            message="the patch empties this file and it is already empty (already applied)",
        )

    if not fp.hunks:
        # rename / copy / mode change only
        if fp.op == "delete":
            if old:
                return FileOutcome("failed", None, message="deletion patch has no hunks but the file is not empty")
            return FileOutcome("applied", None, message="deleted")
        if digest_only:
            return FileOutcome("applied", None, new_mode=new_mode, sha256=hashlib.sha256(old).hexdigest())
        return FileOutcome("applied", old, new_mode=new_mode)

    text = _Text(old)
    writer = _Writer(text, output_bound(len(old), fp.hunks), hashlib.sha256() if digest_only else None)
    results, reversed_ = _run_hunks(writer, fuzz, fp.hunks)
    if reversed_:
        return FileOutcome(
            "already_applied",
            None,
            hunks=[HunkResult(i, "ignored") for i in range(1, len(fp.hunks) + 1)],
            message="reversed (or previously applied) patch detected: the patch looks already applied",
        )
    out = writer.finish()
    partial = None if digest_only else out  # hashed only: nothing was kept
    failed = [r for r in results if r.status == "failed"]
    if failed:
        return FileOutcome(
            "failed",
            None,
            hunks=results,
            partial=partial,
            message=f"{len(failed)} out of {len(results)} hunk(s) FAILED",
        )
    if fp.op == "delete":
        if writer.written:
            return FileOutcome(
                "failed",
                None,
                hunks=results,
                partial=partial,
                message=(f"{fp.old_path}: deletion patch applied but the file is not empty afterwards"),
            )
        return FileOutcome("applied", None, hunks=results, message="deleted")
    if digest_only:
        return FileOutcome("applied", None, new_mode=new_mode, hunks=results, sha256=writer.digest.hexdigest())
    return FileOutcome("applied", out, new_mode=new_mode, hunks=results)


def _create_content(fp: FilePatch) -> bytes:
    w = _Writer(_Text(b""))
    for h in fp.hunks:
        for kind, content in h.body():
            if kind == "+":
                w.emit(content)
    return w.finish()


def reverse_file_patch(fp: FilePatch) -> FilePatch:
    """The patch that undoes ``fp`` (used for "is it already applied?"); as lazy as ``fp``."""
    op = {"create": "delete", "delete": "create"}.get(fp.op, fp.op)
    hunks = fp.hunks.reversed() if isinstance(fp.hunks, HunkList) else [h.reversed() for h in fp.hunks]
    return FilePatch(
        old_path=fp.new_path,
        new_path=fp.old_path,
        op=op,  # type: ignore[arg-type]
        old_mode=fp.new_mode,
        new_mode=fp.old_mode,
        hunks=hunks,
        binary=fp.binary,
        similarity=fp.similarity,
        git=fp.git,
        line_no=fp.line_no,
    )
