# The model image: one model version of every pipeline, as data (the "modelcar" pattern).
# Its tag is the model version, MODELS_IMAGE in versions.env; the Deployment names it
# (k8s/server/deployment.yaml, init container `models`), so a Deployment revision is
# server + models together and `kubectl rollout undo` brings back both. Build and push:
#
#   .venv/bin/python -m builders all
#   .venv/bin/python -m devtools.model_image --output .build/model-image
#   docker build -f docker/models.Dockerfile -t "$MODELS_IMAGE" .build/model-image
#   docker push "$MODELS_IMAGE"
#
# The build context is the staged folder (devtools/model_image.py): model_repository/ with
# every pipeline's configs, Python models, ONNX, served_precision.json, labels, drift
# references and provenance records; no plans (each pod builds its own for its GPU).
# busybox, not scratch: the init container copies the repository out with its `cp`.
FROM busybox:1.37.0

COPY model_repository/ /model_repository/

# Only copied from, never run as a service.
USER 1000:1000
HEALTHCHECK NONE
