"""Parse patch bodies (unified diffs, git diffs, mails) into typed file patches, byte-exact.

The apply engine must reproduce GNU patch byte for byte, so the parsed form keeps every content
byte of every hunk line: CR before LF, a missing newline at end of file, non-UTF-8 text.

Reading is split in two: ``patchset.patchfmt.reader`` walks the body once in bytes and says where
files and hunks are (it reproduces unidiff's grammar without keeping an object per line, so a
100 MB body stays about its own size in memory); this module turns that into typed file patches
and adds what a bare diff grammar does not say:
  * byte exactness: names are read as latin-1 text (a 1:1 byte mapping, so ``\\r`` and any
    non-UTF-8 byte survive); hunk lines are slices of the body, made when a hunk is used
    (``HunkList``), never all at once;
  * git extended headers: ``rename from/to``, ``copy from/to``, ``similarity index``/
    ``dissimilarity index``; git's C-style quoted path names;
  * which line a ``\\ No newline at end of file`` marker strips the newline from;
  * ``-p`` strip levels, ``/dev/null`` and epoch-timestamp (``diff -N``) creations and deletions;
  * GNU patch's name rule outside git diffs (a name ends at the first whitespace unless a tab
    separates it from the timestamp) and data-less ``Binary files ... differ`` stanzas (passed over);
  * the mail / DEP-3 / commit-message header before the first diff (``header_text``);
  * GNU patch's rule that a patch whose file headers end in CRLF has its trailing CRs stripped;
  * error positions: every ``PatchFormatError`` names the line of the body where parsing stopped.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, overload

from patchset.errors import Location, PatchFormatError
from patchset.patchfmt.reader import HUNK_HEADER, RawFile, ReadError, diff_start, read

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

    Holds the body and a ``HunkIndex`` (a few integers per hunk in arrays): a body of 400,000
    small hunks costs a few MB here instead of one ``Hunk`` and one ``bytes`` per line. Each
    access builds a fresh ``Hunk`` (equal to the last one, not the same object); nothing is
    cached, so walking the hunks of a big patch keeps one hunk's lines alive at a time.
    """

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


def header_text(body: bytes) -> bytes:
    """Everything before the first diff: mail headers, DEP-3 fields, the commit message."""
    return bytes(body[: diff_start(bytes(body))[0]])


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
    """Parse every file diff in ``body`` (bytes). Raises ``PatchFormatError`` naming the line.

    The file patches keep a reference to ``body``: their hunks are sliced from it when used."""
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError("parse_patch takes bytes")
    body = bytes(body)
    pos, index = diff_start(body)
    if pos == len(body):
        raise PatchFormatError(
            "no diff found (no 'diff --git' or '---'/'+++' header)",
            where=Location(source),
            hint="is this a patch file?",
        )
    try:
        raw = read(body, pos, index + 1)
    except ReadError as exc:
        raise PatchFormatError(f"malformed diff: {exc}".rstrip(), where=Location(source, exc.line)) from None
    files = [_convert(pf, body, strip, source) for pf in raw]
    if not files:
        raise PatchFormatError("no file diffs found", where=Location(source, index + 1))
    return files


@dataclass
class FileHeader:
    """What a file section's header lines say (whichever reader read them): the paths after
    ``-p``, the operation, modes, similarity and whether it is binary. The readers differ only in
    how they find the lines; what the lines mean is decided here, once."""

    old: str | None
    new: str | None
    op: Op
    old_mode: str | None
    new_mode: str | None
    similarity: int | None
    binary: bool
    dataless: bool
    git: bool
    line_no: int
    where: Location


def file_header(
    info: list[str],
    names: tuple[str | None, str | None, str | None, str | None],
    modes: tuple[str | None, str | None],
    binary: bool,
    shapes: tuple[bool, bool],
    line_no: int,
    strip: int,
    source: str,
) -> FileHeader:
    """Decide a file section's identity from its header: ``info`` the lines before ``---`` (CR/LF
    stripped), ``names`` (source name, its timestamp, target name, its timestamp), ``modes``
    (source, target), ``binary`` as the reader saw it, ``shapes`` (every hunk's old side empty,
    every new side empty), ``line_no`` where the reader numbered the section."""
    where = Location(source, line_no or None)
    git = any(x.startswith("diff --git ") for x in info)
    if not git and line_no > 1:
        line_no -= 1  # a plain diff is numbered by its "+++" line; name the "---" line
        where = Location(source, line_no)
    extra: dict[str, str] = {}
    for x in info:
        m = _GIT_ONLY.match(x)
        if m:
            extra[m.group(1)] = m.group(2)
    new_file = any(x.startswith("new file mode ") for x in info)
    deleted = any(x.startswith("deleted file mode ") for x in info)

    # a data-less "Binary files a and b differ" stanza (no "GIT binary patch"): nothing to apply.
    # GNU patch (so quilt and dpkg-source) passes over it: a creation leaves an empty file (removed
    # again with -E), a change leaves the file as it is.
    dataless = binary and any(x.startswith(("Binary files ", "Binary file ")) for x in info)
    if dataless:
        binary = False
    created_shape, deleted_shape = shapes

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

    old = name(names[0], names[1], strip, created_shape)
    new = name(names[2], names[3], strip, deleted_shape)
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

    old_mode = modes[0] if not new_file else None
    new_mode = modes[1] if not deleted else None
    if not any(x.startswith(("old mode", "new mode", "new file mode", "deleted file mode")) for x in info):
        # only an ``index a..b MODE`` line: the mode is unchanged, not a change request
        old_mode = new_mode = modes[0] if modes[0] else None
        if new_file or deleted:
            old_mode = new_mode = None
    return FileHeader(old, new, op, old_mode, new_mode, similarity, binary, dataless, git, line_no, where)


def finish_file(h: FileHeader, hunks: Sequence[Hunk]) -> FilePatch:
    """The ``FilePatch`` of a header and its hunks (a header-only section must change something)."""
    similarity = h.similarity
    if h.op == "rename" and not hunks and similarity is None:
        similarity = 100
    if not hunks and not h.binary and not h.dataless and h.op == "modify" and h.old_mode == h.new_mode:
        raise PatchFormatError(f"diff for {h.old or h.new!r} has no hunks and changes nothing", where=h.where)
    return FilePatch(
        old_path=h.old,
        new_path=h.new,
        op=h.op,
        old_mode=h.old_mode,
        new_mode=h.new_mode,
        hunks=hunks,
        binary=h.binary,
        similarity=similarity,
        git=h.git,
        line_no=h.line_no,
    )


def _convert(pf: RawFile, body: bytes, strip: int, source: str) -> FilePatch:
    h = file_header(
        [x.rstrip("\r\n") for x in pf.info],
        (pf.source, pf.source_stamp, pf.target, pf.target_stamp),
        (pf.source_mode, pf.target_mode),
        pf.binary,
        (pf.all_old_empty, pf.all_new_empty),
        pf.line_no,
        strip,
        source,
    )
    line_no = h.line_no
    if pf.too_large:
        number, at = pf.too_large
        raise PatchFormatError(
            f"line number {number} is too large (the hunk header's numbers are line numbers)",
            where=Location(source, at or line_no),
            hint="the hunk header is corrupt: regenerate the patch",
        )
    return finish_file(h, HunkList(body, pf, crlf=bool(len(pf.hunks)) and _headers_crlf(pf), fallback_line=line_no))


def _headers_crlf(pf: RawFile) -> bool:
    src = pf.source_stamp or pf.source or ""
    tgt = pf.target_stamp or pf.target or ""
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
