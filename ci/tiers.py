"""The per-patch test tier of the gate: the ledger's ``[[patch.tests]]`` run in the patched tree.

A test is selected when it shares a tag with the selection (``--tags cpu``; ``all`` selects every
test, tagged or not), optionally only for some patches (the workflow's matrix runs one patch per
job). Each runs as a shell command in ``<tree>/<cwd>`` with the patch's test ``env`` on top of
the gate's environment plus ``PATCHSET_TREE`` and ``PATCHSET_PATCH``, under its ``timeout``; its
output goes to a log file. A non-zero exit, a timeout or a missing ``cwd`` is a failed test.

This is the one place the gate runs tests: when ``verify`` grows a per-patch runner, the gate
calls it from here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from patchset.model import Ledger, Patch, TestSpec

ALL = "all"
PASSED, FAILED, TIMEOUT, ERROR = "passed", "failed", "timeout", "error"


@dataclass
class TestResult:
    patch: str
    name: str
    command: str
    status: str  # passed | failed | timeout | error
    seconds: float
    returncode: int | None
    log: str  # path of the output, relative to the artifacts directory
    tail: str = ""  # the last lines of the output, for the report

    @property
    def ok(self) -> bool:
        return self.status == PASSED

    def to_json(self) -> dict:
        return {"patch": self.patch, "name": self.name, "command": self.command, "status": self.status,
                "seconds": self.seconds, "returncode": self.returncode, "log": self.log, "tail": self.tail}


def selected(spec: TestSpec, tags: list[str]) -> bool:
    return ALL in tags or bool(set(spec.tags) & set(tags))


def test_name(spec: TestSpec, index: int) -> str:
    return spec.name or f"test-{index}"


def select(ledger: Ledger, target: str, tags: list[str], patches: list[str] | None = None
           ) -> list[tuple[Patch, int, TestSpec]]:
    """``(patch, index, spec)`` of every selected test of the active series, in series order."""
    out = []
    for p in ledger.series(target):
        if patches and p.id not in patches:
            continue
        for i, spec in enumerate(p.tests, start=1):
            if selected(spec, tags):
                out.append((p, i, spec))
    return out


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def run_one(patch: Patch, index: int, spec: TestSpec, tree: Path, logs: Path, artifacts: Path) -> TestResult:
    name = test_name(spec, index)
    log = logs / f"{patch.id}--{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rel_log = log.relative_to(artifacts).as_posix() if log.is_relative_to(artifacts) else str(log)
    cwd = (tree / spec.cwd).resolve()
    start = time.monotonic()
    if not cwd.is_dir() or not cwd.is_relative_to(tree.resolve()):
        msg = f"cwd {spec.cwd!r} is not a directory inside the patched tree"
        log.write_text(msg + "\n")
        return TestResult(patch.id, name, spec.command, ERROR, 0.0, None, rel_log, msg)
    env = {**os.environ, **spec.env, "PATCHSET_TREE": str(tree), "PATCHSET_PATCH": patch.id}
    # its own process group, so a timeout ends the command and everything it started
    proc = subprocess.Popen(spec.command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=spec.timeout)
        output = out.decode("utf-8", "replace")
        status, code = (PASSED if proc.returncode == 0 else FAILED), proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        output = out.decode("utf-8", "replace") + f"\n[patchset gate] timed out after {spec.timeout} s\n"
        status, code = TIMEOUT, None
    seconds = round(time.monotonic() - start, 3)
    log.write_text(f"$ {spec.command}\n(cwd {spec.cwd}, {seconds} s, exit {code})\n{output}")
    return TestResult(patch.id, name, spec.command, status, seconds, code, rel_log, _tail(output))


def run_tests(ledger: Ledger, target: str, tree: Path, tags: list[str], artifacts: Path, *,
              patches: list[str] | None = None, progress: Callable[[str], None] | None = None) -> list[TestResult]:
    results = []
    for patch, index, spec in select(ledger, target, tags, patches):
        if progress:
            progress(f"{patch.id}: {test_name(spec, index)}")
        results.append(run_one(patch, index, spec, tree, artifacts / "logs" / "tests", artifacts))
    return results
