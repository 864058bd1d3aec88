"""Output directories patchset fills (gate artifacts, exports, build outputs): fresh or its own.

A directory named on the command line to write into may hold someone else's files: ``--artifacts
~`` or ``export --format quilt .`` must not delete or overwrite them. patchset writes into a
directory only when it is absent, empty, or carries the marker file patchset left there when it
first wrote it (:data:`MARKER`); any other directory is refused before a byte is written, with what
to do. A directory that carries the marker is patchset's: its own files in it may be replaced.
"""

from __future__ import annotations

import os
from pathlib import Path

from patchset import atomic
from patchset.errors import InputError

MARKER = ".patchset-output"
_SHOWN = 3  # names of a refused directory's entries quoted in the message


def is_own(directory: Path) -> bool:
    """Whether ``directory`` carries patchset's marker (a regular file, not a link to one)."""
    try:
        return os.path.isfile(directory / MARKER) and not os.path.islink(directory / MARKER)
    except OSError:
        return False


def _first_entries(directory: Path, limit: int) -> list[str]:
    """Up to ``limit`` entry names of ``directory`` (a huge directory is not listed whole)."""
    names: list[str] = []
    with os.scandir(directory) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) >= limit:
                break
    return names


def prepare_output_dir(path: Path, *, what: str) -> Path:
    """``path`` made ready to be written into, and returned.

    Absent: created (with the mode ``mkdir`` gives under the umask) and marked. Empty: marked.
    Marked by an earlier run: returned as it is (the caller replaces only its own files). Anything
    else (a file, a directory with foreign entries) raises :class:`InputError` (exit 2) naming the
    directory and what it holds; nothing is written then. ``what`` names the option or command in
    the message (``"--artifacts"``, ``"export"``).
    """
    path = Path(path)
    if not os.path.lexists(path):
        try:
            path.mkdir(parents=True)
        except FileExistsError:  # another process made it in the meantime: judged as found below
            pass
        except OSError as exc:
            raise InputError(
                f"{what} {path}: cannot create the directory: {exc.strerror or exc}",
                hint="choose a directory you can write to",
            ) from None
    if not path.is_dir():
        raise InputError(
            f"{what} {path}: exists and is not a directory",
            hint="choose a new directory (patchset creates it) or an empty one",
        )
    if is_own(path):
        return path
    try:
        found = _first_entries(path, _SHOWN + 1)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read the directory: {exc.strerror or exc}") from None
    if found:
        shown = ", ".join(repr(n) for n in found[:_SHOWN]) + (", ..." if len(found) > _SHOWN else "")
        raise InputError(
            f"{what} {path}: the directory is not empty ({shown}) and patchset did not create it; nothing was written",
            hint=f"choose a new or empty directory; patchset reuses only a directory that carries its "
            f"marker file {MARKER} (one it wrote earlier)",
        )
    try:
        atomic.write_text(path / MARKER, f"Written by patchset ({what}): it may replace its own files here.\n")
    except OSError as exc:
        raise InputError(
            f"{what} {path}: cannot write into the directory: {exc.strerror or exc}",
            hint="choose a directory you can write to",
        ) from None
    return path
