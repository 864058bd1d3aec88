"""Scripts that apply diffs beside them: ``mods/NAME/run.sh`` doing ``patch -p1 -d / < fix.diff``,
a Dockerfile ``RUN git apply patches/x.diff``.

Such a script is read, never run: each ``patch`` or ``git apply`` it holds names a diff (relative
to the script's folder, or behind a variable that stands for it: ``$(dirname "$0")/``,
``${SCRIPT_DIR}/``), and those diffs are imported directly, in the script's order. A name that
leaves the repository, or a file that is not there, is said and skipped.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from patchset.confine import confine
from patchset.errors import UnsafePathError

MAX_SCRIPT_BYTES = 1 << 20

# the command word at the start of a line or after a shell separator (not `patchset`, not `--patch`)
_PATCH = re.compile(r"(?:^|[;&|(]\s*|\bthen\s+|\bdo\s+|\bRUN\s+|\bsudo\s+)patch\s+(?P<args>[^;&|\n]*)")
_GIT_APPLY = re.compile(r"\bgit\s+(?:-C\s+\S+\s+)?apply\s+(?P<args>[^;&|\n]*)")
_VAR_DIR = re.compile(r"^(?:\$\([^)]*\)|\$\{[^}]*\}|\$\w+|\"\$\([^)]*\)\"|\"\$\{[^}]*\}\"|\"\$\w+\")/+")


@dataclass(frozen=True)
class Step:
    """One diff a script applies: where it is, and how the script applies it."""

    script: str  # the script, relative to the repository
    line: int
    diff: str  # the diff, relative to the repository ("" when it could not be found)
    written: str  # the name as the script writes it
    strip: int | None  # the script's -pN
    directory: str  # the script's -d DIR ("" when none)
    problem: str = ""  # why this step imports nothing


def _tokens(args: str) -> list[str]:
    try:
        return shlex.split(args, comments=True)
    except ValueError:
        return args.split()


def _patch_args(args: str) -> tuple[str | None, int | None, str]:
    """(the input file, -pN, -d DIR) of a ``patch`` command line."""
    toks = _tokens(args.replace("<", " < "))
    src: str | None = None
    strip: int | None = None
    directory = ""
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t == "<" or t in ("-i", "--input"):
            src, i = nxt, i + 2
            continue
        if m := re.fullmatch(r"-[A-Za-oq-z]*p(\d+)|--strip=(\d+)", t):  # -p1, -Np1, --strip=1
            strip = int(m.group(1) or m.group(2))
        elif t == "-p" and nxt.isdigit():
            strip, i = int(nxt), i + 1
        elif t in ("-d", "--directory"):
            directory, i = nxt, i + 1
        elif t.startswith("--directory="):
            directory = t.split("=", 1)[1]
        elif t.startswith("--input="):
            src = t.split("=", 1)[1]
        i += 1
    return src, strip, directory


def _apply_args(args: str) -> tuple[list[str], int | None, str]:
    """(the files, -pN, --directory) of a ``git apply`` command line."""
    files: list[str] = []
    strip: int | None = None
    directory = ""
    for t in _tokens(args):
        if m := re.fullmatch(r"-p(\d+)", t):
            strip = int(m.group(1))
        elif t.startswith("--directory="):
            directory = t.split("=", 1)[1]
        elif t == "<":
            continue
        elif not t.startswith("-"):
            files.append(t)
    return files, strip, directory


def _locate(repo: Path, script: Path, written: str) -> tuple[str, str]:
    """(the diff relative to ``repo``, or "", and the problem when there is one)."""
    name = _VAR_DIR.sub("", written.strip("\"'"))
    if not name or "$" in name or "*" in name:
        return "", f"{written!r} is computed by the script (a variable or a glob): its diffs are found by the survey"
    here = script.parent.relative_to(repo).as_posix()
    for cand in (posixpath.normpath(posixpath.join(here, name)), posixpath.normpath(name)):
        if cand.startswith(("/", "..")):
            continue  # `-d /`-style absolute names and names above the repository are not its files
        try:
            path = confine(repo, cand, what=f"{script.name}: {written!r}")
        except UnsafePathError:
            continue
        if path.is_file():
            return cand, ""
    return "", f"{written!r} is not in the repository"


def steps(repo: Path, script: Path) -> list[Step]:
    """The diffs ``script`` applies, in its order (empty when it applies none)."""
    try:
        text = script.read_bytes()[:MAX_SCRIPT_BYTES].decode("utf-8", "replace")
    except OSError:
        return []
    rel = script.relative_to(repo).as_posix()
    found: list[Step] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        calls: list[tuple[str, int | None, str]] = []
        for m in _PATCH.finditer(line):
            src, strip, directory = _patch_args(m["args"])
            if src:
                calls.append((src, strip, directory))
        for m in _GIT_APPLY.finditer(line):
            files, strip, directory = _apply_args(m["args"])
            calls += [(f, strip, directory) for f in files]
        for written, strip, directory in calls:
            if written.startswith(("http://", "https://", "-")) or written == "/dev/stdin":
                continue  # a PR diff piped in (`curl … | git apply`): the PR list's business
            diff, problem = _locate(repo, script, written)
            found.append(Step(rel, lineno, diff, written, strip, directory, problem))
    return found
