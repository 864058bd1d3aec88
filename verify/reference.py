"""Reference logprobs for the ``reference`` long-context check: a transformers float32 forward pass.

Why this module exists: the ``reference`` check compares a server's prompt logprobs with those of the
same weights run by transformers on CPU. torch and transformers live in the engine venv
(``ci/setup_engine.sh``), not in patchset's environment, so the forward pass runs there, as a short
script given to that venv's Python; only token ids and logprobs cross, as JSON files.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchset.errors import EnvironmentFailure
from patchset.verify.server import engine_missing_reason, venv_python

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
