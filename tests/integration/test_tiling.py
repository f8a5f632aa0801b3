"""Tiled detection (vision_serving.tiling), served: the tests' YOLO detector brought with ``new-pipeline --from yolo
--tiling``, built and served on its own (one small server with only the tiled pipeline), against SAHI 0.12.8's
``get_sliced_prediction`` on the same ONNX file at the same settings, run in its own environment
(``tests/support/sahi_reference.py`` in ``.build/envs/ultralytics``).

The photos are drawn here (tests/support/tiling_scenes.py): 1024x768, each with 14 shapes of 20 to 58 px, as the
detector was trained to see them; shrunk whole into its 128x192 input they are 4 to 11 px. A second tiled pipeline,
the tests' oriented-box model (tests/support/yolo_obb.py, 128x128), is served beside it and compared the same way on
640x512 photos of small bars and ellipses, its corners too: SAHI merges oriented boxes by NMS only, as the pipeline's
spec says. A third, the tests' instance segmenter (tests/support/yolo_segment.py, 128x128), is compared on 640x640
photos of small discs, squares and triangles, its masks too (:func:`test_tiled_masks_equal_sahi_sliced_prediction`).
"""

from __future__ import annotations

import base64
import json
import queue
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builders import build_envs, calibration, loaded
from tests.integration.test_bring_your_own_model import edit, run, write_scenes
from tests.support import serve_script, tiling_scenes, yolo, yolo_exports, yolo_obb, yolo_segment
from tests.support.gateway import GatewayProcess, multipart, request
from vision_serving import drift, layout
from vision_serving.served import ServedPipeline
from vision_serving.tasks import detection
from vision_serving.tasks.segmentation import iou

pytestmark = pytest.mark.integration

ROOT = layout.REPOSITORY_ROOT
NAME = "shapes_tiled"
OBB_NAME = "bars_tiled"
OBB_HEIGHT, OBB_WIDTH, OBB_OBJECTS = 512, 640, 8
SEGMENT_NAME = "discs_tiled"
# Square: the full view is then not letterboxed (SAHI stretches a letterboxed view's masks over the padding).
SEGMENT_SIZE, SEGMENT_OBJECTS = 640, 12
# Measured: every unmerged mask 1.0; a mask merged from tile parts 0.998 with one training of the tests' model, 0.970
# with another (SAHI rasterizes a merged mask from its polygons): the models issue's bar for masks, 0.95.
MIN_MASK_IOU = 0.95
# The share of segment detections matched (measured 45 of 48 with one training of the tests' model, 39 of 43 with
# another): SAHI matches tile parts by their masks' extents, so a cut shape can make one group more or less.
MIN_SEGMENT_MATCHED = 0.85
MAX_SEGMENT_GROUPS_APART = 1  # per photo, in count and in each class's count
SAHI_SCRIPT = ROOT / "tests" / "support" / "sahi_reference.py"
MIN_IOU = 0.98
SCORE_TOLERANCE = 1e-3
HEIGHT, WIDTH, SHAPES = 768, 1024, 14
OUTPUTS = ("BOXES", "SCORES", "CLASS_IDS", "LABELS", "COUNT")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    """The tests' trained detector (tests/support/yolo.py), its ``yolo`` export at 128x192, outside the repository."""
    target = tmp_path_factory.mktemp("downloads") / "shapes.onnx"
    target.write_bytes((yolo.trained() / "yolo.onnx").read_bytes())
    return target


@pytest.fixture(scope="module")
def obb_model_file(tmp_path_factory) -> Path:
    """The tests' oriented-box model, its scores made surer as the OBB tests make them (``yolo_exports.surer``)."""
    return yolo_exports.surer(yolo_obb.trained() / "static.onnx", tmp_path_factory.mktemp("obb") / "bars.onnx", yolo_obb.ODDS)


@pytest.fixture(scope="module")
def segment_model_file(tmp_path_factory) -> Path:
    """The tests' instance segmenter (tests/support/yolo_segment.py), its static export at 128x128."""
    target = tmp_path_factory.mktemp("segment") / "discs.onnx"
    target.write_bytes((yolo_segment.trained() / "static.onnx").read_bytes())
    return target


