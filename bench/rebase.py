"""Benchmark: ``patchset rebase`` vs ``git rebase`` of the same series, on real vLLM releases.

A series of ~15 patches is written against the real vLLM 0.30.0 source (clean edits, edits next
to upstream changes that need a 3-way merge, edits in the glm5next files 0.31.0 moved to
``common/``, and real 0.30.0 -> 0.31.0 changes as backports). The same series is also committed
as a stack on a checked-out 0.30.0 worktree. Each run then rebases it onto 0.31.0:

* patchset: ``rebase(ledger, "vllm==0.31.0")`` on a fresh copy of the ledger, writing the result;
* git: ``git rebase --onto v0.31.0 v0.30.0 stack`` in the worktree (checkout included).

Both results are checked to be the same files. The median of the runs and the ratio are printed.

    python bench/rebase.py [--runs 5] [--onto 0.31.0] [--json]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.engine.hunks import apply_file
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.session import rebase
from patchset.upstream.history import ReleaseHistory, build_history

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}
NOTE = "# patchset bench: downstream note\n"


def git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, input=input, env=GIT_ENV).stdout


def udiff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
        )
    )


def insert_after(text: str, line: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join([*lines[:line], NOTE, *lines[line:]])


def stable_line(old: str, new: str) -> int:
    """A line in the middle of ``old`` whose 6-line window appears once, unchanged, in ``new``."""
    a = old.splitlines(keepends=True)
    mid = len(a) // 2
    for delta in range(0, len(a)):
        for i in (mid + delta, mid - delta):
            if 3 <= i <= len(a) - 3:
                window = "".join(a[i - 3 : i + 3])
                if window.strip() and old.count(window) == 1 and new.count(window) == 1:
                    return i
    raise SystemExit("no stable line found")


def series(h: ReleaseHistory, old: str, new: str) -> dict[str, tuple[str, bytes]]:
    """``{patch id: (path, body)}``: 15 patches against ``old`` that rebase onto ``new`` without conflict."""
    out: dict[str, tuple[str, bytes]] = {}

    def text(commit: str, path: str) -> str:
        data = h.read_blob(commit, path)
        assert data is not None, path
        return data.decode()

    def add(pid: str, path: str, diff: str | bytes) -> None:
        data = diff.encode() if isinstance(diff, str) else diff
        out[pid] = (path, f"Subject: [PATCH] {pid}\n\nBenchmark patch.\n\n".encode() + data)

    changed = set(git(h.git_dir, "diff", "--name-only", old, new, "--", "vllm").decode().split())
    files = sorted(
        p
        for p in git(h.git_dir, "ls-tree", "-r", "--name-only", old, "--", "vllm").decode().split()
        if p.endswith(".py")
    )
    unchanged = [p for p in files if p not in changed and (h.read_blob(old, p) or b"").count(b"\n") > 80]
    for n, path in enumerate(unchanged[:: max(len(unchanged) // 6, 1)][:6], start=1):
        src = text(old, path)
        add(f"clean-{n}", path, udiff(path, src, insert_after(src, stable_line(src, src))))
    for n, name in enumerate(("attention", "kda", "model"), start=1):
        path = f"vllm/models/glm5next/nvidia/{name}.py"
        src = text(old, path)
        moved = text(new, path.replace("/nvidia/", "/common/"))
        add(f"moved-{n}", path, udiff(path, src, insert_after(src, stable_line(src, moved))))
    merge_files = ["vllm/platforms/cuda.py", "vllm/distributed/device_communicators/pynccl.py", "vllm/config/pooler.py"]
    for n, path in enumerate(merge_files, start=1):
        src = text(old, path)
        hunk = next(
            ln
            for ln in git(h.git_dir, "diff", "-U0", old, new, "--", path).decode().splitlines()
            if ln.startswith("@@ ")
        )
        first = int(hunk.split()[1][1:].split(",")[0])  # first changed old line (1-based)
        add(f"merge-{n}", path, udiff(path, src, insert_after(src, first - 3)))
    for n, path in enumerate(("vllm/config/device.py", "vllm/config/model_arch.py", "vllm/assets/base.py"), start=1):
        add(f"backport-{n}", path, git(h.git_dir, "diff", "--no-color", old, new, "--", path))
    return out


def make_ledger(root: Path, pat: dict[str, tuple[str, bytes]], version: str) -> Path:
    d = root / "patchset" / "series" / "vllm"
    d.mkdir(parents=True)
    lines = [
        "schema = 1",
        "[targets.vllm]",
        'upstream = "https://github.com/vllm-project/vllm.git"',
        'github = "vllm-project/vllm"',
        f'base = "vllm=={version}"',
        'package = "vllm"',
        "",
    ]
    for pid, (path, data) in pat.items():
        (d / f"{pid}.patch").write_bytes(data)
        lines += [
            "[[patch]]",
            f'id = "{pid}"',
            'target = "vllm"',
            f'title = "{pid}"',
            'origin = "ours"',
            f'files = ["{path}"]',
            "",
        ]
    (root / "patches.toml").write_text("\n".join(lines))
    return root / "patches.toml"


def make_stack(h: ReleaseHistory, work: Path, pat: dict[str, tuple[str, bytes]], old_tag: str) -> None:
    git(work.parent, "clone", "-q", "--shared", "--no-checkout", str(h.git_dir), str(work))
    git(work, "checkout", "-q", "-b", "stack0", old_tag)
    for pid, (_, data) in pat.items():
        git(work, "apply", "--index", "-", input=data)
        git(work, "commit", "-q", "-m", pid)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--base", default="0.30.0")
    ap.add_argument("--onto", default="0.31.0")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    build_history("vllm", [args.base, args.onto])
    h = ReleaseHistory.for_project("vllm")
    old, new = h.resolve(f"vllm=={args.base}"), h.resolve(f"vllm=={args.onto}")
    pat = series(h, old, new)
    tmp = Path(tempfile.mkdtemp(prefix="patchset-bench-"))
    try:
        template = tmp / "template"
        make_ledger(template, pat, args.base)
        work = tmp / "worktree"
        make_stack(h, work, pat, f"v{args.base}")

        ours: list[float] = []
        theirs: list[float] = []
        report = None
        for run in range(args.runs):
            led_dir = tmp / f"run{run}"
            shutil.copytree(template, led_dir)
            t0 = time.perf_counter()
            report = rebase(led_dir / "patches.toml", f"vllm=={args.onto}")
            ours.append(time.perf_counter() - t0)
            assert report.status == "done", report.status
            git(work, "checkout", "-q", "-f", "-B", "stack", "stack0")
            theirs.append(timed(lambda: git(work, "rebase", "-q", "--onto", f"v{args.onto}", f"v{args.base}", "stack")))
        assert report is not None
        # same result: our regenerated series on the new base == git's rebased tree
        led = load_ledger(tmp / f"run{args.runs - 1}" / "patches.toml")
        checked = 0
        for p in led.series("vllm"):
            for fp in parse_patch(led.body_file(p).read_bytes(), 1):
                mine = apply_file(h.read_blob(new, fp.path), fp)
                assert mine.ok, (p.id, mine.message)
                assert mine.new == git(work, "show", f"stack:{fp.path}"), fp.path
                checked += 1
        counts = report.counts()
        result = {
            "patches": len(pat),
            "runs": args.runs,
            "onto": args.onto,
            "classes": {k: v for k, v in counts.items() if v},
            "hows": sorted({p.how for p in report.patches if p.how}),
            "patchset_median_s": round(statistics.median(ours), 3),
            "git_rebase_median_s": round(statistics.median(theirs), 3),
            "patchset_runs_s": [round(x, 3) for x in ours],
            "git_rebase_runs_s": [round(x, 3) for x in theirs],
            "files_checked_equal": checked,
        }
        result["speedup"] = round(result["git_rebase_median_s"] / result["patchset_median_s"], 2)
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(
                f"{len(pat)} patches, vLLM {args.base} -> {args.onto}, {args.runs} runs each; classes {result['classes']}"
                f" ({', '.join(result['hows'])})"
            )
            print(f"patchset rebase  median {result['patchset_median_s']:.3f} s  runs {result['patchset_runs_s']}")
            print(f"git rebase       median {result['git_rebase_median_s']:.3f} s  runs {result['git_rebase_runs_s']}")
            print(f"patchset is {result['speedup']}x faster than git rebase; {checked} files identical")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
