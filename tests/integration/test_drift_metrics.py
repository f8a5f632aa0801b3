"""Drift metrics on a real tritonserver: the classifier pipeline, in-distribution then night-camera traffic.

A private copy of the built image_classifier pipeline is served with small windows (drift_window
96, drift_min_samples 48, drift_update_every 16), so a few hundred images exercise every metric.
In-distribution traffic is the reference's own source: the held-out photos with augmentations of
another seed. The shifted stream is the same photos as a night camera sees them (gray, x 0.15,
sensor noise). Run with ``-s`` to see the per-feature p-values of both streams.
"""

from __future__ import annotations

import re
import shutil
import time
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builders import calibration, drift_reference, loaded
from devtools.loadgen import running_server
from tests.support.pipelines import built_classifier
from vision_serving import drift, layout

pytestmark = pytest.mark.integration

PIPELINE = "image_classifier"
PREPROCESS, POSTPROCESS = f"{PIPELINE}_preprocess", f"{PIPELINE}_postprocess"
BATCH = 8
SETTINGS = {"drift_window": 96, "drift_min_samples": 48, "drift_update_every": 16}
# Triton spreads batches over the 2 preprocess instances, each with its own window: twice the window
# fills both; a few more batches publish the updates that finished after each instance's last batch.
STREAM = 2 * SETTINGS["drift_window"] + 2 * SETTINGS["drift_update_every"]
FLUSH = 4 * BATCH
STREAM_SEED = 2024
FAMILIES = (
    "vision_drift_statistic",
    "vision_drift_p_value",
    "vision_drift_window_samples",
    "vision_feature_window_mean",
    "vision_feature_reference_mean",
    "vision_nonfinite_outputs_total",
)
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def small_window_copy(destination: Path) -> Path:
    """The built classifier pipeline (with its drift reference) copied, with small drift windows."""
    pipeline = built_classifier()
    drift_reference.build(loaded.load(pipeline), log=lambda message: None)
    root = destination / "model_repository"
    shutil.copytree(
        pipeline.repository,
        root / PIPELINE,
        ignore=shutil.ignore_patterns("__pycache__", "*.plan*", layout.INT8_ONNX, layout.INT8_ONNX + ".json"),
    )
    for model in (PREPROCESS, POSTPROCESS):
        config = root / PIPELINE / model / "config.pbtxt"
        text = config.read_text()
        for key, value in SETTINGS.items():
            text, count = re.subn(rf'(key: "{key}" value {{ string_value: )"\d+"', rf'\1"{value}"', text)
            assert count == 1, (config, key)
        config.write_text(text)
    return root


def read_metrics(server) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the drift families on the server's /metrics: family -> sorted labels -> value."""
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {name: {} for name in FAMILIES}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match.group(1) in samples:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(2))))
            samples[match.group(1)][labels] = float(match.group(3))
    return samples


def by_feature(samples: dict[tuple[tuple[str, str], ...], float], model: str) -> dict[str, float]:
    result = {}
    for labels, value in samples.items():
        named = dict(labels)
        if named.get("model") == model and named.get("pipeline") == PIPELINE and "feature" in named:
            result[named["feature"]] = value
    return result


def in_distribution(count: int) -> list[bytes]:
    """The reference's photos, augmented with another seed than the reference's (same profile)."""
    pipeline = loaded.load(layout.pipeline(PIPELINE))
    limits = pipeline.configs.limits
    sources = calibration.evaluation_sources(pipeline)
    samples = calibration.make_samples(sources, count, STREAM_SEED, calibration.EVALUATION_PROFILE, limits, include_originals=False)
    return [sample.data for sample in samples]


def night_camera(payloads: list[bytes]) -> list[bytes]:
    """Dark, gray, noisy, low-contrast frames: gray x 0.15 + sensor noise, JPEG."""
    rng = np.random.default_rng(STREAM_SEED)
    frames = []
    for payload in payloads:
        gray = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_GRAYSCALE).astype(np.float32)
        dark = np.clip(gray * 0.15 + rng.normal(0, 4, gray.shape), 0, 255).astype(np.uint8)
        ok, buffer = cv2.imencode(".jpg", cv2.cvtColor(dark, cv2.COLOR_GRAY2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85])
        assert ok
        frames.append(buffer.tobytes())
    return frames


def send(client: grpcclient.InferenceServerClient, payloads: list[bytes]) -> None:
    for start in range(0, len(payloads), BATCH):
        part = payloads[start : start + BATCH]
        image = grpcclient.InferInput("IMAGE", [len(part), 1], "BYTES")
        image.set_data_from_numpy(np.array(part, dtype=np.object_).reshape(-1, 1))
        client.infer(PIPELINE, [image])


@pytest.fixture(scope="module")
def drift_server(tmp_path_factory):
    root = small_window_copy(tmp_path_factory.mktemp("drift"))
    with running_server(root, tmp_path_factory.mktemp("drift-log")) as server:
        yield server


