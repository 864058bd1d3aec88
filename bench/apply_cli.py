"""Benchmark: the whole ``patchset apply --tree`` command (process start, ledger, lock check,
engine, crash-safe commit) on a 21-patch series over a full vLLM 0.30.0 tree, against a shell
loop of ``patch -p1 -F0`` over the same series — both as whole commands, same run.

    python bench/apply_cli.py [--runs 7] [--json]

The series is bench/apply.py's 20 patches plus the example series' new-file patch; the ledger
and its lock are written by ``patchset import`` and ``patchset apply --update-lock``.
A measurement: the figures and their ratio, no goal; it exits 0 whatever it finds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from apply import fresh_copy, vllm_tree, write_series  # noqa: E402

from patchset.patchfmt.diffs import files_touched  # noqa: E402

LEDGER = """schema = 1
[targets.vllm]
upstream = "https://github.com/vllm-project/vllm.git"
github = "vllm-project/vllm"
base = "0.30.0"
"""


def cli(*args: str, cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def series_ledger(src: Path, work: Path, run: Callable[..., object]) -> tuple[Path, list[Path], list[str]]:
    """The 21-patch ledger (bench/apply.py's 20 + the example's new-file patch) under ``work``,
    imported and locked with ``run(*args, cwd=...)`` (a patchset invocation). Returns the ledger
    directory, the patch files in order, and the existing files they touch."""
    led = work / "ledger"
    (led / "in").mkdir(parents=True)
    (led / "patches.toml").write_text(LEDGER)
    patches = write_series(src, led / "in")
    extra = ROOT / "examples/spark-sm12x/patchset/series/vllm/03-sm12x-platform-facts.patch"
    shutil.copy(extra, led / "in" / "0021-sm12x-platform-facts.patch")
    patches.append(led / "in" / "0021-sm12x-platform-facts.patch")
    run("import", "--target", "vllm", *[str(p) for p in patches], cwd=led)
    rels = sorted({r for p in patches for r in files_touched(p.read_bytes()) if (src / r).exists()})
    first = work / "tree-lock"
    fresh_copy(src, rels, first)
    run("apply", "--tree", str(first), "--update-lock", cwd=led)
    return led, patches, rels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    src = vllm_tree()
    work = Path(tempfile.mkdtemp(prefix="bench-apply-cli-"))
    try:
        led, patches, rels = series_ledger(src, work, lambda *a, cwd: cli(*a, cwd=cwd))
        tool, loop = [], []
        for _ in range(args.runs):
            t = work / "tree"
            shutil.rmtree(t, ignore_errors=True)
            shutil.copytree(src, t, symlinks=True)
            tool.append(cli("apply", "--tree", str(t), cwd=led))
            t2 = work / "tree-patch"
            fresh_copy(src, rels, t2)
            script = 'set -e; for p in "$@"; do patch -s -p1 -F0 --forward < "$p"; done'
            t0 = time.perf_counter()
            subprocess.run(["bash", "-c", script, "loop", *map(str, patches)], cwd=t2, check=True)
            loop.append(time.perf_counter() - t0)
            for rel in [*rels, "vllm/platforms/sm12x.py"]:
                assert (t / rel).read_bytes() == (t2 / rel).read_bytes(), rel
        res = {
            "patches": len(patches),
            "runs": args.runs,
            "patchset_apply_s": statistics.median(tool),
            "patch_loop_s": statistics.median(loop),
        }
        res["ratio_patchset_over_patch_loop"] = res["patchset_apply_s"] / res["patch_loop_s"]
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print(f"{res['patches']} patches on a full vLLM 0.30.0 tree, median of {args.runs} runs")
            print(f"  patchset apply (whole command): {res['patchset_apply_s'] * 1000:7.1f} ms")
            print(f"  bash loop of patch -p1 -F0:     {res['patch_loop_s'] * 1000:7.1f} ms")
            print(f"  ratio patchset / patch loop:    {res['ratio_patchset_over_patch_loop']:.2f}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
