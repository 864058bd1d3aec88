"""What one ``patchset verify`` is asked to do (``VerifyRun``), built once by the command that starts it
(``patchset verify``, the gate, a benchmark) and passed down to every step that needs a part of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchset.errors import InputError
from patchset.progress import Progress
from patchset.verify.engines.launch import EngineFactory

DEFAULT_FULL_EVERY = 7  # a proof this many runs old is re-proven


@dataclass
class VerifyRun:
    """Every selected per-patch test run with and without its patch.

    ``tree``: a pristine build tree (never modified: verify works on a private copy);
    ``from_index``: ``vllm==0.30.0`` (or just ``0.30.0``); neither: the target's ``base`` release.
    ``timeout`` overrides every test's ledger timeout. ``junit``: also write JUnit XML there.
    ``keep_trees`` keeps the work directory (trees and full logs) and names it in the report.
    Long-context tests start engines through ``engine_factory`` (default: the engine the ledger
    defines, else the CPU vLLM engine of ``ci/setup_engine.sh``); their logs go to ``log_dir``
    (default: ``<cache>/engine-logs/verify-*``), which outlives the run. ``engine`` names the engine
    every engine test runs on (``[engines.NAME]`` or a preset), overriding the tests' own. ``only``:
    these patches' tests only. Serving tests compare the tree with the series with the tree without
    the patch, or, with ``baseline``, with the figures stored there (``save_baseline`` stores this
    run's figures of the tree with the series). Engine-test results are cached by (tree content, test,
    engine) unless ``use_cache`` is False: an unchanged tree starts no engine. ``ledger_dir``: where
    the ledger's relative paths (models, launchers, test files) live, when the ledger read is a copy
    (the gate's). ``results_dir``: the result cache (default ``<cache>/verify-results``).
    ``history``: the sealed proof history the plan reads and (``record_history``) this run's proofs
    go to; None: no history, every without-run runs. ``plan_only``: return the plan without running
    anything. ``all_``: every patch is re-proven. ``full_every``: a proof this many runs old is
    re-proven (0: never by age). ``base_label``: how the history names the base (the gate: the
    upstream commit); default: the release spec or the tree.
    """

    ledger_path: Path
    tree: Path | None = None
    from_index: str | None = None
    tags: list[str] | None = None
    jobs: int = 1
    timeout: int | None = None
    junit: Path | None = None
    progress: Progress | None = None
    target: str | None = None
    keep_trees: bool = False
    download_progress: Progress | None = None
    engine_factory: EngineFactory | None = None
    log_dir: Path | None = None
    engine: str | None = None
    only: list[str] | None = None
    baseline: Path | None = None
    save_baseline: Path | None = None
    use_cache: bool = True
    ledger_dir: Path | None = None
    results_dir: Path | None = None
    history: Path | None = None
    plan_only: bool = False
    all_: bool = False
    full_every: int = DEFAULT_FULL_EVERY
    base_label: str | None = None
    record_history: bool = True

    def check(self) -> None:
        """InputError (exit 2) for values no run can have, before anything is read."""
        if self.jobs < 1:
            raise InputError(f"--jobs {self.jobs}: must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise InputError(f"--timeout {self.timeout}: must be a positive number of seconds")
        if self.full_every < 0:
            raise InputError(f"--full-every {self.full_every}: must be 0 (never by age) or a number of runs")
        if self.tree is not None and self.from_index:
            raise InputError("pass either --tree or --from-index, not both")
