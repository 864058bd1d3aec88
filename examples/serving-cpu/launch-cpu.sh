#!/bin/sh
# A launcher of one's own for the vLLM CPU engine, as `[engines.launcher]` calls it:
#   launch-cpu.sh PYTHON TREE MODEL PORT LOGDIR
# It refuses to start unless `import vllm` loads the build tree's package, writes what it ran into
# LOGDIR, and execs the server (so ending the process group ends the server).
set -eu
python=$1 tree=$2 model=$3 port=$4 logdir=$5
venv=$(dirname "$(dirname "$python")")
export PYTHONPATH="$tree"
[ -f "$venv/lib/libiomp5.so" ] && export LD_PRELOAD="$venv/lib/libiomp5.so"
export VLLM_CPU_KVCACHE_SPACE=2 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
mkdir -p "$logdir"
origin=$(cd "$tree" && "$python" -c 'import importlib.util as u; print(u.find_spec("vllm").origin)')
case "$origin" in
  "$tree"/vllm/__init__.py) ;;
  *) echo "launch-cpu.sh: vllm would come from $origin, not from $tree" >&2; exit 3 ;;
esac
echo "vllm from $origin; port $port" > "$logdir/launcher.txt"
cd "$logdir"
exec "$python" -m vllm.entrypoints.openai.api_server --model "$model" --dtype float32 \
  --max-model-len 8192 --enable-prompt-tokens-details --enforce-eager \
  --host 127.0.0.1 --port "$port"
