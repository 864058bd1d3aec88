"""One judgement: everything after "upstream moved", filling the run's report.

The series is replayed onto the commit with the real rebaser in a scratch copy of the ledger
(keep-going: every patch is classified), the refreshed series written as a patch against this
repository, the upstream status read (offline unless asked to refresh); when a patch newly
conflicts, upstream's history is bisected with the in-memory replay to name the first commit that
breaks it, and the newest commit the whole series still carries onto is named, with its tests run
there (a second, smaller judgement) and the one command that rebases there. Otherwise the refreshed
series is applied to a fresh tree of the commit with every file checked against the refreshed lock,
the per-patch tests run (``ci.gate.tests``) and the artifacts built (``ci.gate.build``).
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.ci import artifacts as artifacts_mod
from patchset.ci.bisect import FirstBad, NewestSafe, Prober, first_bad, newest_clean
from patchset.ci.gate.build import build, image
from patchset.ci.gate.run import Judging, RunLog
from patchset.ci.gate.tests import run_tests
from patchset.ci.refresh import Workspace, changed_files, make_workspace, series_patch
from patchset.ci.report import ERROR, GateReport
from patchset.ci.upstream import Commit
from patchset.errors import PatchsetError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.session import RebaseRun, rebase


@dataclass
class _Bisection:
    """What the bisection of a red run found: the range searched from ``good``, each conflicting
    patch's first bad commit, and the replays it made (``prober`` remembers them)."""

    good: str
    commits: list[Commit]
    found: dict[str, FirstBad]
    prober: Prober


def judge(j: Judging) -> bytes:
    """Fills ``j.report``; returns the refreshed series patch."""
    r = j.report
    j.logs.mkdir(parents=True, exist_ok=True)
    base_sha, _ = j.up.resolve(j.target.base) if j.target.base else ("", "")
    r.base_commit = base_sha
    ws = make_workspace(j.ledger, j.scratch / "series")
    _replay(j, ws)
    image(j, None if r.conflicts else ws.work_ledger, base_sha)  # red: the series is not refreshed
    with j.log.stage("status"):
        _status(j.log, ws.work_ledger, j.job.refresh_status)
    patch = series_patch(ws)
    r.series_patch = {"path": "series.patch", "bytes": len(patch), "files": changed_files(patch)}
    if r.conflicts:
        with j.log.stage("bisect"):
            bisection = _bisect(j, ws, base_sha)
        r.first_bad = {k: v.to_json() for k, v in bisection.found.items()}
        if j.search_safe:
            with j.log.stage("newest safe"):
                _newest_safe(j, bisection, base_sha)
        r.apply = {"outcome": "skipped", "message": "not applied: the series conflicts with this upstream commit"}
    else:
        _carry(j, ws)
    return patch


def _replay(j: Judging, ws: Workspace) -> None:
    """The real rebaser on the scratch copy: every patch classified, the copy refreshed when clean."""
    with j.log.stage("rebase"):
        try:
            rr = rebase(
                RebaseRun(
                    ws.work_ledger,
                    j.label,
                    target=j.target.name,
                    repo=j.up.git_dir,
                    progress=lambda pid, i, n: j.log.note("rebase", f"{i}/{n} {pid}"),
                )
            )
        except PatchsetError as exc:  # name the user's ledger, not the gate's scratch copy of it
            exc.message = exc.message.replace(str(ws.work), str(j.ledger.root))
            raise
    j.report.rebase = rr.to_json()
    artifacts_mod.write_json(j.logs / "rebase.json", j.report.rebase)


def _bisect(j: Judging, ws: Workspace, base_sha: str) -> _Bisection:
    """Each conflicting patch's first bad commit, searched from the last clean commit (or the base)."""
    r, up, prev, sha = j.report, j.up, j.prev, j.sha
    good = base_sha
    if prev is not None and prev.last_clean and up.repo.rev(prev.last_clean) and up.is_ancestor(prev.last_clean, sha):
        good = prev.last_clean
    commits = up.commits(good, sha)
    j.log.log(f"bisect {len(r.conflicts)} patch(es) over {len(commits)} commits {good[:12]}..{sha[:12]}")
    prober = Prober(ws.pristine_ledger, j.target.name, up, lambda what, done, total: j.log.note("bisect", what))
    prober.seen[sha] = {p["id"]: p["verdict"] for p in r.rebase["patches"]}  # replayed already
    return _Bisection(good, commits, first_bad(r.conflicts, good, commits, prober), prober)


def _carry(j: Judging, ws: Workspace) -> None:
    """Green so far: the refreshed series onto a fresh tree of the commit, then its tests and builds."""
    r = j.report
    refreshed = ledger_mod.load_ledger(ws.work_ledger)
    rt = refreshed.targets[j.target.name]
    if not refreshed.series(j.target.name):
        r.apply = {"outcome": "skipped", "message": "no active patch is left: every patch is upstream now"}
        return
    with j.log.stage("tree"):
        tree = j.up.archive(j.sha, j.scratch / "tree", _touched(refreshed, rt))  # only what the series touches
    from patchset.commands.apply.target import ApplyRun  # apply's modules (~100 ms): only a run that applies
    from patchset.commands.apply.tree import apply_to_tree

    with j.log.stage("apply"):
        job = ApplyRun(refreshed, progress=lambda pid, i, n: j.log.note("apply", f"{i}/{n} {pid}"))
        ar = apply_to_tree(job, rt, tree, "source")
    r.apply = {"outcome": ar.outcome, "message": ar.message, "mismatched": ar.mismatched}
    artifacts_mod.write_json(j.logs / "apply.json", ar.to_json())
    if ar.outcome == "applied" and j.job.tag_list:
        run_tests(j, ws.work_ledger, refreshed)
    if ar.outcome == "applied" and j.job.build:
        with j.log.stage("build"):
            build(j, refreshed, rt, tree)


