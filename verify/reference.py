"""Reference logprobs for the ``reference`` long-context check: a transformers float32 forward pass.

Why this module exists: the ``reference`` check compares a server's logprobs with an independent
computation of the same model. That needs torch and transformers, which live in the engine's venv,
not in patchset's environment; so the host side (``reference_logprobs``) runs this very file with
that venv's python, and the part below ``# inside the venv`` imports nothing from patchset.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path


def reference_logprobs(model_dir: Path, tokens: Sequence[int], python: Path | None = None) -> list[float | None]:
    """Logprob of each token given the ones before it (position 0 is None), computed on the CPU by
    ``python`` (default: the engine venv's) with transformers in float32."""
    from patchset.errors import EnvironmentFailure

    if python is None:
        from patchset.verify.server import engine_missing_reason, venv_python

        reason = engine_missing_reason()
        if reason:
            raise EnvironmentFailure(reason)
        python = venv_python()
    with tempfile.TemporaryDirectory(prefix="patchset-ref-") as tmp:
        tok_file, out_file = Path(tmp) / "tokens.json", Path(tmp) / "out.json"
        tok_file.write_text(json.dumps([int(t) for t in tokens]))
        proc = subprocess.run(
            [str(python), str(Path(__file__).resolve()), str(model_dir), str(tok_file), str(out_file)],
            capture_output=True,
            text=True,
            timeout=900,
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        )
        if proc.returncode != 0:
            raise EnvironmentFailure(f"reference logprobs failed in {python}:\n{proc.stderr[-3000:]}")
        return list(json.loads(out_file.read_text()))


# ---------------------------------------------------------------- inside the venv


def _reference(model_dir: Path, tokens: list[int]) -> list[float | None]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    ids = torch.tensor([tokens], dtype=torch.long)
    with torch.no_grad():
        logits = model(ids).logits[0].to(torch.float64)
    logp = torch.log_softmax(logits, dim=-1)
    out: list[float | None] = [None]
    for pos in range(1, len(tokens)):
        out.append(float(logp[pos - 1, tokens[pos]]))
    return out


if __name__ == "__main__":
    model, tokens_file, out = (Path(a) for a in sys.argv[1:4])
    out.write_text(json.dumps(_reference(model, json.loads(tokens_file.read_text()))))
