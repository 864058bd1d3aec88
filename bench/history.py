"""Benchmark: building a release history with git fast-import vs unpack + git add + git commit.

For each run, both methods build a fresh history of the same releases (in order, each release
the parent of the next) in temporary repositories; the table shows the median seconds per
release (wall clock and CPU including git child processes), the ratio, and checks that both
methods produce the same git trees.

    python bench/history.py                       # vllm 0.30.0 .. 0.33.0, 3 runs
    python bench/history.py --runs 5 --versions 0.30.0 0.31.0
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.upstream import releases
from patchset.upstream.history import ReleaseHistory

IDENT = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def cpu_now() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def naive_import(repo: Path, archive: Path, scratch: Path, message: str) -> str:
    """What a person would do: unpack with tar, git add -A -f, git commit. Returns the tree sha."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | IDENT
    work = scratch / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    subprocess.run(["tar", "xzf", str(archive), "-C", str(work), "--strip-components=1"], check=True)
    git = ["git", f"--git-dir={repo}", f"--work-tree={work}"]
    index = scratch / "index"
    index.unlink(missing_ok=True)
    env["GIT_INDEX_FILE"] = str(index)
    # -f: the sdist ships files its own .gitignore names (vllm.egg-info/, *.json ...); a release
    # history must hold every file of the release, so the naive way needs -f to be comparable
    subprocess.run([*git, "add", "-A", "-f"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "--no-verify", "-m", message], check=True, env=env)
    return subprocess.run(
        [*git, "rev-parse", "HEAD^{tree}"], check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


def one_run(
    archives: list[tuple[str, Path]], scratch: Path
) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]], bool]:
    fast: dict[str, tuple[float, float]] = {}
    naive: dict[str, tuple[float, float]] = {}
    same = True
    fast_repo = ReleaseHistory(scratch / "fast.git")
    naive_repo = scratch / "naive.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(naive_repo)], check=True)
    for version, archive in archives:
        w, c = time.perf_counter(), cpu_now()
        sha = fast_repo.import_release(archive)
        fast[version] = (time.perf_counter() - w, cpu_now() - c)
        w, c = time.perf_counter(), cpu_now()
        tree = naive_import(naive_repo, archive, scratch, version)
        naive[version] = (time.perf_counter() - w, cpu_now() - c)
        same &= fast_repo.git("rev-parse", f"{sha}^{{tree}}").stdout.decode().strip() == tree
    fast_repo.close()
    return fast, naive, same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default="vllm")
    ap.add_argument("--versions", nargs="+", default=["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    archives = [(v, releases.download(f"{args.project}=={v}")) for v in args.versions]
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
            runs.append(one_run(archives, Path(tmp)))
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    print(
        f"{args.project}: median of {args.runs} runs on {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} at the end)"
    )
    print(
        f"{'release':>10} {'size MB':>8} | {'fast-import s':>13} {'cpu s':>6} | {'naive s':>8} {'cpu s':>6} | {'ratio':>6}"
    )
    totals = [0.0, 0.0]
    for version, archive in archives:
        fw = statistics.median(r[0][version][0] for r in runs)
        fc = statistics.median(r[0][version][1] for r in runs)
        nw = statistics.median(r[1][version][0] for r in runs)
        nc = statistics.median(r[1][version][1] for r in runs)
        totals[0] += fw
        totals[1] += nw
        size = archive.stat().st_size / 1e6
        print(f"{version:>10} {size:>8.1f} | {fw:>13.2f} {fc:>6.2f} | {nw:>8.2f} {nc:>6.2f} | {nw / fw:>5.1f}x")
    print(
        f"{'total':>10} {'':>8} | {totals[0]:>13.2f} {'':>6} | {totals[1]:>8.2f} {'':>6} | {totals[1] / totals[0]:>5.1f}x"
    )
    identical = all(r[2] for r in runs)
    print(f"trees identical between methods: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
