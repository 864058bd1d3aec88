"""``patchset gate``: judge the series against a new upstream commit, the way CI runs it every night.

One run: name the upstream commit (``--onto REF``, or ``--latest``: the newest release on the
package index, or the fetched branch tip of a real clone); stop at once when the gate already
judged that commit with this series and these tags (the state file); else replay the series
onto it with the real rebaser in a scratch copy of the ledger (keep-going: every patch is
classified), write the refreshed series as a patch against this repository, apply it to a fresh
tree of the commit with every file checked against the refreshed lock, run the per-patch tests
the tags select (``verify``'s per-patch runner), read the upstream status (offline unless asked
to refresh), and, when a patch newly conflicts, bisect upstream's history with the in-memory
replay to name the first commit that breaks it. The ledger is never written; the artifacts directory holds the results.

Exit codes: 0 green or nothing new; 1 a regression; 2 the gate could not judge (see
``ci.report``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shlex
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchset.ci import artifacts as artifacts_mod
from patchset.ci.report import ERROR, GREEN, RED, UNCHANGED, GateReport, render
from patchset.ci.state import Judgement, default_state_path, ledger_digest, load_state, save_state
from patchset.ci.upstream import Upstream, open_upstream
from patchset.errors import EXIT_FINDING, InputError, PatchsetError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress
from patchset.text import split_list
from patchset.upstream.bases import version_like
from patchset.upstream.releases import is_spec_like, parse_spec

if TYPE_CHECKING:  # the bisection loads the rebaser: only a run that judges pays for it
    from patchset.ci.bisect import FirstBad, Prober
    from patchset.ci.upstream import Commit

__all__ = ["GateReport", "render", "run_gate", "split_tags"]


@dataclass
class Planning:
    """How the per-patch tests plan their without-runs (``verify.plan``): the proof history beside the
    state file, ``--all``, ``--full-every``, whether this run records its proofs, and whether engine
    results come from the result cache (``--no-cache``: every tree is measured)."""

    history: Path | None = None
    all_: bool = False
    full_every: int = 7
    record: bool = True
    use_cache: bool = True


def proofs_path(state_path: Path) -> Path:
    """Where the gate keeps the verify proofs (``verify.proofs``), beside its state file."""
    return state_path.parent / "gate-proofs.json"


def split_tags(tags: Sequence[str] | str | None) -> list[str]:
    """``["cpu,gpu", "spark"]`` -> ``["cpu", "gpu", "spark"]`` (order kept, duplicates dropped)."""
    return split_list(tags)


@dataclass
class _Run:
    """One gate run in progress: its report, progress callback and timestamped log."""

    report: GateReport
    progress: Progress | None
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)

    def log(self, text: str) -> None:
        self.lines.append(f"[{time.monotonic() - self.started:7.2f}s] {text}")

    def note(self, stage: str, detail: str) -> None:
        self.log(f"{stage}: {detail}")
        if self.progress:
            self.progress(f"{stage}: {detail}", 0, None)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        self.note(name, "start")
        try:
            yield
        finally:
            took = round(time.monotonic() - t0, 3)
            self.report.timings[name] = round(self.report.timings.get(name, 0.0) + took, 3)
            self.log(f"{name}: {took:.3f} s")


def run_gate(
    ledger_path: Path,
    *,
    onto: str | None = None,
    latest: bool = False,
    artifacts: Path = Path("gate-artifacts"),
    tags: Sequence[str] = (),
    state_file: Path | None = None,
    progress: Progress | None = None,
    target: str | None = None,
    upstream: str | None = None,
    patches: Sequence[str] | None = None,
    force: bool = False,
    refresh_status: bool = False,
    build: Sequence[str] = (),
    engine: str | None = None,
    plan_only: bool = False,
    all_: bool = False,
    full_every: int = 7,
    use_cache: bool = True,
) -> GateReport:
    """Judge the ledger's series against upstream ``onto`` (or the ``latest`` upstream).

    ``artifacts``: where report.md/report.json/junit.xml/series.patch/logs go. ``tags``: the test
    tiers to run through ``verify`` (``cpu``; ``all`` runs every test; none runs no test).
    ``state_file``: the gate's memory (default ``.patchset/gate-state.json`` beside the ledger).
    ``target``: which target (default: the one with patches). ``upstream``: a git repository path or URL to judge against instead of the
    target's default (its local ``upstream`` repository, else the package-index release history).
    ``patches``: run only these patches' tests (a workflow matrix job; the state is not updated).
    ``force``: judge even when upstream has not moved. ``refresh_status``: ask GitHub for the
    upstream status (recorded into the refreshed series) instead of reading it offline.
    ``build``: artifacts to build from the refreshed series once it applies (``wheel``: the judged
    release's wheel patched, into ``dist/``; ``overlay``: the image overlay, into ``overlay/``).
    ``engine``: the engine every long-context and serving test runs on (``verify --engine``). Serving
    tests compare with the figures of the last green run (``serving-<target>.json`` beside the state
    file), once there is one; a green run stores its own.
    The long-context tests follow the verify plan (``verify.plan``; proofs in ``gate-proofs.json``
    beside the state file, sealed): ``all_`` re-proves every patch, ``full_every`` re-proves a proof
    that many nights old; ``use_cache`` False measures every engine tree again. ``plan_only``: make the plan and print it, start no engine, write nothing
    (``ci.gate_plan``; ``onto``/``latest`` may then be left out).

    Never raises for what it finds: the report's ``exit_code`` says 0/1/2. Bad arguments raise
    ``InputError``.
    """
    if plan_only:
        from patchset.ci.gate_plan import plan_gate

        return plan_gate(
            ledger_path,
            onto=onto,
            latest=latest,
            tags=tags,
            state_file=state_file,
            target=target,
            upstream=upstream,
            patches=patches,
            engine=engine,
            all_=all_,
            full_every=full_every,
            progress=progress,
        )
    if bool(onto) == bool(latest):
        raise InputError("name the upstream commit to judge: --onto REF or --latest (one of them)")
    unknown = [b for b in build if b not in BUILDS]
    if unknown:
        raise InputError(f"--build {unknown[0]!r}: unknown artifact", hint=f"one of: {', '.join(BUILDS)}")
    tag_list = split_tags(tags)
    only = list(patches or [])
    out_dir = artifacts_mod.claim(Path(artifacts).resolve())  # fresh or the gate's own; else refused
    report = GateReport(status=ERROR, asked=onto or "--latest", tags=tag_list, artifacts=str(out_dir))
    run = _Run(report, progress)
    cleared = False
    series_bytes: bytes | None = None
    scratch = Path(tempfile.mkdtemp(prefix="patchset-gate-"))
    up: Upstream | None = None
    try:
        ledger = ledger_mod.load_ledger(Path(ledger_path))
        from patchset.rebase.session import pick_target  # the rebaser's own rule, so both pick alike

        t = pick_target(ledger, target, onto or "")
        report.target, report.base = t.name, t.base
        up = open_upstream(ledger.root, t, upstream)
        report.upstream = {"kind": up.kind, "location": up.location}
        with run.stage("fetch"):
            sha, label = up.latest() if latest else up.resolve(onto or "")
        report.commit, report.onto = sha, label
        state_path = Path(state_file) if state_file is not None else default_state_path(ledger)
        states = load_state(state_path)
        if tag_list:  # the proofs decide what is not tested: a foreign history is refused before anything runs
            _check_proofs(proofs_path(state_path))
        prev = states.get(t.name)
        if prev is not None and prev.upstream != up.key:
            run.log(f"the state names another upstream ({prev.upstream}); judging afresh")
            prev = None
        if prev is not None:
            report.previous = dataclasses.asdict(prev)
        digest = ledger_digest(ledger, t.name)
        if prev is not None and not force and prev.same_question(up.key, sha, digest, tag_list):
            report.status = UNCHANGED
            report.verdict_report = artifacts_mod.kept_verdict(out_dir, prev.judged, prev.judged_at) or {}
            if not report.verdict_report:  # another run's files (or none): they must not pass for this verdict
                artifacts_mod.clear(out_dir)
            cleared = True
            run.log(f"{label} ({sha[:12]}) was judged {prev.verdict} on {prev.judged_at}; nothing to do")
            return report
        artifacts_mod.clear(out_dir)  # an earlier run's results cannot pass for this one's
        cleared = True
        figures = serving_figures_path(state_path, t.name)
        planning = Planning(proofs_path(state_path), all_, full_every, record=not only, use_cache=use_cache)
        series_bytes = _judge(
            run,
            ledger,
            t,
            up,
            sha,
            label,
            prev,
            tag_list,
            only,
            out_dir,
            scratch,
            refresh_status,
            list(build),
            Path(ledger_path),
            engine=engine,
            serving_baseline=figures if figures.is_file() else None,
            planning=planning,
        )
        report.status = RED if report.reasons() else GREEN
        if not only:
            states[t.name] = _judgement(report, up, sha, label, digest, tag_list, prev)
            report.judged_at = states[t.name].judged_at
            save_state(state_path, states)
            run.log(f"state: {state_path}")
            measured = out_dir / "logs" / "serving-figures.json"
            if report.status == GREEN and measured.is_file():  # the next run compares with these
                from patchset import atomic

                atomic.write_bytes(figures, measured.read_bytes())
                run.log(f"serving figures of this green run: {figures}")
    except PatchsetError as exc:
        report.status = RED if exc.exit_code == EXIT_FINDING else ERROR
        report.errors.append(exc.render())
        run.log(f"error: {exc.render()}")
    except OSError as exc:
        report.status = ERROR
        report.errors.append(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        run.log(traceback.format_exc())
    except Exception as exc:
        report.status = ERROR
        report.errors.append(f"internal error: {type(exc).__name__}: {exc} (traceback in logs/gate.log)")
        run.log(traceback.format_exc())
    finally:
        if up is not None:
            up.close()
        shutil.rmtree(scratch, ignore_errors=True)
        report.seconds = round(time.monotonic() - run.started, 3)
        if not cleared:  # stopped before it knew what to do: nothing of an earlier run may stay beside its report
            artifacts_mod.clear(out_dir)
        _write(run, out_dir, series_bytes)
    return report


def _write(run: _Run, out_dir: Path, series_bytes: bytes | None) -> None:
    r = run.report
    try:
        if r.status != UNCHANGED:
            logs = out_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            (logs / "gate.log").write_text("\n".join(run.lines) + "\n")
        artifacts_mod.write(r, out_dir, series_patch=series_bytes)
    except OSError as exc:
        r.status = ERROR
        r.errors.append(f"cannot write the artifacts to {out_dir}: {exc.strerror or exc}")


def _judgement(
    r: GateReport, up: Upstream, sha: str, label: str, digest: str, tags: list[str], prev: Judgement | None
) -> Judgement:
    clean = not r.conflicts
    return Judgement(
        upstream=up.key,
        judged=sha,
        judged_label=label,
        verdict=r.status,
        ledger_digest=digest,
        tags=list(tags),
        last_clean=sha if clean else (prev.last_clean if prev and prev.last_clean else r.base_commit),
        last_clean_label=label if clean else (prev.last_clean_label if prev and prev.last_clean else r.base),
        last_green=sha if r.status == GREEN else (prev.last_green if prev else ""),
        last_green_label=label if r.status == GREEN else (prev.last_green_label if prev else ""),
        failing=sorted(set(r.conflicts) | {t["patch"] for t in r.failed_tests}),
        judged_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def _judge(
    run: _Run,
    ledger: Ledger,
    t: Target,
    up: Upstream,
    sha: str,
    label: str,
    prev: Judgement | None,
    tags: list[str],
    only: list[str],
    out_dir: Path,
    scratch: Path,
    refresh_status: bool,
    build: list[str] | None = None,
    ledger_path: Path | None = None,
    *,
    search_safe: bool = True,
    engine: str | None = None,
    serving_baseline: Path | None = None,
    planning: Planning | None = None,
) -> bytes:
    """Everything after "upstream moved": fills ``run.report``; returns the refreshed series patch.

    ``search_safe``: when a patch conflicts, also look for the newest upstream commit the whole
    series carries onto (``_newest_safe``)."""
    from patchset.ci.bisect import Prober, first_bad
    from patchset.ci.refresh import changed_files, make_workspace, series_patch
    from patchset.rebase.session import rebase

    r = run.report
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    base_sha, _ = up.resolve(t.base) if t.base else ("", "")
    r.base_commit = base_sha
    ws = make_workspace(ledger, scratch / "series")
    with run.stage("rebase"):
        try:
            rr = rebase(
                ws.work_ledger,
                label,
                target=t.name,
                repo=up.git_dir,
                progress=lambda pid, i, n: run.note("rebase", f"{i}/{n} {pid}"),
            )
        except PatchsetError as exc:  # name the user's ledger, not the gate's scratch copy of it
            exc.message = exc.message.replace(str(ws.work), str(ledger.root))
            raise
    r.rebase = rr.to_json()
    artifacts_mod.write_json(logs / "rebase.json", r.rebase)
    _image(run, t, None if r.conflicts else ws.work_ledger, base_sha, label, sha)  # red: the series is not refreshed
    with run.stage("status"):
        _status(run, ws.work_ledger, refresh_status)
    patch = series_patch(ws)
    r.series_patch = {"path": "series.patch", "bytes": len(patch), "files": changed_files(patch)}
    conflicts = r.conflicts
    if conflicts:
        with run.stage("bisect"):
            good = base_sha
            if (
                prev is not None
                and prev.last_clean
                and up.repo.rev(prev.last_clean)
                and up.is_ancestor(prev.last_clean, sha)
            ):
                good = prev.last_clean
            commits = up.commits(good, sha)
            run.log(f"bisect {len(conflicts)} patch(es) over {len(commits)} commits {good[:12]}..{sha[:12]}")
            prober = Prober(ws.pristine_ledger, t.name, up, lambda what, done, total: run.note("bisect", what))
            prober.seen[sha] = {p["id"]: p["verdict"] for p in r.rebase["patches"]}  # replayed already
            found = first_bad(conflicts, good, commits, prober)
        r.first_bad = {k: v.to_json() for k, v in found.items()}
        if search_safe:
            with run.stage("newest safe"):
                _newest_safe(
                    run,
                    ledger,
                    t,
                    up,
                    good,
                    base_sha,
                    prev,
                    commits,
                    found,
                    prober,
                    tags,
                    only,
                    out_dir,
                    scratch,
                    ledger_path or ledger.path,
                    engine=engine,
                    planning=planning,
                )
        r.apply = {"outcome": "skipped", "message": "not applied: the series conflicts with this upstream commit"}
        return patch
    refreshed = ledger_mod.load_ledger(ws.work_ledger)
    rt = refreshed.targets[t.name]
    if not refreshed.series(t.name):
        r.apply = {"outcome": "skipped", "message": "no active patch is left: every patch is upstream now"}
        return patch
    with run.stage("tree"):
        tree = up.archive(sha, scratch / "tree", _touched(refreshed, rt))  # only what the series touches
    from patchset.commands.apply.target import ApplyRun
    from patchset.commands.apply.tree import apply_to_tree

    with run.stage("apply"):
        job = ApplyRun(refreshed, progress=lambda pid, i, n: run.note("apply", f"{i}/{n} {pid}"))
        ar = apply_to_tree(job, rt, tree, "source")
    r.apply = {"outcome": ar.outcome, "message": ar.message, "mismatched": ar.mismatched}
    artifacts_mod.write_json(logs / "apply.json", ar.to_json())
    if ar.outcome == "applied" and tags:
        _tests(
            run,
            ws.work_ledger,
            refreshed,
            t,
            up,
            sha,
            tags,
            only,
            scratch,
            logs,
            engine=engine,
            baseline=serving_baseline,
            home=ledger.root.resolve(),
            planning=planning,
            label=label,
        )
    if ar.outcome == "applied" and build:
        with run.stage("build"):
            _build(run, refreshed, rt, tree, up, label, build, out_dir)
    return patch


BUILDS = ("wheel", "overlay")


def _image(run: _Run, t: Target, work_ledger: Path | None, base_sha: str, label: str, sha: str) -> None:
    """The stock image of the judged commit (``nightly.image_for``: the target's ``base_image``
    with its tag moved from the base to the judged commit or release), recorded in the report and
    written into the refreshed series; when it cannot be derived, the reason (``--build overlay``
    then refuses rather than build on the old base's image)."""
    from patchset.upstream.nightly import image_for

    if not t.base_image:
        return
    base_version = t.base_version or (
        parse_spec(t.base).version if is_spec_like(t.base) else version_like(t.base) or ""
    )
    version = parse_spec(label).version if is_spec_like(label) else (version_like(label) or "")
    image, why = image_for(
        t.base_image, base=t.base, base_version=base_version, base_commit=base_sha, version=version, commit=sha
    )
    run.report.image = {"base_image": t.base_image, "image": image, "why": why}
    if work_ledger is None:
        return
    if why:
        run.report.warnings.append(f"base_image left as it is in the refreshed series: {why}")
        return
    if image != t.base_image:
        with ledger_mod.edit(work_ledger) as e:
            e.doc["targets"][t.name]["base_image"] = image
        run.log(f"image: {t.base_image} -> {image}")


def _newest_safe(
    run: _Run,
    ledger: Ledger,
    t: Target,
    up: Upstream,
    good: str,
    base_sha: str,
    prev: Judgement | None,
    commits: list[Commit],
    found: dict[str, FirstBad],
    prober: Prober,
    tags: list[str],
    only: list[str],
    out_dir: Path,
    scratch: Path,
    ledger_path: Path,
    *,
    engine: str | None = None,
    planning: Planning | None = None,
) -> None:
    """Red by a conflict: the newest commit below the first bad one onto which the whole series
    replays (``bisect.newest_clean``), its tests run there when tags are selected (a second,
    smaller judgement in the scratch directory), and the one command that rebases there."""
    from patchset.ci.bisect import newest_clean

    safe = newest_clean(good, commits, found, prober)
    r = run.report
    if safe.index >= 0:
        commit = commits[safe.index]
        onto = f"{up.project}=={commit.release}" if up.kind == "releases" and commit.release else commit.sha
        info: dict[str, Any] = {"commit": commit.to_json(), "label": onto}
        below = min((commits.index(f.commit) for f in found.values() if f.commit in commits), default=len(commits))
        info["why"] = (
            f"the whole series replays onto it; {below - safe.index - 1} commit(s) below the first bad one"
            if below > safe.index + 1
            else "the whole series replays onto it; the commit just before the first bad one"
        )
    elif prev is not None and good == prev.last_clean and good != base_sha:
        onto = prev.last_clean_label or good
        info = {"commit": up.describe(good).to_json(), "label": onto, "why": "the last commit the series replayed onto"}
    else:
        r.newest_safe = {
            "commit": None,
            "label": t.base,
            "why": "no upstream commit after the base carries the whole series: stay on the base",
            "probes": len(safe.probes),
            "command": "",
        }
        return
    info["probes"] = len(safe.probes)
    if tags:
        sub = _Run(GateReport(status=ERROR, target=t.name, asked=onto, tags=tags), None)
        sub_out = scratch / "newest-safe"
        (sub_out / "logs").mkdir(parents=True, exist_ok=True)
        with run.stage("newest safe tests"):
            _judge(
                sub,
                ledger,
                t,
                up,
                safe.sha,
                onto,
                None,
                tags,
                only,
                sub_out,
                scratch / "safe",
                False,
                [],
                search_safe=False,
                engine=engine,
                planning=dataclasses.replace(planning, record=False) if planning is not None else None,
            )
        failed = sub.report.reasons()
        info["tests"] = "; ".join(failed) if failed else "pass"
        info["passed"] = not failed
        info["test_results"] = [
            {"patch": x["patch"], "name": x["name"], "status": x["status"]} for x in sub.report.tests
        ]
        shutil.move(str(sub_out / "logs"), str(out_dir / "logs" / "newest-safe"))
    cmd = ["patchset", "--ledger", str(ledger_path), "rebase", "--target", t.name, "--onto", onto]
    if up.kind != "releases":
        cmd += ["--upstream", up.location]
    info["command"] = shlex.join(cmd)
    r.newest_safe = info
    run.log(f"newest safe upstream: {onto} ({len(safe.probes)} more replays)")


def _build(
    run: _Run, ledger: Ledger, t: Target, tree: Path, up: Upstream, label: str, kinds: list[str], out_dir: Path
) -> None:
    """``--build``: the deployable artifacts of the refreshed series (``patchset.build``)."""
    from patchset.build.overlay import OverlayBuild, build_overlay
    from patchset.build.wheel import WheelBuild, build_wheel, fetch_wheel

    for kind in kinds:
        run.note("build", kind)
        rep: OverlayBuild | WheelBuild
        if kind == "overlay":
            image = run.report.image
            if not image.get("image"):
                raise InputError(
                    f"--build overlay: no image to build on for {label}: {image.get('why', 'unknown')}",
                    hint="set base_image to an image whose tag names the base (…:v<version>, …:nightly-<commit>), "
                    "or build the overlay yourself: `patchset build overlay --base-image IMAGE`",
                )
            rep = build_overlay(ledger, t, tree, out_dir / "image", layout="source", base_image=image["image"])
        elif up.kind != "releases":
            raise InputError(
                "--build wheel needs a release to take the wheel from; this upstream is a git repository",
                hint="judge a release (--onto PROJECT==VERSION) or build the wheel with `patchset build wheel`",
            )
        else:
            rep = build_wheel(ledger, t, fetch_wheel(label), out_dir / "dist")
        run.report.build[kind] = rep.to_json()
        run.log(f"build {kind}: {rep.outcome}: {rep.message}")


def _touched(ledger: Ledger, target: Target) -> list[str]:
    """Every path the target's active series names (old and new names)."""
    from patchset.commands.apply.target import series_items
    from patchset.patchfmt.diffs import parse_patch

    out: list[str] = []
    for item in series_items(ledger, target):
        for fp in parse_patch(item.body, item.strip, source=item.patch_id):
            out += [p for p in fp.paths() if p not in out]
    return out


_OUTCOME = {"pass": "passed", "fail": "failed", "error": "error"}


def _tests(
    run: _Run,
    ledger_path: Path,
    ledger: Ledger,
    t: Target,
    up: Upstream,
    sha: str,
    tags: list[str],
    only: list[str],
    scratch: Path,
    logs: Path,
    *,
    engine: str | None = None,
    baseline: Path | None = None,
    home: Path | None = None,
    planning: Planning | None = None,
    label: str = "",
) -> None:
    """The per-patch test tier (``verify``): each selected test with the refreshed series, and without its
    patch, on a pristine tree of the judged commit. Only the "with the series" result judges the gate
    (a serving regression fails it); the class (proven, not-needed) is reported. Serving tests compare
    with ``baseline`` (the last green run's figures) when given; this run's go to ``serving-figures.json``.
    ``home``: the real ledger's directory (``ledger_path`` is a scratch copy): launchers, models and
    test files beside the ledger are found there. ``planning``: the verify plan's settings (its proof
    history names tonight's base by ``label``, the judged upstream)."""
    r = run.report
    try:
        from patchset.verify.pertest import VerifyRun, run_verify
        from patchset.verify.selection import selected
    except ImportError:
        r.warnings.append("per-patch tests not run: the verify package is not installed")
        return
    wanted = [] if "all" in tags else tags  # verify: no tags selects every test
    chosen = [
        p.id
        for p in ledger.series(t.name)
        if (not only or p.id in only) and any(selected(spec, wanted) for spec in p.tests)
    ]
    if not chosen:
        which = f"of {', '.join(only)} " if only else ""
        r.warnings.append(f"no test {which}carries the tags {', '.join(tags)}: none ran")
        return
    if only:  # a matrix job: the scratch copy keeps only these patches' tests
        with ledger_mod.edit(ledger_path) as e:
            for table in e.patch_tables():
                if table.get("id") not in only and "tests" in table:
                    del table["tests"]
    with run.stage("tree"):
        tree = up.archive(sha, scratch / "pristine")
    with run.stage("tests"):
        vr = run_verify(
            VerifyRun(
                ledger_path,
                tree=tree,
                tags=wanted,
                target=t.name,
                junit=logs / "verify-junit.xml",
                progress=lambda what, done, total: run.note("tests", f"{done}/{total} {what}"),
                log_dir=logs / "engines",
                engine=engine,
                baseline=baseline,
                save_baseline=logs / "serving-figures.json",
                ledger_dir=home,
                history=planning.history if planning else None,
                all_=planning.all_ if planning else False,
                full_every=planning.full_every if planning else 7,
                base_label=short_label(label or sha),
                record_history=planning.record if planning else False,
                use_cache=planning.use_cache if planning else True,
            )
        )
    artifacts_mod.write_json(logs / "verify.json", vr.to_json())
    r.plan = plan_summary(vr)
    for po in vr.patches:
        for to in po.tests:
            w = to.with_run
            r.tests.append(
                {
                    "patch": to.patch_id,
                    "name": to.name,
                    "command": to.command,
                    "status": _OUTCOME.get(w.outcome, "error") if w else "error",
                    "seconds": round(w.seconds, 3) if w else 0.0,
                    "returncode": w.exit_code if w else None,
                    "class": to.klass,
                    "note": to.note,
                    "tail": (w.reason + "\n" + w.output).strip() if w else "",
                    "kind": to.kind,
                    "checks": list(to.checks),
                    "longctx": _longctx_runs(to) if to.kind in ("longctx", "serving") else None,
                    "engine": getattr(to, "engine", "") or None,
                    "serving": (getattr(w, "comparison", None) or None) if to.kind == "serving" else None,
                    "carried": to.carried or None,
                    "proof": po.proof or None,
                }
            )
        if po.klass == "not-needed":
            r.warnings.append(f"{po.patch_id}: {po.note or 'every test passes without the patch'}")
    for c in vr.changed:
        r.warnings.append(f"{c['patch']}: verdict changed: {c['was']} -> {c['now']} (last: {c['since']})")
    r.warnings += vr.notes


def _check_proofs(path: Path) -> None:
    """Read the proof history once, so a foreign one ends the run before it judges (``ForeignState``)."""
    try:
        from patchset.verify.proofs import load_history
    except ImportError:  # no verify package: no per-patch tests, no proofs to trust
        return
    load_history(path)


def short_label(label: str) -> str:
    """An upstream label as the proof history names it: a commit sha shortened to 12 digits."""
    return label[:12] if len(label) == 40 and all(ch in "0123456789abcdef" for ch in label) else label


def plan_summary(vr: Any) -> dict[str, Any]:
    """What the gate's report says of the verify plan: the plan, what was proven tonight and what
    carried (with the run each comes from), verdict changes, group tries, engine starts."""
    carried = [{"patch": p.patch_id, "from": p.carried_from, "proof": p.proof} for p in vr.patches if p.carried_from]
    proven = [{"patch": p.patch_id, "proof": p.proof} for p in vr.patches if p.proof and not p.carried_from]
    return {
        "plan": vr.plan.to_json() if vr.plan is not None else None,
        "engine_starts": vr.engine_starts,
        "proven_tonight": proven,
        "carried": carried,
        "changed": vr.changed,
        "group_tries": vr.group_tries,
    }


def serving_figures_path(state_path: Path, target: str) -> Path:
    """Where the gate keeps the serving figures of the last green run, beside its state file."""
    return state_path.parent / f"serving-{target}.json"


def _longctx_runs(to: Any) -> dict[str, Any]:
    """A long-context test's two runs for the report: outcome, per-check verdicts, engine times and log."""
    out: dict[str, Any] = {}
    for label, run in (("with", to.with_run), ("without", to.without_run)):
        if run is None:
            out[label] = None
            continue
        out[label] = {
            "outcome": run.outcome,
            "reason": run.reason,
            "engine_startup_seconds": getattr(run, "startup_seconds", None),
            "check_seconds": round(run.seconds, 3),
            "engine_log": run.log or None,
            "checks": list(getattr(run, "checks", []) or []),
        }
    return out


def _status(run: _Run, ledger_path: Path, refresh: bool) -> None:
    """The upstream status of the refreshed series: offline by default, recorded into the copy on refresh."""
    from patchset.tracker.status import status as do_status

    try:
        st = do_status(ledger_path, refresh=refresh, offline=not refresh)
    except PatchsetError as exc:
        run.report.warnings.append(f"upstream status not read: {exc.message}")
        return
    rows = [
        {"id": row.id, "action": row.action, "text": row.action_text}
        for row in st.rows
        if row.action not in ("nothing", "dropped")
    ]
    run.report.upstream_status = {
        "mode": st.mode,
        "data_age": st.oldest(),
        "counts": st.counts("action"),
        "actions": rows,
        "errors": st.errors(),
    }
    for e in st.errors():
        run.report.warnings.append(f"upstream status: {e}")
