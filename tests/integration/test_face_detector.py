"""The face_detector ensemble on a real tritonserver, against MediaPipe's own FaceDetection.

Photos with zero faces, one face (the package photos) and several (composites
of face crops, tests/support/faces.py). MediaPipe's boxes and keypoints may
extend past the image (a face cut by the border); the served ones are clipped
to it (``clip_to_image`` in face_detector_postprocess/config.pbtxt), so the
reference is clipped the same way before comparing.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from builders import loaded
from tests.support import faces, references
from vision_serving import image_codec, layout
from vision_serving.tasks import detection, segmentation

pytestmark = pytest.mark.integration

MODEL = "face_detector"
CLIENTS = {"grpc": grpcclient, "http": httpclient}
MIN_IOU = 0.9
MAX_KEYPOINT_ERROR = 0.02  # of the face's width
OUTPUTS = ("BOXES", "SCORES", "CLASS_IDS", "LABELS", "KEYPOINTS", "COUNT")


def detect(
    server, images: list[bytes], thresholds: list[float] | None = None, protocol: str = "grpc", iou_thresholds: list[float] | None = None
) -> dict[str, np.ndarray]:
    module = CLIENTS[protocol]
    client = module.InferenceServerClient(server.grpc_url if protocol == "grpc" else server.http_url)
    image_input = module.InferInput("IMAGE", [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    inputs = [image_input]
    if thresholds is not None:
        threshold_input = module.InferInput("SCORE_THRESHOLD", [len(images), 1], "FP32")
        threshold_input.set_data_from_numpy(np.array(thresholds, dtype=np.float32).reshape(-1, 1))
        inputs.append(threshold_input)
    if iou_thresholds is not None:
        iou_input = module.InferInput("IOU_THRESHOLD", [len(images), 1], "FP32")
        iou_input.set_data_from_numpy(np.array(iou_thresholds, dtype=np.float32).reshape(-1, 1))
        inputs.append(iou_input)
    result = client.infer(MODEL, inputs)
    out = {name: result.as_numpy(name) for name in OUTPUTS}
    n, k = len(images), out["SCORES"].shape[1]
    assert out["BOXES"].shape == (n, k, 4) and out["KEYPOINTS"].shape == (n, k, 6, 2) and out["COUNT"].shape == (n, 1)
    assert out["BOXES"].dtype == out["SCORES"].dtype == out["KEYPOINTS"].dtype == np.float32 and out["COUNT"].dtype == np.int32
    assert out["CLASS_IDS"].shape == out["LABELS"].shape == (n, k) and out["CLASS_IDS"].dtype == np.int32
    for row, count in zip(out["LABELS"], out["COUNT"][:, 0]):  # one class, "face" (labels.txt); padding rows are empty
        assert row[:count].tolist() == [b"face"] * count and row[count:].tolist() == [b""] * (k - count)
    assert k == out["COUNT"].max(initial=0)  # K is the request's largest count
    return out


def clipped(reference: dict[str, np.ndarray], height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    size = np.array([width, height], np.float32)
    boxes = np.clip(reference["boxes"].reshape(-1, 2, 2), 0, size).reshape(-1, 4)
    return boxes, np.clip(reference["keypoints"], 0, size)


@pytest.fixture(scope="module")
def photos() -> dict[str, bytes]:
    return faces.photo_set()


@pytest.fixture(scope="module")
def mediapipe(photos) -> dict[str, dict[str, np.ndarray]]:
    return references.mediapipe_outputs("face_detection", photos)


def test_the_photos_have_zero_one_and_several_faces(mediapipe):
    counts = {name: len(result["scores"]) for name, result in mediapipe.items()}
    assert {counts[name] for name in faces.NO_FACE} == {0}
    assert {counts[name] for name in faces.ONE_FACE} == {1}
    assert sorted(counts[name] for name in faces.several_faces()) == [3, 4, 10]


@pytest.mark.parametrize("name", [*faces.NO_FACE, *faces.ONE_FACE, *faces.several_faces()])
def test_faces_match_mediapipe(triton_server, photos, mediapipe, name):
    """Same number of faces; each matched box with IoU >= 0.9, keypoints within 2 % of the face size."""
    out = detect(triton_server, [photos[name]])
    count = int(out["COUNT"][0, 0])
    height, width = image_codec.decode_rgb(photos[name], faces.LIMITS).shape[:2]
    reference_boxes, reference_keypoints = clipped(mediapipe[name], height, width)
    assert count == len(reference_boxes)
    boxes, keypoints, scores = out["BOXES"][0], out["KEYPOINTS"][0], out["SCORES"][0]
    assert np.all(np.diff(scores) <= 0) and np.all(scores > 0.5)  # best first, above the default threshold
    matches = detection.match_boxes(boxes, reference_boxes, MIN_IOU)
    assert len(matches) == count, f"{name}: IoUs {detection.box_iou(boxes, reference_boxes).max(axis=1, initial=0)}"
    for served, expected, _ in matches:
        face = reference_boxes[expected, 2] - reference_boxes[expected, 0]
        error = np.linalg.norm(keypoints[served] - reference_keypoints[expected], axis=-1).max()
        assert error <= MAX_KEYPOINT_ERROR * face
        assert scores[served] == pytest.approx(mediapipe[name]["scores"][expected], abs=0.01)
    assert np.all((boxes[..., 0::2] >= 0) & (boxes[..., 0::2] <= width) & (boxes[..., 1::2] >= 0) & (boxes[..., 1::2] <= height))


def test_a_request_is_padded_to_its_own_largest_count(triton_server, photos):
    """K is per request: images with fewer faces get zero rows (score 0); a request without faces has K = 0."""
    names = ["coffee", "faces_2x2", "astronaut"]
    requests = [[photos[n] for n in names], [photos["rocket"]], [photos["grace_hopper"], photos["brick"]]]
    with ThreadPoolExecutor(len(requests)) as pool:  # concurrently, so Triton may batch them together
        mixed, empty, single = pool.map(lambda images: detect(triton_server, images), requests)
    assert mixed["COUNT"][:, 0].tolist() == [0, 4, 1] and mixed["BOXES"].shape == (3, 4, 4)
    assert np.all(mixed["BOXES"][0] == 0) and np.all(mixed["SCORES"][0] == 0) and np.all(mixed["KEYPOINTS"][0] == 0)
    assert np.all(mixed["SCORES"][2, 1:] == 0) and mixed["SCORES"][2, 0] > 0.5
    assert empty["COUNT"].tolist() == [[0]] and empty["BOXES"].shape == (1, 0, 4) and empty["KEYPOINTS"].shape == (1, 0, 6, 2)
    assert single["COUNT"][:, 0].tolist() == [1, 0] and single["BOXES"].shape == (2, 1, 4)


def test_several_images_in_one_request_match_one_by_one(triton_server, photos):
    names = ["faces_row_3", "coffee", "grace_hopper", "faces_2x2"]
    together = detect(triton_server, [photos[n] for n in names])
    for index, name in enumerate(names):
        alone = detect(triton_server, [photos[name]])
        count = int(alone["COUNT"][0, 0])
        assert together["COUNT"][index, 0] == count
        for output in ("BOXES", "SCORES", "KEYPOINTS"):
            np.testing.assert_array_equal(together[output][index, :count], alone[output][0])


def test_score_threshold_input(triton_server, photos, mediapipe):
    """SCORE_THRESHOLD overrides the default (0.5) per image; outside [0, 1] is the client's error."""
    scores = np.sort(mediapipe["faces_2x2"]["scores"])[::-1]
    threshold = float((scores[1] + scores[2]) / 2)  # between the second and third best faces
    out = detect(triton_server, [photos["faces_2x2"], photos["faces_2x2"]], [threshold, 0.5])
    assert out["COUNT"][:, 0].tolist() == [2, 4]
    np.testing.assert_allclose(out["SCORES"][0, :2], out["SCORES"][1, :2])
    assert np.all(out["SCORES"][0, 2:] == 0)
    assert detect(triton_server, [photos["astronaut"]], [0.99])["COUNT"].tolist() == [[0]]
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(InferenceServerException, match=r"SCORE_THRESHOLD must be in \[0, 1\]") as error:
            detect(triton_server, [photos["astronaut"]], [bad])
        assert str(error.value.status()) == "StatusCode.INVALID_ARGUMENT"