def segment_scene(rng: np.random.Generator, height: int, width: int, background: np.ndarray | None) -> np.ndarray:
    return yolo_segment.scene(rng, height, width, background)[0]


def bring(repository: Path, name: str, model: Path, images: Path) -> str:
    """``new-pipeline --from yolo --tiling``, the recipe pointed at the user's images (``images``/calibration,
    held_out); the command's output."""
    output = run(
        "-m", "builders", "new-pipeline", name, "--from", "yolo", "--model", str(model), "--tiling", "--model-repository", str(repository)
    )
    recipe = repository / name / "pipeline.toml"
    assert "[tiling]" in recipe.read_text()
    edit(
        recipe, r"^exclude = \[\]$", f'calibration_dir = "{images / "calibration"}"\nevaluation_dir = "{images / "held_out"}"\nexclude = []'
    )
    return output


@pytest.fixture(scope="module")
def repository(model_file, obb_model_file, segment_model_file, tmp_path_factory) -> Path:
    """A user's model repository: each model with the one command and ``--tiling``, pointed at their images, built."""
    root = tmp_path_factory.mktemp("tiled")
    repository = root / "model_repository"
    repository.mkdir()
    write_scenes(root / "shapes" / "calibration", 24, seed=11)
    write_scenes(root / "shapes" / "held_out", 12, seed=12)
    yolo_obb.write_scenes(root / "bars" / "calibration", 24, seed=11)
    yolo_obb.write_scenes(root / "bars" / "held_out", 12, seed=12)
    yolo.write_new_scenes(root / "discs" / "calibration", 24, 11, "segment", segment_scene)
    yolo.write_new_scenes(root / "discs" / "held_out", 12, 12, "segment", segment_scene)
    output = bring(repository, NAME, model_file, root / "shapes")
    assert "yolo head, 3 classes (circle, square, triangle), input 128x192" in output
    assert "tile_size = [128, 192]" in (repository / NAME / "pipeline.toml").read_text()
    output = bring(repository, OBB_NAME, obb_model_file, root / "bars")
    assert "yolo_obb head, 2 classes (bar, ellipse), input 128x128" in output
    assert 'merge = "nms"' in (repository / OBB_NAME / "pipeline.toml").read_text()  # oriented boxes: NMS, as SAHI's
    output = bring(repository, SEGMENT_NAME, segment_model_file, root / "discs")
    assert "yolo_segment head, 3 classes (disc, square, triangle), input 128x128" in output
    assert "ok: " in run("-m", "vision_serving.consistency", "--repository", str(repository))
    for name in (NAME, OBB_NAME, SEGMENT_NAME):
        run("-m", "builders", "all", "--pipeline", name, "--model-repository", str(repository))
    return repository


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory) -> Iterator[str]:
    """``./scripts/serve`` for the tiled pipelines alone, on free ports; its gRPC address."""
    with serve_script.serving(repository, [NAME, OBB_NAME, SEGMENT_NAME], tmp_path_factory.mktemp("serve") / "serve.log") as served:
        yield served["grpc"]


