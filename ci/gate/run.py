"""What one gate run carries: the options (``GateRun``, built by the CLI), its log, and one judgement.

``GateRun`` is one ``patchset gate`` as asked; ``RunLog`` is its report in progress with the
progress callback and the timestamped log; ``Judging`` is one judgement of the series against one
upstream commit (the night's, or the newest safe one's, a smaller judgement in the scratch
directory). The paths beside the state file are named here, so the judging run and ``--plan``
find the same proofs and figures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from patchset.ci.report import GateReport
from patchset.ci.state import Judgement, default_state_path
from patchset.ci.upstream import Upstream
from patchset.errors import InputError
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress
from patchset.text import split_list

BUILDS = ("wheel", "overlay")


@dataclass(frozen=True)
class GateRun:
    """One ``patchset gate``, as asked.

    ``artifacts``: where report.md/report.json/junit.xml/series.patch/logs go. ``tags``: the test
    tiers to run through ``verify`` (``cpu``; ``all`` runs every test; none runs no test).
    ``state_file``: the gate's memory (default ``.patchset/gate-state.json`` beside the ledger).
    ``target``: which target (default: the one with patches). ``upstream``: a git repository path
    or URL to judge against instead of the target's default (its local ``upstream`` repository,
    else the package-index release history). ``patches``: run only these patches' tests (a
    workflow matrix job; the state is not updated). ``force``: judge even when upstream has not
    moved. ``refresh_status``: ask GitHub for the upstream status (recorded into the refreshed
    series) instead of reading it offline. ``build``: artifacts to build from the refreshed series
    once it applies (``wheel``: the judged release's wheel patched, into ``dist/``; ``overlay``:
    the image overlay, into ``overlay/``). ``engine``: the engine every long-context and serving
    test runs on (``verify --engine``). The long-context tests follow the verify plan: ``all_``
    re-proves every patch, ``full_every`` re-proves a proof that many nights old; ``use_cache``
    False measures every engine tree again. ``plan_only``: make the plan and print it, start no
    engine, write nothing (``onto``/``latest`` may then be left out).
    """

    ledger_path: Path
    onto: str | None = None
    latest: bool = False
    artifacts: Path = Path("gate-artifacts")
    tags: Sequence[str] = ()
    state_file: Path | None = None
    target: str | None = None
    upstream: str | None = None
    patches: Sequence[str] | None = None
    force: bool = False
    refresh_status: bool = False
    build: Sequence[str] = ()
    engine: str | None = None
    plan_only: bool = False
    all_: bool = False
    full_every: int = 7
    use_cache: bool = True
    progress: Progress | None = None

    @property
    def tag_list(self) -> list[str]:
        return split_list(self.tags)

    @property
    def only(self) -> list[str]:
        return list(self.patches or [])

    @property
    def asked(self) -> str:
        return self.onto or ("--latest" if self.latest else "")

    def state_path(self, ledger: Ledger) -> Path:
        return Path(self.state_file) if self.state_file is not None else default_state_path(ledger)

    def check(self) -> None:
        """Refuse what cannot be judged before anything is read (InputError)."""
        if bool(self.onto) == bool(self.latest):
            raise InputError("name the upstream commit to judge: --onto REF or --latest (one of them)")
        unknown = [b for b in self.build if b not in BUILDS]
        if unknown:
            raise InputError(f"--build {unknown[0]!r}: unknown artifact", hint=f"one of: {', '.join(BUILDS)}")


@dataclass
class Planning:
    """How the per-patch tests plan their without-runs (``verify.plan``): the proof history beside the
    state file, ``--all``, ``--full-every``, whether this run records its proofs, and whether engine
    results come from the result cache (``--no-cache``: every tree is measured). No defaults: the
    gate's run names each from its ``GateRun``, and a default here would be a second, unchecked one."""

    history: Path | None
    all_: bool
    full_every: int
    record: bool
    use_cache: bool


def proofs_path(state_path: Path) -> Path:
    """Where the gate keeps the verify proofs (``verify.proofs``), beside its state file."""
    return state_path.parent / "gate-proofs.json"


def serving_figures_path(state_path: Path, target: str) -> Path:
    """Where the gate keeps the serving figures of the last green run, beside its state file."""
    return state_path.parent / f"serving-{target}.json"


def short_label(label: str) -> str:
    """An upstream label as the proof history names it: a commit sha shortened to 12 digits."""
    return label[:12] if len(label) == 40 and all(ch in "0123456789abcdef" for ch in label) else label


@dataclass
class RunLog:
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


@dataclass
class Judging:
    """One judgement of the series against upstream ``sha`` (named ``label``): what ``judge`` needs.

    ``prev``: what the state remembers of the last run (its last clean commit starts the bisection);
    ``out_dir``: where its logs go; ``scratch``: its throwaway directory; ``serving_baseline``: the
    last green run's serving figures; ``search_safe``: on a conflict, also look for the newest
    upstream commit the whole series carries onto."""

    job: GateRun
    log: RunLog
    ledger: Ledger
    target: Target
    up: Upstream
    sha: str
    label: str
    out_dir: Path
    scratch: Path
    prev: Judgement | None = None
    planning: Planning | None = None
    serving_baseline: Path | None = None
    search_safe: bool = True

    @property
    def report(self) -> GateReport:
        return self.log.report

    @property
    def logs(self) -> Path:
        return self.out_dir / "logs"
