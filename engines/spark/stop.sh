#!/bin/sh
# stop.sh NAME: remove the container on every node ([engines.spark].stop); never fails half-way.
name=$1
ssh=${SPARK_SSH:-ssh}
for node in ${SPARK_NODES:?set SPARK_NODES}; do
  $ssh "$node" "docker rm -f $name >/dev/null 2>&1; rm -rf /tmp/patchset-overlay/$name" || echo "stop.sh: $node: not reached" >&2
done
