"""The one rule for a directory a command writes its results into (``--out``, ``--artifacts``).

A command that writes into a directory the user names must never destroy what it did not create.
So the directory must be *fresh* (absent, or empty) or *patchset's own*: one that patchset wrote
before, which it marks with a regular file :data:`MARKER` (``.patchset-output``) naming the
command. Anything else (a non-empty directory without the marker, a file, a marker that is a
link or a directory) is refused before anything is written, with what to do (exit 2).

Usage, in every command that writes an output directory::

    outdir.check(out, option="--out")        # before reading or writing anything else
    ...                                      # write the results (atomically, as the command does)
    outdir.mark(out, command="build wheel")  # once the directory holds patchset's results

``check`` only reads. A directory patchset owns may be replaced or added to by the command that
checks it; the marker says nothing about which files inside are whose.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from patchset import atomic
from patchset.errors import InputError

MARKER = ".patchset-output"
_LISTED = 3  # entries named in the refusal


@dataclass(frozen=True)
class OutputDir:
    """What :func:`check` found: whether the directory exists and whether patchset owns it."""

    path: Path
    exists: bool
    owned: bool  # carries the marker (an empty directory is fresh, not owned)


def is_owned(path: Path) -> bool:
    """Whether ``path`` is a directory carrying patchset's marker as a regular file (not a link)."""
    try:
        return stat.S_ISREG(os.lstat(path / MARKER).st_mode) and not os.path.islink(path)
    except OSError:
        return False


def check(path: Path, *, option: str = "--out") -> OutputDir:
    """Refuse ``path`` unless it is absent, an empty directory, or patchset's own. Reads only.

    Raises :class:`InputError` (exit 2) naming the option, the directory, a few of its entries
    and what to do.
    """
    if not os.path.lexists(path):
        return OutputDir(path, exists=False, owned=False)
    if os.path.islink(path) or not path.is_dir():
        raise InputError(
            f"{option} {path} exists and is not a directory" + (" (it is a symlink)" if path.is_symlink() else ""),
            hint="name a new directory (patchset creates it)",
        )
    if is_owned(path):
        return OutputDir(path, exists=True, owned=True)
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot read it: {exc.strerror}") from None
    if not entries:
        return OutputDir(path, exists=True, owned=False)
    shown = ", ".join(entries[:_LISTED]) + (f" and {len(entries) - _LISTED} more" if len(entries) > _LISTED else "")
    raise InputError(
        f"{option} {path} is not empty ({shown}) and patchset did not write it (no {MARKER}); nothing was written",
        hint=f"name a new or empty directory; patchset writes only into those and into its own (marked {MARKER})",
    )


def mark(path: Path, *, command: str) -> None:
    """Write the marker into ``path`` (a directory :func:`check` accepted, now holding results)."""
    atomic.write_bytes(path / MARKER, marker_text(command).encode())


def marker_text(command: str) -> str:
    """The marker's content (for commands that assemble their output in a scratch directory)."""
    return (
        f"Written by `patchset {command}`. patchset may replace what is in this directory;\n"
        "remove this file to keep patchset from writing here again.\n"
    )


def prepare(path: Path, *, option: str, command: str) -> Path:
    """``path`` made ready to be written into in place (``gate --artifacts``, ``export``): checked
    (:func:`check`), created when absent (with the mode ``mkdir`` gives under the umask) and
    marked at once, so a run that stops half-way leaves a directory patchset may write again."""
    path = Path(path)
    found = check(path, option=option)
    if not found.exists:
        try:
            path.mkdir(parents=True)
        except FileExistsError:  # made in the meantime: judged again below
            pass
        except OSError as exc:
            raise InputError(
                f"{option} {path}: cannot create the directory: {exc.strerror or exc}",
                hint="choose a directory you can write to",
            ) from None
        check(path, option=option)
    if not found.owned:
        try:
            mark(path, command=command)
        except OSError as exc:
            raise InputError(
                f"{option} {path}: cannot write into the directory: {exc.strerror or exc}",
                hint="choose a directory you can write to",
            ) from None
    return path
