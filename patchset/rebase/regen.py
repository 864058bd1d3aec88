"""Regenerate a patch body against a new base, byte-stable, and diff old vs new bodies.

The header of the old body (mail headers, DEP-3 fields, description) is kept byte for byte; the
diff part is rewritten from the new world's file contents before and after the patch, in the
body's own style (a quilt body keeps its ``---``/``+++`` lines and gets no git headers). Hunks come
from ``git diff --no-index`` with every option that changes output pinned (algorithm, context,
heuristics, prefixes), and ``index`` lines carry full blob ids, so the same contents always give
the same bytes whatever the user's git configuration.
"""

from __future__ import annotations

import difflib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patchset.engine.hunks import apply_file
from patchset.errors import EnvironmentFailure, PatchFormatError
from patchset.patchfmt.diffs import header_text, parse_patch
from patchset.patchfmt.filepatch import split_lines
from patchset.rebase.replay import blob_sha
from patchset.upstream.git import run_git

_ZERO = "0" * 40
_DIFF_OPTS = [
    "-c",
    "core.quotePath=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.relative=false",
    "-c",
    "core.autocrlf=false",
    "-c",
    "diff.suppressBlankEmpty=false",
    "-c",
    "diff.interHunkContext=0",
]


@dataclass
class FileChange:
    """One file of a regenerated patch: contents before and after (None: absent)."""

    old_path: str | None
    new_path: str | None
    before: bytes | None
    after: bytes | None
    old_mode: str | None = None
    new_mode: str | None = None
    patch_path: str | None = None  # the path the old body names (to find its own file header)


@dataclass
class PlainStyle:
    """How a plain (quilt, ``diff -u``) body writes its file headers: per file, the lines from the
    end of the previous file's hunks up to its first ``@@`` (``Index:``, ``---``/``+++`` with its own
    prefixes and timestamps), and what follows the last hunk."""

    preambles: dict[str, bytes]
    trailer: bytes


def plain_style(body: bytes, strip: int) -> PlainStyle | None:
    """The file headers of a body that is not a git diff (None for a git diff or an unreadable one)."""
    lines = split_lines(body)
    if any(ln.startswith(b"diff --git ") for ln in lines):
        return None
    try:
        fps = parse_patch(body, strip)
    except PatchFormatError:
        return None
    pos = len(split_lines(header_text(body)))
    pre: dict[str, bytes] = {}
    for fp in fps:
        if not fp.hunks:
            return None
        first = fp.hunks[0].line_no - 1
        pre[fp.target or fp.path] = b"".join(lines[pos:first])
        pre.setdefault(fp.path, pre[fp.target or fp.path])
        last = fp.hunks[-1]
        pos = last.line_no + len(last.lines)
    return PlainStyle(pre, b"".join(lines[pos:]))


def _plain_file(ch: Staged, hunks: bytes | memoryview, style: PlainStyle) -> bytes:
    if not hunks:
        return b""
    own = style.preambles.get(ch.patch_path or "") or style.preambles.get(ch.new_path or ch.old_path or "")
    new_name = ch.new_path if ch.new_path is not None else ch.old_path
    if own is None:
        old = f"a/{ch.old_path}" if ch.before_id is not None else "/dev/null"
        new = f"b/{new_name}" if ch.after_id is not None else "/dev/null"
        return f"--- {old}\n+++ {new}\n".encode("utf-8", "surrogateescape") + hunks
    if ch.patch_path and new_name and ch.patch_path != new_name:  # followed an upstream move
        a, b = ch.patch_path.encode("utf-8", "surrogateescape"), new_name.encode("utf-8", "surrogateescape")
        own = b"".join(
            ln.replace(a, b) if ln.startswith((b"--- ", b"+++ ", b"Index: ", b"diff ")) else ln
            for ln in split_lines(own)
        )
    return own + hunks


@dataclass(frozen=True)
class Staged:
    """A ``FileChange`` once its contents are on disk for git: names, modes and the blob ids of its
    contents (None: absent on that side), all its header needs."""

    old_path: str | None
    new_path: str | None
    before_id: str | None
    after_id: str | None
    old_mode: str | None = None
    new_mode: str | None = None
    patch_path: str | None = None