def test_iou_threshold_input(triton_server, photos):
    """IOU_THRESHOLD overrides the NMS overlap (iou_threshold, 0.3) per image: near 1, the anchors around one face
    are no longer merged into one detection; outside [0, 1] is the client's error."""
    out = detect(triton_server, [photos["astronaut"]] * 2, iou_thresholds=[0.3, 0.95])
    assert out["COUNT"][0, 0] == 1 and out["COUNT"][1, 0] > 1
    assert detect(triton_server, [photos["astronaut"]])["COUNT"].tolist() == [[1]]
    with pytest.raises(InferenceServerException, match=r"IOU_THRESHOLD must be in \[0, 1\]") as error:
        detect(triton_server, [photos["astronaut"]], iou_thresholds=[2.0])
    assert str(error.value.status()) == "StatusCode.INVALID_ARGUMENT"


def test_http_and_grpc_agree(triton_server, photos):
    grpc_out = detect(triton_server, [photos["faces_2x2"]], protocol="grpc")
    http_out = detect(triton_server, [photos["faces_2x2"]], protocol="http")
    for output in OUTPUTS:
        np.testing.assert_array_equal(grpc_out[output], http_out[output])


def test_bad_upload_is_invalid_argument_and_the_server_keeps_serving(triton_server, photos):
    with pytest.raises(InferenceServerException, match="unrecognized image format") as error:
        detect(triton_server, [b"GIF89a not really"])
    assert str(error.value.status()) == "StatusCode.INVALID_ARGUMENT"
    assert detect(triton_server, [photos["astronaut"]])["COUNT"].tolist() == [[1]]


