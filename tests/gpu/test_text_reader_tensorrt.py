"""The text reader served on TensorRT answers as the same pipeline on CPU, within the precision gate its plans were
chosen by; the plans hold no more GPU memory than the capacity planner allows for.

It needs a Triton server with the TensorRT backend serving this repository's model repository with its plans: on a
GPU host with Docker and the NVIDIA Container Toolkit,

    docker compose --env-file versions.env -f docker/compose.yaml up -d --wait     # builds every plan, then serves
    VISION_SERVING_TRITON_URL=localhost:8001 ./scripts/test -m gpu tests/gpu/test_text_reader_tensorrt.py -s

from the repository's own environment on the host (the builder writes the ONNX and the plans into ../model_repository,
which the CPU reference here reads too; the builder image has neither that folder nor devtools/). The GPU should serve
this server alone, for the memory check. Skipped without ``VISION_SERVING_TRITON_URL``.

Every BLS output the postprocess reads comes from a TensorRT stage, so a BLS request without CPU preferred memory
fails every request here (``as_numpy()`` refuses GPU tensors). The photos cover the detector's three profiles (photo,
wide, tall) and the recognizer's widths; they are sent one per request, then all at once (the recognizer's two
instances and its batches across requests).
"""

from __future__ import annotations

import os
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest

from builders import loaded, photos
from tests.support import text_reading
from vision_serving import engine_profiles, layout, model_config
from vision_serving.tasks.text_reading import reader
from vision_serving.tasks.text_reading.task import TASK, TextReadingResult

NAME = "text_reader"
URL = os.environ.get("VISION_SERVING_TRITON_URL", "")
METRICS_URL = os.environ.get("VISION_SERVING_TRITON_METRICS_URL", "http://localhost:8002/metrics")
REAL_PHOTOS = ("page", "grace_hopper", "motorcycle_left", "motorcycle_right", "coffee", "camera", "china")
OUTPUTS = ("TEXTS", "SCORES", "BOXES", "BOX_SCORES", "COUNT")
TENSORRT_MODELS = (f"{NAME}_core", f"{NAME}_core_classifier", f"{NAME}_core_recognizer")

pytestmark = pytest.mark.skipif(not URL, reason="no TensorRT server: set VISION_SERVING_TRITON_URL (docker compose up: see the docstring)")


@pytest.fixture(scope="module")
def client():
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(URL)
    if not client.is_server_ready():
        pytest.fail(f"the server at {URL} is not ready")
    return client


def png(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


@pytest.fixture(scope="module")
def uploads() -> dict[str, bytes]:
    """Drawn text photos, real photos with text, and photos whose detector inputs fall in the wide and tall profiles
    (four drawn photos side by side, about 5:1: a 736 x ~3900 input; the same turned upright)."""
    drawn = {name: data for name, (data, _lines) in text_reading.text_photos(8).items()}
    chosen = {**drawn, **{name: photos.photo_bytes(name) for name in REAL_PHOTOS}}
    strip = np.hstack([cv2.resize(text_reading.decode_bgr(data), (480, 360)) for data in list(drawn.values())[:4]])
    chosen["wide-strip"] = png(strip)
    chosen["tall-strip"] = png(cv2.rotate(strip, cv2.ROTATE_90_CLOCKWISE))
    return chosen


def read_served(client, payload: bytes) -> list[reader.Line]:
    import tritonclient.grpc as grpcclient

    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[payload]], dtype=np.object_))
    result = client.infer(NAME, [image], outputs=[grpcclient.InferRequestedOutput(n) for n in OUTPUTS], client_timeout=300)
    texts, scores, boxes, box_scores, counts = (result.as_numpy(n) for n in OUTPUTS)
    return [reader.Line(texts[0, k].decode(), float(scores[0, k]), boxes[0, k], float(box_scores[0, k])) for k in range(int(counts[0, 0]))]


