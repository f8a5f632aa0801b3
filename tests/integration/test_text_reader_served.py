"""The two-stage text reader on a real tritonserver: the ensemble's postprocess fans the crops out to the
direction classifier and the recognizer by BLS, and the answers come back per photo.

Photos with text drawn on them (tests/support/text_reading.py) are sent over gRPC, one per request, and
the served lines are compared with the same computation in process (``reader.read`` with width buckets)
and with RapidOCR's own runtime in its environment. Sent all at once, the recognizer batches the chunks
of different photos and requests together. Run with ``-s`` for the figures.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builders import rapidocr_models
from devtools.loadgen import free_port
from tests.support import text_reading
from tests.support.text_reader_server import NAME, RepositoryServer, write_repository
from vision_serving.tasks.text_reading import reader, recognition

pytestmark = pytest.mark.integration

PHOTOS = 12
OUTPUTS = ("TEXTS", "SCORES", "BOXES", "BOX_SCORES", "COUNT")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = write_repository(tmp_path_factory.mktemp("text-reader") / "model_repository")
    logs = tmp_path_factory.mktemp("text-reader-logs")
    running = RepositoryServer(
        http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), model_repository=root, log_file=logs / "tritonserver.log"
    )
    running.start()
    try:
        running.wait_ready(timeout_s=240)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def drawn() -> dict[str, bytes]:
    return {name: data for name, (data, _lines) in text_reading.text_photos(PHOTOS).items()}


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
def in_process(drawn) -> dict[str, list[reader.Line]]:
    sessions = {
        role: onnxruntime.InferenceSession(str(rapidocr_models.model_file(role)), providers=["CPUExecutionProvider"])
        for role in rapidocr_models.MODELS
    }

    def runner(session):
        name = session.get_inputs()[0].name
        return lambda batch: session.run(None, {name: np.ascontiguousarray(batch, dtype=np.float32)})[0]

    models = {role: runner(session) for role, session in sessions.items()}
    classes = recognition.characters(rapidocr_models.model_characters(rapidocr_models.model_file("recognizer")))
    return {
        name: reader.read(
            text_reading.decode_bgr(data), models["detector"], models["recognizer"], classes, models["classifier"], batching="buckets"
        )
        for name, data in drawn.items()
    }


def test_served_lines_are_the_in_process_reader_s_and_agree_with_rapidocr(server, drawn, in_process):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    served = {name: read_served(client, [data])[0] for name, data in drawn.items()}
    for name in drawn:
        assert [line.text for line in served[name]] == [line.text for line in in_process[name]], name
        np.testing.assert_allclose([line.score for line in served[name]], [line.score for line in in_process[name]], atol=1e-4)
        np.testing.assert_allclose(
            np.array([line.box for line in served[name]]).reshape(-1),
            np.array([line.box for line in in_process[name]]).reshape(-1),
            atol=0.5,
        )
    rapidocr = text_reading.reference(drawn)
    agreement = text_reading.against_rapidocr(rapidocr, served)
    print(f"\nserved {NAME} vs RapidOCR {rapidocr['']['rapidocr']} ({len(drawn)} photos): {agreement.summary()}")
    assert agreement.lines >= 3 * len(drawn)
    assert agreement.exact_rate >= 0.95 and agreement.cer <= 0.01, agreement.summary()
    assert agreement.min_iou >= 0.9, agreement.summary()


def test_concurrent_photos_share_recognizer_batches_and_answer_as_alone(server, drawn, in_process):
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def statistics() -> tuple[int, int]:
        stats = client.get_inference_statistics(f"{NAME}_recognizer", as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))

    before = statistics()
    names = sorted(drawn) * 2
    local = threading.local()

    def call(name: str) -> list[reader.Line]:
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(server.grpc_url)
        return read_served(local.client, [drawn[name]])[0]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, names))
    after = statistics()
    for name, lines in zip(names, answers):
        assert [line.text for line in lines] == [line.text for line in in_process[name]], name
    crops, executions = after[0] - before[0], after[1] - before[1]
    print(f"\nrecognizer: {crops} crops in {executions} executions ({crops / max(executions, 1):.1f} per batch) for {len(names)} requests")
    assert crops == sum(len(lines) for lines in answers) or crops >= sum(len(lines) for lines in answers)
    assert executions < crops  # chunks of different photos and requests were batched together


def test_a_photo_without_text_has_count_zero_and_a_bad_upload_is_invalid_argument(server, drawn):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    import cv2

    ok, blank = cv2.imencode(".png", np.full((240, 320, 3), 200, np.uint8))
    assert ok
    (lines,) = read_served(client, [blank.tobytes()])
    assert lines == []
    with pytest.raises(InferenceServerException) as raised:
        read_served(client, [b"not an image"])
    assert str(raised.value.status()) == "StatusCode.INVALID_ARGUMENT", raised.value
    name = sorted(drawn)[0]
    assert read_served(client, [drawn[name]])[0], "the server stopped reading after a bad upload"
