"""One gate run from the options to the report: name the commit, stop when it was judged, judge, remember.

The state file decides whether there is anything to do (the same upstream commit, series and tags
judged before: ``unchanged``, and the artifacts of that verdict stay); otherwise the artifacts
directory is cleared, ``judge`` fills the report, and a run of the whole series records its verdict
(and, when green, its serving figures for the next run to compare with). Whatever happens, the
report, ``junit.xml``, the refreshed series and ``logs/gate.log`` are written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import tempfile
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from patchset import atomic
from patchset.ci import artifacts as artifacts_mod
from patchset.ci.gate.judge import judge
from patchset.ci.gate.plan import plan_gate
from patchset.ci.gate.run import GateRun, Judging, Planning, RunLog, proofs_path, serving_figures_path
from patchset.ci.gate.tests import check_proofs
from patchset.ci.report import ERROR, GREEN, RED, UNCHANGED, GateReport
from patchset.ci.state import Judgement, ledger_digest, load_state, save_state
from patchset.ci.upstream import Upstream, open_upstream
from patchset.errors import PatchsetError
from patchset.ledger import store as ledger_mod
from patchset.rebase.session import pick_target  # the rebaser's own rule, so both pick alike


@dataclass
class _Written:
    """What the run leaves in the artifacts directory: whether an earlier run's files are gone, and
    the refreshed series."""

    cleared: bool = False
    series: bytes | None = None


def run_gate(job: GateRun) -> GateReport:
    """Judge the ledger's series against upstream ``job.onto`` (or the ``latest`` upstream).

    Serving tests compare with the figures of the last green run (``serving-<target>.json`` beside
    the state file), once there is one; a green run stores its own. The long-context tests follow the
    verify plan (proofs in ``gate-proofs.json`` beside the state file, sealed). ``plan_only``: the
    plan of such a run, made and printed (``ci.gate.plan``).

    Never raises for what it finds: the report's ``exit_code`` says 0/1/2. Bad arguments raise
    ``InputError``.
    """
    if job.plan_only:
        return plan_gate(job)
    job.check()
    out_dir = artifacts_mod.claim(Path(job.artifacts).resolve())  # fresh or the gate's own; else refused
    report = GateReport(status=ERROR, asked=job.onto or "--latest", tags=job.tag_list, artifacts=str(out_dir))
    log = RunLog(report, job.progress)
    written = _Written()
    scratch = Path(tempfile.mkdtemp(prefix="patchset-gate-"))
    try:
        with ExitStack() as closing:
            _night(job, log, out_dir, scratch, written, closing)
    except PatchsetError as exc:  # a judgement cut short judges nothing: a corrupt download is not a regression
        report.status = ERROR
        report.errors.append(exc.render())
        log.log(f"error: {exc.render()}")
    except OSError as exc:
        report.status = ERROR
        report.errors.append(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        log.log(traceback.format_exc())
    except Exception as exc:
        report.status = ERROR
        report.errors.append(f"internal error: {type(exc).__name__}: {exc} (traceback in logs/gate.log)")
        log.log(traceback.format_exc())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        report.seconds = round(time.monotonic() - log.started, 3)
        if (
            not written.cleared
        ):  # stopped before it knew what to do: nothing of an earlier run may stay beside its report
            artifacts_mod.clear(out_dir)
        _write(log, out_dir, written.series)
    return report


def _night(job: GateRun, log: RunLog, out_dir: Path, scratch: Path, written: _Written, closing: ExitStack) -> None:
    """The run inside ``run_gate``'s guard: ``closing`` closes the upstream it opens."""
    report = log.report
    ledger = ledger_mod.load_ledger(Path(job.ledger_path))
    t = pick_target(ledger, job.target, job.onto or "")
    report.target, report.base = t.name, t.base
    up = open_upstream(ledger.root, t, job.upstream)
    closing.callback(up.close)
    report.upstream = {"kind": up.kind, "location": up.location}
    with log.stage("fetch"):
        sha, label = up.latest() if job.latest else up.resolve(job.onto or "")
    report.commit, report.onto = sha, label
    state_path = job.state_path(ledger)
    states = load_state(state_path)
    if job.tag_list:  # the proofs decide what is not tested: a foreign history is refused before anything runs
        check_proofs(proofs_path(state_path))
    prev = _previous(log, states.get(t.name), up)
    digest = ledger_digest(ledger, t.name)
    if prev is not None and not job.force and prev.same_question(up.key, sha, digest, job.tag_list):
        report.status = UNCHANGED
        report.verdict_report = artifacts_mod.kept_verdict(out_dir, prev.judged, prev.judged_at) or {}
        if not report.verdict_report:  # another run's files (or none): they must not pass for this verdict
            artifacts_mod.clear(out_dir)
        written.cleared = True
        log.log(f"{label} ({sha[:12]}) was judged {prev.verdict} on {prev.judged_at}; nothing to do")
        return
    artifacts_mod.clear(out_dir)  # an earlier run's results cannot pass for this one's
    written.cleared = True
    figures = serving_figures_path(state_path, t.name)
    planning = Planning(proofs_path(state_path), job.all_, job.full_every, not job.only, job.use_cache)
    j = Judging(
        job, log, ledger, t, up, sha, label, out_dir, scratch, prev, planning, figures if figures.is_file() else None
    )
    written.series = judge(j)
    report.status = RED if report.reasons() else GREEN
    if not job.only:
        _remember(j, states, state_path, digest, figures)


