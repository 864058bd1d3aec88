"""A real small file system for disk-full, inode-exhaustion and read-only tests: a tmpfs.

Mounting needs root (CI on this machine runs as root); elsewhere the tests that need it skip
with the reason. Nothing is simulated: the kernel returns ENOSPC / EROFS itself.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(where: Path, options: str) -> None:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'mount failed'}): needs root")


@contextmanager
def tmpfs(where: Path, size: str = "1m", inodes: int | None = None) -> Iterator[Path]:
    """Mount a fresh tmpfs of ``size`` (and at most ``inodes`` inodes) on ``where``."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    _mount(where, f"size={size}" + (f",nr_inodes={inodes}" if inodes else ""))
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount_readonly(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True)


def fill(where: Path) -> None:
    """Fill the file system under ``where`` until the kernel says ENOSPC."""
    chunk = b"\0" * (64 << 10)
    try:
        with open(where / ".filler", "wb", buffering=0) as fh:
            while True:
                fh.write(chunk)
    except OSError:
        pass
    for i in range(100000):  # and the last blocks, in small files
        try:
            (where / f".fill{i}").write_bytes(b"x" * 512)
        except OSError:
            break
