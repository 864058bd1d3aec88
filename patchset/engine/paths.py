"""Which tree path a patch path names, and the symbolic links that must stay inside the tree.

Every path comes from a patch, which may be hostile: it is mapped, checked textually (relative,
no ``..``, no repository or patchset metadata in any letter case) and resolved through the links
the tree has as the series leaves it so far (``patchset.confine.resolve_links``); every link the
series makes, and every link it could turn outward, is checked the same way.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from pathlib import Path

from patchset.confine import STATE_DIRS, resolve_links
from patchset.engine.treestate import SYMLINK, TreeState, parents
from patchset.errors import UnsafePathError


def metadata_dir(parts: list[str]) -> str | None:
    """The metadata directory a path goes into (``.git`` anywhere, patchset's own state
    directories ``.patchset-txn`` and ``.patchset`` at the top), compared case-insensitively: on
    macOS or Windows ``.GIT`` *is* ``.git``."""
    if parts and parts[0].lower() in STATE_DIRS:
        return parts[0]
    return next((p for p in parts if p.lower() == ".git"), None)


class Paths:
    """Maps patch paths to safe tree paths: relative, no ``..``, no symlink leaving the tree.

    Links are resolved through the series' in-memory state (:meth:`TreeState.link_at`): a link an
    earlier hunk or patch made counts exactly as one on disk, so the dry run sees the tree the
    commit would write (``patchset.confine.resolve_links`` does the resolving).
    """

    def __init__(self, root: Path, path_for: Callable[[str], str] | None) -> None:
        self.root = Path(os.path.realpath(root))
        self.path_for = path_for or (lambda p: p)
        self.checked: dict[str, tuple[str, str]] = {}  # patch path -> (normalised mapped path, where)

    def _check(self, patch_path: str, patch_id: str) -> tuple[str, str]:
        """The textual checks (no state needed): the mapped path, normalised, and how to name it."""
        if patch_path in self.checked:
            return self.checked[patch_path]
        mapped = self.path_for(patch_path)
        where = f"patch {patch_id}: path {patch_path!r}"
        if mapped != patch_path:
            where += f" (mapped to {mapped!r})"
        if not mapped or "\0" in mapped:
            raise UnsafePathError(f"{where} is empty or contains NUL")
        if mapped.startswith("/") or os.path.isabs(mapped):
            raise UnsafePathError(f"{where} is absolute", hint="patch paths must be relative")
        parts = [p for p in mapped.split("/") if p not in ("", ".")]
        if not parts or any(p == ".." for p in parts):
            raise UnsafePathError(f"{where} escapes the tree with '..'")
        bad = metadata_dir(parts)
        if bad:
            raise UnsafePathError(
                f"{where} points into {bad}",
                hint="patches may not touch repository or patchset metadata (in any letter case: "
                "case-insensitive file systems treat .GIT as .git)",
            )
        self.checked[patch_path] = ("/".join(parts), where)
        return self.checked[patch_path]

    def resolve(self, patch_path: str, patch_id: str, state: TreeState, own_link: bool = False) -> str:
        """The real tree path for ``patch_path`` in the tree as ``state`` has it (links on disk and
        links the series made expanded); ``own_link``: the path of a git symlink itself (its
        directory is resolved, the link is not followed)."""
        if own_link:
            head, _, name = patch_path.rpartition("/")
            parent = self.resolve(head, patch_id, state) if head else ""
            if name in ("", ".", "..") or metadata_dir([name]):
                raise UnsafePathError(f"patch {patch_id}: path {patch_path!r} is not a valid link name")
            return f"{parent}/{name}" if parent else name
        rel, where = self._check(patch_path, patch_id)
        real = resolve_links(rel, state.link_at, what=where, root=str(self.root))
        if not real or metadata_dir(real.split("/")):
            raise UnsafePathError(f"{where} resolves to {real or '.'!r}, which patches may not touch")
        return real


def check_link(state: TreeState, rel: str, target: bytes, patch_id: str, root: str) -> None:
    """A git symlink is written as a symlink, but only one that stays inside the tree as the series
    has it now (links made by earlier hunks and patches followed, like links on disk)."""
    text = os.fsdecode(target)
    what = f"patch {patch_id}: symlink {rel} -> {text!r}"
    hint = "patchset writes only relative links that resolve inside the tree"
    if not text or "\0" in text or text.startswith("/"):
        raise UnsafePathError(f"{what} is empty or absolute: refused (outside the tree)", hint=hint)
    head = posixpath.dirname(rel)
    resolve_links(f"{head}/{text}" if head else text, state.link_at, what=what, root=root)


def check_links(state: TreeState, root: str) -> None:
    """The tree as the whole series leaves it: every link the series made or changed, and every
    link already on disk that was inside before, must resolve inside it (a later patch can make an
    earlier, harmless link point out: ``x -> sub/l/..`` and then ``sub/l -> ..``; removing a link
    can too: ``x -> sub/l/../../..`` with ``sub/l -> a/b``)."""
    made = sorted(rel for rel, (data, mode) in state.now.items() if mode == SYMLINK and data is not None)
    if not made and not any(state.disk[rel][1] == SYMLINK for rel in state.now):
        return  # no link made, changed or removed: every link resolves as before
    for rel in made:
        resolve_links(rel, state.link_at, what=f"symlink {rel} (as the series leaves the tree)", root=root)
    before = TreeState(state.root)
    for rel in _disk_links(state.root):
        if rel in state.now or any(parent in state.now for parent in parents(rel)):
            continue
        try:
            resolve_links(rel, before.link_at, what="", root=root)
        except UnsafePathError:
            continue  # already out before the series: not the series' doing, and not written to
        resolve_links(rel, state.link_at, what=f"symlink {rel} in the tree (after the series)", root=root)


def _disk_links(root: Path) -> list[str]:
    """Every symlink in the tree on disk (not followed; metadata directories skipped)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                out.append(os.path.relpath(full, root))
                dirnames.remove(d)
            elif metadata_dir([d]) and (dirpath == str(root) or d.lower() == ".git"):
                dirnames.remove(d)
        out += [
            os.path.relpath(os.path.join(dirpath, f), root)
            for f in filenames
            if os.path.islink(os.path.join(dirpath, f))
        ]
    return sorted(out)
