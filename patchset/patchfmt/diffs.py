"""Parse patch bodies (unified diffs, git diffs, mails) into typed file patches, byte-exact.

``patchset.patchfmt.reader`` walks the body once and says where files and hunks are; this module
decides what each file section means and makes the typed file patches of
``patchset.patchfmt.filepatch``; ``patchset.patchfmt.names`` reads each file name. Beyond a bare
diff grammar they keep every byte (names as latin-1), read git's extended headers and quoted
names, ``-p`` strips, ``/dev/null`` and epoch-stamp creations, GNU patch's name and CRLF rules,
the mail header before the first diff (``header_text``), and name the line where parsing stopped
in every ``PatchFormatError``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from patchset.errors import Location, PatchFormatError
from patchset.patchfmt.filepatch import FilePatch, Hunk, HunkList, Op
from patchset.patchfmt.names import clean_name, gnu_split, is_epoch, strip_path, to_path
from patchset.patchfmt.reader import RawFile, ReadError, diff_start, read

_GIT_ONLY = re.compile(r"^(rename from|rename to|copy from|copy to|similarity index|dissimilarity index) (.*)$")


def header_text(body: bytes) -> bytes:
    """Everything before the first diff: mail headers, DEP-3 fields, the commit message."""
    return bytes(body[: diff_start(bytes(body))[0]])


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


@dataclass(frozen=True)
class SectionHead:
    """A file section's header as a reader saw it, before anything is decided: ``info`` the lines
    before ``---`` (CR/LF stripped), ``names`` (source name, its timestamp, target name, its
    timestamp), ``modes`` (source, target), ``binary`` as the reader saw it, ``shapes`` (every
    hunk's old side empty, every new side empty), ``line_no`` where the reader numbered it."""

    info: list[str]
    names: tuple[str | None, str | None, str | None, str | None]
    modes: tuple[str | None, str | None]
    binary: bool
    shapes: tuple[bool, bool]
    line_no: int


def file_header(seen: SectionHead, strip: int, source: str) -> FileHeader:
    """Decide a file section's identity from its header as a reader saw it."""
    info, names, modes, binary, line_no = seen.info, seen.names, seen.modes, seen.binary, seen.line_no
    where = Location(source, line_no or None)
    git = any(x.startswith("diff --git ") for x in info)
    if not git and line_no > 1:
        line_no -= 1  # a plain diff is numbered by its "+++" line; name the "---" line
        where = Location(source, line_no)
    extra = {m.group(1): m.group(2) for x in info if (m := _GIT_ONLY.match(x))}
    new_file = any(x.startswith("new file mode ") for x in info)
    deleted = any(x.startswith("deleted file mode ") for x in info)

    # a data-less "Binary files a and b differ" stanza (no "GIT binary patch"): nothing to apply.
    # GNU patch (so quilt and dpkg-source) passes over it: a creation leaves an empty file (removed
    # again with -E), a change leaves the file as it is.
    dataless = binary and any(x.startswith(("Binary files ", "Binary file ")) for x in info)
    if dataless:
        binary = False
    created_shape, deleted_shape = seen.shapes

    def name(raw: str | None, ts: str | None, rel_strip: int, shape: bool) -> str | None:
        if raw is None:
            return None
        raw, ts = gnu_split(raw, ts, git)
        cleaned = clean_name(raw)
        # an Epoch timestamp marks a missing file only where the hunks agree (GNU patch patches an
        # existing file whose "---" line carries the Epoch but whose hunks change lines)
        if cleaned == "/dev/null" or (shape and is_epoch(ts)):
            return None
        return to_path(strip_path(cleaned, rel_strip, where=where))

    old = name(names[0], names[1], strip, created_shape)
    new = name(names[2], names[3], strip, deleted_shape)
    if new_file:
        old = None
    if deleted:
        new = None

    similarity = int(extra["similarity index"].rstrip("%") or 0) if "similarity index" in extra else None
    old, new, op = _operation(extra, old, new, strip, where)

    old_mode = modes[0] if not new_file else None
    new_mode = modes[1] if not deleted else None
    if not any(x.startswith(("old mode", "new mode", "new file mode", "deleted file mode")) for x in info):
        # only an ``index a..b MODE`` line: the mode is unchanged, not a change request
        old_mode = new_mode = modes[0] if modes[0] else None
        if new_file or deleted:
            old_mode = new_mode = None
    return FileHeader(old, new, op, old_mode, new_mode, similarity, binary, dataless, git, line_no, where)


def _operation(
    extra: dict[str, str], old: str | None, new: str | None, strip: int, where: Location
) -> tuple[str | None, str | None, Op]:
    """The paths and the operation: git's ``rename``/``copy from``/``to`` lines name both paths."""
    if "rename from" in extra or "copy from" in extra:
        kind = "rename" if "rename from" in extra else "copy"
        frm, to = extra.get(f"{kind} from"), extra.get(f"{kind} to")
        if frm is None or to is None:
            raise PatchFormatError(f"'{kind} from' without '{kind} to'", where=where)
        # git writes rename/copy names without the a/ b/ prefix: strip one level less (as git does)
        old = to_path(strip_path(clean_name(frm), max(strip - 1, 0), where=where))
        new = to_path(strip_path(clean_name(to), max(strip - 1, 0), where=where))
        return old, new, kind  # type: ignore[return-value]
    if old is None and new is None:
        raise PatchFormatError("diff has /dev/null on both sides", where=where)
    if old is None:
        return old, new, "create"
    if new is None:
        return old, new, "delete"
    return old, new, "modify"


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
    seen = SectionHead(
        [x.rstrip("\r\n") for x in pf.info],
        (pf.source, pf.source_stamp, pf.target, pf.target_stamp),
        (pf.source_mode, pf.target_mode),
        pf.binary,
        (pf.all_old_empty, pf.all_new_empty),
        pf.line_no,
    )
    h = file_header(seen, strip, source)
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
    return (pf.source_stamp or pf.source or "").endswith("\r") or (pf.target_stamp or pf.target or "").endswith("\r")


def files_touched(body: bytes, strip: int = 1, *, source: str = "<patch>") -> list[str]:
    """Every path the patch reads or writes (both sides of a rename), in order, no repeats."""
    return list(dict.fromkeys(p for fp in parse_patch(body, strip, source=source) for p in fp.paths()))