@pytest.fixture(scope="module")
def tiled_gateway(server, tmp_path_factory) -> Iterator[GatewayProcess]:
    """The gateway in front of the tiled pipelines' server."""
    process = GatewayProcess(server, log_file=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def photos() -> list[tiling_scenes.LargePhoto]:
    return [tiling_scenes.large_photo(seed, HEIGHT, WIDTH, SHAPES) for seed in range(3)]


def sahi_predictions(model: Path, size: str, photos: list[tiling_scenes.LargePhoto], folder: Path) -> list[dict[str, np.ndarray]]:
    """SAHI's sliced prediction of each photo (its PNG) at the pipelines' defaults: tiles of the model's input
    (``size``: H,W), overlap 0.2, the full view, greedy NMM by IoS 0.5 (NMS for oriented boxes), class-aware;
    Ultralytics' predictor at conf 0.25."""
    paths = []
    for index, photo in enumerate(photos):
        paths.append(folder / f"{index}.png")
        paths[-1].write_bytes(photo.png())
    out = folder / "sahi.npz"
    arguments = [str(SAHI_SCRIPT), "predict", "--model", str(model), "--imgsz", size, "--tile", size]
    build_envs.run_in_env(yolo.ENV, [*arguments, "--out", str(out), *map(str, paths)], timeout=1200)
    with np.load(out) as data:
        return [{key.split("_", 1)[1]: data[key] for key in data.files if key.startswith(f"{index}_")} for index in range(len(photos))]


@pytest.fixture(scope="module")
def sahi(model_file, photos, tmp_path_factory) -> list[dict[str, np.ndarray]]:
    return sahi_predictions(model_file, "128,192", photos, tmp_path_factory.mktemp("sahi"))


@pytest.fixture(scope="module")
def obb_photos() -> list[tiling_scenes.LargePhoto]:
    return [tiling_scenes.large_photo(seed, OBB_HEIGHT, OBB_WIDTH, OBB_OBJECTS, scene=yolo_obb.scene) for seed in range(3)]


@pytest.fixture(scope="module")
def obb_sahi(obb_model_file, obb_photos, tmp_path_factory) -> list[dict[str, np.ndarray]]:
    return sahi_predictions(obb_model_file, "128,128", obb_photos, tmp_path_factory.mktemp("obb_sahi"))


@pytest.fixture(scope="module")
def segment_photos() -> list[tiling_scenes.LargePhoto]:
    return [tiling_scenes.large_photo(seed, SEGMENT_SIZE, SEGMENT_SIZE, SEGMENT_OBJECTS, scene=yolo_segment.scene) for seed in range(3)]


@pytest.fixture(scope="module")
def segment_sahi(segment_model_file, segment_photos, tmp_path_factory) -> list[dict[str, np.ndarray]]:
    return sahi_predictions(segment_model_file, "128,128", segment_photos, tmp_path_factory.mktemp("segment_sahi"))


def inputs(images: list[bytes], tiling: list[str] | None = None) -> list[grpcclient.InferInput]:
    image = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    image.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    if tiling is None:
        return [image]
    option = grpcclient.InferInput("TILING", [len(images), 1], "BYTES")
    option.set_data_from_numpy(np.array([text.encode() for text in tiling], dtype=np.object_).reshape(-1, 1))
    return [image, option]


def detections(result) -> list[dict[str, np.ndarray]]:
    """Per photo of an answer: its boxes, scores, classes and labels (and an oriented-box head's corners, a segment
    head's masks and mask boxes)."""
    out = {name: result.as_numpy(name) for name in OUTPUTS}
    corners, masks, mask_boxes = (result.as_numpy(name) for name in ("CORNERS", "MASKS", "MASK_BOXES"))
    found = []
    for row, count in enumerate(out["COUNT"][:, 0]):
        found.append(
            {
                "boxes": out["BOXES"][row, :count],
                "scores": out["SCORES"][row, :count],
                "classes": out["CLASS_IDS"][row, :count],
                "labels": [label.decode() for label in out["LABELS"][row, :count]],
                **({} if corners is None else {"corners": corners[row, :count]}),
                **({} if masks is None else {"masks": masks[row, :count], "mask_boxes": mask_boxes[row, :count]}),
            }
        )
    return found


def infer(server: str, images: list[bytes], tiling: list[str] | None = None, model: str = NAME) -> list[dict[str, np.ndarray]]:
    return detections(grpcclient.InferenceServerClient(server).infer(model, inputs(images, tiling), outputs=None))


def assert_same(served: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str) -> None:
    """Same count and classes, each box matched within its class at IoU >= 0.98, its score within 1e-3."""
    assert len(served["boxes"]) == len(expected["boxes"]), f"{what}: {len(served['boxes'])} served, {len(expected['boxes'])} expected"
    assert sorted(served["classes"].tolist()) == sorted(expected["classes"].tolist()), what
    matches = detection.match_by_class((served["boxes"], served["classes"]), (expected["boxes"], expected["classes"]), MIN_IOU)
    assert len(matches) == len(served["boxes"]), f"{what}: {detection.box_iou(served['boxes'], expected['boxes'])}"
    for i, j, _ in matches:
        assert served["scores"][i] == pytest.approx(expected["scores"][j], abs=SCORE_TOLERANCE), what
        if "corners" in expected:  # the same four corners (within a hundredth of a pixel), in either order
            # The one difference: SAHI clips a shifted polygon at the photo's right and bottom edges (min(x, width),
            # min(y, height); not at 0), the pipeline keeps a rotated box whole, as Ultralytics' predictor does untiled.
            clipped = np.minimum(served["corners"][i], [OBB_WIDTH, OBB_HEIGHT])
            served_corners = sorted(map(tuple, np.round(clipped, 2).tolist()))
            expected_corners = sorted(map(tuple, np.round(expected["corners"][j], 2).tolist()))
            np.testing.assert_allclose(served_corners, expected_corners, atol=0.02, err_msg=what)


def recall(found: dict[str, np.ndarray], photo: tiling_scenes.LargePhoto) -> float:
    """The share of the photo's drawn shapes found, matched within their class at IoU >= 0.5."""
    return len(detection.match_by_class((photo.boxes, photo.classes), (found["boxes"], found["classes"]), 0.5)) / len(photo.classes)


def test_tiled_detections_equal_sahi_sliced_prediction(server, photos, sahi):
    """The photos in one request (their tiles through the core together, in batches of its max_batch_size)."""
    served = infer(server, [photo.png() for photo in photos])
    assert sum(len(found["scores"]) for found in served) >= len(photos) * SHAPES // 2  # the shapes are found: a real comparison
    for index, (found, expected) in enumerate(zip(served, sahi)):
        assert_same(found, expected, f"photo {index}")
        assert found["labels"] == [yolo.CLASSES[c] for c in found["classes"]]


def test_tiling_finds_the_small_shapes_the_untiled_pipeline_misses(server, photos):
    """A request's TILING turns it off per photo: the whole photo at 128x192 then, where the shapes are a few pixels."""
    images = [photo.png() for photo in photos]
    tiled = infer(server, images)
    untiled = infer(server, images, ['{"enabled": false}'] * len(images))
    tiled_recall = np.mean([recall(found, photo) for found, photo in zip(tiled, photos)])
    untiled_recall = np.mean([recall(found, photo) for found, photo in zip(untiled, photos)])
    assert tiled_recall >= 0.7 and untiled_recall <= 0.2, (tiled_recall, untiled_recall)
    # Mixed in one request: each photo as asked.
    mixed = infer(server, images, ["", '{"enabled": false}', "true"])
    assert_same(mixed[0], tiled[0], "tiled in a mixed request")
    assert_same(mixed[1], untiled[1], "untiled in a mixed request")
    assert_same(mixed[2], tiled[2], "tiled (true) in a mixed request")


def test_a_photo_past_the_tile_cap_is_refused_alone(server, photos):
    """Sent at once, so the preprocess batches them: the 2000x1500 photo (196 views at 128x192 tiles) gets INVALID_ARG
    naming its views and the limit; its neighbours are answered as they are alone."""
    large = tiling_scenes.large_photo(7, 1500, 2000, 8).png()
    images = [photos[0].png(), large, photos[2].png()]
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server)
    for index, image in enumerate(images):
        client.async_infer(NAME, inputs([image]), lambda result, error, index=index: answers.put((index, result, error)))
    got = {}
    for _ in images:
        index, result, error = answers.get(timeout=300)
        got[index] = (result, error)
    alone = infer(server, [images[0], images[2]])
    for index, expected in ((0, alone[0]), (2, alone[1])):
        result, error = got[index]
        assert error is None, error
        assert_same(detections(result)[0], expected, f"neighbour {index}")
    result, error = got[1]
    assert result is None and isinstance(error, InferenceServerException)
    assert str(error.status()).removeprefix("StatusCode.") == "INVALID_ARGUMENT"
    assert "a 2000x1500 photo needs 196 views (195 tiles of 192x128 at overlap 0.2 and the full view)" in error.message()
    assert "limit of 64 (max_tiles)" in error.message()


