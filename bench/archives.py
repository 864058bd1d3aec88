"""Benchmark: one pass over a release sdist with ``ArchiveReader`` against bare ``tarfile``.

The reader is the standard ``tarfile`` with the budgets, the header bounds, the data filter, the
path rules and the sha256 on top (``patchset/upstream/archives.py``, ``boundedtar.py``); the
baseline, measured in the same run, is ``tarfile.open`` iterating the same archive and reading every
file's bytes with none of that. The table shows the median wall-clock seconds and the ratio.

    python bench/archives.py                      # vllm 0.30.0 (42 MB), 5 runs
    python bench/archives.py --spec vllm==0.33.0 --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.upstream.archives import ArchiveReader
from patchset.upstream.releases import download


def bare_tarfile(archive: Path) -> int:
    count = 0
    with tarfile.open(archive, "r:*") as tf:
        for info in tf:
            count += 1
            if info.isreg():
                fh = tf.extractfile(info)
                if fh is not None:
                    fh.read()
    return count


def reader(archive: Path) -> int:
    r = ArchiveReader(archive)
    count = sum(1 for _ in r)
    assert r.sha256, "a full pass records the archive's sha256"
    return count


def timed(fn, archive: Path) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn(archive)
    return time.perf_counter() - start, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="vllm==0.30.0")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    archive = download(args.spec)
    rows: dict[str, list[float]] = {"tarfile alone": [], "ArchiveReader": []}
    counts: dict[str, int] = {}
    for _ in range(args.runs):  # alternated, so a change in the machine's load hits both
        for name, fn in (("tarfile alone", bare_tarfile), ("ArchiveReader", reader)):
            seconds, counts[name] = timed(fn, archive)
            rows[name].append(seconds)
    base = statistics.median(rows["tarfile alone"])
    print(
        f"{archive.name}: {archive.stat().st_size / 1e6:.1f} MB, median of {args.runs} runs on {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"  {name:<14} {med:6.2f} s  {counts[name]:>6} members  {med / base:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
