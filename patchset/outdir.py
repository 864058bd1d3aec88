"""The one rule for a directory a command writes its results into (``--out``, ``--artifacts``).

A command must never destroy what it did not create, so the directory must be fresh (absent or
empty) or patchset's own: marked by a regular file :data:`MARKER` (``.patchset-output``) holding a
token this installation sealed for that directory (device and inode), so a planted or copied
marker owns nothing. Anything else is refused before anything is written (exit 2), naming the
files the command would have replaced. ``check(out, option=...)`` comes first and only reads;
``mark(out, command=...)`` once the directory holds the results (docs/security.md).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from patchset import atomic
from patchset.errors import InputError
from patchset.journal.seal import has_seal, seal_of

MARKER = ".patchset-output"
KIND = "output directory"
MAX_MARKER = 4096  # bytes: the marker is a few lines
_LISTED = 3  # entries named in the refusal
_TOKEN = re.compile(
    r"^command: (?P<command>[^\n]{1,80})\ndirectory: (?P<dev>\d+):(?P<ino>\d+)\nseal: (?P<seal>\S+)$", re.M
)


@dataclass(frozen=True)
class OutputDir:
    """What :func:`check` found: whether the directory exists and whether patchset owns it."""

    path: Path
    exists: bool
    owned: bool  # carries the marker (an empty directory is fresh, not owned)


def _identity(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def _body(command: str, dev: int, ino: int) -> dict[str, object]:
    return {"command": command, "dev": dev, "ino": ino}


def marker_problem(path: Path) -> str | None:
    """Why the marker in ``path`` does not make it patchset's (``""``: it does; None: there is none)."""
    try:
        fd = os.open(path / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return "the marker is a symbolic link or cannot be read"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "the marker is not a regular file"
        raw = os.read(fd, MAX_MARKER + 1)
    finally:
        os.close(fd)
    if os.path.islink(path):
        return "the directory is a symbolic link"
    m = _TOKEN.search(raw[:MAX_MARKER].decode("utf-8", "replace"))
    if m is None:
        return "the marker carries no seal: a plain file anyone can write, not one patchset wrote"
    dev, ino = int(m["dev"]), int(m["ino"])
    if not has_seal(KIND, _body(m["command"], dev, ino), m["seal"]):
        return "the marker's seal is not this installation's"
    if (dev, ino) != _identity(path):
        return "the marker was sealed for another directory: it was copied here"
    return ""


def is_owned(path: Path) -> bool:
    """Whether ``path`` is a directory carrying patchset's marker, sealed for it by this installation."""
    try:
        return marker_problem(path) == ""
    except OSError:
        return False


def check(path: Path, *, option: str = "--out", touches: Iterable[str] = ()) -> OutputDir:
    """Refuse ``path`` unless it is absent, an empty directory, or patchset's own. Reads only.

    Raises :class:`InputError` (exit 2) naming the option, the directory, a few of its entries
    (of ``touches``, the names the command replaces or removes, those present) and what to do.
    """
    if not os.path.lexists(path):
        return OutputDir(path, exists=False, owned=False)
    if os.path.islink(path) or not path.is_dir():
        raise InputError(
            f"{option} {path} exists and is not a directory" + (" (it is a symlink)" if path.is_symlink() else ""),
            hint="name a new directory (patchset creates it)",
        )
    try:
        problem = marker_problem(path)
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot read it: {exc.strerror}") from None
    if problem == "":
        return OutputDir(path, exists=True, owned=True)
    if problem is not None:
        names = list(touches)
        at_risk = [n for n in names if os.path.lexists(path / n)] if names else [e for e in entries if e != MARKER]
        listed = ", ".join(at_risk[:6]) + (f" and {len(at_risk) - 6} more" if len(at_risk) > 6 else "")
        raise InputError(
            f"{option} {path} is not empty and holds a {MARKER} patchset did not write for it ({problem}); "
            + (f"it would have replaced or removed {listed}; " if at_risk else "")
            + "nothing was written or removed",
            hint=f"name a new or empty directory; if what is in {path} may go, remove it yourself first "
            "(patchset replaces only what it can tell it wrote)",
        )
    if not entries:
        return OutputDir(path, exists=True, owned=False)
    shown = ", ".join(entries[:_LISTED]) + (f" and {len(entries) - _LISTED} more" if len(entries) > _LISTED else "")
    raise InputError(
        f"{option} {path} is not empty ({shown}) and patchset did not write it (no {MARKER}); nothing was written",
        hint=f"name a new or empty directory; patchset writes only into those and into its own (marked {MARKER})",
    )


def mark(path: Path, *, command: str) -> None:
    """Write the marker into ``path`` (a directory :func:`check` accepted, now holding results, or the
    scratch directory a command renames into place), sealed for that directory."""
    dev, ino = _identity(path)
    command = " ".join(command.split())[:80]
    text = (
        f"Written by `patchset {command}`. patchset may replace what is in this directory;\n"
        "remove this file to keep patchset from writing here again.\n"
        f"command: {command}\ndirectory: {dev}:{ino}\nseal: {seal_of(KIND, _body(command, dev, ino))}\n"
    )
    atomic.write_bytes(path / MARKER, text.encode())


def prepare(path: Path, *, option: str, command: str, touches: Iterable[str] = ()) -> Path:
    """``path`` made ready to be written into in place (``gate --artifacts``, ``export``): checked
    (:func:`check`), created when absent (with the mode ``mkdir`` gives under the umask) and
    marked at once, so a run that stops half-way leaves a directory patchset may write again."""
    path = Path(path)
    found = check(path, option=option, touches=touches)
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
        check(path, option=option, touches=touches)
    if not found.owned:
        try:
            mark(path, command=command)
        except OSError as exc:
            raise InputError(
                f"{option} {path}: cannot write into the directory: {exc.strerror or exc}",
                hint="choose a directory you can write to",
            ) from None
    return path
