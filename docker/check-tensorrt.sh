#!/usr/bin/env bash
# Before building the images: do the two upstream images the Dockerfiles build FROM carry the same TensorRT
# release? Plans are built in the builder image (docker/builder.Dockerfile, FROM NVIDIA's tensorrt image) and
# loaded by the server image (docker/server.Dockerfile, FROM NVIDIA's tritonserver image); a plan only loads in
# the TensorRT release that built it. Both images take their tag from TRITON_RELEASE (versions.env, the
# Dockerfiles' build arg). docker/server.Dockerfile runs the same check while it builds; this runs it on the
# upstream images alone (a few seconds once pulled):
#
#   docker/check-tensorrt.sh            # exit 0: same release; 1: they differ (one line says which); 2: not found
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
# shellcheck source=../versions.env
source "$ROOT/versions.env"

# The image a Dockerfile's last stage is built FROM, with versions.env's TRITON_RELEASE for its build arg.
base_image() {
  local from
  from="$(sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]\{1,\}\).*/\1/p' "$ROOT/docker/$1" | tail -n 1)"
  echo "${from//\$\{TRITON_RELEASE\}/$TRITON_RELEASE}"
}
tensorrt_image="$(base_image builder.Dockerfile)"
tritonserver_image="$(base_image server.Dockerfile)"

builder="$(docker run --rm --entrypoint python3 "$tensorrt_image" -c 'import tensorrt; print(tensorrt.__version__)')"
# Every libnvinfer.so.* the server image has, symlinks included (libnvinfer.so.N sorts before libnvinfer.so.N.x.y),
# in the folders the in-build check looks in; same-tensorrt reads the release from the versioned file, as that check does.
cd "$ROOT"
folders="$("$PYTHON" -c 'from builders.tensorrt.discovery import LIBRARY_DIRS; print(" ".join(LIBRARY_DIRS))')"
listing="$(docker run --rm --entrypoint bash "$tritonserver_image" -c "for folder in $folders; do ls -1d \"\$folder\"/libnvinfer.so.* 2>/dev/null || true; done")"
libraries=()
while IFS= read -r name; do
  [ -n "$name" ] && libraries+=(--server-library "$name")
done <<< "$listing"
if [ "${#libraries[@]}" -eq 0 ]; then
  echo "check-tensorrt: error: no libnvinfer.so.* in $tritonserver_image (looked in $folders)" >&2
  exit 2
fi
exec "$PYTHON" -m builders same-tensorrt --builder-version "$builder" "${libraries[@]}"
