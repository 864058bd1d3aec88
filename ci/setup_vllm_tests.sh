#!/usr/bin/env bash
# Create the venv in which vLLM 0.30.0's own unit tests run on CPU, for `patchset verify`'s proof.
#
# Why: tests/test_verify_vllm.py (and `patchset verify` on examples/verify-kv) runs real vLLM unit
# tests (tests/v1/core/) from a patched source tree. They need vLLM's Python dependencies and the CPU
# torch, installed once in a clean venv in the patchset cache. The script is idempotent: a second
# run checks the venv imports and returns in a few seconds.
#
# What it does:
#   1. a clean venv (no system site packages), torch==2.13.0 first (the CPU wheel already on disk);
#   2. vLLM 0.30.0's sdist from the package index (cached by patchset in <cache>/dist), installed with
#      VLLM_TARGET_DEVICE=empty (pure Python: no kernels are compiled, the Rust extras are skipped);
#   3. pytest and the plugins vLLM's test conftest imports;
#   4. torchvision/torchaudio/torchcodec removed: PyPI's builds do not import next to this torch and
#      break transformers' imports (multimodal tests are deselected instead).
# The tests then run inside a source tree with PYTHONPATH=<tree>, so the tree's vllm/ wins over the
# installed copy (verify/vllm_env.py proves that on every run).
#
# Venv location: $PATCHSET_VLLM_TESTS_VENV, else <cache>/vllm-tests-venv, where <cache> is patchset's cache root
# ($PATCHSET_CACHE, else $XDG_CACHE_HOME/patchset, else ~/.cache/patchset; patchset/upstream/cache.py decides).
# Usage: bash ci/setup_vllm_tests.sh        (prints "setup_vllm_tests: ready ..." and the venv path)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$(PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 -m patchset.upstream.cache)"
venv="${PATCHSET_VLLM_TESTS_VENV:-$cache/vllm-tests-venv}"
vllm_version="0.30.0"
torch_version="2.13.0"
stamp="$venv/.patchset-vllm-tests"
want="vllm=$vllm_version torch=$torch_version v3"

py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
t0=$(date +%s)

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
   && "$py" -c 'import torch, vllm, pytest, transformers' 2>/dev/null; then
  echo "setup_vllm_tests: ready (already installed) in $(( $(date +%s) - t0 )) s: $venv"
  exit 0
fi

if [[ ! -x "$py" ]]; then
  echo "setup_vllm_tests: creating venv $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
rm -f "$stamp"

echo "setup_vllm_tests: torch==$torch_version (CPU wheel on disk)"
quiet "${pip[@]}" install -q "torch==$torch_version"

echo "setup_vllm_tests: vLLM $vllm_version sdist from the package index (cached)"
sdist="$(cd "$here" && python3 - "$vllm_version" <<'EOF'
import sys
from patchset.upstream.releases import download
print(download(f"vllm=={sys.argv[1]}", "sdist"))
EOF
)"
echo "setup_vllm_tests: installing $sdist with VLLM_TARGET_DEVICE=empty (~2 min)"
# `torch==...` pinned again so that no dependency pulls another (CUDA) torch build.
VLLM_TARGET_DEVICE=empty quiet "${pip[@]}" install -q "$sdist" "torch==$torch_version"

echo "setup_vllm_tests: pytest and the plugins vLLM's tests import"
quiet "${pip[@]}" install -q "torch==$torch_version" pytest pytest-asyncio pytest-timeout tblib

"${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$py" -c 'import torch, vllm, pytest, transformers' >/dev/null
echo "$want" > "$stamp"
echo "setup_vllm_tests: ready in $(( $(date +%s) - t0 )) s: $venv"
