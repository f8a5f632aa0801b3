#!/usr/bin/env bash
# The builder image's entrypoint: every artifact of every pipeline of the model repository, in order.
#   bash docker/build_artifacts.sh [MODEL_REPOSITORY] [extra build-engine options]
# MODEL_REPOSITORY (default /models) holds the pipelines: each folder with a pipeline.toml.
# `builders all` runs the CPU steps of every pipeline (export -> fix -> check -> quantize ->
# precision ladder, which writes <pipeline>_core/1/served_precision.json); then, without
# --pipeline, `build-engine` builds every core's plan for this GPU from the ONNX its ladder
# chose, and `verify-plan --deserialize` loads each one. No pipeline is named here: a new one
# (python -m builders new-pipeline) is built like the others.
# Each step skips itself when its recorded inputs are unchanged, so a rerun is cheap.
set -euo pipefail
repository="${1:-/models}"
shift || true
cache_dir="${PLAN_CACHE_DIR:-/opt/vision-serving/.build/plans}"

pipelines=()
shopt -s nullglob
for recipe in "${repository%/}"/*/pipeline.toml; do
    pipeline_dir="${recipe%/pipeline.toml}"
    pipelines+=("${pipeline_dir##*/}")
done
shopt -u nullglob
if ((${#pipelines[@]} == 0)); then
    echo "build_artifacts: error: no pipeline in $repository (no $repository/<pipeline>/pipeline.toml): mount the model repository there" >&2
    exit 2
fi
echo "build_artifacts: pipelines in $repository: ${pipelines[*]}" >&2

# The build environments made in the image (docker/builder.Dockerfile: /opt/build-envs/<name>),
# linked where builders/build_envs.py looks (.build/envs/<name>); .build may be a volume
# from an older image, so a stale environment there is replaced by the image's.
envs_dir="${BUILD_ENVS_DIR:-/opt/vision-serving/.build/envs}"
for baked in "${BAKED_ENVS_DIR:-/opt/build-envs}"/*/; do
    [[ -d "$baked" ]] || continue
    baked="${baked%/}"
    link="$envs_dir/${baked##*/}"
    if [[ "$(readlink "$link" || true)" != "$baked" ]]; then
        mkdir -p "$envs_dir"
        rm -rf "$link"
        ln -s "$baked" "$link"
    fi
done

python -m builders all --model-repository "$repository"
python -m builders build-engine --model-repository "$repository" --cache-dir "$cache_dir" "$@"
python -m builders verify-plan --model-repository "$repository" --deserialize
