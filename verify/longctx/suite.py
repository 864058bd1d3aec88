"""Long-context correctness checks past 2,048 tokens against any OpenAI-compatible completions server.

Three upstream attention/KV-cache bugs of this project's history showed only past 2,048 tokens,
and the maintainer checked for them by hand. The checks (``causality``, ``resume``, ``cached``,
``rescore``, ``reference``, ``copy``; docs/longctx.md) send token-id prompts to
``/v1/completions`` and compare what the server returns with what it must agree with, against a
fixed bar or a multiple of a measured control. A server that answers a long prompt with an HTTP
error fails the check; an unreachable one raises ``ServerUnreachable`` (exit 2).

This module runs the checks asked for (``run_checks``); they live in ``verify.longctx.checks``,
their inputs in ``verify.longctx.params``, the report in ``verify.longctx.report``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from patchset.errors import EnvironmentFailure, InputError
from patchset.verify.engines.client import CompletionsClient
from patchset.verify.engines.vllm_cpu import engine_missing_reason, venv_python
from patchset.verify.longctx.checks import (
    CheckRun,
    check_cached,
    check_causality,
    check_copy,
    check_reference,
    check_rescore,
    check_resume,
    pool_control,
)
from patchset.verify.longctx.params import (
    CHECKS,
    DEFAULT_BASELINE,
    DEFAULT_CHECKS,
    CachedCase,
    Lengths,
    LongctxRun,
    Thresholds,
    load_baseline,
)
from patchset.verify.longctx.report import CheckResult, LongctxReport, Measurement


def run_checks(run: LongctxRun) -> LongctxReport:
    """Run the long-context checks of ``run`` against its server and return the report.

    Raises InputError for bad arguments and ServerUnreachable when the server cannot be reached."""
    t0 = time.monotonic()
    lengths = Lengths.coerce(run.lengths)
    thresholds = run.thresholds or Thresholds(mode=run.mode)
    checks = _checks(run)
    baseline_path = Path(run.baseline) if run.baseline else DEFAULT_BASELINE
    cached_cases: list[CachedCase] = []
    if "cached" in checks:
        _, cached_cases = load_baseline(baseline_path)
    lo, hi = run.token_range
    if not 0 <= lo < hi:
        raise InputError(f"token_range {run.token_range} is empty")
    client = CompletionsClient(run.url, run.model, timeout=run.timeout)
    state = CheckRun(
        client, run, lengths, thresholds, extra_doc=max((c.prompt_tokens for c in cached_cases), default=0)
    )

    def reference_fn(tokens: Sequence[int]) -> Sequence[float | None]:
        assert run.reference_model is not None  # the reference check runs only with a reference model
        python = Path(run.reference_python) if run.reference_python else None
        return reference_logprobs(Path(run.reference_model), tokens, python=python)

    runners: dict[str, Callable[[], list[Measurement]]] = {
        "causality": lambda: check_causality(state),
        "resume": lambda: check_resume(state),
        "cached": lambda: check_cached(state, cached_cases),
        "rescore": lambda: check_rescore(state),
        "reference": lambda: check_reference(state, reference_fn),
        "copy": lambda: check_copy(state),
    }
    results = [_result(name, runners[name], thresholds) for name in checks]
    info = client.model_info()
    return LongctxReport(
        url=client.base_url,
        model=client.model,
        mode=thresholds.mode,
        lengths=lengths,
        thresholds=thresholds,
        results=results,
        seconds=time.monotonic() - t0,
        server={"max_model_len": info.get("max_model_len"), "owned_by": info.get("owned_by")},
        baseline=str(baseline_path) if "cached" in checks else None,
    )


def _checks(run: LongctxRun) -> list[str]:
    """The checks asked for (default: the first four, and reference with a reference model), checked."""
    checks = (
        list(run.checks)
        if run.checks is not None
        else [*DEFAULT_CHECKS] + (["reference"] if run.reference_model else [])
    )
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        raise InputError(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}")
    if "reference" in checks and not run.reference_model:
        raise InputError(
            "the reference check needs reference_model: a local directory with the served "
            "weights (config.json + safetensors)"
        )
    if run.reference_model and not (Path(run.reference_model) / "config.json").exists():
        raise InputError(f"{run.reference_model}: not a model directory (no config.json)")
    return checks


def _result(name: str, runner: Callable[[], list[Measurement]], thresholds: Thresholds) -> CheckResult:
    c0 = time.monotonic()
    measurements = runner()
    pool_control(thresholds, name, measurements)
    errors = [m.details["error"] for m in measurements if m.details.get("error")]
    return CheckResult(
        name=name,
        ok=bool(measurements) and all(m.ok for m in measurements),
        measurements=measurements,
        error=errors[0] if errors else None,
        seconds=time.monotonic() - c0,
    )


# --------------------------------------------------------------------------- the reference check's forward pass

# torch and transformers live in the engine venv (ci/setup_engine.sh), not in patchset's environment: the
# forward pass runs there as a short script; only token ids and logprobs cross, as JSON files.
_SCRIPT = """
import json, sys
import torch
from transformers import AutoModelForCausalLM

model_dir, tokens_file, out_file = sys.argv[1:4]
tokens = json.load(open(tokens_file))
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa").eval()
with torch.no_grad():
    logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0].to(torch.float64)
logp = torch.log_softmax(logits, dim=-1)
out = [None] + [float(logp[p - 1, tokens[p]]) for p in range(1, len(tokens))]
json.dump(out, open(out_file, "w"))
"""


def reference_logprobs(
    model_dir: Path, tokens: Sequence[int], python: Path | None = None, timeout: float = 900
) -> list[float | None]:
    """Logprob of each token given the ones before it (position 0 is None), from transformers in float32.

    Runs with ``python`` (default: the engine venv's). Raises EnvironmentFailure when it cannot."""
    py = python or venv_python()
    if python is None:
        reason = engine_missing_reason(faults=False)
        if reason:
            raise EnvironmentFailure(f"the reference check needs torch and transformers: {reason}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="patchset-ref-") as tmp:
        tok_file, out_file = Path(tmp) / "tokens.json", Path(tmp) / "out.json"
        tok_file.write_text(json.dumps([int(t) for t in tokens]))
        try:
            proc = subprocess.run(
                [str(py), "-c", _SCRIPT, str(Path(model_dir).resolve()), str(tok_file), str(out_file)],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                cwd=tmp,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentFailure(f"reference forward pass with {py} did not finish: {exc}") from None
        if proc.returncode != 0:
            raise EnvironmentFailure(f"reference forward pass failed in {py}:\n{proc.stderr[-3000:]}")
        return json.loads(out_file.read_text())
