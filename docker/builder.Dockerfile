# The builder image: NVIDIA's TensorRT container (the SAME YY.MM as the server
# image, so the same TensorRT release) plus the builders and ModelOpt.
# For every pipeline of the mounted model repository (/models/<pipeline>/ with a
# pipeline.toml; none is named here) it runs `builders all` (export -> check ->
# quantize -> precision ladder), then build-engine and verify-plan
# (docker/build_artifacts.sh), and writes the ONNX files, the plans and their
# provenance into /models.
#
#   docker build -f docker/builder.Dockerfile --build-arg TRITON_RELEASE=26.11 -t vision-serving/builder:26.11-0.1.0 .
#
# TRITON_RELEASE comes from versions.env (asserted equal to the default below).
ARG TRITON_RELEASE=26.11
FROM nvcr.io/nvidia/tensorrt:${TRITON_RELEASE}-py3

ARG MODELOPT_VERSION=0.47.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The build environments of builders/build_envs.py made in the image (see below).
ARG BUILD_ENVS="tflite-convert"

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

WORKDIR /opt/vision-serving
COPY requirements/ requirements/
# torch first: the CPU wheel (export and calibration run on CPU; the GPU is TensorRT's)
# from TORCH_INDEX_URL, at the version requirements/builder.in pins, alone (--no-deps).
# It is the one package installed without a hash: its cp312 +cpu wheel lives only on
# that index, which the machines that regenerate the locks cannot reach, and PyPI's
# Linux torch is the CUDA build. Then the lock requirements/builder.txt (Python 3.12,
# every package pinned and hashed; torch and PyPI torch's CUDA packages left out,
# torch's CPU dependencies in), then ModelOpt alone from requirements/modelopt.txt
# (its [onnx] extra would replace onnxruntime with onnxruntime-gpu; builder.in).
RUN python3 -m pip --python /opt/venv/bin/python install --no-compile --no-deps \
        --index-url "${TORCH_INDEX_URL}" "$(grep -E '^torch==' requirements/builder.in)" \
    && python3 -m pip --python /opt/venv/bin/python install --no-compile \
        --require-hashes -r requirements/builder.txt \
    && python3 -m pip --python /opt/venv/bin/python install --no-compile --no-deps \
        --require-hashes -r requirements/modelopt.txt \
    && /opt/venv/bin/python -c "import modelopt, importlib.metadata as m; assert m.version('nvidia-modelopt') == '${MODELOPT_VERSION}'"

# The separate build environments builders/build_envs.py runs tools in
# (.build/envs/<name> from the lock requirements/<name>.txt: TensorFlow + tf2onnx for TFLite
# sources pin numpy 2 / protobuf 7, which /opt/venv cannot take). Made here, in
# /opt/build-envs/<name>, not at run time: NVIDIA's Ubuntu Python may lack ensurepip
# (python3-venv; /opt/venv above is made --without-pip for that reason), which
# build_envs' own `python3 -m venv` needs, and a build then needs no index for them. docker/build_artifacts.sh links each into .build/envs/ (which compose mounts
# as a volume, possibly one made by an older image), with the stamp build_envs
# compares: the sha256 of requirements/<name>.txt.
RUN for name in ${BUILD_ENVS}; do \
        python3 -m venv --without-pip "/opt/build-envs/${name}" \
        && python3 -m pip --python "/opt/build-envs/${name}/bin/python" install --no-compile --require-hashes -r "requirements/${name}.txt" \
        && sha256sum "requirements/${name}.txt" | cut -d " " -f 1 > "/opt/build-envs/${name}/.requirements.sha256" \
        || exit 1; \
    done

# The source tree itself (no install): builders write their caches to .build/.
COPY pyproject.toml README.md ./
COPY vision_serving vision_serving
COPY builders builders
COPY scripts scripts
COPY tests tests
COPY docker/build_artifacts.sh docker/build_artifacts.sh
RUN mkdir -p .build && chmod 0777 .build

ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONPATH=/opt/vision-serving \
    HOME=/tmp

# Runs as any UID: docker/compose.yaml passes the host user so files written to
# the bind-mounted model repository stay the user's; Kubernetes sets 1000.
USER 1000:1000

HEALTHCHECK NONE

# NVIDIA's entrypoint stays in front, as in the server image: its entrypoint.d parts check the driver and set up CUDA
# forward compatibility, then it execs the build.
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh", "bash", "docker/build_artifacts.sh"]
CMD ["/models"]
