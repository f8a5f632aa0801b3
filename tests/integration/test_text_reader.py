"""The text_reader pipeline on the run's shared tritonserver: two stages, the crops fanned out by BLS.

Photos with text drawn on them (tests/support/text_reading.py) and real photos with text (a scanned page, a
name badge, a brand on a tank) are sent one per request, and the served lines are compared with the same
pipeline in process (:class:`vision_serving.served.ServedPipeline`, which runs the second stages in the
same chunks) and with RapidOCR's own runtime in its environment. Sent all at once, the recognizer batches
the chunks of different photos and requests together. Run with ``-s`` for the figures.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builders import loaded
from tests.support import text_reading
from vision_serving import layout
from vision_serving.tasks.text_reading import reader

pytestmark = pytest.mark.integration

NAME = "text_reader"
PHOTOS = 12
# The package photos with text in them: a scanned page, a name badge, brands on a tank and a cup, a clock face.
REAL_PHOTOS = ("page", "grace_hopper", "motorcycle_left", "motorcycle_right", "coffee", "camera", "china")
OUTPUTS = ("TEXTS", "SCORES", "BOXES", "BOX_SCORES", "COUNT")


@pytest.fixture(scope="module")
def drawn() -> dict[str, bytes]:
    return {name: data for name, (data, _lines) in text_reading.text_photos(PHOTOS).items()}


@pytest.fixture(scope="module")
def real(photo_bytes) -> dict[str, bytes]:
    return {name: photo_bytes[name] for name in REAL_PHOTOS}


def read_served(client: grpcclient.InferenceServerClient, payloads: list[bytes]) -> list[list[reader.Line]]:
    image = grpcclient.InferInput("IMAGE", [len(payloads), 1], "BYTES")
    image.set_data_from_numpy(np.array(payloads, dtype=np.object_).reshape(-1, 1))
    result = client.infer(NAME, [image], outputs=[grpcclient.InferRequestedOutput(name) for name in OUTPUTS], client_timeout=120)
    texts, scores, boxes, box_scores, counts = (result.as_numpy(name) for name in OUTPUTS)
    return [
        [
            reader.Line(texts[row, k].decode(), float(scores[row, k]), boxes[row, k], float(box_scores[row, k]))
            for k in range(int(counts[row, 0]))
        ]
        for row in range(len(payloads))
    ]


@pytest.fixture(scope="module")
def in_process(built_repository, drawn, real) -> dict[str, list[reader.Line]]:
    """Every photo read by the pipeline in this process, one photo a run (as one per request is served)."""
    served = loaded.load(layout.pipeline(NAME, built_repository)).served()
    return {name: served.run([data]).lines[0] for name, data in {**drawn, **real}.items()}  # type: ignore[attr-defined]


def test_served_lines_are_the_in_process_pipeline_s_and_agree_with_rapidocr(triton_server, drawn, real, in_process):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    photos = {**drawn, **real}
    served = {name: read_served(client, [data])[0] for name, data in photos.items()}
    for name in photos:
        assert [line.text for line in served[name]] == [line.text for line in in_process[name]], name
        np.testing.assert_allclose([line.score for line in served[name]], [line.score for line in in_process[name]], atol=1e-4)
        np.testing.assert_allclose(
            np.array([line.box for line in served[name]]).reshape(-1),
            np.array([line.box for line in in_process[name]]).reshape(-1),
            atol=0.5,
        )
    # Judged on all photos together (every line counts once); each set's figures are printed.
    rapidocr = text_reading.reference(photos)
    for label, chosen in (("drawn", drawn), ("real", real)):
        agreement = text_reading.against_rapidocr(rapidocr, {name: served[name] for name in chosen})
        print(f"\nserved {NAME} vs RapidOCR {rapidocr['']['rapidocr']} ({len(chosen)} {label} photos): {agreement.summary()}")
        assert agreement.lines >= 2 * len(chosen)
    agreement = text_reading.against_rapidocr(rapidocr, served)
    print(f"all {len(photos)} photos: {agreement.summary()}")
    assert agreement.exact_rate >= 0.95 and agreement.cer <= 0.01, agreement.summary()
    assert agreement.min_iou >= 0.9, agreement.summary()


def test_the_recipe_s_golden_lines_are_read(triton_server, photo_bytes):
    """pipeline.toml [golden]: photo -> lines the served pipeline must read ([]: none at all)."""
    golden = loaded.load(layout.pipeline(NAME)).recipe.golden
    assert golden and any(golden.values()), "the recipe names golden photos with lines"
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    for name, expected in golden.items():
        texts = [line.text for line in read_served(client, [photo_bytes[name]])[0]]
        assert set(expected) <= set(texts) if expected else texts == [], (name, texts)


def test_concurrent_photos_share_recognizer_batches_and_answer_as_alone(triton_server, drawn, in_process):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)

    def statistics() -> tuple[int, int]:
        stats = client.get_inference_statistics(f"{NAME}_core_recognizer", as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))

    before = statistics()
    names = sorted(drawn) * 2
    local = threading.local()

    def call(name: str) -> list[reader.Line]:
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(triton_server.grpc_url)
        return read_served(local.client, [drawn[name]])[0]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, names))
    after = statistics()
    for name, lines in zip(names, answers):
        assert [line.text for line in lines] == [line.text for line in in_process[name]], name
    crops, executions = after[0] - before[0], after[1] - before[1]
    print(f"\nrecognizer: {crops} crops in {executions} executions ({crops / max(executions, 1):.1f} per batch) for {len(names)} requests")
    assert crops >= sum(len(lines) for lines in answers)  # each line read once (a crop under text_score is dropped after)
    assert executions < crops  # chunks of different photos and requests were batched together


def test_photos_of_one_size_read_together_and_a_blank_photo_has_count_zero(triton_server, drawn, in_process):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    name = sorted(drawn)[0]
    ok, blank = cv2.imencode(".png", np.full((240, 320, 3), 200, np.uint8))
    assert ok
    assert read_served(client, [blank.tobytes()]) == [[]]
    twice = read_served(client, [drawn[name], drawn[name]])
    assert [[line.text for line in lines] for lines in twice] == [[line.text for line in in_process[name]]] * 2


def test_bad_uploads_are_invalid_argument_and_the_next_request_is_read(triton_server, drawn, photo_bytes):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    ok, strip = cv2.imencode(".png", np.full((300, 2000, 3), 200, np.uint8))  # shorter side up to 736: a 736 x 4896 input
    assert ok
    cases = {
        "not an image": ([b"not an image"], "unrecognized image format"),
        "a detector input longer than max_detector_side": ([strip.tobytes()], "needs a 4896x736 text detector input, longer than 4096"),
        "two detector sizes in one request": ([photo_bytes["page"], photo_bytes["astronaut"]], "need one detector size"),
    }
    for label, (payloads, message) in cases.items():
        try:
            read_served(client, payloads)
        except InferenceServerException as error:
            assert str(error.status()) == "StatusCode.INVALID_ARGUMENT" and message in str(error), (label, error)
        else:
            pytest.fail(f"{label}: served without an error")
    name = sorted(drawn)[0]
    assert read_served(client, [drawn[name]])[0], "the server stopped reading after a bad upload"


def test_read_text_prints_the_lines_draws_their_boxes_and_gives_json(triton_server, photo_bytes, tmp_path):
    """./scripts/read-text: the lines of each file in reading order, one photo per request (photos of different sizes
    in one folder), --draw and --json."""
    import json
    import subprocess

    photos_dir = tmp_path / "photos"
    photos_dir.mkdir()
    for name in ("page", "astronaut"):
        (photos_dir / f"{name}.png").write_bytes(photo_bytes[name])
    script = str(layout.REPOSITORY_ROOT / "scripts" / "read-text")
    drawn = tmp_path / "drawn"
    run = subprocess.run(
        [script, "--url", triton_server.grpc_url, "--draw", str(drawn), "photos"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert f"photos/astronaut.png: 0 lines -> {drawn / 'astronaut.lines.jpg'}" in lines
    page = lines.index(f"photos/page.png: 7 lines -> {drawn / 'page.lines.jpg'}")
    assert lines[page + 1].split(maxsplit=2) == ["1", "1.000", "Region-based segmentation"]
    assert cv2.imread(str(drawn / "page.lines.jpg")).shape == (191, 384, 3)
    as_json = subprocess.run(
        [script, "--url", triton_server.grpc_url, "--json", "photos/page.png"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert as_json.returncode == 0, as_json.stderr
    (record,) = json.loads(as_json.stdout)
    assert record["lines"][0]["text"] == "Region-based segmentation" and len(record["lines"][0]["box"]) == 4
