"""Run one per-patch test command in a build tree: time-boxed, whole process group, output kept.

A test command is a shell command line from the ledger. Its exit status says what happened:

* ``0`` -> **pass**;
* ``77`` (the autotools "skip": the test could not run here), ``99`` (autotools "hard error"),
  ``126`` (not executable), ``127`` (command not found) -> **error**, the test could not run;
* anything else, a signal included -> **fail**.

A command still running at its timeout is an **error** too: its process group gets SIGTERM, then
SIGKILL five seconds later, so grandchildren (pytest workers, servers) do not outlive it.
The full output goes to a log file; the result keeps its tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from patchset.text import json_fields, read_tail
from patchset.verify import Word


class Outcome(Word):
    """What one run of a test did."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # it could not run: a timeout, a missing tool, an engine that did not start


PASS, FAIL, ERROR = Outcome.PASS, Outcome.FAIL, Outcome.ERROR
ERROR_CODES = {
    77: "the test says it cannot run here (exit 77)",
    99: "the test reports a hard error (exit 99)",
    126: "command not executable (exit 126)",
    127: "command not found (exit 127)",
}
TAIL_CHARS = 4000
KILL_GRACE = 5.0


@dataclass
class CommandResult:
    """What one run of a test command did."""

    outcome: Outcome
    exit_code: int | None  # None: killed at the timeout or never started; negative: killed by a signal
    seconds: float
    reason: str = ""  # why an error or a failure, in one line
    output: str = ""  # the tail of stdout+stderr
    log: str = ""  # the full log file, when kept

    def to_json(self) -> dict:
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
            "output_tail": self.output,
            "log": self.log or None,
        }


def _tail(path: Path, limit: int = TAIL_CHARS) -> str:
    text, cut = read_tail(path, limit)
    return "..." + text[text.find("\n") + 1 :] if cut and "\n" in text else text


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _failure_detail(text: str) -> str:
    """pytest's ``FAILED <test id>`` summary lines when there are any (up to three), else the last line."""
    failed = [ln.strip()[7:].split(" - ")[0] for ln in text.splitlines() if ln.startswith("FAILED ")]
    if failed:
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        return "failed " + ", ".join(failed[:3]) + more + "; " + _last_line(text)
    return _last_line(text)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(command: str, cwd: Path, env: dict[str, str], timeout: float, log: Path) -> CommandResult:
    """Run ``command`` with ``/bin/sh -c`` in ``cwd``; classify the exit as pass, fail or error."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if not cwd.is_dir():
        return CommandResult(ERROR, None, 0.0, f"working directory {cwd} does not exist in the build tree")
    with open(log, "wb") as out:
        out.write(f"$ {command}\n# cwd: {cwd}\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            return CommandResult(ERROR, None, time.monotonic() - start, f"cannot start /bin/sh: {exc.strerror}")
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            seconds = time.monotonic() - start
            out.write(f"\n# patchset verify: killed after the {timeout:g} s timeout\n".encode())
            out.flush()
            return CommandResult(ERROR, None, seconds, f"timed out after {timeout:g} s", _tail(log), str(log))
        except BaseException:
            _kill_group(proc)
            raise
        # a command that exits while its background children still run: end them too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    seconds = time.monotonic() - start
    tail = _tail(log)
    if code == 0:
        return CommandResult(PASS, 0, seconds, "", tail, str(log))
    if code in ERROR_CODES:
        detail = _last_line(tail)
        return CommandResult(
            ERROR, code, seconds, ERROR_CODES[code] + (f": {detail}" if detail else ""), tail, str(log)
        )
    why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    detail = _failure_detail(tail)
    return CommandResult(FAIL, code, seconds, why + (f": {detail}" if detail else ""), tail, str(log))


@dataclass
class LongctxResult(CommandResult):
    """A run of a long-context test: the outcome, per-check verdicts and the engine that served it."""

    engine: int | None = None  # index into VerifyReport.engines
    startup_seconds: float | None = None
    checks: list[dict] = field(default_factory=list)
    reused: str = ""  # the result came from the cache: when it was measured
    drift: dict | None = None  # control mode with repeats: the exact test's verdict on the resume trials
    carried: str = ""  # not run tonight: the verdict of this run (``verify.plan``), "run N (...)"

    def to_json(self) -> dict:
        out = {
            **super().to_json(),
            "carried_from": self.carried or None,
            "engine": self.engine,
            "engine_startup_seconds": None if self.startup_seconds is None else round(self.startup_seconds, 3),
            "check_seconds": round(self.seconds, 3),
            "engine_log": self.log or None,
            "checks": self.checks,
            "reused": self.reused or None,
        }
        if self.drift is not None:
            out["drift"] = self.drift
        return out


@dataclass
class ServingResult(LongctxResult):
    """A run of a serving test: every sample of the engine it measured and, on the side judged, the
    comparison with the baseline (per metric: median ratio, interval, verdict)."""

    samples: dict = field(default_factory=dict)  # ServingSamples.to_json()
    comparison: dict | None = None  # Comparison.to_json(), on the run the verdict belongs to
    baseline_from: str = ""  # "the tree without <patch>", "a stored baseline <file>"

    def to_json(self) -> dict:
        return {**super().to_json(), **json_fields(self, "samples comparison baseline_from")}

    @classmethod
    def from_json(cls, data: dict) -> ServingResult:
        return cls(
            Outcome(data["outcome"]),
            data.get("exit_code"),
            float(data.get("seconds", 0.0)),
            data.get("reason", ""),
            data.get("output_tail", ""),
            data.get("log") or "",
            None,
            data.get("engine_startup_seconds"),
            list(data.get("checks") or []),
            samples=dict(data.get("samples") or {}),
        )
