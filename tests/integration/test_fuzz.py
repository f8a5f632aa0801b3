"""Seeded fuzzing of the image path with mutated real JPEGs (radamsa-like, in Python).

Two levels:

* in-process: ``decode_rgb`` on thousands of mutants (in a child process, so a
  native crash in OpenCV/libjpeg is a test failure, not a dead pytest). Only
  ``ImageError`` may come out, and no case may take long (CPU time: the
  process's own, which other load on the machine does not inflate).
* served: mutants through the real ensemble, concurrently: every response is
  a valid classification or INVALID_ARGUMENT, none hangs (per-request
  timeout), the stub processes are the same PIDs afterwards and every model is
  still ready.

CI runs ``FUZZ_CASES`` served cases (default 300); ``-m slow`` runs
``FUZZ_CASES_SLOW`` (default 2000). The seed is ``FUZZ_SEED`` (default 1234);
a failure prints the seed and case index, and ``mutant(seed, index)``
rebuilds that case.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from devtools.loadgen import GOLDEN_LABELS, classify, image_input, stub_processes
from tests.support.fuzzing import mutant
from vision_serving.image_codec import ImageError, ImageLimits, decode_rgb

SEED = int(os.environ.get("FUZZ_SEED", "1234"))
CI_CASES = int(os.environ.get("FUZZ_CASES", "300"))
SLOW_CASES = int(os.environ.get("FUZZ_CASES_SLOW", "2000"))
IN_PROCESS_CASES = int(os.environ.get("FUZZ_CASES_IN_PROCESS", "3000"))
REQUEST_TIMEOUT_S = 60.0
# No single decode may take longer than this in-process (the scan bomb took 14 s).


IN_PROCESS_SCRIPT = r"""
import json, sys, time
from tests.support.fuzzing import mutant, DECODE_BUDGET_S
from vision_serving.image_codec import ImageError, ImageLimits, decode_rgb
seed, count = int(sys.argv[1]), int(sys.argv[2])
limits = ImageLimits(max_bytes=20 * 2**20, max_pixels=50_000_000)
outcomes, problems, slowest = {}, [], 0.0
for index in range(count):
    payload, how = mutant(seed, index)
    started = time.process_time()
    try:
        image = decode_rgb(payload, limits)
        assert image.dtype.name == "uint8" and image.ndim == 3 and image.shape[2] == 3, image.shape
        key = "decoded"
    except ImageError as error:
        key = "rejected: " + str(error).split(":")[0][:40]
    except BaseException as error:
        problems.append({"index": index, "mutations": how, "error": f"{type(error).__name__}: {error}"[:300]})
        key = "ESCAPED " + type(error).__name__
    elapsed = time.process_time() - started
    slowest = max(slowest, elapsed)
    if elapsed > DECODE_BUDGET_S:
        problems.append({"index": index, "mutations": how, "error": f"took {elapsed:.1f} s"})
    outcomes[key] = outcomes.get(key, 0) + 1