class DiffDir:
    """Changes written one at a time into a temporary ``a``/``b`` pair, then one pinned ``git diff
    --no-index`` over both (its output read from a file, each file's hunks a view of it). A caller
    that stages its changes one by one holds one file's contents at a time, and none of them
    beside git's output."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="patchset-regen-")
        self.root = Path(self._tmp.name)
        (self.root / "a").mkdir()
        (self.root / "b").mkdir()
        self.staged: list[Staged] = []

    def __enter__(self) -> DiffDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()

    def stage(self, ch: FileChange) -> None:
        i = str(len(self.staged))
        (self.root / "a" / i).write_bytes(ch.before or b"")
        (self.root / "b" / i).write_bytes(ch.after or b"")
        before = blob_sha(ch.before) if ch.before is not None else None
        after = blob_sha(ch.after) if ch.after is not None else None
        self.staged.append(Staged(ch.old_path, ch.new_path, before, after, ch.old_mode, ch.new_mode, ch.patch_path))

    def hunks(self) -> list[bytes | memoryview]:
        """Each staged change's hunks (empty: no difference in content), in the order staged."""
        out: list[bytes | memoryview] = [b""] * len(self.staged)
        if not self.staged:
            return out
        with open(self.root / "diff", "w+b") as fh:
            proc = run_git(
                [
                    *_DIFF_OPTS,
                    "diff",
                    "--no-index",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--text",
                    "--no-renames",
                    "--src-prefix=<",
                    "--dst-prefix=>",
                    "-U3",
                    "--inter-hunk-context=0",
                    "--diff-algorithm=myers",
                    "--indent-heuristic",
                    "--",
                    "a",
                    "b",
                ],
                cwd=self.root,
                check=False,
                stdout=fh,
            )
            if proc.returncode not in (0, 1):
                raise EnvironmentFailure(f"git diff failed: {proc.stderr.decode(errors='replace').strip()}")
            fh.seek(0)
            data = fh.read()
        # each file's hunks are a view of git's output (no copies: bodies can be large)
        view, marker = memoryview(data), b"diff --git <a/"
        starts = [0] if data.startswith(marker) else []
        at = data.find(b"\n" + marker)
        while at >= 0:
            starts.append(at + 1)
            at = data.find(b"\n" + marker, at + 1)
        for start, stop in zip(starts, [*starts[1:], len(data)], strict=True):
            name = start + len(marker)
            index = int(data[name : data.index(b" ", name)])
            at = data.find(b"\n@@ ", start, stop)
            out[index] = view[at + 1 : stop] if at >= 0 else b""
        return out


def render_parts(
    ch: Staged, hunks: bytes | memoryview, prefix: tuple[str, str] = ("a/", "b/")
) -> list[bytes | memoryview]:
    """One file's git-style diff as (header, hunks), for a caller that joins many at once."""
    before, after = ch.before_id, ch.after_id
    old_name = ch.old_path if ch.old_path is not None else ch.new_path
    new_name = ch.new_path if ch.new_path is not None else ch.old_path
    assert old_name is not None and new_name is not None
    head = [f"diff --git {prefix[0]}{old_name} {prefix[1]}{new_name}"]
    if before is None and after is None:
        return []
    if before is None:
        head += [f"new file mode {ch.new_mode or '100644'}", f"index {_ZERO}..{after}"]
    elif after is None:
        head += [f"deleted file mode {ch.old_mode or '100644'}", f"index {before}..{_ZERO}"]
    else:
        renamed = old_name != new_name
        mode_change = bool(ch.old_mode and ch.new_mode and ch.old_mode != ch.new_mode)
        if not hunks and not renamed and not mode_change:
            return []
        if mode_change:
            head += [f"old mode {ch.old_mode}", f"new mode {ch.new_mode}"]
        if renamed:
            head += [f"rename from {old_name}", f"rename to {new_name}"]
        if hunks:
            idx = f"index {before}..{after}"
            head.append(idx if mode_change else f"{idx} {ch.new_mode or ch.old_mode or '100644'}")
    if hunks:
        head.append(f"--- {prefix[0]}{old_name}" if before is not None else "--- /dev/null")
        head.append(f"+++ {prefix[1]}{new_name}" if after is not None else "+++ /dev/null")
    text = ("\n".join(head) + "\n").encode("utf-8", "surrogateescape")
    return [text, hunks]


