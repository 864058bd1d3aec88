"""Test helper: the real GNU ``patch`` and ``git apply`` run on one file ``f``, as oracles for the engine.

Each call works in a fresh directory under the test's ``tmp_path``; the engine is held to what the
binary does with the same bytes (``patch -p1 -F<fuzz> --forward``, the engine's reference).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

needs_binaries = pytest.mark.skipif(
    not (shutil.which("patch") and shutil.which("git")), reason="needs the GNU patch and git binaries"
)

_HUNK = re.compile(
    r"Hunk #(\d+) (?:succeeded at (-?\d+)(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?|(FAILED) at (-?\d+))"
)


@dataclass
class Said:
    """What a binary did: its exit code, the file afterwards (None: absent) and its output."""

    rc: int
    file: bytes | None
    output: str
    offsets: dict[int, int] = field(default_factory=dict)  # hunk -> offset GNU patch reported
    failed: set[int] = field(default_factory=set)  # hunks GNU patch reported FAILED


def _fresh(tmp: Path, kind: str, old: bytes | None, patch: bytes) -> Path:
    d = tmp / f"{kind}{len(list(tmp.glob(kind + '*')))}"
    d.mkdir()
    if old is not None:
        (d / "f").write_bytes(old)
    (d / "p").write_bytes(patch)
    return d


def gnu_patch(old: bytes | None, patch: bytes, tmp: Path, fuzz: int = 0) -> Said:
    """``patch -p1 -F<fuzz> --forward`` on ``f`` holding ``old`` (None: no such file)."""
    d = _fresh(tmp, "gnu", old, patch)
    proc = subprocess.run(
        ["patch", "-p1", f"-F{fuzz}", "--forward", "--no-backup-if-mismatch", "-r", "-", "-i", "p"],
        cwd=d,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LC_ALL": "C"},
        timeout=60,
    )
    text = proc.stdout.decode("latin-1")
    said = Said(proc.returncode, (d / "f").read_bytes() if (d / "f").exists() else None, text)
    for m in _HUNK.finditer(text):
        if m.group(5):
            said.failed.add(int(m.group(1)))
        else:
            said.offsets[int(m.group(1))] = int(m.group(4) or 0)
    return said


def git_apply(old: bytes | None, patch: bytes, tmp: Path) -> Said:
    """``git apply -p1`` (outside any repository) on ``f`` holding ``old``."""
    d = _fresh(tmp, "git", old, patch)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(d)}
    proc = subprocess.run(
        ["git", "apply", "-p1", "p"], cwd=d, capture_output=True, stdin=subprocess.DEVNULL, env=env, timeout=60
    )
    text = (proc.stdout + proc.stderr).decode("latin-1")
    return Said(proc.returncode, (d / "f").read_bytes() if (d / "f").exists() else None, text)
