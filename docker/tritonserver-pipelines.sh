#!/usr/bin/env bash
# The server image's entrypoint (installed as /usr/local/bin/tritonserver-pipelines):
# tritonserver with one --model-repository per PIPELINE, i.e. per folder of the
# model repository root that holds a pipeline.toml (vision_serving/layout.py), so
# a pipeline added with `python -m builders new-pipeline` is served without
# editing this image, docker/compose.yaml or k8s/.
#
#   tritonserver-pipelines [--pipelines-root=DIR] [tritonserver flags...]
#
# --pipelines-root (default: $PIPELINES_ROOT, else /models) is this script's own
# flag and is not passed on; every other argument goes to tritonserver unchanged,
# after the --model-repository flags. A root without any pipeline is an error
# (one line on stderr, exit 2): Triton would otherwise start serving nothing.
# $SIZED_MODELS_DIR (default /tmp/sized-models) receives the view sized to the CPUs.
set -euo pipefail

me="tritonserver-pipelines"
root="${PIPELINES_ROOT:-/models}"
passed=()
for argument in "$@"; do
    case "$argument" in
        --pipelines-root=*)
            root="${argument#--pipelines-root=}"
            ;;
        --model-repository | --model-repository=* | --model-store | --model-store=*)
            echo "$me: error: do not pass $argument: every pipeline under --pipelines-root=$root is added (one --model-repository each)" >&2
            exit 2
            ;;
        *)
            passed+=("$argument")
            ;;
    esac
done

if [[ ! -d "$root" ]]; then
    echo "$me: error: model repository root $root does not exist (mount the model repository there or pass --pipelines-root=DIR)" >&2
    exit 2
fi

names=()
shopt -s nullglob
for recipe in "${root%/}"/*/pipeline.toml; do
    [[ -f "$recipe" ]] || continue
    pipeline_dir="${recipe%/pipeline.toml}"
    names+=("${pipeline_dir##*/}")
done
shopt -u nullglob

if ((${#names[@]} == 0)); then
    echo "$me: error: no pipeline in $root (no $root/<pipeline>/pipeline.toml): copy the built model repository there first" >&2
    exit 2
fi

# The Python steps sized to this container's CPU limit (cgroup cpu.max, else the CPU affinity):
# a view of $root in $sized whose sized steps' configs are rewritten and everything else is a link
# to $root, which stays read-only (vision_serving/cpu_sizing.py). One line per sized step.
sized="${SIZED_MODELS_DIR:-/tmp/sized-models}"
python3 -m vision_serving.cpu_sizing --pipelines-root "$root" --out "$sized"
repositories=()
for name in "${names[@]}"; do
    repositories+=("--model-repository=${sized%/}/$name")
done

# The node's driver against this image's CUDA (vision_serving/cuda_driver.py), after NVIDIA's entrypoint (in front of
# this script: its driver check and forward-compatibility set-up). One line either way; exit 1
# where the image's CUDA cannot run. VISION_SERVING_REQUIRE_GPU=1 (the Kubernetes Deployment) makes a missing driver or
# GPU an error too; without it the CPU configs still serve.
require=()
[[ "${VISION_SERVING_REQUIRE_GPU:-0}" == 1 ]] && require=(--require)
python3 -m vision_serving.cuda_driver --prefix "$me" ${require[@]+"${require[@]}"} || exit 1

# The allocator: jemalloc for tritonserver and the Python stubs it starts. Under uploads of every size glibc's
# malloc keeps what it freed, and the server's memory kept rising after warm-up; with jemalloc it stays flat
# (docs/design.md, "Memory stays flat"). NVIDIA's image ships it (Triton's docs); VISION_SERVING_MALLOC=glibc
# keeps glibc's, JEMALLOC_LIBRARY names another file.
if [[ "${VISION_SERVING_MALLOC:-jemalloc}" == jemalloc ]]; then
    arch="$(uname -m)"
    jemalloc=""
    for candidate in ${JEMALLOC_LIBRARY:-"/usr/lib/$arch-linux-gnu/libjemalloc.so.2" "/usr/lib/$arch-linux-gnu/libjemalloc.so"}; do
        if [[ -f "$candidate" ]]; then
            jemalloc="$candidate"
            break
        fi
    done
    if [[ -n "$jemalloc" ]]; then
        export LD_PRELOAD="$jemalloc${LD_PRELOAD:+:$LD_PRELOAD}"
        # oneTBB (OpenVINO) opens hwloc with RTLD_DEEPBIND, which then frees with glibc what jemalloc allocated:
        # OpenVINO's compile_model aborts ("free(): invalid pointer"). This opens it without (oneTBB's workaround).
        export TBB_ENABLE_SANITIZERS=1
        echo "$me: allocator: jemalloc ($jemalloc)" >&2
    else
        echo "$me: warning: jemalloc not found (${JEMALLOC_LIBRARY:-/usr/lib/$arch-linux-gnu/libjemalloc.so[.2]}): glibc's malloc, whose memory grows under uploads of every size" >&2
    fi
fi

echo "$me: serving ${#names[@]} pipeline(s) from $root: ${names[*]}" >&2
exec tritonserver "${repositories[@]}" ${passed[@]+"${passed[@]}"}