def test_a_request_sets_its_tiles_and_a_bad_tiling_is_refused(server):
    """Larger tiles take the 2000x1500 photo the 128x192 tiles cannot (57 views of 256x384 at overlap 0.2, under the
    cap); a TILING that is not JSON, or names a key a request may not set, is INVALID_ARG naming it."""
    large = tiling_scenes.large_photo(7, 1500, 2000, 8)
    (found,) = infer(server, [large.png()], [json.dumps({"tile_size": [256, 384]})])
    assert len(found["boxes"]) >= 1
    for value, message in (("{tile", "TILING must be JSON"), ('{"max_tiles": 500}', "unknown key(s) max_tiles")):
        with pytest.raises(InferenceServerException) as refused:
            infer(server, [large.png()], [value])
        assert str(refused.value.status()).removeprefix("StatusCode.") == "INVALID_ARGUMENT"
        assert message in refused.value.message(), refused.value.message()


def test_tiled_oriented_boxes_equal_sahi_sliced_prediction(server, obb_photos, obb_sahi):
    """The oriented-box head tiled: its boxes, scores, classes and corners SAHI's, the photos in one request."""
    served = infer(server, [photo.png() for photo in obb_photos], model=OBB_NAME)
    assert sum(len(found["scores"]) for found in served) >= len(obb_photos) * OBB_OBJECTS // 2  # a real comparison
    for index, (found, expected) in enumerate(zip(served, obb_sahi)):
        assert "corners" in found and "corners" in expected
        assert_same(found, expected, f"oriented-box photo {index}")