def test_the_same_photos_through_every_pipeline(triton_server, photos):
    """One server, every image-to-tensor pipeline, the same uploads in one request each (the text reader takes
    photos of one detector size per request: tests/integration/test_text_reader.py)."""
    names = ["astronaut", "faces_2x2", "coffee"]
    uploads = np.array([[photos[n]] for n in names], dtype=np.object_)
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)

    def infer(model: str, outputs: tuple[str, ...]) -> list[np.ndarray]:
        image = grpcclient.InferInput("IMAGE", [len(names), 1], "BYTES")
        image.set_data_from_numpy(uploads)
        result = client.infer(model, [image])
        return [result.as_numpy(name) for name in outputs]

    assert {p.name for p in layout.pipelines()} == {"image_classifier", "person_segmenter", MODEL, "text_reader"}
    (labels,) = infer("image_classifier", ("LABELS",))
    masks, coverage = infer("person_segmenter", ("MASK", "COVERAGE"))
    boxes, counts = infer(MODEL, ("BOXES", "COUNT"))
    sizes = [image_codec.decode_rgb(photos[n], faces.LIMITS).shape[:2] for n in names]
    assert labels.shape == (3, 5) and labels[2, 0] == b"espresso"
    assert [segmentation.decode_png(png).shape for png in masks[:, 0]] == sizes
    assert coverage[0, 0] > 0.3
    assert counts[:, 0].tolist() == [1, 4, 0] and boxes.shape == (3, 4, 4)
    # The astronaut's face is inside what the segmenter calls person.
    x0, y0, x1, y1 = boxes[0, 0].round().astype(int)
    assert segmentation.decode_png(masks[0, 0])[y0:y1, x0:x1].mean() > 0.9 * 255


def test_detect_client_prints_boxes_and_draws_them(triton_server, photos, tmp_path):
    """./scripts/detect: a table of boxes per file; --draw writes the image with boxes and keypoints."""
    uploads = tmp_path / "photos"
    uploads.mkdir()
    (uploads / "astronaut.png").write_bytes(photos["astronaut"])
    (uploads / "coffee.png").write_bytes(photos["coffee"])
    script = str(layout.REPOSITORY_ROOT / "scripts" / "detect")
    drawn = tmp_path / "drawn.jpg"
    single = subprocess.run(
        [script, "--url", triton_server.grpc_url, "--draw", str(drawn), "astronaut.png"],
        cwd=uploads,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert single.returncode == 0, single.stderr
    lines = single.stdout.splitlines()
    assert lines[0] == f"astronaut.png: 1 detection (face: 1) -> {drawn}"
    assert lines[1].split() == ["#", "label", "score", "x_min", "y_min", "x_max", "y_max"]
    index, label, score, *box = lines[2].split()
    assert (
        index == "1"
        and label == "face"
        and 0.9 < float(score) < 1
        and detection.box_iou([float(v) for v in box], [178, 83, 273, 178])[0, 0] > 0.95
    )
    image = image_codec.decode_rgb(drawn.read_bytes(), faces.LIMITS)
    original = image_codec.decode_rgb(photos["astronaut"], faces.LIMITS)
    assert image.shape == original.shape and not np.array_equal(image, original)

    (uploads / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    folder = subprocess.run(
        [
            script,
            "--url",
            triton_server.http_url,
            "--protocol",
            "http",
            "--json",
            "--score-threshold",
            "0.6",
            "--draw",
            str(tmp_path / "out"),
            str(uploads),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert folder.returncode == 1 and f"detect: error: {uploads / 'broken.jpg'}:" in folder.stderr
    results = {Path(r["file"]).name: r for r in json.loads(folder.stdout)}
    assert "error" in results["broken.jpg"] and results["coffee.png"]["detections"] == []
    (found,) = results["astronaut.png"]["detections"]
    assert found["label"] == "face" and found["class_id"] == 0 and found["score"] > 0.6
    assert np.array(found["keypoints"]).shape == (6, 2)  # MediaPipe's six: eyes, nose tip, mouth, ear tragions
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["astronaut.detections.jpg", "coffee.detections.jpg"]


def test_golden_photos_of_the_recipe(triton_server, photos):
    """pipeline.toml [golden]: photo -> the number of faces the served pipeline finds."""
    golden = loaded.load(layout.pipeline(MODEL)).recipe.golden
    assert golden, "the recipe names golden photos"
    out = detect(triton_server, [photos[name] for name in golden])
    assert out["COUNT"][:, 0].tolist() == list(golden.values())
