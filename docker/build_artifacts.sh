#!/usr/bin/env bash
# The builder image's entrypoint: every artifact of the model repository, in order.
#   bash docker/build_artifacts.sh [MODEL_REPOSITORY] [extra build-engine options]
# `builders all` runs the CPU steps (export -> fix -> check -> quantize -> evaluate,
# the accuracy gate included); then the plan for this GPU, verified by loading it.
# Each step skips itself when its recorded inputs are unchanged, so a rerun is cheap.
set -euo pipefail
repository="${1:-/models}"
shift || true
cache_dir="${PLAN_CACHE_DIR:-/opt/image-classifier/.build/plans}"

python -m builders all --repository "$repository"
python -m builders build-engine --repository "$repository" --cache-dir "$cache_dir" "$@"
python -m builders verify-plan --repository "$repository" --deserialize