def extent(mask: np.ndarray) -> tuple[int, int, int, int]:
    """The box SAHI gives a segment prediction: its mask polygons' extent, whose vertices are the outermost pixels'
    columns and rows (x_min, y_min, x_max, y_max, the ends those pixels', not past them)."""
    columns, rows = np.flatnonzero(mask.any(axis=0)), np.flatnonzero(mask.any(axis=1))
    return int(columns[0]), int(rows[0]), int(columns[-1]), int(rows[-1])


def test_tiled_masks_equal_sahi_sliced_prediction(server, segment_photos, segment_sahi):
    """The segment head tiled against SAHI, the photos in one request. SAHI (0.12.8, ``ObjectAnnotation``) gives a
    segment prediction its mask polygons' extent as box, so each served mask's extent is compared with SAHI's box (the
    served BOXES are the model's, as Ultralytics' predictor gives them untiled); a detection whose mask holds no pixel
    is left out, as Ultralytics' predictor and SAHI drop it. Each matched detection (box IoU >= 0.98) has SAHI's
    score and, placed in the photo, a mask at IoU >= ``MIN_MASK_IOU`` with SAHI's (rasterized from its polygons:
    ``Mask.bool_mask``). A few are not matched: SAHI's greedy NMM matches the parts of a shape cut by the tiles by
    their masks' extents, the pipeline by the model's boxes, so a part can join another group or make one of its own
    (the same parts and scores, merged otherwise): per photo the count and each class's count are within
    ``MAX_SEGMENT_GROUPS_APART`` of SAHI's, and at least ``MIN_SEGMENT_MATCHED`` of all are matched."""
    served = infer(server, [photo.png() for photo in segment_photos], model=SEGMENT_NAME)
    mask_ious: list[float] = []
    total = empty = 0
    for index, (found, expected) in enumerate(zip(served, segment_sahi)):
        what = f"segment photo {index}"
        masks = [yolo_segment.placed(png, box, SEGMENT_SIZE, SEGMENT_SIZE) for png, box in zip(found["masks"], found["mask_boxes"])]
        kept = [row for row, mask in enumerate(masks) if mask.any()]
        empty += len(masks) - len(kept)
        total += max(len(kept), len(expected["boxes"]))
        assert abs(len(kept) - len(expected["boxes"])) <= MAX_SEGMENT_GROUPS_APART, (
            f"{what}: {len(kept)} served, {len(expected['boxes'])} SAHI's"
        )
        served_classes, sahi_classes = Counter(found["classes"][kept].tolist()), Counter(expected["classes"].tolist())
        assert all(abs(served_classes[c] - sahi_classes[c]) <= MAX_SEGMENT_GROUPS_APART for c in served_classes | sahi_classes), what
        extents = np.array([extent(masks[row]) for row in kept], np.float64).reshape(-1, 4)
        for i, j, _ in detection.match_by_class((extents, found["classes"][kept]), (expected["boxes"], expected["classes"]), MIN_IOU):
            assert found["scores"][kept[i]] == pytest.approx(expected["scores"][j], abs=SCORE_TOLERANCE), what
            mask_ious.append(iou(masks[kept[i]], expected["masks"][j]))
        assert found["labels"] == [yolo_segment.CLASSES[c] for c in found["classes"]]
    print(
        f"\n{SEGMENT_NAME}: {len(served)} photos, {total} detections (the more of served and SAHI's per photo; {empty} "
        f"without mask pixels left out), {len(mask_ious)} matched at box IoU >= {MIN_IOU}, their mask IoU min "
        f"{min(mask_ious, default=1.0):.4f}"
    )
    assert total >= len(segment_photos) * SEGMENT_OBJECTS // 2  # the shapes are found: a real comparison
    assert len(mask_ious) >= MIN_SEGMENT_MATCHED * total, f"{len(mask_ious)} of {total} matched"
    assert min(mask_ious) >= MIN_MASK_IOU, sorted(mask_ious)[:5]


