"""The naive baseline: a minimal FastAPI app doing the served work per request, no batching.

    uvicorn benchmarks.naive_service:app --workers 1

POST raw image bytes to /classify; the answer is the top-k as JSON. Each
request runs decode -> preprocess -> onnxruntime -> top-k on its own in
Starlette's thread pool (what a plain ``def`` endpoint does), with the same
library and configs as the served models. By default onnxruntime and OpenCV
keep their default thread settings, as in a service written without tuning;
``BENCH_NAIVE_TUNED=1`` gives it the served settings instead (one intra-op
thread, OpenCV's pool as configured), to separate what thread tuning buys
from what Triton buys. ``BENCH_CORE_CONFIG=cpu_openvino`` runs the core on
OpenVINO (its default thread count), the naive counterpart of the OpenVINO
ensemble: the same runtime on both sides of the comparison.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from benchmarks.pipeline import Pipeline
from vision_serving import layout
from vision_serving.image_codec import ImageError

REPOSITORY_ENV = "BENCH_MODEL_REPOSITORY"
TUNED_ENV = "BENCH_NAIVE_TUNED"
CORE_CONFIG_ENV = "BENCH_CORE_CONFIG"

app = FastAPI(title="naive image classifier")
pipeline = Pipeline(
    Path(os.environ.get(REPOSITORY_ENV, layout.MODEL_REPOSITORY)),
    library_defaults=os.environ.get(TUNED_ENV) != "1",
    core_config_name=os.environ.get(CORE_CONFIG_ENV, "cpu"),
)


def _classify(data: bytes) -> dict:
    """The served outputs of one upload, by tensor name (BYTES as text)."""
    outputs = pipeline.run([data]).outputs()
    return {name: [item.decode() if isinstance(item, bytes) else item for item in value[0].tolist()] for name, value in outputs.items()}


@app.get("/health")
def health() -> dict:
    return {"ready": True}


@app.post("/classify")
async def classify(request: Request) -> dict:
    data = await request.body()
    try:
        return await run_in_threadpool(_classify, data)
    except ImageError as error:
        raise HTTPException(status_code=400, detail=str(error)) from None
