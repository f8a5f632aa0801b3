# The image gateway (gateway/, docs/gateway.md): an image-native HTTP API in front of the Triton server, no GPU.
#
#   docker build -f docker/gateway.Dockerfile -t vision-serving/image-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 vision-serving/image-gateway:0.1.0 --host=0.0.0.0 --triton=HOST:8001
#
# Python 3.12 (requirements/gateway.txt is locked for it, manylinux_2_28 wheels: Debian 12's glibc 2.36 runs them),
# every package pinned and hashed, wheels only: the web stack, tritonclient's gRPC client and the part of the serving
# library it imports (vision_serving.tasks), no core runtime. The tag is GATEWAY_IMAGE in versions.env.
FROM python:3.12-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python3 -m venv /opt/venv

WORKDIR /opt/image-gateway
COPY requirements/gateway.txt requirements/gateway.txt
RUN /opt/venv/bin/pip install --no-compile --require-hashes --only-binary=:all: -r requirements/gateway.txt

COPY pyproject.toml README.md ./
COPY vision_serving vision_serving
COPY gateway gateway
RUN /opt/venv/bin/pip install --no-compile --no-deps . \
    && rm -rf /opt/image-gateway/build /opt/image-gateway/*.egg-info

ENV PATH=/opt/venv/bin:${PATH} \
    HOME=/tmp
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["python3", "-m", "gateway"]
CMD ["--host=0.0.0.0", "--port=8080"]