def test_the_gateway_sends_tiling_as_the_server_takes_it(server, tiled_gateway, photos):
    """The gateway offers a tiled pipeline's ``tiling`` (JSON text, or a JSON body's object or boolean) and sends it as
    the ensemble's BYTES input: the answers are gRPC's with the same TILING; a bad one is the server's 400."""
    photo = photos[1].png()
    status, listing = request(f"{tiled_gateway.url}/v1/pipelines")
    (offered,) = [pipeline["options"]["tiling"] for pipeline in listing["pipelines"] if pipeline["name"] == NAME]
    assert status == 200 and offered["type"] == "string" and offered["contentMediaType"] == "application/json"
    (untiled,) = infer(server, [photo], ['{"enabled": false}'])
    (tiled,) = infer(server, [photo])
    for fields in ({"tiling": '{"enabled": false}'}, {"tiling": "false"}):
        body, headers = multipart(fields, photo)
        status, answer = request(f"{tiled_gateway.url}/v1/pipelines/{NAME}", body, headers)
        assert status == 200, answer
        assert len(answer["detections"]) == len(untiled["boxes"]) != len(tiled["boxes"])
    status, answer = request(
        f"{tiled_gateway.url}/v1/pipelines/{NAME}",
        json.dumps({"image": base64.b64encode(photo).decode(), "tiling": {"enabled": False}}).encode(),
        {"Content-Type": "application/json"},
    )
    assert status == 200 and len(answer["detections"]) == len(untiled["boxes"]), answer
    body, headers = multipart({"tiling": '{"max_tiles": 500}'}, photo)
    status, answer = request(f"{tiled_gateway.url}/v1/pipelines/{NAME}", body, headers)
    assert status == 400 and answer["error"]["code"] == "INVALID_ARG" and "unknown key(s) max_tiles" in answer["error"]["message"]


def test_the_drift_reference_is_built_tiled_and_its_own_photos_raise_no_drift(repository):
    """The tiled pipeline's drift reference records its tiled answers: the reference's own images (the held-out photos
    and their seeded augmentations), answered as clients send them, test as no drift (every p > 0.05). Built untiled, the
    reference said fewer detections than the served pipeline gives, and the alarm fired on normal traffic."""
    pipeline = loaded.load(layout.pipeline(NAME, repository))
    sources = calibration.evaluation_sources(pipeline)
    count = len(sources) * (1 + calibration.AUGMENTED_PER_PHOTO)
    samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, pipeline.configs.limits)
    postprocess = pipeline.configs.postprocess
    core_dir = drift.served_version_dir(pipeline.layout.model_dir("core"))
    assert core_dir is not None
    reference = drift.load_reference(core_dir / drift.DriftSettings().reference, postprocess.name)
    served = ServedPipeline.load(pipeline.configs, "cpu")
    answered = []
    for sample in samples:  # one photo per request, as clients send them
        try:
            answered.append(served.run([sample.data]).features())
        except ValueError:  # the server refuses it too (a photo past max_tiles): never in the traffic
            continue
    assert len(answered) >= 0.9 * len(samples)
    settings = drift.DriftSettings(window=len(answered), update_every=len(answered))  # the served min_samples
    monitor = drift.DriftMonitor(reference, settings, background=False)
    for features in answered:
        monitor.observe(features)
    report = monitor.latest()
    assert report is not None and report.samples == len(answered)
    # A feature with fewer values than min_samples is not tested (confidence: the photos with a detection).
    p_values = {name: result.p_value for name, result in report.results.items() if result.p_value is not None}
    assert "detections" in p_values and all(p > 0.05 for p in p_values.values()), p_values
