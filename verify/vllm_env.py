"""The CPU environment in which vLLM's own unit tests run from a (patched) source tree.

The venv is made once by ``ci/setup_vllm_tests.sh``. ``test_env(tree)`` gives a run's variables
(CPU device, the Hub offline, the tree first on ``PYTHONPATH``, model names redirected to the
config-only directories of ``MODEL_CONFIGS``: the tests read shapes, never weights). A small
pytest plugin stops the run unless ``import vllm`` comes from the tree. ``python -m
patchset.verify.vllm_env [--add SRC:DEST] -- PYTEST_ARGS`` is the wrapper a ledger's test command
calls: it copies the ``--add`` files in, runs pytest in the venv and maps its exit status onto
``verify.testrun``'s convention (1, 2 fail; 3, 4, 5 and a missing venv are errors: 99 / 77).
PyPI's torchvision does not import beside this torch: deselect multimodal tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make patchset importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchset import atomic
from patchset.errors import EnvironmentFailure
from patchset.upstream import cache

VENV_ENV = "PATCHSET_VLLM_TESTS_VENV"
HOME = Path(__file__).resolve().parent.parent
SETUP_SCRIPT = HOME / "ci" / "setup_vllm_tests.sh"
EXIT_SKIP, EXIT_HARD = 77, 99

# Published configuration facts of the models vLLM 0.30.0's tests/v1/core/ name. Config only: the
# unit tests build ModelConfig/VllmConfig from them and never load weights or a tokenizer.
_QWEN_COMMON = {
    "vocab_size": 151936,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "use_sliding_window": False,
}
MODEL_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen3-0.6B": {
        **_QWEN_COMMON,
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "eos_token_id": 151645,
        "attention_bias": False,
        "sliding_window": None,
        "max_window_layers": 28,
    },
    "Qwen/Qwen1.5-7B": {
        **_QWEN_COMMON,
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "eos_token_id": 151643,
        "sliding_window": 32768,
        "max_window_layers": 28,
    },
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "hidden_size": 768,
        "ffn_dim": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        "word_embed_proj_dim": 768,
        "do_layer_norm_before": True,
        "activation_function": "relu",
        "bos_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "torch_dtype": "float16",
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "init_std": 0.02,
        "layerdrop": 0.0,
        "use_cache": True,
    },
}


def venv_dir() -> Path:
    raw = os.environ.get(VENV_ENV, "").strip()
    return Path(raw).expanduser() if raw else cache.cache_dir(create=False) / "vllm-tests-venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def venv_ready() -> bool:
    """The setup script finished (its stamp is there) and the interpreter exists."""
    return venv_python().is_file() and (venv_dir() / ".patchset-vllm-tests").is_file()


def ensure_venv(timeout: float = 1800) -> Path:
    """Run ``ci/setup_vllm_tests.sh`` (idempotent; ~4 min the first time); return the venv's python."""
    try:
        proc = subprocess.run(
            ["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentFailure(f"{SETUP_SCRIPT} did not finish in {timeout:g} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise EnvironmentFailure(
            f"{SETUP_SCRIPT} failed (exit {proc.returncode}):\n{tail}",
            hint="it needs the package index; run it by hand to see the whole log",
        )
    return venv_python()


def model_redirects() -> Path:
    """Write the config-only model directories (once) and the redirect map; return the map's path."""
    root = cache.subdir("vllm-test-models")
    mapping = {}
    for name, config in MODEL_CONFIGS.items():
        d = root / name.replace("/", "--")
        data = (json.dumps(config, indent=1, sort_keys=True) + "\n").encode()
        f = d / "config.json"
        if not f.is_file() or f.read_bytes() != data:
            d.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(f, data)
        mapping[name] = str(d)
    out = root / "redirect.json"
    text = json.dumps(mapping, indent=1, sort_keys=True) + "\n"
    if not out.is_file() or out.read_text() != text:
        atomic.write_text(out, text)
    return out


def test_env(tree: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for vLLM's unit tests on CPU, importing vLLM from ``tree``."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "VLLM_TARGET_DEVICE": "cpu",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1",
            "PYTHONPATH": str(tree),
            "PYTHONDONTWRITEBYTECODE": "1",
            "VLLM_MODEL_REDIRECT_PATH": str(model_redirects()),
        }
    )
    env.pop("PYTHONHOME", None)
    return env


def add_file(src: Path, tree: Path, dest: str) -> Path:
    """Copy ``src`` to ``tree/dest`` (a directory if it ends in '/') by writing a new file and renaming it."""
    rel = dest.rstrip("/")
    target = tree / rel / src.name if dest.endswith("/") or (tree / rel).is_dir() else tree / rel
    if not target.parent.resolve().is_relative_to(tree.resolve()):
        raise EnvironmentFailure(f"--add destination {dest!r} leaves the tree {tree}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)  # a new inode: never writes through a hard link to the pristine base
    return target


ORIGIN_PLUGIN = "patchset_vllm_origin"
_ORIGIN_PLUGIN_SOURCE = '''"""Written by patchset (verify/vllm_env.py): stop pytest when vllm is not the tree's."""
import os

import pytest


def pytest_configure(config):
    import vllm

    tree = os.path.realpath(os.environ["PATCHSET_VLLM_TREE"])
    origin = os.path.realpath(vllm.__file__)
    print(f"vllm_env: vllm imported from {origin}", flush=True)
    if not origin.startswith(tree.rstrip("/") + "/"):
        pytest.exit(f"vllm_env: `import vllm` loads {origin}, not the tree {tree}: refusing to test the wrong "
                    "code", returncode=3)
'''


def origin_plugin_dir() -> Path:
    """A directory holding the pytest plugin that checks, in the test process itself, where vllm comes from.

    Checking inside pytest costs nothing (the tests import vllm anyway), where a separate
    ``import vllm`` would cost a second interpreter start of ~10 s per run.
    """
    d = cache.subdir("vllm-test-plugin")
    f = d / f"{ORIGIN_PLUGIN}.py"
    if not f.is_file() or f.read_text() != _ORIGIN_PLUGIN_SOURCE:
        atomic.write_text(f, _ORIGIN_PLUGIN_SOURCE)
    return d


def _map_pytest(code: int) -> int:
    if code in (0, 1, 2):  # pass; tests failed; interrupted by collection errors (an import the tree lacks)
        return 0 if code == 0 else 1
    return EXIT_HARD  # 3 internal error, 4 usage error, 5 no tests collected: the test could not run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m patchset.verify.vllm_env",
        description="Run vLLM's unit tests on CPU from a source tree (the tree's vllm/ "
        "is imported, not the installed one).",
    )
    ap.add_argument("--tree", type=Path, default=None, help="the source tree (default: $PATCHSET_TREE or .)")
    ap.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="SRC:DEST",
        help="copy a test file into the tree first (DEST relative to the tree; a directory if it ends in '/')",
    )
    ap.add_argument("--setup", action="store_true", help="create the venv first if it is missing (slow)")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="arguments for pytest (after --)")
    ns = ap.parse_args(argv)
    tree = (ns.tree or Path(os.environ.get("PATCHSET_TREE") or ".")).resolve()
    args = ns.pytest_args[1:] if ns.pytest_args[:1] == ["--"] else ns.pytest_args
    try:
        if not venv_ready():
            if not ns.setup:
                print(f"vllm_env: the vLLM test venv {venv_dir()} is not set up; run bash {SETUP_SCRIPT}", flush=True)
                return EXIT_SKIP
            ensure_venv()
        for spec in ns.add:
            src, sep, dest = spec.partition(":")
            if not sep or not src or not dest:
                print(f"vllm_env: --add {spec!r}: expected SRC:DEST", flush=True)
                return EXIT_HARD
            path = Path(src).expanduser()
            if not path.is_file():
                print(f"vllm_env: --add {src}: no such file", flush=True)
                return EXIT_HARD
            add_file(path, tree, dest)
        env = test_env(tree)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(origin_plugin_dir())])
        env["PATCHSET_VLLM_TREE"] = str(tree)
        cmd = [str(venv_python()), "-m", "pytest", "-p", "no:cacheprovider", "-p", ORIGIN_PLUGIN, *args]
        code = subprocess.run(cmd, cwd=tree, env=env, stdin=subprocess.DEVNULL).returncode
    except EnvironmentFailure as exc:
        print(f"vllm_env: {exc.render()}", flush=True)
        return EXIT_HARD
    mapped = _map_pytest(code)
    if mapped != code:
        print(f"vllm_env: pytest exit {code} -> {mapped}", flush=True)
    return mapped


if __name__ == "__main__":
    sys.exit(main())
