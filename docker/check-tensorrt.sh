#!/usr/bin/env bash
# Before building the images: do the two upstream images of versions.env carry the same TensorRT release?
# Plans are built in the builder image (FROM TENSORRT_BASE_IMAGE) and loaded by the server image (FROM
# TRITONSERVER_BASE_IMAGE); a plan only loads in the TensorRT release that built it. docker/server.Dockerfile
# runs the same check while it builds; this runs it on the upstream images alone (a few seconds once pulled):
#
#   docker/check-tensorrt.sh            # exit 0: same release; 1: they differ (one line says which)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../versions.env
source "$ROOT/versions.env"
builder="$(docker run --rm --entrypoint python3 "$TENSORRT_BASE_IMAGE" -c 'import tensorrt; print(tensorrt.__version__)')"
library="$(docker run --rm --entrypoint bash "$TRITONSERVER_BASE_IMAGE" -c 'ls /usr/lib/*-linux-gnu/libnvinfer.so.* /usr/local/tensorrt/lib/libnvinfer.so.* 2>/dev/null | head -n 1')"
server="${library##*libnvinfer.so.}"
if [ -z "$library" ]; then
  echo "check-tensorrt: error: no libnvinfer.so.X.Y.Z in $TRITONSERVER_BASE_IMAGE" >&2
  exit 2
fi
cd "$ROOT"
exec "${PYTHON:-python3}" -m builders.tensorrt_engine same-tensorrt --builder-version "$builder" --server-version "$server"
