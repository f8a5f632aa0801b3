# The serving image: NVIDIA's Triton server plus this repository's serving
# library (vision_serving) for the Python-backend preprocess/postprocess models.
#
#   docker build -f docker/server.Dockerfile --build-arg TRITON_RELEASE=26.11 -t vision-serving/triton-server:26.11-0.1.0 .
#
# The model repository is NOT in the image: mount it at /models (docker/compose.yaml,
# k8s/). It holds one folder per pipeline (a folder with a pipeline.toml), each a
# Triton model repository of its own; the entrypoint, tritonserver-pipelines
# (docker/tritonserver-pipelines.sh), passes one --model-repository per pipeline
# it finds there, so no pipeline is named here. Nothing is installed at start. TRITON_RELEASE comes from versions.env
# (the default below is asserted equal to it by tests/integration/test_deployment.py).
ARG TRITON_RELEASE=26.11

# The builder image's TensorRT release (docker/builder.Dockerfile is FROM this image): plans only load in the
# release that built them, and NVIDIA has built a tritonserver:YY.MM on the previous month's base, so the same tag
# does not promise the same TensorRT. Checked below, while this image builds (same-tensorrt).
FROM nvcr.io/nvidia/tensorrt:${TRITON_RELEASE}-py3 AS builder-tensorrt
RUN python3 -c "import tensorrt; print(tensorrt.__version__)" > /builder-tensorrt-version

FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv

# The Python backend stub embeds the image's libpython and imports packages from
# the `python3` first on PATH, so a venv made from the image's own Python 3 (no
# PEP 668 clash with Ubuntu's system packages) and first on PATH is what the
# preprocess/postprocess models see. --without-pip: Ubuntu's python3 has no
# ensurepip; the system pip installs into the venv with --python.
RUN python3 -m venv --without-pip /opt/venv

WORKDIR /opt/vision-serving
# requirements/image.txt: the lock of requirements/image.in, resolved for this image's
# Python 3.12 on manylinux_2_28 x86_64 (python -m devtools.lock), every package pinned
# and hashed, installed from wheels only; tests/integration/test_dependencies.py
# downloads it that way from PyPI. Only what the Python-backend models import: no
# torch, no client library (no tritonclient, no grpcio): vision_serving parses the configs
# with Triton's model_config schema vendored in vision_serving/protos (protobuf only).
# numpy<2 on this image's own evidence, not the local server's: Triton 2.51/2.52
# listed numpy 2 as a known issue of the Python backend (empty tensors);
# python_backend#384 (Oct 2024) moved its pybind11 to a numpy-2 capable 2.12, yet no
# release note up to 2.75.0 (this 26.11 image, 17 Nov 2026) announces numpy 2
# support, server#8301 "Support for numpy2.x" is open (users still asking in
# 2026-09, no maintainer answer) and compose.py reportedly still pins numpy<2.
# Locally the 2.51 stub the tests run returns empty tensors with numpy 2.
COPY requirements/image.txt requirements/image.txt
RUN python3 -m pip --python /opt/venv/bin/python install --no-compile \
        --require-hashes --only-binary=:all: -r requirements/image.txt

COPY pyproject.toml README.md ./
COPY vision_serving vision_serving
COPY builders builders
RUN python3 -m pip --python /opt/venv/bin/python install --no-compile --no-deps . \
    && rm -rf /opt/vision-serving/build /opt/vision-serving/*.egg-info

# Fail the build, in one line, when the builder image's TensorRT is not this image's libnvinfer release.
COPY --from=builder-tensorrt /builder-tensorrt-version /opt/vision-serving/builder-tensorrt-version
RUN /opt/venv/bin/python -m builders same-tensorrt \
        --builder-version "$(cat /opt/vision-serving/builder-tensorrt-version)"

# One --model-repository per <root>/<pipeline>/pipeline.toml, then exec tritonserver.
COPY --chmod=0755 docker/tritonserver-pipelines.sh /usr/local/bin/tritonserver-pipelines
# The liveness check (k8s livenessProbe exec): fails on a dead Python backend stub, which
# Triton does not restart while /v2/health/live stays green; reads /proc only.
COPY --chmod=0755 docker/triton-liveness.sh /usr/local/bin/triton-liveness

ENV PATH=/opt/venv/bin:${PATH} \
    HOME=/tmp

# triton-server (UID/GID 1000) is created by NVIDIA's image; /opt/tritonserver stays owned by root (since 2.71) and is only read.
USER 1000:1000
WORKDIR /opt/tritonserver

EXPOSE 8000 8001 8002

HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]

# Production flags: every pipeline under /models (--pipelines-root, the entry
# script's own flag, not passed to tritonserver), models loaded once at start and
# never changed through the API (--model-control-mode=none), ready only when every
# model is, and stopped when one cannot load (--exit-on-error=true: one pipeline failing
# fails the pod, docs/design.md "One pipeline fails, the pod fails"), per-step latency quantiles on /metrics (the alerts use them), and up to
# 40 s to drain in-flight requests on SIGTERM (k8s: preStop 10 s + 40 s <
# terminationGracePeriodSeconds 60).
# Append e.g. --http-restricted-api/--grpc-restricted-protocol as CMD/args.
# NVIDIA's entrypoint stays in front: its entrypoint.d parts check the driver and set up CUDA forward compatibility
# (the image keeps its compat libcuda where that setup, not the container toolkit's hook, finds it), then it execs
# the rest.
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh", "tritonserver-pipelines", \
    "--pipelines-root=/models", \
    "--model-control-mode=none", \
    "--strict-readiness=true", \
    "--exit-on-error=true", \
    "--exit-timeout-secs=40", \
    "--http-port=8000", \
    "--grpc-port=8001", \
    "--metrics-port=8002", \
    "--allow-metrics=true", \
    "--metrics-config=summary_latencies=true", \
    "--log-format=ISO8601"]
CMD []
