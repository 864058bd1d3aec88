"""Regenerate a patch body against a new base, byte-stable, and diff old vs new bodies.

The header of the old body (mail headers, DEP-3 fields, description) is kept byte for byte; the
diff part is rewritten from the new world's file contents before and after the patch. Hunks come
from ``git diff --no-index`` with every option that changes output pinned (algorithm, context,
heuristics, prefixes), and ``index`` lines carry full blob ids, so the same contents always give
the same bytes whatever the user's git configuration.
"""

from __future__ import annotations

import difflib
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patchset.diffs import header_text
from patchset.errors import EnvironmentFailure
from patchset.history import _git_env
from patchset.replay import blob_sha

_ZERO = "0" * 40
_DIFF_OPTS = ["-c", "core.quotePath=false", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
              "-c", "diff.relative=false", "-c", "core.autocrlf=false"]


@dataclass
class FileChange:
    """One file of a regenerated patch: contents before and after (None: absent)."""

    old_path: str | None
    new_path: str | None
    before: bytes | None
    after: bytes | None
    old_mode: str | None = None
    new_mode: str | None = None


def _hunks(before: bytes, after: bytes, work: Path) -> bytes:
    a, b = work / "a", work / "b"
    a.write_bytes(before)
    b.write_bytes(after)
    proc = subprocess.run(
        ["git", *_DIFF_OPTS, "diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "--text",
         "--no-renames", "-U3", "--diff-algorithm=myers", "--indent-heuristic", "--", str(a), str(b)],
        capture_output=True, env=_git_env())
    if proc.returncode not in (0, 1):
        raise EnvironmentFailure(f"git diff failed: {proc.stderr.decode(errors='replace').strip()}")
    out = proc.stdout
    at = out.find(b"\n@@ ")
    return out[at + 1:] if at >= 0 else b""


def render_file(ch: FileChange, work: Path, prefix: tuple[str, str] = ("a/", "b/")) -> bytes:
    """One file's git-style diff (empty when nothing changed)."""
    before, after = ch.before, ch.after
    old_name = ch.old_path if ch.old_path is not None else ch.new_path
    new_name = ch.new_path if ch.new_path is not None else ch.old_path
    assert old_name is not None and new_name is not None
    hunks = _hunks(before or b"", after or b"", work)
    head = [f"diff --git {prefix[0]}{old_name} {prefix[1]}{new_name}"]
    if before is None and after is None:
        return b""
    if before is None:
        head += [f"new file mode {ch.new_mode or '100644'}", f"index {_ZERO}..{blob_sha(after or b'')}"]
    elif after is None:
        head += [f"deleted file mode {ch.old_mode or '100644'}", f"index {blob_sha(before)}..{_ZERO}"]
    else:
        renamed = old_name != new_name
        mode_change = bool(ch.old_mode and ch.new_mode and ch.old_mode != ch.new_mode)
        if not hunks and not renamed and not mode_change:
            return b""
        if mode_change:
            head += [f"old mode {ch.old_mode}", f"new mode {ch.new_mode}"]
        if renamed:
            head += [f"rename from {old_name}", f"rename to {new_name}"]
        if hunks:
            idx = f"index {blob_sha(before)}..{blob_sha(after)}"
            head.append(idx if mode_change else f"{idx} {ch.new_mode or ch.old_mode or '100644'}")
    if hunks:
        head.append(f"--- {prefix[0]}{old_name}" if before is not None else "--- /dev/null")
        head.append(f"+++ {prefix[1]}{new_name}" if after is not None else "+++ /dev/null")
    text = ("\n".join(head) + "\n").encode("utf-8", "surrogateescape")
    return text + hunks


def regenerate(old_body: bytes, changes: list[FileChange], strip: int = 1) -> bytes:
    """The new body: the old header, then a diff of every change, in the order given."""
    prefix = ("a/", "b/") if strip == 1 else ("", "") if strip == 0 else ("a/" * strip, "b/" * strip)
    with tempfile.TemporaryDirectory(prefix="patchset-regen-") as tmp:
        parts = [render_file(ch, Path(tmp), prefix) for ch in changes]
    return header_text(old_body) + b"".join(parts)


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