print(json.dumps({"outcomes": outcomes, "problems": problems, "slowest_s": round(slowest, 3)}))
"""


def test_decode_fuzz_in_process():
    """Thousands of mutants through decode_rgb in a child process: only ImageError, never slow, never a crash."""
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-c", IN_PROCESS_SCRIPT, str(SEED), str(IN_PROCESS_CASES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, f"decoder process died (seed {SEED}): rc {completed.returncode}\n{completed.stderr[-2000:]}"
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    print(f"in-process fuzz, seed {SEED}, {IN_PROCESS_CASES} cases in {time.monotonic() - started:.1f} s:", json.dumps(report))
    assert report["problems"] == [], f"seed {SEED}: {report['problems'][:5]}"
    assert report["outcomes"].get("decoded", 0) > 0 and len(report["outcomes"]) > 3, "the mutants did not exercise the decoder"


# --------------------------------------------------------------------------- served


def is_valid_classification(result) -> bool:
    labels, scores, ids = (result.as_numpy(name) for name in ("LABELS", "SCORES", "CLASS_IDS"))
    return (
        labels.shape == scores.shape == ids.shape == (1, 5)
        and bool(np.all(np.isfinite(scores)))
        and bool(np.all(np.diff(scores[0]) <= 1e-6))
        and 0.0 < float(scores[0].sum()) <= 1.0 + 1e-4
        and all(0 <= int(i) < 1000 for i in ids[0])
    )


def fuzz_server(server, count: int, seed: int = SEED, concurrency: int = 8) -> dict:
    stubs_before = stub_processes(server.process.pid)
    assert stubs_before, "no Python backend stubs found"

    def run(index: int) -> tuple[int, str, str, float]:
        payload, how = mutant(seed, index)
        client = clients[index % concurrency]
        started = time.monotonic()
        try:
            result = client.infer("image_classifier", [image_input([payload])], client_timeout=REQUEST_TIMEOUT_S)
            outcome = "classified" if is_valid_classification(result) else "INVALID RESPONSE"
        except InferenceServerException as error:
            status = str(error.status()).removeprefix("StatusCode.")
            outcome = "invalid_argument" if status == "INVALID_ARGUMENT" else f"{status}: {error.message()[:200]}"
        return index, how, outcome, time.monotonic() - started

    clients = [grpcclient.InferenceServerClient(server.grpc_url) for _ in range(concurrency)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(run, range(count)))
    elapsed = time.monotonic() - started
    outcomes = Counter(outcome for _, _, outcome, _ in results)
    bad = [(index, how, outcome) for index, how, outcome, _ in results if outcome not in ("classified", "invalid_argument")]
    client = clients[0]
    report = {
        "seed": seed,
        "cases": count,
        "seconds": round(elapsed, 1),
        "outcomes": dict(outcomes),
        "by_mutation": dict(Counter(how.split("+")[0] for _, how, _, _ in results)),
        "slowest_s": round(max(latency for *_, latency in results), 2),
        "bad": bad[:10],
        "stubs_unchanged": stub_processes(server.process.pid) == stubs_before,
        "all_ready": client.is_server_ready()
        and all(
            client.is_model_ready(model)
            for model in ("image_classifier", "image_classifier_preprocess", "image_classifier_core", "image_classifier_postprocess")
        ),
    }
    print("served fuzz:", json.dumps(report))
    return report


def assert_survived(server, report: dict, photo_bytes) -> None:
    assert report["bad"] == [], f"seed {report['seed']}: responses other than a classification or INVALID_ARGUMENT: {report['bad']}"
    assert report["slowest_s"] < REQUEST_TIMEOUT_S
    assert report["stubs_unchanged"], "a stub process died or was restarted"
    assert report["all_ready"]
    assert report["outcomes"].get("classified", 0) > 0 and report["outcomes"].get("invalid_argument", 0) > 0
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert classify(client, photo_bytes["coffee"]) in GOLDEN_LABELS["coffee"]


@pytest.mark.integration
def test_served_fuzz(triton_server, photo_bytes):
    assert_survived(triton_server, fuzz_server(triton_server, CI_CASES), photo_bytes)


@pytest.mark.slow
@pytest.mark.integration
def test_served_fuzz_long(triton_server, photo_bytes):
    assert SLOW_CASES >= 1000
    assert_survived(triton_server, fuzz_server(triton_server, SLOW_CASES, seed=SEED + 1), photo_bytes)


# --------------------------------------------------------------------------- regressions found by fuzzing and review


LIMITS = ImageLimits(max_bytes=20 * 2**20, max_pixels=50_000_000)


def test_mutants_are_reproducible():
    assert mutant(SEED, 17) == mutant(SEED, 17)
    assert mutant(SEED, 17) != mutant(SEED, 18)


def test_regression_progressive_scan_bomb_is_rejected_fast():
    """A 16-megapixel progressive JPEG with 1000 repeated scans (125 KB) took libjpeg 14 s to decode."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4000, 4000), np.uint8)).save(buffer, "JPEG", progressive=True, quality=90)
    data = buffer.getvalue()
    scan = data[data.rindex(b"\xff\xda") : -2]
    bomb = data[:-2] + scan * 1000 + b"\xff\xd9"
    started = time.process_time()
    with pytest.raises(ImageError, match="more than 64 scans"):
        decode_rgb(bomb, LIMITS)
    assert time.process_time() - started < 0.5
    # A normal progressive JPEG of the same image is fine.
    assert decode_rgb(data, LIMITS).shape == (4000, 4000, 3)


