"""Benchmark: ``build wheel`` on a real wheel vs the plainest rewrite of the same archive.

``build wheel`` validates the input wheel against its RECORD (installer), applies the series,
rewrites every member through ``wheel``'s WheelFile (which hashes each one for RECORD), and
validates the result (installer) and its patched files against the lock. The baseline is what
any rewrite of the wheel costs at least: read every member and write it into a new zip with the
same compression, nothing else (``zipfile`` only). The ratio says what the checks add.

    python bench/build_wheel.py [--runs 3] [--spec flashinfer-python==0.6.18.post1] [--ledger examples/flashinfer-sm12x] [--json]

The wheel is downloaded once into ``$PATCHSET_CACHE/dist``. Wall times are medians of the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.build.series import pick_target
from patchset.build.wheel import build_wheel, fetch_wheel
from patchset.ledger.store import load_ledger

REPO = Path(__file__).resolve().parent.parent


def baseline(src: Path, dest: Path) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spec", default="flashinfer-python==0.6.18.post1")
    ap.add_argument("--ledger", type=Path, default=REPO / "examples/flashinfer-sm12x")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    wheel = fetch_wheel(args.spec)
    ledger = load_ledger(args.ledger / "patches.toml")
    target = pick_target(ledger, None)
    times: dict[str, list[float]] = {"build wheel": [], "baseline rewrite": []}
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            rep = build_wheel(ledger, target, wheel, Path(tmp) / f"out{i}")
            times["build wheel"].append(time.perf_counter() - t0)
            assert rep.ok, rep.message
            t0 = time.perf_counter()
            baseline(wheel, Path(tmp) / "copy.whl")
            times["baseline rewrite"].append(time.perf_counter() - t0)
    with zipfile.ZipFile(wheel) as zf:
        members = len(zf.infolist())
        raw = sum(i.file_size for i in zf.infolist())
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "wheel": wheel.name,
        "members": members,
        "compressed_mb": round(wheel.stat().st_size / 1e6, 1),
        "uncompressed_mb": round(raw / 1e6, 1),
        "runs": args.runs,
        "median_s": {k: round(v, 2) for k, v in med.items()},
        "ratio_build_to_baseline": round(med["build wheel"] / med["baseline rewrite"], 2),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(
            f"{wheel.name}: {members} members, {result['compressed_mb']} MB ({result['uncompressed_mb']} MB unpacked)"
        )
        for k, v in med.items():
            print(f"  {k:<18} {v:7.2f} s (median of {args.runs})")
        print(f"  ratio build/baseline {result['ratio_build_to_baseline']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