def _previous(log: RunLog, prev: Judgement | None, up: Upstream) -> Judgement | None:
    """What the state remembers of this target's last run, when it judged the same upstream."""
    if prev is not None and prev.upstream != up.key:
        log.log(f"the state names another upstream ({prev.upstream}); judging afresh")
        return None
    if prev is not None:
        log.report.previous = dataclasses.asdict(prev)
    return prev


def _remember(j: Judging, states: dict[str, Judgement], state_path: Path, digest: str, figures: Path) -> None:
    """A run of the whole series: its verdict into the state, and a green run's serving figures."""
    report, t = j.report, j.target
    states[t.name] = _judgement(j, digest)
    report.judged_at = states[t.name].judged_at
    save_state(state_path, states)
    j.log.log(f"state: {state_path}")
    measured = j.logs / "serving-figures.json"
    if report.status == GREEN and measured.is_file():  # the next run compares with these
        atomic.write_bytes(figures, measured.read_bytes())
        j.log.log(f"serving figures of this green run: {figures}")


def _write(log: RunLog, out_dir: Path, series_bytes: bytes | None) -> None:
    r = log.report
    try:
        if r.status != UNCHANGED:
            logs = out_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            (logs / "gate.log").write_text("\n".join(log.lines) + "\n")
        artifacts_mod.write(r, out_dir, series_patch=series_bytes)
    except OSError as exc:
        r.status = ERROR
        r.errors.append(f"cannot write the artifacts to {out_dir}: {exc.strerror or exc}")


def _judgement(j: Judging, digest: str) -> Judgement:
    r, prev, sha, label = j.report, j.prev, j.sha, j.label
    clean = not r.conflicts
    return Judgement(
        upstream=j.up.key,
        judged=sha,
        judged_label=label,
        verdict=r.status,
        ledger_digest=digest,
        tags=list(j.job.tag_list),
        last_clean=sha if clean else (prev.last_clean if prev and prev.last_clean else r.base_commit),
        last_clean_label=label if clean else (prev.last_clean_label if prev and prev.last_clean else r.base),
        last_green=sha if r.status == GREEN else (prev.last_green if prev else ""),
        last_green_label=label if r.status == GREEN else (prev.last_green_label if prev else ""),
        failing=sorted(set(r.conflicts) | {t["patch"] for t in r.failed_tests}),
        judged_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