def regenerate_many(items: list[tuple[bytes, list[FileChange]]], strip: int | list[int] = 1) -> list[bytes]:
    """New bodies for many patches at once: each keeps its old header, then a diff of its changes
    (in the order given), in the body's own style: a git diff stays a git diff; a plain (quilt)
    diff keeps its file headers (``Index:``, prefixes, timestamps) and gets no ``diff --git`` or
    ``index`` lines. One ``git diff`` call for all of them. ``strip``: one level, or one per item."""
    strips = strip if isinstance(strip, list) else [strip] * len(items)
    with DiffDir() as d:
        for _, changes in items:
            for ch in changes:
                d.stage(ch)
        hunks = iter(d.hunks())
        staged = iter(d.staged)
        out = []
        for (old_body, changes), level in zip(items, strips, strict=True):
            mine = [next(staged) for _ in changes]
            prefix = ("a/", "b/") if level == 1 else ("", "") if level == 0 else ("a/" * level, "b/" * level)
            style = plain_style(old_body, level)
            if style is None:
                files = b"".join(part for ch in mine for part in render_parts(ch, next(hunks), prefix))
                out.append(header_text(old_body) + files)
            else:
                files = b"".join(_plain_file(ch, next(hunks), style) for ch in mine)
                out.append(header_text(old_body) + files + style.trailer)
    return out


def render_changes(changes: list[FileChange], *, head: bytes = b"") -> bytes:
    """``head`` and a git-style diff (``a/``, ``b/``, full blob ids) of ``changes``, byte-stable:
    what an edit script's result becomes as a patch body (one ``git diff`` call). A caller that
    need not hold every file's contents at once stages them in a ``DiffDir`` itself
    (``render_staged``)."""
    with DiffDir() as d:
        for ch in changes:
            d.stage(ch)
        return render_staged(d, head=head)


def render_staged(d: DiffDir, *, head: bytes = b"") -> bytes:
    """``head`` and the git-style diff of what ``d`` holds, joined once: the body is the only copy
    of the hunks made here."""
    hunks = d.hunks()
    return b"".join([head, *(part for ch, h in zip(d.staged, hunks, strict=True) for part in render_parts(ch, h))])


def prove(body: bytes, changes: list[FileChange], result: str) -> str | None:
    """None when ``body``, applied to each file's content before, gives its content after; else
    what went wrong (``result`` names the content after: "the script's result")."""
    try:
        fps = parse_patch(body, 1)
    except PatchFormatError as exc:
        return f"the diff does not parse back ({exc.message})"
    by_path = {fp.target or fp.path: fp for fp in fps}
    by_path.update({fp.path: fp for fp in fps if fp.op == "delete"})
    for ch in changes:
        path = ch.new_path or ch.old_path or ""
        fp = by_path.get(path)
        if fp is None:
            return f"{path}: the diff lost the file"
        got = apply_file(ch.before, fp)
        if not got.ok or got.new != ch.after:
            return f"{path}: the diff does not reproduce {result} ({got.message or 'differs'})"
    return None


def range_diff(old_body: bytes, new_body: bytes, name: str) -> str:
    """A unified diff of the two bodies (what changed in the patch itself), '' when equal."""
    if old_body == new_body:
        return ""
    # like git range-diff: blob ids in ``index`` lines are noise, the change is in the hunks
    a = [ln for ln in old_body.decode("utf-8", "replace").splitlines(keepends=True) if not ln.startswith("index ")]
    b = [ln for ln in new_body.decode("utf-8", "replace").splitlines(keepends=True) if not ln.startswith("index ")]
    if a == b:
        return ""
    lines = difflib.unified_diff(a, b, f"old/{name}", f"new/{name}", n=2)
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)
