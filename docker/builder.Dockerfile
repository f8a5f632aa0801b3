# The builder image: NVIDIA's TensorRT container (the SAME YY.MM as the server
# image, so the same TensorRT release) plus the builders and ModelOpt.
# It runs export -> quantize -> build-engine -> verify-plan (docker/build_artifacts.sh)
# and writes the ONNX files, the plan and their provenance into the mounted
# model repository (/models).
#
#   docker build -f docker/builder.Dockerfile --build-arg TRITON_RELEASE=26.11 -t image-classifier/builder:26.11-0.1.0 .
#
# TRITON_RELEASE comes from versions.env (asserted equal to the default below).
ARG TRITON_RELEASE=26.11
FROM nvcr.io/nvidia/tensorrt:${TRITON_RELEASE}-py3

ARG MODELOPT_VERSION=0.47.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv

# A venv on top of the image's Python: --system-site-packages keeps NVIDIA's
# `tensorrt` bindings visible, while our pins (numpy<2 etc.) take precedence and
# Ubuntu's PEP 668 marker is not in the way.
RUN python3 -m venv --without-pip --system-site-packages /opt/venv

WORKDIR /opt/image-classifier
COPY requirements/ requirements/
# torch: the CPU wheel (export and calibration run on CPU; the GPU is TensorRT's),
# pinned by requirements/build.txt. Then the builders' pins, ModelOpt without its
# [onnx] extra (it would replace onnxruntime with onnxruntime-gpu; see
# requirements/quantize.txt), pytest for the GPU tests.
RUN python3 -m pip --python /opt/venv/bin/python install --no-compile \
        --index-url "${TORCH_INDEX_URL}" "$(grep -E '^torch==' requirements/build.txt)" \
    && python3 -m pip --python /opt/venv/bin/python install --no-compile \
        -r requirements/serve.txt -r requirements/build.txt -r requirements/quantize.txt \
        "$(grep -E '^pytest==' requirements/dev.txt)" \
    && python3 -m pip --python /opt/venv/bin/python install --no-compile --no-deps \
        "nvidia-modelopt==${MODELOPT_VERSION}"

# The source tree itself (no install): builders write their caches to .build/.
COPY pyproject.toml README.md ./
COPY vision_serving vision_serving
COPY builders builders
COPY scripts scripts
COPY tests tests
COPY docker/build_artifacts.sh docker/build_artifacts.sh
RUN mkdir -p .build && chmod 0777 .build

ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONPATH=/opt/image-classifier \
    HOME=/tmp

# Runs as any UID: docker/compose.yaml passes the host user so files written to
# the bind-mounted model repository stay the user's; Kubernetes sets 1000.
USER 1000:1000

HEALTHCHECK NONE

ENTRYPOINT ["bash", "docker/build_artifacts.sh"]
CMD ["/models"]
