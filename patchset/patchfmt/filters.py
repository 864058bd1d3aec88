"""Diff filters and comparisons for fetched patch bodies: include/exclude globs, a normalised
patch id, and a readable interdiff.

``fetch`` keeps only some files of an upstream diff, ``fetch --check`` and ``status`` must tell
"the head moved, the change is the same" from "the change changed": all need one split of a diff
into per-file sections that keeps every byte. It splits on bytes and counts hunk lines (a removed
``--- x`` line is no header) and keeps the text around the sections. Globs are anchored at the
root after ``-p``: ``*`` stays in a component, ``**`` crosses them, a pattern without ``/``
matches the name at any depth, as in ``.gitignore``.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache

from patchset.errors import InputError, PatchFormatError
from patchset.patchfmt.diffs import files_touched
from patchset.patchfmt.filepatch import split_lines

__all__ = ["FilterResult", "Section", "filter_diff", "interdiff", "match_glob", "patch_id", "split_sections"]

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_EXT_HEADERS = (
    b"index ",
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"similarity index ",
    b"dissimilarity index ",
    b"rename from ",
    b"rename to ",
    b"copy from ",
    b"copy to ",
    b"Binary files ",
    b"GIT binary patch",
)


@dataclass
class Section:
    """A piece of a diff: ``kind`` "file" (one file's header and hunks) or "text" (anything else).
    ``paths`` are the file's paths after stripping (both sides of a rename), for "file" only."""

    kind: str
    lines: list[bytes]
    paths: list[str] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        return b"".join(self.lines)


@dataclass
class FilterResult:
    """What a filter kept: the new body, the paths kept and the paths dropped."""

    data: bytes
    kept: list[str]
    dropped: list[str]

    def to_json(self) -> dict[str, object]:
        return {"bytes": len(self.data), "kept": self.kept, "dropped": self.dropped}


def _starts_file(lines: list[bytes], i: int) -> bool:
    line = lines[i]
    return line.startswith(b"diff ") or (
        line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")
    )


def split_sections(body: bytes, strip: int = 1, *, source: str = "<diff>") -> list[Section]:
    """Cut ``body`` into text and per-file sections, byte-exact (joining them gives ``body``)."""
    lines = split_lines(body)
    out: list[Section] = []
    text: list[bytes] = []
    i, n = 0, len(lines)
    while i < n:
        if not _starts_file(lines, i):
            text.append(lines[i])
            i += 1
            continue
        if text:
            out.append(Section("text", text))
            text = []
        sec: list[bytes] = []
        if lines[i].startswith(b"diff "):
            sec.append(lines[i])
            i += 1
            binary = False
            while i < n and (
                lines[i].startswith(_EXT_HEADERS)
                or (binary and not _starts_file(lines, i) and not lines[i].startswith(b"From "))
            ):
                binary = binary or lines[i].startswith(b"GIT binary patch")
                sec.append(lines[i])
                i += 1
        if i + 1 < n and lines[i].startswith(b"--- ") and lines[i + 1].startswith(b"+++ "):
            sec += lines[i : i + 2]
            i += 2
        while i < n and lines[i].startswith(b"@@ "):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchFormatError(f"{source}: line {i + 1}: unreadable hunk header {lines[i][:60]!r}")
            old = int(m.group(2)) if m.group(2) is not None else 1
            new = int(m.group(4)) if m.group(4) is not None else 1
            sec.append(lines[i])
            i += 1
            while i < n and (old > 0 or new > 0):
                line = lines[i]
                c = line[:1]
                if c == b" " or line in (b"\n", b"\r\n"):
                    old, new = old - 1, new - 1
                elif c == b"-":
                    old -= 1
                elif c == b"+":
                    new -= 1
                elif c != b"\\":
                    raise PatchFormatError(
                        f"{source}: line {i + 1}: hunk ends early (expected {old} more old and {new} more new lines)",
                        hint="the download is truncated or not a unified diff",
                    )
                sec.append(line)
                i += 1
            while i < n and lines[i].startswith(b"\\"):
                sec.append(lines[i])
                i += 1
        out.append(Section("file", sec, files_touched(b"".join(sec), strip, source=source)))
    if text:
        out.append(Section("text", text))
    return out


@lru_cache(maxsize=512)
def _glob_re(pattern: str) -> re.Pattern[str]:
    if not pattern.strip("/"):
        raise InputError(
            f"empty glob {pattern!r} in include/exclude", hint="write a path pattern such as 'vllm/**' or '**/tests/**'"
        )
    pat = pattern + "**" if pattern.endswith("/") else pattern  # a directory: everything under it
    pat = pat.lstrip("/") if "/" in pat.rstrip("*").strip("/") or pat.startswith("/") else "**/" + pat
    out = []
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("(?:/.*)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[":
            j = pat.find("]", i + 2)
            if j < 0:
                out.append(re.escape("["))
                i += 1
            else:
                body = pat[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def match_glob(path: str, pattern: str) -> bool:
    """Does ``path`` (relative, ``/``-separated) match ``pattern``? See the module docstring."""
    return bool(_glob_re(pattern).match(path))


def _selected(paths: list[str], include: list[str], exclude: list[str]) -> bool:
    if include and not any(match_glob(p, g) for p in paths for g in include):
        return False
    return not any(match_glob(p, g) for p in paths for g in exclude)


def filter_diff(
    body: bytes,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    strip: int = 1,
    *,
    source: str = "<diff>",
) -> FilterResult:
    """Keep the file sections whose paths match ``include`` (all when empty) and none of
    ``exclude``; text around them is kept. Sections are kept byte for byte."""
    include, exclude = list(include or []), list(exclude or [])
    for g in include + exclude:
        _glob_re(g)
    kept_data: list[bytes] = []
    kept: list[str] = []
    dropped: list[str] = []
    for sec in split_sections(body, strip, source=source):
        if sec.kind == "text":
            kept_data.append(sec.data)
        elif _selected(sec.paths, include, exclude):
            kept_data.append(sec.data)
            kept += [p for p in sec.paths if p not in kept]
        else:
            dropped += [p for p in sec.paths if p not in dropped]
    return FilterResult(b"".join(kept_data), kept, dropped)


def _norm(content: bytes) -> bytes:
    return re.sub(rb"\s+", b"", content)


def patch_id(body: bytes, strip: int = 1, *, source: str = "<diff>") -> str | None:
    """A normalised id of what a diff changes: per file, its path and the added and removed lines
    with all whitespace removed; hunk positions, context lines, ``index`` lines, file order and
    any text around the diff are ignored (so a rebase onto a moved base keeps the id, a changed
    line does not). Several sections for one file (a series of commits) are taken in order.
    ``None`` when the body has no file sections."""
    per_file: dict[str, hashlib._Hash] = {}
    for sec in split_sections(body, strip, source=source):
        if sec.kind != "file":
            continue
        key = sec.paths[-1] if sec.paths else ""
        h = per_file.setdefault(key, hashlib.sha256(key.encode("utf-8", "surrogateescape") + b"\0"))
        in_hunk = False
        for line in sec.lines:
            if line.startswith(b"@@ "):
                in_hunk = True
                continue
            if not in_hunk:
                if line.startswith((b"GIT binary patch", b"literal ", b"delta ", b"Binary files ")):
                    h.update(b"B" + _norm(line))
                continue
            if line[:1] in (b"+", b"-"):
                h.update(line[:1] + _norm(line[1:]) + b"\n")
    if not per_file:
        return None
    total = hashlib.sha256()
    for key in sorted(per_file):
        total.update(per_file[key].hexdigest().encode() + b"\n")
    return total.hexdigest()


def _readable(body: bytes) -> list[str]:
    out = []
    for line in split_lines(body):
        if line.startswith(b"index "):
            continue
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        m = re.match(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@(.*)$", text)
        out.append("@@" + m.group(1) if m else text)
    return out


def interdiff(old: bytes, new: bytes, old_label: str = "stored", new_label: str = "upstream", context: int = 3) -> str:
    """A unified diff of two patch bodies (a diff of diffs), with ``index`` lines and hunk line
    numbers left out so only changes to the change show. Empty when they say the same thing."""
    lines = list(difflib.unified_diff(_readable(old), _readable(new), old_label, new_label, n=context, lineterm=""))
    return "\n".join(lines) + "\n" if lines else ""