def test_drift_metrics_in_distribution_then_night_camera(drift_server):
    client = grpcclient.InferenceServerClient(drift_server.grpc_url)
    reference = drift.load_reference(layout.pipeline(PIPELINE).drift_reference, PREPROCESS)

    before = read_metrics(drift_server)
    # Before min_samples: window sizes and reference means are there, no p-values yet.
    assert by_feature(before["vision_drift_p_value"], PREPROCESS) == {}
    reference_means = by_feature(before["vision_feature_reference_mean"], PREPROCESS)
    assert reference_means["brightness"] == pytest.approx(reference.means["brightness"], rel=1e-6)
    assert set(by_feature(before["vision_feature_reference_mean"], POSTPROCESS)) == {"confidence", "entropy"}
    assert {dict(labels)["model"] for labels in before["vision_nonfinite_outputs_total"]} == {POSTPROCESS}

    normal = in_distribution(STREAM + FLUSH)
    send(client, normal)
    calm = read_metrics(drift_server)
    image_p = by_feature(calm["vision_drift_p_value"], PREPROCESS)
    output_p = by_feature(calm["vision_drift_p_value"], POSTPROCESS)
    print("\nin-distribution p-values:", {k: f"{v:.3g}" for k, v in {**image_p, **output_p}.items()})
    assert set(image_p) == {*drift.IMAGE_NUMERIC, *drift.IMAGE_CATEGORICAL}
    assert set(output_p) == {"confidence", "entropy", "predicted_class"}
    assert set(by_feature(calm["vision_drift_statistic"], PREPROCESS)) == set(image_p)
    windows = {dict(labels)["model"]: value for labels, value in calm["vision_drift_window_samples"].items()}
    assert windows[POSTPROCESS] == SETTINGS["drift_window"]
    assert SETTINGS["drift_min_samples"] <= windows[PREPROCESS] <= SETTINGS["drift_window"]  # two instances share the traffic
    not_tiny = [feature for feature, p in {**image_p, **output_p}.items() if p >= 1e-3]
    assert len(not_tiny) >= 0.75 * (len(image_p) + len(output_p)), (image_p, output_p)
    assert image_p["brightness"] >= 1e-3 and image_p["saturation"] >= 1e-3

    send(client, night_camera(normal))
    night = read_metrics(drift_server)
    image_p = by_feature(night["vision_drift_p_value"], PREPROCESS)
    output_p = by_feature(night["vision_drift_p_value"], POSTPROCESS)
    print("night-camera p-values:   ", {k: f"{v:.3g}" for k, v in {**image_p, **output_p}.items()})
    assert image_p["brightness"] < 0.01 and image_p["saturation"] < 0.01 and image_p["contrast"] < 0.01
    window_means = by_feature(night["vision_feature_window_mean"], PREPROCESS)
    assert window_means["brightness"] < 0.5 * reference_means["brightness"]
    # HSV saturation of dark JPEG frames is not 0 (chroma noise over a small V), but it collapses too.
    assert window_means["saturation"] < 0.5 * reference_means["saturation"]


def test_non_finite_core_output_is_refused_alone(drift_server):
    """The postprocess model called directly (as the ensemble calls it after the core) with NaN and
    Inf logits: those requests fail with INTERNAL naming the problem and are counted; finite
    requests sent at the same time are answered."""
    client = grpcclient.InferenceServerClient(drift_server.grpc_url)
    rng = np.random.default_rng(STREAM_SEED)

    def logits_request(values: np.ndarray):
        tensor = grpcclient.InferInput("LOGITS", list(values.shape), "FP32")
        tensor.set_data_from_numpy(values.astype(np.float32))
        return [tensor]

    def counted() -> float:
        samples = read_metrics(drift_server)["vision_nonfinite_outputs_total"]
        return sum(v for labels, v in samples.items() if dict(labels) == {"pipeline": PIPELINE, "model": POSTPROCESS})

    start = counted()
    bad = rng.normal(0, 1, (2, 1000))
    bad[0, 3], bad[1, 7] = np.nan, np.inf
    good = rng.normal(0, 1, (1, 1000))
    results: dict[str, object] = {}
    for name, values in (("nan", bad[:1]), ("good", good), ("inf", bad[1:]), ("good2", good)):
        client.async_infer(
            POSTPROCESS, logits_request(values), callback=lambda result, error, name=name: results.update({name: error or result})
        )
    for _ in range(200):
        if len(results) == 4:
            break
        time.sleep(0.05)
    for name in ("nan", "inf"):
        error = results[name]
        assert isinstance(error, InferenceServerException), error
        assert str(error.status()) == "StatusCode.INTERNAL" and "non-finite model output" in error.message(), error
    for name in ("good", "good2"):
        assert not isinstance(results[name], InferenceServerException), results[name]
        assert results[name].as_numpy("LABELS").shape == (1, 5)
    assert counted() == start + 2
