"""End to end: a real tritonserver's drift metrics, scraped by a real Prometheus evaluating the real
alert rules (k8s/prometheusrule.yaml, every `for:` divided by FOR_DIVISOR), raise
VisionServingFeatureDrift when the photos turn into night-camera frames, and not before.

The server serves a copy of the built image_classifier pipeline with its own configs (drift_window,
drift_min_samples, drift_update_every as committed). In-distribution traffic is the images the drift
reference was built from (the recipe's held-out photos and their seeded augmentations), as clients
send them. The shifted traffic is the same photos as a night camera sees them: gray, dark, low
contrast, with sensor noise, JPEG. Run with -s to see the measured times and
the features that triggered.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from builders import calibration, loaded
from devtools.loadgen import copy_repository, running_server
from devtools.prometheus import LocalPrometheus, ScrapeTarget, alert_rule_groups
from tests.support.pipelines import CLASSIFIER, built_classifier
from vision_serving import drift, layout, model_config

pytestmark = pytest.mark.integration

PIPELINE = CLASSIFIER
ALERT = "VisionServingFeatureDrift"
FOR_DIVISOR = 180  # 15 minutes of `for:` become 5 s
CONCURRENCY = 4
ALERT_TIMEOUT_S = 120.0


def settings() -> drift.DriftSettings:
    config = model_config.load_config(layout.pipeline(PIPELINE).model_dir("preprocess"))
    return drift.DriftSettings.from_config(config)


def reference_images() -> list[bytes]:
    """The images the drift reference was built from (builders.drift_reference: the held-out photos and
    their seeded augmentations), encoded as a client sends them."""
    pipeline = loaded.load(layout.pipeline(PIPELINE))
    limits = pipeline.configs.limits
    sources = calibration.evaluation_sources(pipeline)
    count = len(sources) * (1 + calibration.AUGMENTED_PER_PHOTO)
    samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, limits)
    return [sample.data for sample in samples]


def night_camera_frame(data: bytes, rng: np.random.Generator) -> bytes:
    """A photo as a cheap camera sees it at night: gray, dark (about a third), low contrast, noisy, JPEG."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    gray = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    night = 12.0 + 0.3 * gray + rng.normal(0.0, 3.0, gray.shape)
    ok, encoded = cv2.imencode(".jpg", np.clip(night, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 80])
    assert ok
    return encoded.tobytes()


class Stream:
    """Sends images to the ensemble from CONCURRENCY threads, one image per request, until stopped."""

    def __init__(self, url: str, images: list[bytes]) -> None:
        self.url, self.images = url, images
        self.sent = 0
        self.errors: list[str] = []
        self.first_sent_at: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(CONCURRENCY)
        self._cycle = itertools.cycle(images)

    def _next(self) -> bytes:
        with self._lock:
            if self.first_sent_at is None:
                self.first_sent_at = time.monotonic()
            self.sent += 1
            return next(self._cycle)

    def _worker(self, limit: int | None) -> None:
        client = grpcclient.InferenceServerClient(self.url)
        while not self._stop.is_set() and (limit is None or self.sent < limit):
            image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
            image.set_data_from_numpy(np.array([[self._next()]], dtype=np.object_))
            try:
                client.infer(PIPELINE, [image], client_timeout=30)
            except Exception as error:  # counted, reported by the test
                self.errors.append(str(error))

    def start(self, limit: int | None = None) -> Stream:
        self._futures = [self._pool.submit(self._worker, limit) for _ in range(CONCURRENCY)]
        return self

    def wait(self) -> None:
        for future in self._futures:
            future.result()

    def stop(self) -> None:
        self._stop.set()
        self.wait()
        self._pool.shutdown()


def drift_alerts(prometheus: LocalPrometheus) -> list[dict]:
    return [alert for alert in prometheus.alerts() if alert["labels"]["alertname"] == ALERT]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A tritonserver serving a copy of the built pipeline (its own drift windows, no other test's traffic)."""
    from builders import drift_reference

    pipeline = built_classifier()
    drift_reference.build(loaded.load(pipeline), log=lambda message: None)
    root = tmp_path_factory.mktemp("drift")
    copy_repository(pipeline.repository, root / "model_repository" / PIPELINE)
    with running_server(root / "model_repository", root / "logs") as running:
        yield running


def test_night_camera_frames_raise_the_drift_alert(server, tmp_path):
    window = settings()
    in_distribution = reference_images()
    # Whole cycles of the reference's images, at least a window's worth: the window ends up holding
    # each image once or twice, close to the reference's own distribution.
    in_distribution_count = len(in_distribution) * math.ceil(window.window / len(in_distribution))
    rng = np.random.default_rng(7)
    shifted = [night_camera_frame(data, rng) for data in in_distribution]
    target = ScrapeTarget(f"localhost:{server.metrics_port}")
    with LocalPrometheus([target], rule_groups=alert_rule_groups(for_divisor=FOR_DIVISOR), workdir=tmp_path / "prometheus") as prometheus:
        prometheus.wait_until_scraped()

        # 1. In distribution: a full window of the reference's images, then its p-values: no drift alert at any point.
        stream = Stream(server.grpc_url, in_distribution).start(limit=in_distribution_count)
        seen: list[dict] = []
        while stream.sent < in_distribution_count:
            seen += drift_alerts(prometheus)
            time.sleep(1.0)
        stream.wait()
        settle_until = time.monotonic() + 5
        while time.monotonic() < settle_until:
            seen += drift_alerts(prometheus)
            time.sleep(1.0)
        p_values = prometheus.query(f'vision_drift_p_value{{model="{PIPELINE}_preprocess"}}')
        in_distribution_p = {s["metric"]["feature"]: float(s["value"][1]) for s in p_values}
        print(f"\nin distribution: {stream.sent} images, preprocess p-values {in_distribution_p}")
        assert not stream.errors, stream.errors[:3]
        assert in_distribution_p, "no p-values after a full window: are the drift metrics exported?"
        assert not seen, f"drift alert on in-distribution photos: {[a['labels'] for a in seen]}"

        # 2. Night-camera frames until the alert is pending, then firing (for: shortened FOR_DIVISOR times).
        night = Stream(server.grpc_url, shifted).start()
        pending_at = firing_at = None
        alerts: list[dict] = []
        try:
            deadline = time.monotonic() + ALERT_TIMEOUT_S
            while time.monotonic() < deadline and firing_at is None:
                alerts = drift_alerts(prometheus)
                now = time.monotonic()
                if alerts and pending_at is None:
                    pending_at = now
                if any(alert["state"] == "firing" for alert in alerts):
                    firing_at = now
                time.sleep(0.5)
        finally:
            night.stop()
        assert night.first_sent_at is not None
        features = sorted({(a["labels"]["model"], a["labels"]["feature"]) for a in alerts})
        print(f"night frames: {night.sent} images sent, {len(night.errors)} errors")
        if pending_at is not None:
            print(f"{ALERT} pending {pending_at - night.first_sent_at:.1f} s after the first night frame")
        if firing_at is not None:
            print(f"{ALERT} firing {firing_at - night.first_sent_at:.1f} s after it (for: 15m / {FOR_DIVISOR})")
        print("features that triggered: " + ", ".join(f"{model}/{feature}" for model, feature in features))
        assert not night.errors, night.errors[:3]
        assert pending_at is not None, f"no {ALERT} within {ALERT_TIMEOUT_S:.0f} s of night frames"
        assert (f"{PIPELINE}_preprocess", "brightness") in features, features
