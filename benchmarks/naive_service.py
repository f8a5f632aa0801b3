"""The naive baseline: a minimal FastAPI app doing the served work per request, no batching.

    BENCH_PIPELINE=model_repository/image_classifier uvicorn benchmarks.naive_service:app --workers 1

POST raw image bytes to /infer; the answer is the pipeline's outputs as JSON (by tensor name; bytes
base64-encoded). Each request runs the served computation (``benchmarks.inprocess``: the same
library and configs as the served models) on its own in Starlette's thread pool (what a plain ``def``
endpoint does). By default onnxruntime and OpenCV keep their default thread settings, as in a service
written without tuning; ``BENCH_NAIVE_TUNED=1`` gives it the served settings instead (one intra-op
thread, OpenCV's pool as configured), to separate what thread tuning buys from what Triton buys.
``BENCH_CORE_CONFIG=cpu_openvino`` runs the core on OpenVINO, the naive counterpart of the OpenVINO
ensemble: the same runtime on both sides of the comparison.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from benchmarks import CLASSIFIER, inprocess
from vision_serving import layout
from vision_serving.image_codec import ImageError

PIPELINE_ENV = "BENCH_PIPELINE"
TUNED_ENV = "BENCH_NAIVE_TUNED"
CORE_CONFIG_ENV = "BENCH_CORE_CONFIG"

app = FastAPI(title="naive vision service")
served = inprocess.load(
    layout.Pipeline.at(Path(os.environ.get(PIPELINE_ENV, CLASSIFIER.repository))),
    inprocess.Variant(core_config=os.environ.get(CORE_CONFIG_ENV, "cpu"), library_defaults=os.environ.get(TUNED_ENV) != "1"),
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _infer(data: bytes) -> dict:
    """The served outputs of one upload, by the ensemble's tensor names."""
    outputs = served.run([data]).outputs()
    names = served.steps["postprocess"].outputs
    return {names.get(name, name): _jsonable(value[0].tolist()) for name, value in outputs.items()}


@app.get("/health")
def health() -> dict:
    return {"ready": True}


@app.post("/infer")
async def infer(request: Request) -> dict:
    data = await request.body()
    try:
        return await run_in_threadpool(_infer, data)
    except ImageError as error:
        raise HTTPException(status_code=400, detail=str(error)) from None
