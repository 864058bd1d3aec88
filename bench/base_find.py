"""Benchmark: ``base find``'s search (gallop from the newest, bisect the edges) against checking
every release, for a real series on the real package index.

The series is three downstream edits of real vLLM 0.30.0 files (``platforms/cuda.py``,
``v1/core/kv_cache_utils.py``, ``config/device.py``). Each run uses a new series digest (the
patch ids carry the run number), so no verdict comes from the cache; the releases themselves come
from the release cache once downloaded (the first run downloads what it needs: its time is shown
apart). Both ways must name the same releases.

    python bench/base_find.py [--since 0.25.0] [--runs 3] [--at middle|header] [--json]

``middle``: edits halfway down files that change every release (a short run fits); ``header``:
edits below the SPDX lines (every release fits: the gallop's best case).
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.commands.importer import import_sources
from patchset.commands.onboard.bases import Find, fits, fitting, releases, search
from patchset.commands.targets import init
from patchset.ledger.store import load_ledger
from patchset.upstream.history import ReleaseHistory, build_history

FILES = ["vllm/platforms/cuda.py", "vllm/v1/core/kv_cache_utils.py", "vllm/config/device.py"]


def _series(work: Path, run: int, at: str) -> Path:
    h = ReleaseHistory.for_project("vllm")
    c = h.resolve("vllm==0.30.0")
    led = work / f"led-{run}"
    led.mkdir()
    init(led / "patches.toml", "bench", ["vllm"])
    bodies = []
    for i, path in enumerate(FILES):
        old = h.read_blob(c, path).decode().splitlines(keepends=True)
        k = 2 if at == "header" else len(old) * (i + 3) // 8  # below the SPDX lines: in every release
        new = [*old[:k], f"# spark downstream note {run}.{i}\n", *old[k:]]
        body = work / f"{run}-{i}-{path.rsplit('/', 1)[1]}.patch"
        body.write_text(
            f"diff --git a/{path} b/{path}\n" + "".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"))
        )
        bodies.append(body)
    import_sources(led / "patches.toml", bodies, "vllm")
    return led / "patches.toml"


def _timed(ledger_path: Path, since: str, every: bool) -> tuple[float, Find]:
    led = load_ledger(ledger_path)
    t = led.targets["vllm"]
    f = Find(led, t, releases(t, since))
    start = time.perf_counter()
    if every:
        from patchset.commands.onboard.bases import series_digest

        f.digest = series_digest(led, t)
        for i in range(len(f.versions)):
            fits(f, i)
    else:
        search(f)
    return time.perf_counter() - start, f


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--since", default="0.25.0")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--at", choices=["middle", "header"], default="middle", help="where the edits sit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    build_history("vllm", ["0.30.0"])
    with tempfile.TemporaryDirectory(prefix="bench-base-find-") as tmp:
        work = Path(tmp)
        warm, f0 = _timed(_series(work, 0, args.at), args.since, every=True)  # downloads what is missing
        searched, every = [], []
        for run in range(1, args.runs + 1):
            s, fs = _timed(_series(work, 2 * run, args.at), args.since, every=False)
            e, fe = _timed(_series(work, 2 * run + 1, args.at), args.since, every=True)
            if fitting(fs) != [v for v in fe.versions if fe.verdicts[v]]:
                raise SystemExit(f"the search and the full check disagree: {fitting(fs)} vs {fe.verdicts}")
            searched.append(s)
            every.append(e)
    out = {
        "releases": len(f0.versions),
        "fits": fitting(fs),
        "checked_by_search": len(fs.verdicts),
        "search_s": statistics.median(searched),
        "every_release_s": statistics.median(every),
        "ratio": statistics.median(every) / statistics.median(searched),
        "first_run_s": warm,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['releases']} releases since {args.since}; the series fits {', '.join(out['fits']) or 'none'}")
        print(f"search: {out['checked_by_search']} checked, median {out['search_s']:.2f} s")
        print(f"every release: {out['releases']} checked, median {out['every_release_s']:.2f} s")
        print(f"ratio (every / search): {out['ratio']:.1f}x; first run (downloads): {warm:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
