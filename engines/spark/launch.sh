#!/bin/sh
# The production engine for `patchset verify` ([engines.spark] in patches.toml), in the shape of the
# maintainer's launcher (the facts, from the maintainer's ledger facts: docs/engines.md, "The
# production engine"): one container per node, workers first (ranks 3, 2, 1), the head (rank 0)
# last; the OpenAI server listens on the head, port 8000.
#
#   launch.sh NAME OVERLAY ROOT IMAGE LOGDIR [EXTRA SERVER ARGS...]
#
# NAME     the container name on every node (patchset gives each start its own)
# OVERLAY  the patched files of this build tree, laid out under the image root as `patchset build
#          overlay` lays them out (OVERLAY/usr/local/lib/python3.12/dist-packages/vllm/...); each file
#          is copied to every node and bind-mounted read-only over the image's copy
# ROOT     the install root in the image (the target's installed_root)
# IMAGE    the stock image the overlay goes over (vllm/vllm-openai:nightly-<base commit>)
#
# What the record does not give is not guessed: it must come from the runner's environment.
#   SPARK_NODES        the four rail IPs, rank 0 (the head) first             (required; not recorded)
#   SPARK_MASTER_PORT  --master-port                                          (required; not recorded)
#   SPARK_MODEL        the model path on the nodes, as the container sees it  (required; not recorded)
#   SPARK_MOUNTS       more `-v` arguments, e.g. the model directory          (optional)
#   SPARK_SPEC_ARGS    the DFlash2 speculative-decoding arguments             (required; not recorded)
#   SPARK_SSH          how to reach a node (default: ssh)
# Variables named VLLM_* in this environment (a test's switches, e.g. VLLM_DRAFTER_W8A16=1) are
# passed into every container. --enable-prompt-tokens-details is added for the checks' cached-token
# counts (usage.prompt_tokens_details); it changes no served output.
set -eu
# q VALUE: VALUE single-quoted for the node's shell (the command runs there through ssh): file names
# from patch bodies and arguments from the ledger are data, never shell syntax
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
name=$1 overlay=$2 root=$3 image=$4 logdir=$5
shift 5
: "${SPARK_NODES:?set SPARK_NODES to the four rail IPs, rank 0 first}"
: "${SPARK_MASTER_PORT:?set SPARK_MASTER_PORT (the --master-port of the maintainer launcher; not recorded)}"
: "${SPARK_MODEL:?set SPARK_MODEL (the model path on the nodes; not recorded)}"
: "${SPARK_SPEC_ARGS:?set SPARK_SPEC_ARGS (the DFlash2 speculative-decoding arguments; not recorded)}"
ssh=${SPARK_SSH:-ssh}
extra=""
for a in "$@"; do extra="$extra $(q "$a")"; done
# shellcheck disable=SC2086
set -- $SPARK_NODES
[ "$#" -eq 4 ] || { echo "launch.sh: SPARK_NODES lists $# addresses, not 4" >&2; exit 2; }
head=$1
nodes="$*"
mkdir -p "$logdir"
stage=/tmp/patchset-overlay/$name
mounts=""
list=$(mktemp)
(cd "$overlay" && find . -type f | sed 's|^\./||' | sort) > "$list"
while IFS= read -r f; do
  case "$f" in
    *:*) echo "launch.sh: cannot bind-mount a file whose name holds ':': $f" >&2; rm -f "$list"; exit 2 ;;
  esac
  mounts="$mounts -v $(q "$stage/$f:/$f:ro")"
done < "$list"
rm -f "$list"
envs=""
for v in $(env | sed -n 's/^\(VLLM_[A-Za-z0-9_]*\)=.*/\1/p'); do
  envs="$envs -e $v"
done
for rank in 3 2 1 0; do
  i=0
  for n in $nodes; do [ $i -eq $rank ] && node=$n; i=$((i + 1)); done
  echo "launch.sh: rank $rank on $node" >> "$logdir/launch.txt"
  # the overlay files, then a fresh container (docker rm -f first, as the maintainer's launcher does)
  $ssh "$node" "rm -rf $(q "$stage") && mkdir -p $(q "$stage")"
  (cd "$overlay" && tar cf - .) | $ssh "$node" "tar xf - -C $(q "$stage")"
  headless=""
  [ "$rank" -ne 0 ] && headless="--headless"
  $ssh "$node" "docker rm -f $(q "$name") >/dev/null 2>&1 || true; \
    docker run --gpus all -d --name $(q "$name") --network host --ipc host \
      -e VLLM_ENGINE_READY_TIMEOUT_S=3600 $envs $mounts ${SPARK_MOUNTS:-} \
      --entrypoint vllm $(q "$image") serve $SPARK_MODEL \
      --served-model-name glm-5.3-flash --tensor-parallel-size 4 \
      --distributed-executor-backend mp --nnodes 4 --node-rank $rank \
      --master-addr $head --master-port $SPARK_MASTER_PORT $headless \
      --max-model-len 500000 --block-size 2304 --kv-cache-dtype fp8 --moe-backend humming \
      $SPARK_SPEC_ARGS --enable-prompt-tokens-details --port 8000 $extra" >> "$logdir/launch.txt" 2>&1
done
echo "launch.sh: $name started on $nodes; the head serves http://$head:8000" >> "$logdir/launch.txt"
