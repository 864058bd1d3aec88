"""Running git the same way everywhere: a clean environment, failures as domain errors.

Several modules drive git directly (release histories, directory imports, patch ids, three-way
merges, diff regeneration). They share one environment rule (no ``GIT_DIR`` & co. inherited from
a hook or a worktree that would point git elsewhere, no prompts, the C locale so messages parse),
one runner that turns a missing git or a failed command into ``EnvironmentFailure``, and the path
quoting ``git fast-import`` reads.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO, Any

from patchset.errors import EnvironmentFailure

__all__ = ["GIT_ENV_DROP", "fast_import_path", "git_env", "ls_tree_blobs", "popen_git", "run_git"]

# Variables that would make git act on another repository, index or config than the one named.
GIT_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_COMMON_DIR",
    "GIT_CONFIG_PARAMETERS",
)


def git_env(user_config: bool = False) -> dict[str, str]:
    """This process's environment without ``GIT_ENV_DROP``, with prompts off and ``LC_ALL=C``
    unless the caller set a locale of its own. Isolated from the user's and the system's git
    configuration (so ``diff.noprefix``, ``color.ui`` or a ``core.autocrlf`` cannot change what
    patchset reads or writes) unless ``user_config``: operations that reach the network (clone,
    fetch, a partial clone's lazy blobs) need the user's proxies and credential helpers."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_ENV_DROP}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("LC_ALL", "C")
    if not user_config:
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_CONFIG_GLOBAL"] = os.devnull
    return env


def run_git(
    args: list[str],
    *,
    cwd: Path | None = None,
    input: bytes | None = None,
    check: bool = True,
    user_config: bool = False,
    stdout: IO[bytes] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``git <args>`` in ``cwd`` with ``git_env()``, output captured (``stdout``: written to that
    file instead, a large output read back in one piece). ``EnvironmentFailure`` when git is not
    installed, or (with ``check``) when it exits non-zero, with git's own message."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=input,
            stdout=stdout if stdout is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=git_env(user_config),
        )
    except FileNotFoundError as exc:
        raise EnvironmentFailure("git is not installed", hint="install git (apt-get install git)") from exc
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise EnvironmentFailure(f"git {' '.join(args[:3])} failed in {cwd}: {err}")
    return proc


def popen_git(
    args: list[str], *, cwd: Path | None = None, user_config: bool = False, **kw: Any
) -> subprocess.Popen[bytes]:
    """A long-running ``git <args>`` (``cat-file --batch``, ``fast-import``) with ``git_env()``;
    ``kw`` goes to ``subprocess.Popen`` (pipes, buffering)."""
    try:
        return subprocess.Popen(["git", *args], cwd=cwd, env=git_env(user_config), **kw)
    except FileNotFoundError as exc:
        raise EnvironmentFailure("git is not installed", hint="install git (apt-get install git)") from exc


def fast_import_path(path: str) -> bytes:
    """A path as ``git fast-import`` reads it: C-quoted when it holds LF, a backslash or starts
    with '"'."""
    raw = path.encode("utf-8", "surrogateescape")
    if b"\n" not in raw and not raw.startswith(b'"') and b"\\" not in raw:
        return raw
    out = bytearray(b'"')
    for byte in raw:
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte == 0x0A:
            out += b"\\n"
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    out += b'"'
    return bytes(out)


def ls_tree_blobs(out: bytes) -> dict[str, tuple[str, str]]:
    """``{path: (mode, blob sha)}`` from the output of ``git ls-tree -r -z``: files and symlinks;
    submodules (commits) are left out. Paths decode as UTF-8 with surrogate escapes."""
    entries: dict[str, tuple[str, str]] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, kind, obj = meta.split()
        if kind == b"blob":
            entries[path.decode("utf-8", "surrogateescape")] = (mode.decode(), obj.decode())
    return entries