def _newest_safe(j: Judging, b: _Bisection, base_sha: str) -> None:
    """Red by a conflict: the newest commit below the first bad one onto which the whole series
    replays (``bisect.newest_clean``), its tests run there when tags are selected (a second,
    smaller judgement in the scratch directory), and the one command that rebases there."""
    safe = newest_clean(b.good, b.commits, b.found, b.prober)
    chosen = _safe_commit(j, b, safe, base_sha)
    if chosen is None:
        j.report.newest_safe = {
            "commit": None,
            "label": j.target.base,
            "why": "no upstream commit after the base carries the whole series: stay on the base",
            "probes": len(safe.probes),
            "command": "",
        }
        return
    onto, info = chosen
    info["probes"] = len(safe.probes)
    if j.job.tag_list:
        with j.log.stage("newest safe tests"):
            info.update(_safe_tests(j, safe.sha, onto))
    cmd = ["patchset", "--ledger", str(j.job.ledger_path), "rebase", "--target", j.target.name, "--onto", onto]
    if j.up.kind != "releases":
        cmd += ["--upstream", j.up.location]
    info["command"] = shlex.join(cmd)
    j.report.newest_safe = info
    j.log.log(f"newest safe upstream: {onto} ({len(safe.probes)} more replays)")


def _safe_commit(j: Judging, b: _Bisection, safe: NewestSafe, base_sha: str) -> tuple[str, dict[str, Any]] | None:
    """The newest safe commit's label and why it is safe; None when only the base is."""
    up, commits = j.up, b.commits
    if safe.index >= 0:
        commit = commits[safe.index]
        onto = f"{up.project}=={commit.release}" if up.kind == "releases" and commit.release else commit.sha
        below = min((commits.index(f.commit) for f in b.found.values() if f.commit in commits), default=len(commits))
        why = (
            f"the whole series replays onto it; {below - safe.index - 1} commit(s) below the first bad one"
            if below > safe.index + 1
            else "the whole series replays onto it; the commit just before the first bad one"
        )
        return onto, {"commit": commit.to_json(), "label": onto, "why": why}
    prev = j.prev
    if prev is not None and b.good == prev.last_clean and b.good != base_sha:
        onto = prev.last_clean_label or b.good
        return onto, {
            "commit": up.describe(b.good).to_json(),
            "label": onto,
            "why": "the last commit the series replayed onto",
        }
    return None


def _safe_tests(j: Judging, sha: str, onto: str) -> dict[str, Any]:
    """The tests on the newest safe commit: a smaller judgement in the scratch directory, its logs
    moved under ``logs/newest-safe``."""
    t, tags = j.target, j.job.tag_list
    sub_out = j.scratch / "newest-safe"
    (sub_out / "logs").mkdir(parents=True, exist_ok=True)
    sub = Judging(
        dataclasses.replace(j.job, refresh_status=False, build=()),
        RunLog(GateReport(status=ERROR, target=t.name, asked=onto, tags=tags), None),
        j.ledger,
        t,
        j.up,
        sha,
        onto,
        sub_out,
        j.scratch / "safe",
        planning=dataclasses.replace(j.planning, record=False) if j.planning is not None else None,
        search_safe=False,
    )
    judge(sub)
    failed = sub.report.reasons()
    shutil.move(str(sub_out / "logs"), str(j.logs / "newest-safe"))
    return {
        "tests": "; ".join(failed) if failed else "pass",
        "passed": not failed,
        "test_results": [{"patch": x["patch"], "name": x["name"], "status": x["status"]} for x in sub.report.tests],
    }


def _touched(ledger: Ledger, target: Target) -> list[str]:
    """Every path the target's active series names (old and new names)."""
    from patchset.commands.apply.target import series_items  # apply's modules (~100 ms): only a run that applies

    out: list[str] = []
    for item in series_items(ledger, target):
        for fp in parse_patch(item.body, item.strip, source=item.patch_id):
            out += [p for p in fp.paths() if p not in out]
    return out


def _status(log: RunLog, ledger_path: Path, refresh: bool) -> None:
    """The upstream status of the refreshed series: offline by default, recorded into the copy on refresh."""
    from patchset.tracker.status import status as do_status  # the tracker: ~10 ms, only a run that judges pays

    try:
        st = do_status(ledger_path, refresh=refresh, offline=not refresh)
    except PatchsetError as exc:
        log.report.warnings.append(f"upstream status not read: {exc.message}")
        return
    rows = [
        {"id": row.id, "action": row.action, "text": row.action_text}
        for row in st.rows
        if row.action not in ("nothing", "dropped")
    ]
    log.report.upstream_status = {
        "mode": st.mode,
        "data_age": st.oldest(),
        "counts": st.counts("action"),
        "actions": rows,
        "errors": st.errors(),
    }
    for e in st.errors():
        log.report.warnings.append(f"upstream status: {e}")
