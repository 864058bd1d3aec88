"""Shared pieces of the fuzz tier (hypothesis over hostile input): case counts and a sentinel.

Every fuzz test draws ``examples()`` cases (``PATCHSET_FUZZ_EXAMPLES``, default 400; the
``fuzz`` marker's deep run sets it higher) and asserts, for each case, that nothing outside the
allowed roots changed: a :class:`Sentinel` directory sits beside the root under test (where a
``../`` or absolute path would land) and its snapshot must be identical after the case.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DEFAULT_EXAMPLES = 400
# Wall-clock bound for one case: an archive or journal that never ends must not hang the run.
CASE_DEADLINE_S = 10.0


def examples(default: int = DEFAULT_EXAMPLES) -> int:
    """How many cases each fuzz test draws (``PATCHSET_FUZZ_EXAMPLES`` overrides)."""
    return int(os.environ.get("PATCHSET_FUZZ_EXAMPLES", default))


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``root`` (links not followed): kind and content digest or link target."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


class Sentinel:
    """A directory of bait files (``victim.txt``, ``etc/passwd``) whose snapshot must not change."""

    def __init__(self, base: Path) -> None:
        self.root = base / "sentinel"
        (self.root / "etc").mkdir(parents=True, exist_ok=True)
        (self.root / "victim.txt").write_text("do not touch\n")
        (self.root / "etc" / "passwd").write_text("root:x:0:0\n")
        self.before = snapshot(self.root)

    def assert_untouched(self) -> None:
        after = snapshot(self.root)
        assert after == self.before, f"fuzz case wrote outside its root: {sorted(set(after) ^ set(self.before))}"
