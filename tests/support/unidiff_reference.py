"""The parser as it was before the streaming reader: unidiff reads the body, this turns its
``PatchedFile`` objects into ``patchset.patchfmt.filepatch.FilePatch``. Kept as the reference the
reader (``patchset.patchfmt.reader``) is compared with on real patches (tests/test_diff_reader.py):
unidiff is a well-kept parser no one here wrote, so where the two disagree the reader is wrong.

Only the hot path moved off unidiff (it keeps an object per line and cannot hand out one hunk at
a time); what the header lines mean (names, strip levels, epochs, renames, modes:
``diffs.file_header``/``finish_file``) is the product's own code, shared by both.
"""

from __future__ import annotations

from collections.abc import Iterator

from unidiff import PatchedFile, PatchSet
from unidiff.constants import LINE_TYPE_ADDED, LINE_TYPE_CONTEXT, LINE_TYPE_NO_NEWLINE, LINE_TYPE_REMOVED
from unidiff.errors import UnidiffParseError

from patchset.errors import Location, PatchFormatError
from patchset.patchfmt.diffs import SectionHead, file_header, finish_file
from patchset.patchfmt.filepatch import NO_NEWLINE_MARKER, FilePatch, Hunk, split_lines

MAX_LINE_NUMBER = 2**63 - 1


def _diff_start(lines: list[bytes]) -> int:
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            return i
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            j = i
            while j > 0 and (
                lines[j - 1].startswith(b"diff ")
                or lines[j - 1].startswith(b"Index: ")
                or lines[j - 1].startswith(b"=" * 10)
            ):
                j -= 1
            return j
    return len(lines)


class _CountingLines:
    """Feeds unidiff and remembers the 1-based number of the last line handed out."""

    def __init__(self, lines: list[str], first_no: int) -> None:
        self._lines = lines
        self._first = first_no
        self.last = first_no - 1

    def __iter__(self) -> Iterator[str]:
        for i, line in enumerate(self._lines):
            self.last = self._first + i
            yield line


def parse_patch(body: bytes, strip: int = 1, *, source: str = "<patch>") -> list[FilePatch]:
    """Parse every file diff in ``body`` (bytes). Raises ``PatchFormatError`` naming the line."""
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError("parse_patch takes bytes")
    lines = split_lines(bytes(body))
    start = _diff_start(lines)
    if start == len(lines):
        raise PatchFormatError(
            "no diff found (no 'diff --git' or '---'/'+++' header)",
            where=Location(source),
            hint="is this a patch file?",
        )
    text_lines = [ln.decode("latin-1") for ln in lines[start:]]
    feeder = _CountingLines(text_lines, start + 1)
    try:
        pset = PatchSet(iter(feeder))
    except UnidiffParseError as exc:
        raise PatchFormatError(f"malformed diff: {exc}".rstrip(), where=Location(source, feeder.last)) from None
    files: list[FilePatch] = []
    for pf in pset:
        files.append(_convert(pf, strip, source, start))
    if not files:
        raise PatchFormatError("no file diffs found", where=Location(source, start + 1))
    return files


def _convert(pf: PatchedFile, strip: int, source: str, start: int) -> FilePatch:
    info = [str(x).rstrip("\r\n") for x in (pf.patch_info or [])]
    seen = SectionHead(
        info,
        (pf.source_file, pf.source_timestamp, pf.target_file, pf.target_timestamp),
        (pf.source_mode, pf.target_mode),
        bool(pf.is_binary_file) or any(x == "GIT binary patch" for x in info),
        (all(hk.source_length == 0 for hk in pf), all(hk.target_length == 0 for hk in pf)),
        (pf.diff_line_no or 1) + start,
    )
    head = file_header(seen, strip, source)
    line_no = head.line_no
    hunks: list[Hunk] = []
    for h in pf:
        for number in (h.source_start, h.target_start):
            if number > MAX_LINE_NUMBER:
                at = (h[0].diff_line_no - 1 + start) if len(h) and h[0].diff_line_no else line_no
                raise PatchFormatError(
                    f"line number {number} is too large (the hunk header's numbers are line numbers)",
                    where=Location(source, at),
                    hint="the hunk header is corrupt: regenerate the patch",
                )
        raw_lines: list[bytes] = []
        for ln in h:
            t = ln.line_type
            if t in (LINE_TYPE_CONTEXT, LINE_TYPE_ADDED, LINE_TYPE_REMOVED):
                raw_lines.append(t.encode() + ln.value.encode("latin-1"))
            elif t == LINE_TYPE_NO_NEWLINE:
                raw_lines.append(NO_NEWLINE_MARKER)
            # unidiff appends blank separator lines after a complete hunk as type "": skip them
        hunks.append(
            Hunk(
                old_start=h.source_start,
                old_len=h.source_length,
                new_start=h.target_start,
                new_len=h.target_length,
                lines=raw_lines,
                section=h.section_header or "",
                line_no=(h[0].diff_line_no - 1 + start) if len(h) and h[0].diff_line_no else line_no,
            )
        )
    if hunks and _headers_crlf(pf):
        # GNU patch: "Stripping trailing CRs from patch" when the file headers end in CRLF
        for hk in hunks:
            hk.lines = [ln[:-2] + b"\n" if ln.endswith(b"\r\n") else ln for ln in hk.lines]
    return finish_file(head, hunks)


def _headers_crlf(pf: PatchedFile) -> bool:
    src = pf.source_timestamp or pf.source_file or ""
    tgt = pf.target_timestamp or pf.target_file or ""
    return src.endswith("\r") or tgt.endswith("\r")
