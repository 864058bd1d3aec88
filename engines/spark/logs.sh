#!/bin/sh
# logs.sh NAME: `docker logs NAME` of every node, rank 0 first ([engines.spark].logs).
name=$1
ssh=${SPARK_SSH:-ssh}
rank=0
for node in ${SPARK_NODES:?set SPARK_NODES}; do
  echo "===== rank $rank ($node): docker logs $name"
  $ssh "$node" "docker logs --tail 2000 $name 2>&1" || echo "logs.sh: $node: not reached"
  rank=$((rank + 1))
done
