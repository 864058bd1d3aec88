"""Benchmark: ``apply_series`` vs a loop of ``patch -p1 -F0`` vs a loop of ``git apply``.

A 20-patch series is written (deterministically, by this script) against the real vLLM 0.30.0
source from the package index: plausible downstream edits (comments explaining a workaround,
an environment switch, a guarded early return, a changed default, a log line) to 14 real
files, several of them patched by two or three patches in a row, each patch a real
``git diff`` with 1-3 hunks. Every run copies the touched files into three fresh trees and
applies the series with each tool; the resulting files are checked identical, and the median
wall time of the runs and the ratios are printed.

    python bench/apply.py [--runs 7] [--json]

The engine's figure includes its crash-safe commit (staged files, journal, fsync); the loops
do not fsync. ``of which in memory`` is the same call with ``dry_run=True``.

The sdist is downloaded once into ``$PATCHSET_CACHE/dist`` and unpacked once into
``$PATCHSET_CACHE/bench/vllm-0.30.0``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.patchfmt.diffs import files_touched
from patchset.upstream import cache
from patchset.upstream.archives import unpack
from patchset.upstream.releases import download

VERSION = "0.30.0"

# (file, edit kind, which occurrence) per patch; files repeat so later patches see earlier ones
SERIES: list[tuple[str, list[tuple[str, str, int]]]] = [
    (
        "spark-kv-cache-block-size",
        [("vllm/v1/core/kv_cache_utils.py", "comment-def", 3), ("vllm/v1/core/kv_cache_utils.py", "log-def", 12)],
    ),
    ("cuda-sm121-capability", [("vllm/platforms/cuda.py", "guard-def", 4)]),
    ("envs-spark-switch", [("vllm/envs.py", "env-var", 0)]),
    (
        "scheduler-prefix-resume",
        [("vllm/v1/core/sched/scheduler.py", "comment-def", 5), ("vllm/v1/core/sched/scheduler.py", "log-def", 20)],
    ),
    ("flashinfer-workspace", [("vllm/v1/attention/backends/flashinfer.py", "comment-def", 6)]),
    ("fused-moe-tile-default", [("vllm/model_executor/layers/fused_moe/fused_moe.py", "default", 2)]),
    (
        "nccl-group-timeout",
        [
            ("vllm/distributed/parallel_state.py", "guard-def", 8),
            ("vllm/distributed/parallel_state.py", "comment-def", 30),
        ],
    ),
    ("runner-cudagraph-note", [("vllm/v1/worker/gpu_model_runner.py", "comment-def", 10)]),
    ("cache-config-gb10", [("vllm/config/cache.py", "comment-def", 1)]),
    ("kv-cache-hash-log", [("vllm/v1/core/kv_cache_utils.py", "guard-def", 25)]),
    ("cuda-device-name", [("vllm/platforms/cuda.py", "log-def", 15)]),
    ("envs-second-switch", [("vllm/envs.py", "env-var", 1)]),
    ("scheduler-preempt-guard", [("vllm/v1/core/sched/scheduler.py", "guard-def", 35)]),
    (
        "flashinfer-fp8-note",
        [
            ("vllm/v1/attention/backends/flashinfer.py", "log-def", 30),
            ("vllm/v1/attention/backends/flashinfer.py", "comment-def", 50),
        ],
    ),
    ("runner-graph-guard", [("vllm/v1/worker/gpu_model_runner.py", "guard-def", 60)]),
    ("block-pool-note", [("vllm/v1/core/block_pool.py", "comment-def", 4)]),
    ("kv-cache-manager-log", [("vllm/v1/core/kv_cache_manager.py", "log-def", 6)]),
    ("engine-core-note", [("vllm/v1/engine/core.py", "comment-def", 9)]),
    ("sampler-guard", [("vllm/v1/sample/sampler.py", "guard-def", 3)]),
    (
        "kv-cache-final",
        [("vllm/v1/core/kv_cache_utils.py", "comment-def", 40), ("vllm/v1/core/kv_cache_utils.py", "default", 1)],
    ),
]

_DEF = re.compile(rb"^(\s*)def \w+\(")
_DEFAULT = re.compile(rb"^(\s*\w+\s*(?::\s*[\w\[\], .|]+)?=\s*)(\d+)(\s*(#.*)?)$")


def _edit(text: bytes, kind: str, nth: int, tag: str) -> bytes:
    lines = text.split(b"\n")
    if kind == "env-var":
        idx = [i for i, ln in enumerate(lines) if ln.startswith(b"    VLLM_")][nth * 7 % 50]
        name = f"VLLM_SPARK_{tag.upper().replace('-', '_')}".encode()
        lines[idx:idx] = [
            b"    # DGX Spark: downstream switch, see the patch ledger",
            b'    "' + name + b'": lambda: bool(int(os.getenv("' + name + b'", "0"))),',
        ]
        return b"\n".join(lines)
    if kind == "default":
        idx = [i for i, ln in enumerate(lines) if _DEFAULT.match(ln)][nth]
        m = _DEFAULT.match(lines[idx])
        assert m
        lines[idx] = m.group(1) + str(int(m.group(2)) * 2 or 2).encode() + b"  # downstream: doubled for GB10"
        return b"\n".join(lines)
    defs = [i for i, ln in enumerate(lines) if _DEF.match(ln)]
    idx = defs[nth % len(defs)]
    indent = _DEF.match(lines[idx]).group(1)  # type: ignore[union-attr]
    body = indent + b"    "
    end = idx
    while not lines[end].rstrip().endswith(b":"):  # end of a multi-line signature
        end += 1
    if kind == "comment-def":
        lines[idx:idx] = [
            indent + b"# downstream (" + tag.encode() + b"): keep in sync with the",
            indent + b"# patch ledger; upstream PR pending.",
        ]
    elif kind == "log-def":
        lines[end + 1 : end + 1] = [
            body + b'if os.environ.get("VLLM_SPARK_DEBUG"):',
            body + b'    print("[spark] ' + tag.encode() + b'")',
        ]
    elif kind == "guard-def":
        lines[end + 1 : end + 1] = [
            body + b"# downstream guard: GB10 reports sm_121",
            body + b'_spark = os.environ.get("VLLM_SPARK", "")',
        ]
    return b"\n".join(lines)


def vllm_tree(version: str = VERSION) -> Path:
    """The unpacked sdist of ``vllm==version`` (downloaded and unpacked once, cached)."""
    dest = cache.subdir("bench") / f"vllm-{version}"
    if not dest.exists():
        unpack(download(f"vllm=={version}"), dest)
    return dest


def write_series(src: Path, out: Path) -> list[Path]:
    """The 20 patches as real ``git diff`` files, each against the tree with the earlier ones."""
    state: dict[str, bytes] = {}
    patches = []
    work = Path(tempfile.mkdtemp(prefix="bench-series-"))
    try:
        for n, (name, edits) in enumerate(SERIES, start=1):
            files: dict[str, tuple[bytes, bytes]] = {}
            for rel, kind, nth in edits:
                before = files[rel][1] if rel in files else state.get(rel, (src / rel).read_bytes())
                after = _edit(before, kind, nth, name)
                files[rel] = (files[rel][0] if rel in files else before, after)
            body = b""
            for rel, (before, after) in files.items():
                for side, data in (("a", before), ("b", after)):
                    p = work / side / rel
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
                    os.chmod(p, (src / rel).stat().st_mode & 0o777)  # same mode line as the tree
                proc = subprocess.run(
                    ["git", "diff", "--no-index", "--no-prefix", "-U3", f"a/{rel}", f"b/{rel}"],
                    cwd=work,
                    capture_output=True,
                )
                assert proc.returncode == 1, proc.stderr
                body += proc.stdout
                state[rel] = after
            header = (
                f"From: bench <bench@example.invalid>\nSubject: [PATCH {n:02d}/20] {name}\n\n"
                f"Downstream patch {n} of the benchmark series.\n---\n"
            ).encode()
            path = out / f"{n:04d}-{name}.patch"
            path.write_bytes(header + body)
            patches.append(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return patches


def fresh_copy(src: Path, rels: list[str], dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)


def snapshot(root: Path, rels: list[str]) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in rels}


def run_engine(tree: Path, patches: list[Path], dry_run: bool = False) -> float:
    t0 = time.perf_counter()
    items = [SeriesItem(p.stem, p.read_bytes()) for p in patches]
    res = apply_series(tree, items, dry_run=dry_run)
    dt = time.perf_counter() - t0
    if not res.ok:
        res.raise_for_failure()
    return dt


def run_loop(tree: Path, patches: list[Path], argv: list[str]) -> float:
    t0 = time.perf_counter()
    for p in patches:
        subprocess.run([*argv, str(p)], cwd=tree, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    src = vllm_tree()
    base = Path(tempfile.mkdtemp(prefix="bench-apply-"))
    try:
        series_dir = base / "series"
        series_dir.mkdir()
        patches = write_series(src, series_dir)
        rels: list[str] = []
        for p in patches:
            for rel in files_touched(p.read_bytes()):
                if rel not in rels:
                    rels.append(rel)
        tools = {
            "patchset apply_series": lambda t: run_engine(t, patches),
            "patch -p1 -F0 loop": lambda t: run_loop(
                t, patches, ["patch", "-p1", "-F0", "--forward", "-s", "--no-backup-if-mismatch", "-i"]
            ),
            "git apply loop": lambda t: run_loop(t, patches, ["git", "apply", "-p1"]),
        }
        times: dict[str, list[float]] = {k: [] for k in tools}
        times["  of which in memory"] = []  # apply_series(dry_run=True): no staging, no fsync
        for _ in range(args.runs):
            results = {}
            for name, fn in tools.items():
                tree = base / "tree"
                fresh_copy(src, rels, tree)
                times[name].append(fn(tree))
                results[name] = snapshot(tree, rels)
                if name == "patchset apply_series":
                    fresh_copy(src, rels, tree)
                    times["  of which in memory"].append(run_engine(tree, patches, dry_run=True))
            first = next(iter(results.values()))
            for name, snap in results.items():
                if snap != first:
                    bad = [r for r in rels if snap[r] != first[r]]
                    raise SystemExit(f"{name} produced different files: {bad}")
        med = {k: statistics.median(v) for k, v in times.items()}
        hunks = sum(p.read_bytes().count(b"\n@@ ") for p in patches)
        report = {
            "vllm": VERSION,
            "patches": len(patches),
            "files": len(rels),
            "hunks": hunks,
            "runs": args.runs,
            "median_seconds": med,
            "ratio_git_apply_over_engine": med["git apply loop"] / med["patchset apply_series"],
            "ratio_patch_over_engine": med["patch -p1 -F0 loop"] / med["patchset apply_series"],
        }
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(
                f"vLLM {VERSION}: {len(patches)} patches, {hunks} hunks, {len(rels)} files, "
                f"median of {args.runs} runs (results identical across tools)"
            )
            for name, m in med.items():
                print(f"  {name:24s} {m * 1000:8.1f} ms   (min {min(times[name]) * 1000:.1f})")
            print(f"  git apply loop / engine   {report['ratio_git_apply_over_engine']:.2f}x")
            print(f"  patch loop / engine       {report['ratio_patch_over_engine']:.2f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