def test_the_text_reader_is_served_from_tensorrt_plans_with_every_profile(client):
    pipeline = layout.pipeline(NAME)
    for name in TENSORRT_MODELS:
        config = client.get_model_config(name, as_json=True)["config"]
        assert config.get("platform") == "tensorrt_plan" or config.get("backend") == "tensorrt", (name, config.get("platform"))
        role = engine_profiles.role_of(pipeline, name)
        assert role is not None
        profiles = engine_profiles.for_model(pipeline, role)
        if profiles:  # every instance holds every profile (the configs as served, not only as committed)
            for group in config["instance_group"]:
                assert sorted(group.get("profile", []), key=int) == [str(i) for i in range(len(profiles))], name
            assert config["parameters"][engine_profiles.ALLOCATION_STRATEGY]["string_value"] == engine_profiles.ON_PROFILE_CHANGE, name
    recognizer = client.get_model_config(f"{NAME}_core_recognizer", as_json=True)["config"]
    local = model_config.load_config(pipeline.stage_dir("recognizer"))
    assert sum(int(group["count"]) for group in recognizer["instance_group"]) == sum(g.count for g in local.instance_group)


def test_tensorrt_answers_as_the_cpu_pipeline_within_the_precision_gate(client, uploads):
    """Each photo alone, then all at once: the TensorRT answers against the FP32 pipeline in process (the reference
    the precision ladder judged the plans' ONNX by), with the recipe's gate."""
    pipeline = loaded.load(layout.pipeline(NAME))
    cpu = pipeline.served()
    names = sorted(uploads)
    reference = [cpu.run([uploads[name]]).lines[0] for name in names]  # type: ignore[attr-defined]
    alone = [read_served(client, uploads[name]) for name in names]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda name: read_served(client, uploads[name]), names))
    for label, served in (("one at a time", alone), ("all at once", together)):
        report = TASK.gate(
            TextReadingResult(cpu.postprocessor, reference), TextReadingResult(cpu.postprocessor, served), pipeline.recipe.gate
        )
        print(f"\nTensorRT vs CPU FP32, {len(names)} photos, {label}: {report['metrics']} {report['checks']}")
        failed = {name: check for name, check in report["checks"].items() if not check["pass"]}
        assert not failed, (label, failed, report["metrics"]["differences"])
    assert [[line.text for line in lines] for lines in together] == [[line.text for line in lines] for lines in alone]
    assert sum(len(lines) for lines in alone) >= len(names)  # the photos have text, and it is read
    golden = pipeline.recipe.golden
    for name, expected in golden.items():
        texts = [line.text for line in read_served(client, photos.photo_bytes(name))]
        assert set(expected) <= set(texts) if expected else texts == [], (name, texts)


def gpu_memory_used() -> int:
    text = urllib.request.urlopen(METRICS_URL, timeout=10).read().decode()
    values = [float(value) for value in re.findall(r"^nv_gpu_memory_used_bytes\{[^}]*\} (\S+)$", text, re.MULTILINE)]
    if not values:
        pytest.fail(f"{METRICS_URL} has no nv_gpu_memory_used_bytes (GPU metrics off?)")
    return int(max(values))


def test_the_plans_hold_no_more_gpu_memory_than_the_planner_allows(client, uploads):
    """After every profile has run (warm-up, then the photos above), the GPU's used memory (all of this server's plans,
    CUDA context included) is within what the planner chose instances by: its estimate from shapes x its margin,
    plus the runtime allowance. The two figures are printed: they calibrate the estimate."""
    capacity = pytest.importorskip("benchmarks.capacity", reason="the planner (devtools/) is not in this image: run from the repository")
    read_served(client, uploads["wide-strip"])
    read_served(client, uploads["tall-strip"])
    estimated = capacity.estimate_gpu_memory("tests/gpu")
    plans = capacity.gpu_pod_bytes(estimated["models"])
    used = gpu_memory_used()
    allowed = capacity.ESTIMATE_MARGIN * plans + capacity.GPU_RUNTIME_GIB * 2**30
    print(
        f"\nGPU memory used {used / 2**30:.2f} GiB; plans estimated {plans / 2**30:.2f} GiB ({used / plans:.2f} x); allowed {allowed / 2**30:.2f} GiB"
    )
    assert used <= allowed
