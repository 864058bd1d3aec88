"""Parse patch bodies (unified diffs, git diffs, mails) into typed file patches, byte-exact.

The apply engine must reproduce GNU patch byte for byte, so the parsed form keeps every content
byte of every hunk line: CR before LF, a missing newline at end of file, non-UTF-8 text.

Division of labour with ``unidiff`` (a chosen dependency): unidiff splits the body into files and
hunks, validates the hunk line counts, reads ``---``/``+++`` names, ``new file mode``,
``deleted file mode``, ``old mode``/``new mode`` and binary markers. This module adds what unidiff
does not do:
  * byte exactness: the body is fed to unidiff as latin-1 text split on ``\\n`` only (a 1:1 byte
    mapping, so ``\\r`` and any non-UTF-8 byte survive) and encoded back afterwards;
  * git extended headers unidiff leaves as free text: ``rename from/to``, ``copy from/to``,
    ``similarity index``/``dissimilarity index``; git's C-style quoted path names;
  * which line a ``\\ No newline at end of file`` marker strips the newline from;
  * ``-p`` strip levels, ``/dev/null`` and epoch-timestamp (``diff -N``) creations and deletions;
  * GNU patch's name rule outside git diffs (a name ends at the first whitespace unless a tab
    separates it from the timestamp) and data-less ``Binary files ... differ`` stanzas (passed over);
  * the mail / DEP-3 / commit-message header before the first diff (``header_text``);
  * GNU patch's rule that a patch whose file headers end in CRLF has its trailing CRs stripped;
  * error positions: unidiff's errors carry no line number, so lines are fed through a counting
    iterator and every ``PatchFormatError`` names the line of the body where parsing stopped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from unidiff import PatchedFile, PatchSet
from unidiff.constants import (
    LINE_TYPE_ADDED,
    LINE_TYPE_CONTEXT,
    LINE_TYPE_NO_NEWLINE,
    LINE_TYPE_REMOVED,
)
from unidiff.errors import UnidiffParseError

from patchset.errors import Location, PatchFormatError

Op = Literal["create", "delete", "modify", "rename", "copy"]

NO_NEWLINE_MARKER = b"\\ No newline at end of file\n"

_STAMP = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))?"
    r"(?:\s+(?P<zone>[+-]\d{4}))?\s*$"
)
_CTIME_EPOCH = re.compile(r"^(Thu Jan  1 (\d\d):00:00 1970|Wed Dec 31 (\d\d):00:00 1969)\s*$")
_GIT_ONLY = re.compile(r"^(rename from|rename to|copy from|copy to|similarity index|dissimilarity index) (.*)$")


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


@dataclass
class FilePatch:
    """Everything one patch says about one file. Paths are already stripped (``-p``);
    ``None`` stands for ``/dev/null``. Modes are git octal strings such as ``"100755"``."""

    old_path: str | None
    new_path: str | None
    op: Op
    old_mode: str | None = None
    new_mode: str | None = None
    hunks: list[Hunk] = field(default_factory=list)
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

    def paths(self) -> list[str]:
        out: list[str] = []
        for p in (self.old_path, self.new_path):
            if p is not None and p not in out:
                out.append(p)
        return out


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


def _diff_start(lines: list[bytes]) -> int:
    """Index of the first line that belongs to a diff (``len(lines)`` if none)."""
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            return i
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            j = i
            # a plain ``diff -u a b`` / ``Index:`` line directly above belongs to the diff
            while j > 0 and (
                lines[j - 1].startswith(b"diff ")
                or lines[j - 1].startswith(b"Index: ")
                or lines[j - 1].startswith(b"=" * 10)
            ):
                j -= 1
            return j
    return len(lines)


def header_text(body: bytes) -> bytes:
    """Everything before the first diff: mail headers, DEP-3 fields, the commit message."""
    lines = split_lines(body)
    return b"".join(lines[: _diff_start(lines)])


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


def _to_path(latin: str) -> str:
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


def _gnu_split(raw: str, timestamp: str | None, git: bool) -> tuple[str, str | None]:
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


def _clean_name(name: str) -> str:
    name = name.rstrip("\r\n")
    return _unquote(name)


# --------------------------------------------------------------------------- parse


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


# GNU patch keeps line numbers in a signed 64-bit integer and refuses larger ones ("line number
# ... is too large"): so does the parser, before anything searches for such a hunk
MAX_LINE_NUMBER = 2**63 - 1


def _headers_crlf(pf: PatchedFile) -> bool:
    src = pf.source_timestamp or pf.source_file or ""
    tgt = pf.target_timestamp or pf.target_file or ""
    return src.endswith("\r") or tgt.endswith("\r")


def creates_missing(fp: FilePatch) -> bool:
    """A plain diff whose only hunks are ``@@ -0,0 +1,N @@``: on a tree that lacks the file it is a
    creation (GNU patch creates the file), whatever its ``---`` line says."""
    return fp.op == "modify" and bool(fp.hunks) and all(h.old_len == 0 for h in fp.hunks)


def as_creation(fp: FilePatch) -> FilePatch:
    """``fp`` read as the creation of its target (see ``creates_missing``)."""
    return dataclasses.replace(fp, op="create", old_path=None, new_path=fp.target or fp.path, old_mode=None)


def files_touched(body: bytes, strip: int = 1) -> list[str]:
    """Every path the patch reads or writes (both sides of a rename), in order, no repeats."""
    out: list[str] = []
    for fp in parse_patch(body, strip):
        for p in fp.paths():
            if p not in out:
                out.append(p)
    return out
