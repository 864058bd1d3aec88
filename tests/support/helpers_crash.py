"""Subprocess entry point for the SIGKILL tests: apply a series stored as files, nothing else.

Usage: ``python -m tests.support.helpers_crash ROOT SERIES_DIR`` where SERIES_DIR holds ``NN-name.patch``
files applied in name order; ``python -m tests.support.helpers_crash --recover ROOT`` runs ``recover``. ``PATCHSET_TEST_CRASH_AFTER=k`` (read by ``patchset.engine.txn``) makes
the process SIGKILL itself at the k-th commit step. Exit 0: committed; 3: did not apply.
"""

from __future__ import annotations

import sys
from pathlib import Path

from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series, recover


def main() -> int:
    if sys.argv[1] == "--recover":
        recover(Path(sys.argv[2]))
        return 0
    root, series = Path(sys.argv[1]), Path(sys.argv[2])
    items = [SeriesItem(p.stem, p.read_bytes()) for p in sorted(series.glob("*.patch"))]
    result = apply_series(root, items)
    return 0 if result.ok else 3


if __name__ == "__main__":
    sys.exit(main())
