"""The parser as it was before the streaming reader: unidiff reads the body, this turns its
``PatchedFile`` objects into ``patchset.patchfmt.diffs.FilePatch``. Kept as the reference the
reader (``patchset.patchfmt.reader``) is compared with on real patches (tests/test_diff_reader.py):
unidiff is a well-kept parser no one here wrote, so where the two disagree the reader is wrong.

Only the hot path moved off unidiff (it keeps an object per line and cannot hand out one hunk at
a time); everything after reading (names, strip levels, epochs, renames, CRLF) is the product's
own code, shared by both.
"""

from __future__ import annotations

from collections.abc import Iterator

from unidiff import PatchedFile, PatchSet
from unidiff.constants import LINE_TYPE_ADDED, LINE_TYPE_CONTEXT, LINE_TYPE_NO_NEWLINE, LINE_TYPE_REMOVED
from unidiff.errors import UnidiffParseError

from patchset.errors import Location, PatchFormatError
from patchset.patchfmt.diffs import (
    _GIT_ONLY,
    NO_NEWLINE_MARKER,
    FilePatch,
    Hunk,
    Op,
    _clean_name,
    _gnu_split,
    _to_path,
    is_epoch,
    split_lines,
    strip_path,
)

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
    line_no = (pf.diff_line_no or 1) + start
    where = Location(source, line_no or None)
    info = [str(x).rstrip("\r\n") for x in (pf.patch_info or [])]
    git = any(x.startswith("diff --git ") for x in info)
    if not git and line_no > 1:
        line_no -= 1  # unidiff numbers a plain diff by its "+++" line; name the "---" line
        where = Location(source, line_no)
    extra: dict[str, str] = {}
    for x in info:
        m = _GIT_ONLY.match(x)
        if m:
            extra[m.group(1)] = m.group(2)
    new_file = any(x.startswith("new file mode ") for x in info)
    deleted = any(x.startswith("deleted file mode ") for x in info)
    binary = bool(pf.is_binary_file) or any(x == "GIT binary patch" for x in info)

    # a data-less "Binary files a and b differ" stanza (no "GIT binary patch"): nothing to apply.
    # GNU patch (so quilt and dpkg-source) passes over it: a creation leaves an empty file (removed
    # again with -E), a change leaves the file as it is.
    dataless = bool(pf.is_binary_file) and any(x.startswith(("Binary files ", "Binary file ")) for x in info)
    if dataless:
        binary = False
    created_shape = all(h.source_length == 0 for h in pf)
    deleted_shape = all(h.target_length == 0 for h in pf)

    def name(raw: str | None, ts: str | None, rel_strip: int, shape: bool) -> str | None:
        if raw is None:
            return None
        raw, ts = _gnu_split(raw, ts, git)
        cleaned = _clean_name(raw)
        # an Epoch timestamp marks a missing file only where the hunks agree (GNU patch patches an
        # existing file whose "---" line carries the Epoch but whose hunks change lines)
        if cleaned == "/dev/null" or (shape and is_epoch(ts)):
            return None
        return _to_path(strip_path(cleaned, rel_strip, where=where))

    src_raw, tgt_raw = pf.source_file, pf.target_file
    old = name(src_raw, pf.source_timestamp, strip, created_shape)
    new = name(tgt_raw, pf.target_timestamp, strip, deleted_shape)
    if new_file:
        old = None
    if deleted:
        new = None

    op: Op
    similarity: int | None = None
    if "similarity index" in extra:
        similarity = int(extra["similarity index"].rstrip("%") or 0)
    if "rename from" in extra or "copy from" in extra:
        kind = "rename" if "rename from" in extra else "copy"
        frm, to = extra.get(f"{kind} from"), extra.get(f"{kind} to")
        if frm is None or to is None:
            raise PatchFormatError(f"'{kind} from' without '{kind} to'", where=where)
        # git writes rename/copy names without the a/ b/ prefix: strip one level less (as git does)
        old = _to_path(strip_path(_clean_name(frm), max(strip - 1, 0), where=where))
        new = _to_path(strip_path(_clean_name(to), max(strip - 1, 0), where=where))
        op = kind  # type: ignore[assignment]
    elif old is None and new is None:
        raise PatchFormatError("diff has /dev/null on both sides", where=where)
    elif old is None:
        op = "create"
    elif new is None:
        op = "delete"
    else:
        op = "modify"

    old_mode = pf.source_mode if not new_file else None
    new_mode = pf.target_mode if not deleted else None
    if not any(x.startswith(("old mode", "new mode", "new file mode", "deleted file mode")) for x in info):
        # only an ``index a..b MODE`` line: the mode is unchanged, not a change request
        old_mode = new_mode = pf.source_mode if pf.source_mode else None
        if new_file or deleted:
            old_mode = new_mode = None

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
    if op == "rename" and not hunks and similarity is None:
        similarity = 100
    if not hunks and not binary and not dataless and op in ("modify",) and old_mode == new_mode:
        raise PatchFormatError(f"diff for {old or new!r} has no hunks and changes nothing", where=where)
    return FilePatch(
        old_path=old,
        new_path=new,
        op=op,
        old_mode=old_mode,
        new_mode=new_mode,
        hunks=hunks,
        binary=binary,
        similarity=similarity,
        git=git,
        line_no=line_no,
    )


def _headers_crlf(pf: PatchedFile) -> bool:
    src = pf.source_timestamp or pf.source_file or ""
    tgt = pf.target_timestamp or pf.target_file or ""
    return src.endswith("\r") or tgt.endswith("\r")