def test_regression_opencv_errors_become_image_errors(monkeypatch):
    """cv2.error out of execute() would fail every request in the dynamic batch, not just this one."""
    import cv2

    from vision_serving import image_codec

    def failing_decode(*_args, **_kwargs):
        raise cv2.error("OpenCV(4.11) imgcodecs: image size is too large")

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, "PNG")
    monkeypatch.setattr(image_codec.cv2, "imdecode", failing_decode)
    with pytest.raises(ImageError, match="corrupt PNG: the decoder failed"):
        decode_rgb(buffer.getvalue(), LIMITS)


def test_regression_decoded_size_must_match_the_header(monkeypatch):
    """The pixel limit is checked on the header we parse; a decoder reading another size is refused."""
    from vision_serving import image_codec

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, "PNG")
    monkeypatch.setattr(image_codec.cv2, "imdecode", lambda *_: np.zeros((9000, 9000, 3), np.uint8))
    with pytest.raises(ImageError, match="decoded 9000x9000 image, header declares 8x8"):
        decode_rgb(buffer.getvalue(), LIMITS)


def test_regression_side_over_opencv_warp_limit_is_rejected():
    """Fuzz case (seed 1235, #1257): a JPEG declaring 65344x383 (25 MP, under the pixel limit) decoded,
    then cv2.warpAffine asserted (sides must be < 32767) inside execute(): INTERNAL for the whole batch."""
    from vision_serving import layout, model_config, preprocessing

    payload, _ = mutant(1235, 1257)
    with pytest.raises(ImageError, match="65344x383: a side over the limit of 32766 pixels"):
        decode_rgb(payload, LIMITS)
    # The widest accepted image goes through the served preprocessing.
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((2, 32766, 3), np.uint8)).save(buffer, "PNG")
    spec = preprocessing.PreprocessSpec.from_config(model_config.load_config(layout.pipeline("image_classifier").model_dir("preprocess")))
    assert preprocessing.preprocess_batch([decode_rgb(buffer.getvalue(), LIMITS)], spec).shape == (1, *spec.output_shape)


@pytest.mark.parametrize(
    "body",
    [b"\xff" * 20_000_000, b"\xff\xd0" * 10_000_000, b"\xff\xe0\x00\x02" * 5_000_000],
    ids=["fill_bytes", "restart_markers", "empty_app_segments"],
)
def test_regression_header_walk_cost_is_bounded(body):
    """20 MB of fill bytes or tiny segments cost the Python header walk ~7 s per request before
    (one byte or segment per loop); now fill runs are one regex match and segments are capped."""
    payload = b"\xff\xd8" + body + b"\xff\xd9"
    started = time.process_time()
    with pytest.raises(ImageError, match=r"truncated JPEG|more than 1000 segments|before any scan"):
        decode_rgb(payload, LIMITS)
    assert time.process_time() - started < 1.0


def test_exif_thumbnail_scans_are_not_counted():
    """A thumbnail inside APP1 has its own SOS markers; only the main image's scans count against
    the served limit: with one scan allowed, a baseline JPEG carrying ~100 thumbnail scans decodes,
    while a progressive one (several scans of its own) is refused."""
    thumb = io.BytesIO()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(thumb, "JPEG", progressive=True)
    payload = b"Exif\0\0" + thumb.getvalue() * 10  # ~100 scans' worth of markers inside one APP1 segment
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload

    def with_thumbnail(progressive: bool) -> bytes:
        main = io.BytesIO()
        Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(main, "JPEG", progressive=progressive)
        data = main.getvalue()
        return data[:2] + app1 + data[2:]

    one_scan = dataclasses.replace(LIMITS, max_jpeg_scans=1)
    assert decode_rgb(with_thumbnail(progressive=False), one_scan).shape == (32, 32, 3)
    with pytest.raises(ImageError, match="more than 1 scans"):
        decode_rgb(with_thumbnail(progressive=True), one_scan)
