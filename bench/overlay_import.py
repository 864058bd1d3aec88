"""Benchmark: the memory ``import --overlay`` holds for one large overlay file, against its size.

A stock file of ``--mb`` MB (80-byte lines) is written into a base tree and an overlay kit holds it
edited in one of three shapes:

* ``sparse``: every 1000th line changed (a kit's usual file: a few edits of a big module);
* ``spread``: every 10th line changed (many small hunks);
* ``dense``: every 4th line changed (the hunks' context overlaps: one hunk spans the whole file).

Each shape is imported with ``import_overlay`` (``--base-tree``) while ``tracemalloc`` traces every
Python allocation; the peak above what was allocated before is printed with its ratio to the
overlay file's size and to the baseline measured in the same run: reading the stock and the overlay
file (the two files any byte-exact diff needs). ``git diff`` runs in a child process and is not
counted. Each shape is also imported once more in a fresh interpreter without tracing, for the
resident set: its high-water mark (``VmHWM``) above the resident size just before the import
(after a warm-up import of a tiny kit, so the modules it loads are not counted).

    python bench/overlay_import.py [--mb 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.commands.importer import read_source
from patchset.commands.overlay_import import import_overlay

MB = 1 << 20
SHAPES = {"sparse": 1000, "spread": 10, "dense": 4}
LEDGER = """\
schema = 1

[targets.vllm]
upstream = "https://example.invalid/vllm.git"
package = "vllm"
layout = "installed"
"""


def _line(i: int, changed: bool = False) -> bytes:
    return b"x" * 60 + (b" %09dY\n" % i if changed else b" %09d\n" % i)


def world(root: Path, mb: float, every: int) -> tuple[Path, Path, Path, int]:
    """(ledger, kit, base tree, overlay size) with one file of about ``mb`` MB."""
    n = int(mb * MB) // 80
    for where, changed in (("base", lambda i: False), ("kit", lambda i: i % every == 0)):
        (root / where / "vllm").mkdir(parents=True)
        with open(root / where / "vllm/big.py", "wb") as fh:  # line by line: the resident set stays small
            for i in range(n):
                fh.write(_line(i, changed(i)))
    (root / "led").mkdir()
    (root / "led/patches.toml").write_text(LEDGER)
    return root / "led/patches.toml", root / "kit", root / "base", (root / "kit/vllm/big.py").stat().st_size


def peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(result, peak bytes allocated while ``fn`` ran, above what was allocated before)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _rss_child(mb: float, shape: str) -> int:
    """In this (fresh) process: the import's resident high-water mark above the resident size before it."""
    with tempfile.TemporaryDirectory(prefix="patchset-bench-overlay-") as tmp:
        warm = world(Path(tmp) / "warm-up", 0.01, SHAPES[shape])  # the modules the import loads, loaded
        import_overlay(warm[0], warm[1], "vllm", base_tree=warm[2])
        ledger, kit, base, _ = world(Path(tmp) / "measured", mb, SHAPES[shape])
        with open("/proc/self/statm") as fh:
            before = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        import_overlay(ledger, kit, "vllm", base_tree=base)
        return _high_water() - before


def _high_water() -> int:
    """This process's resident high-water mark (``VmHWM``: ``ru_maxrss`` keeps the parent's across exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss(mb: float, shape: str) -> int:
    out = subprocess.run(
        [sys.executable, __file__, "--mb", str(mb), "--rss-child", shape], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def measure(mb: float, shape: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="patchset-bench-overlay-") as tmp:
        ledger, kit, base, size = world(Path(tmp), mb, SHAPES[shape])
        _, baseline = peak(lambda: (read_source(base / "vllm/big.py"), read_source(kit / "vllm/big.py")))
        t0 = time.monotonic()
        rep, used = peak(lambda: import_overlay(ledger, kit, "vllm", base_tree=base))
        seconds = time.monotonic() - t0
        assert rep.added == ["overlay-vllm-big.py"], rep.to_json()
        body = (ledger.parent / "patchset/series/vllm/overlay-vllm-big.py.patch").stat().st_size
    return {
        "shape": shape,
        "overlay_bytes": size,
        "body_bytes": body,
        "baseline_peak_bytes": baseline,
        "peak_bytes": used,
        "x_overlay": round(used / size, 2),
        "x_baseline": round(used / baseline, 2),
        "rss_bytes": (resident := rss(mb, shape)),
        "rss_x_overlay": round(resident / size, 2),
        "seconds": round(seconds, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=8.0, help="size of the overlay file (default 8)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rss-child", choices=sorted(SHAPES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        print(_rss_child(args.mb, args.rss_child))
        return 0
    rows = [measure(args.mb, shape) for shape in SHAPES]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"import --overlay, one file of {args.mb:g} MB (tracemalloc peak; git diff not counted)")
    print(f"{'shape':<8} {'body MB':>8} {'peak MB':>8} {'x file':>7} {'x read both':>12} {'RSS x file':>11} {'s':>5}")
    for r in rows:
        print(
            f"{r['shape']:<8} {r['body_bytes'] / MB:>8.1f} {r['peak_bytes'] / MB:>8.1f} {r['x_overlay']:>7.2f} "
            f"{r['x_baseline']:>12.2f} {r['rss_x_overlay']:>11.2f} {r['seconds']:>5.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
