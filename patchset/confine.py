"""The one place a path that comes from data is turned into a path on disk.

Journals, the download cache, archive members, lock and ``EXPECTED.sha256`` keys, quilt series
lines, overlay and wheel outputs and export names all carry paths someone else wrote. Every one of
them goes through :func:`confine` (or :func:`check_relative` when there is no directory yet), which
refuses what could leave the allowed root:

- an empty name, a NUL byte, a control character that would hide part of the name when printed;
- an absolute path (``/x``, ``C:\\x``, ``\\\\host\\x``) or a backslash-separated one;
- any ``..`` component (textually, before anything is resolved);
- patchset's own state directories (``.patchset-txn``, ``.patchset``) and ``.git``, in any letter
  case, unless the caller owns them (``allow_state``);
- on disk, a symlink at any step that resolves outside the root (each prefix is resolved in turn,
  so ``sub/l2 -> ..`` followed by ``sub/l2/x`` is refused even when the text looks harmless);
- in a tree that exists only in memory (the apply engine's dry run, where links made by earlier
  patches are not on disk yet), the same per-step resolution through a lookup callable
  (:func:`resolve_links`): a chain ``sub/l2 -> ..``, ``evil -> sub/l2/..`` leaves the root.

The rule book this enforces is ``docs/security.md``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from patchset.errors import UnsafePathError

# Directories patchset itself keeps inside trees and ledgers: data may never name them.
STATE_DIRS = (".patchset-txn", ".patchset")
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Links followed while resolving one name before it counts as a loop (Linux's MAXSYMLINKS is 40).
MAX_LINKS = 40


def check_relative(name: str, *, what: str, allow_state: bool = False, allow_git: bool = False) -> str:
    """``name`` checked as a relative posix path and normalised (``a//./b`` -> ``a/b``).

    ``what`` names the source in the message (``"journal .patchset-txn/journal.json entry"``).
    Raises :class:`UnsafePathError` naming the value and what to do.
    """
    shown = repr(name)
    if not isinstance(name, str) or not name:
        raise UnsafePathError(f"{what}: empty path", hint="the data is malformed; do not use it")
    if _CONTROL.search(name):
        raise UnsafePathError(
            f"{what}: path {shown} contains a control character", hint="the data is malformed or hostile"
        )
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise UnsafePathError(f"{what}: path {shown} is absolute", hint="paths in data must be relative to their root")
    if "\\" in name:
        raise UnsafePathError(f"{what}: path {shown} contains a backslash", hint="paths in data use '/' between names")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        raise UnsafePathError(f"{what}: path {shown} names the root itself")
    if ".." in parts:
        raise UnsafePathError(f"{what}: path {shown} climbs out with '..'", hint="the data is malformed or hostile")
    lowered = [p.lower() for p in parts]
    if not allow_state and lowered[0] in STATE_DIRS:
        raise UnsafePathError(
            f"{what}: path {shown} points into patchset's own state directory {parts[0]}",
            hint="trees, archives and other people's data may not carry patchset's state",
        )
    if not allow_git and ".git" in lowered:
        raise UnsafePathError(f"{what}: path {shown} points into a .git directory")
    return "/".join(parts)


def is_within(path: Path | str, root: Path | str) -> bool:
    """Whether ``path`` (resolved) is ``root`` (resolved) or below it."""
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return real == base or real.startswith(base.rstrip("/") + "/")


def regular_file(path: Path | str) -> bool:
    """Whether ``path`` (a name ``confine`` returned) is a regular file itself, not a symbolic
    link: False for anything that cannot be looked at (missing, a name too long for the file
    system, a loop, no permission), where ``Path.is_file`` would raise."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def confine(root: Path | str, name: str, *, what: str, allow_state: bool = False, allow_git: bool = False) -> Path:
    """The on-disk path for ``name`` under ``root``, refusing anything that leaves ``root``.

    Every existing prefix is resolved in turn, so a symlink at any step (or a chain of them) that
    points outside is refused; the last component may be a link that resolves inside. Returns
    ``realpath(root)`` joined with the normalised name (links inside are not expanded: callers
    replace a link, not its target)."""
    rel = check_relative(name, what=what, allow_state=allow_state, allow_git=allow_git)
    base = Path(os.path.realpath(root))
    current = base
    linked = False  # until a link is met, a real entry in a real directory under ``base`` is inside it
    for part in rel.split("/"):
        current = current / part
        if not linked:
            try:
                if not stat.S_ISLNK(os.lstat(current).st_mode):
                    continue
            except OSError:  # missing (or unreadable): nothing below it exists either
                break
            linked = True
        if os.path.lexists(current) and not is_within(current, base):
            raise UnsafePathError(
                f"{what}: path {name!r} leaves {base} through a symlink (resolves to {os.path.realpath(current)})",
                hint="a link in the tree points outside it; the tree is hostile or broken",
            )
    return base / rel


def real_directories(root: Path | str, name: str, *, what: str) -> Path:
    """``root/name`` for a directory patchset keeps its own state in (``.patchset/rebase``): every
    component of ``name`` that exists is a real directory, never a symbolic link (patchset makes
    none there, and a link would move its state, and what it clears, somewhere else) nor a file.
    ``name`` may name patchset's state directories. Raises :class:`UnsafePathError` naming the
    component; reads only."""
    rel = check_relative(name, what=what, allow_state=True)
    at = Path(root)
    for part in rel.split("/"):
        at = at / part
        try:
            st = os.lstat(at)
        except (FileNotFoundError, NotADirectoryError):
            break
        except OSError as exc:
            raise UnsafePathError(f"{what}: {at} cannot be read: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            shown = (
                "a symbolic link, which patchset never makes there" if stat.S_ISLNK(st.st_mode) else "not a directory"
            )
            raise UnsafePathError(
                f"{what}: {at} is {shown}; it was left alone, nothing was changed",
                hint=f"it came with the directory (a cloned ledger?) or was made by hand: check it, then remove {at} "
                "by hand (the link itself, not where it leads) and run the command again",
            )
    return Path(root) / rel


def resolve_links(
    name: str,
    readlink: Callable[[str], str | None],
    *,
    what: str,
    root: str | None = None,
    follow_last: bool = True,
    max_links: int = MAX_LINKS,
) -> str:
    """``name`` with every symlink on its way expanded, inside a tree that ``readlink`` describes.

    ``readlink(rel)`` returns the target of the symlink at ``rel`` (a normalised path whose prefixes
    are real directories), or ``None``; the tree may be on disk, in memory or both. ``..`` applies
    after the links before it are expanded, as the kernel does. An absolute target is let through
    only when it names a place under ``root``. ``follow_last=False`` keeps the last component
    unfollowed. Returns the normalised relative path (``""`` for the root); raises
    :class:`UnsafePathError` when a step leaves the root, a target is empty, or the links loop."""
    shown = repr(name)
    done: list[str] = []
    todo = [p for p in reversed(name.split("/")) if p not in ("", ".")]
    links = 0
    via = ""  # the last link expanded, for the message
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                raise UnsafePathError(
                    f"{what}: path {shown} leaves the tree"
                    + (f" through symlink {via}" if via else "")
                    + " (it resolves outside the tree)",
                    hint="a link made or found on the way points outside the tree; the data is malformed or hostile",
                )
            done.pop()
            continue
        here = "/".join([*done, part])
        target = readlink(here) if (todo or follow_last) else None
        if target is None:
            done.append(part)
            continue
        links += 1
        if links > max_links:
            raise UnsafePathError(f"{what}: path {shown}: too many levels of symlinks (a loop at {here!r}?)")
        if not target or "\0" in target:
            raise UnsafePathError(f"{what}: path {shown}: symlink {here!r} has an empty or malformed target")
        if target.startswith("/"):
            inside = _under(target, root)
            if inside is None:
                raise UnsafePathError(
                    f"{what}: path {shown} leaves the tree through symlink {here!r} -> {target!r} (absolute)",
                    hint="a link in the tree points outside it; the tree is hostile or broken",
                )
            done = []
            target = inside
        via = f"{here!r} -> {target!r}" if not via else f"{via}, {here!r} -> {target!r}"
        todo.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
    return "/".join(done)


def _under(target: str, root: str | None) -> str | None:
    """An absolute link target as a path relative to ``root`` (still to be resolved, ``..`` and
    links included), or None when it does not name a place under ``root``."""
    if root is None:
        return None
    base = root.rstrip("/")
    for candidate in (target, os.path.realpath(target)):  # as written, else as the disk resolves it
        if candidate == base:
            return ""
        if candidate.startswith(base + "/"):
            return candidate[len(base) + 1 :]
    return None
