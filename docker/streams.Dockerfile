# The stream service's image (vision_streams, docs/streams.md): Python 3.12 and exactly requirements/streams.txt
# (hashed, wheels only). PyAV's wheel brings its own FFmpeg libraries (docs/streams.md, "FFmpeg build and license");
# nothing of Triton or the serving library is in it.
#
#   docker build -f docker/streams.Dockerfile -t vision-serving/streams:0.1.0 .
FROM python:3.12-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OPENBLAS_NUM_THREADS=1

COPY requirements/pip.txt requirements/streams.txt /tmp/requirements/
RUN python -m pip install --no-deps --require-hashes -r /tmp/requirements/pip.txt \
    && python -m pip install --require-hashes --only-binary=:all: -r /tmp/requirements/streams.txt \
    && rm -r /tmp/requirements \
    && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin streams

COPY vision_streams /opt/vision-streams/vision_streams
WORKDIR /opt/vision-streams
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"]
ENTRYPOINT ["python", "-m", "vision_streams"]
CMD ["--config", "/etc/vision-streams/streams.toml"]
