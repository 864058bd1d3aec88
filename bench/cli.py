"""Benchmark: how fast patchset's commands start and finish, as whole processes, against baselines
measured in the same run.

    python bench/cli.py [--runs 9] [--json] [--python PATH]

``--python`` measures the patchset installed for another interpreter (say a venv with a regular,
non-editable install: an editable install's import finder slows every start of its interpreter,
the baselines' too, so the ratios read lower there). The report names the kind of install.

Measured side by side (interleaved, median wall time of ``--runs`` rounds):

- ``python -c pass`` and ``python -c "import click"`` (the floor any click CLI pays);
- ``patchset --version``, and ``list``, ``validate``, ``status --offline`` on the production ledger
  (``patches.toml`` at the repository root: 23 patches, bodies not imported) and on a 21-patch
  ledger whose bodies are imported (bench/apply.py's series over vLLM 0.30.0);
- ``patchset apply --tree`` of those 21 patches on a full vLLM 0.30.0 tree (8,000+ files), against
  a bash loop of ``patch -p1 -F0`` over the same patches on a copy of the same files.

A measurement, not a test: it sets no goal and exits 0 whatever it finds (the start-up work is
done; ``docs/performance.md`` says where it ended). The steadiest figure is the paired ratio: the
median over rounds of each round's time over that round's baseline (the shared machine's speed
drifts from one second to the next, and a ratio within one round cancels the drift). The last
line prints the floor: how ``import click`` alone compares with the patch loop (a Python CLI
cannot finish before its interpreter and click have started).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from apply import fresh_copy, vllm_tree  # noqa: E402
from apply_cli import series_ledger  # noqa: E402


def patchset_cmd(python: str) -> list[str]:
    """The installed console script next to ``python`` (what a user runs), else the shim."""
    script = Path(python).parent / "patchset"
    return [str(script)] if script.exists() else [python, str(ROOT / "cli.py")]


def install_kind(python: str) -> str:
    """How patchset is installed for ``python``: an editable install adds an import finder that
    every start of that interpreter pays for (the baselines too), a regular one does not."""
    code = "import importlib.metadata as m; print(m.distribution('patchset').read_text('direct_url.json') or '')"
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    return "editable install" if '"editable": true' in r.stdout else "regular install"


# As installed: bytecode compiled once and reused (an environment with PYTHONDONTWRITEBYTECODE
# would otherwise compile every module of patchset on every start and measure the compiler).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_all() -> None:
    for d in ("patchset", "tracker", "verify", "ci"):
        compileall.compile_dir(str(ROOT / d), quiet=1)


CPU: dict[str, list[float]] = {}
APPLY = "apply --tree (21 patches, vLLM 0.30.0)"


def timed(argv: list[str], cwd: Path, name: str = "") -> float:
    """Wall time of one run; its CPU time (user + system of the process and its children) goes to
    ``CPU[name]``: on a shared machine the CPU figure is the steadier of the two."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(name, []).append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--python", default=sys.executable, help="the interpreter whose patchset to measure (default: this one)"
    )
    args = ap.parse_args()
    ps = patchset_cmd(args.python)
    compile_all()
    src = vllm_tree()
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:

        def run(*argv: str, cwd: Path) -> None:
            subprocess.run([*ps, *argv], cwd=cwd, check=True, capture_output=True, env=ENV)

        led, patches, rels = series_ledger(src, work, run)

        py = args.python
        cases: dict[str, tuple[list[str], Path]] = {
            "python -c pass": ([py, "-c", "pass"], ROOT),
            "python -c 'import click'": ([py, "-c", "import click"], ROOT),
            "patchset --version": ([*ps, "--version"], ROOT),
            "list (production ledger)": ([*ps, "list"], ROOT),
            "validate (production ledger)": ([*ps, "validate"], ROOT),
            "status --offline (production ledger)": ([*ps, "status", "--offline"], ROOT),
            "list (21 bodies)": ([*ps, "list"], led),
            "validate (21 bodies)": ([*ps, "validate"], led),
            "status --offline (21 bodies)": ([*ps, "status", "--offline"], led),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        times[APPLY] = []
        times["patch -p1 -F0 loop (21 patches)"] = []
        for _ in range(args.runs):
            for name, (argv, cwd) in cases.items():
                times[name].append(timed(argv, cwd, name))
            t = work / "tree"
            shutil.rmtree(t, ignore_errors=True)
            shutil.copytree(src, t, symlinks=True)
            name = APPLY
            times[name].append(timed([*ps, "apply", "--tree", str(t)], led, name))
            t2 = work / "tree-patch"
            fresh_copy(src, rels, t2)
            script = 'set -e; for p in "$@"; do patch -s -p1 -F0 --forward < "$p"; done'
            name = "patch -p1 -F0 loop (21 patches)"
            times[name].append(timed(["bash", "-c", script, "loop", *map(str, patches)], t2, name))
            for rel in [*rels, "vllm/platforms/sm12x.py"]:
                assert (t / rel).read_bytes() == (t2 / rel).read_bytes(), rel
        med = {k: statistics.median(v) for k, v in times.items()}
        low = {k: min(v) for k, v in times.items()}  # the least disturbed run: noise only ever adds
        cpu = {k: statistics.median(v) for k, v in CPU.items()}
        cpu_ratios = {
            k: v / cpu["patch -p1 -F0 loop (21 patches)" if k.startswith("apply") else "python -c 'import click'"]
            for k, v in cpu.items()
            if k.startswith(("patchset", "list", "validate", "status", "apply"))
        }
        click_s = med["python -c 'import click'"]
        loop_s = med["patch -p1 -F0 loop (21 patches)"]
        ratios = {
            k: v / (loop_s if k.startswith("apply") else click_s)
            for k, v in med.items()
            if k.startswith(("patchset", "list", "validate", "status", "apply"))
        }
        # paired: each round's time over its own round's baseline, then the median of those; the
        # machine's speed drifts (other tenants), and a ratio within one round cancels the drift
        paired = {
            k: statistics.median(
                a / b
                for a, b in zip(
                    v,
                    times["patch -p1 -F0 loop (21 patches)" if k.startswith("apply") else "python -c 'import click'"],
                    strict=True,
                )
            )
            for k, v in times.items()
            if k in ratios
        }
        kind = install_kind(args.python)
        floor = click_s / loop_s  # what any click CLI pays before its first line of work, vs the loop
        res = {
            "runs": args.runs,
            "install": kind,
            "click_floor_vs_patch_loop": floor,
            "median_s": med,
            "ratios": ratios,
            "paired_ratios": paired,
            "median_cpu_s": cpu,
            "min_s": low,
            "min_ratios": {
                k: v / low["patch -p1 -F0 loop (21 patches)" if k.startswith("apply") else "python -c 'import click'"]
                for k, v in low.items()
                if k in ratios
            },
            "cpu_ratios": cpu_ratios,
        }
        if args.json:
            print(json.dumps(res, indent=2))
            return 0
        print(
            f"median of {args.runs} interleaved rounds ({' '.join(ps)}, {kind}); wall time, then CPU (user+sys), "
            "then the least disturbed run's ratio, then the median of each round's own ratio (paired: the steadiest)"
        )
        for k, v in med.items():
            base = "patch loop" if k.startswith("apply") else "import click"
            ratio = f" {ratios[k]:5.2f}x" if k in ratios else " " * 7
            cr = f" {cpu_ratios[k]:5.2f}x" if k in cpu_ratios else " " * 7
            vs = f"  (vs {base})" if k in ratios else ""
            mr = f" {res['min_ratios'][k]:5.2f}x" if k in ratios else " " * 7  # type: ignore[index]
            pr = f" {paired[k]:5.2f}x" if k in paired else " " * 7
            print(
                f"  {k:40s} wall {v * 1000:7.1f} ms{ratio}   cpu {cpu[k] * 1000:6.1f} ms{cr}   min{mr}   paired{pr}{vs}"
            )
        print(
            f"floor: `python -c 'import click'` alone is {floor:.2f}x the patch loop's wall time "
            f"(apply's own work over that floor: {(med[APPLY] - click_s) * 1000:.1f} ms)"
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
