"""The text reader's two stages, computed in process from the wheel's own models, against RapidOCR's own pipeline.

Photos with text drawn on them (tests/support/text_reading.py: several fonts, sizes, colours,
tilts, quarter turns and upside-down lines on the package photos) are read twice: by
:func:`vision_serving.tasks.text_reading.reader.read` with the three ONNX files taken from the
pinned ``rapidocr`` wheel (the text_reader pipeline's exported core and second stages) on onnxruntime, and by ``RapidOCR()``
itself in its own environment (``.build/envs/rapidocr``). Lines are paired by box IoU; the reader
must give the same text on at least 95 % of them, a character error rate of at most 1 % and
matched boxes of IoU at least 0.9: with RapidOCR's own recognition batches, and with the width
buckets a server uses instead. RapidOCR's box growing (pyclipper) is checked point for point
against the project's port (:mod:`vision_serving.tasks.text_reading.offset`).
"""

from __future__ import annotations

import asyncio

import numpy as np
import onnxruntime
import pytest

from tests.support import text_reading
from vision_serving.tasks.text_reading import detection, reader, recognition
from vision_serving.tasks.text_reading.settings import DEFAULT

PHOTOS = 12
MIN_EXACT = 0.95
MAX_CER = 0.01
MIN_IOU = 0.9


def _session(path) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _runner(session: onnxruntime.InferenceSession):
    """A batch in, every output out (the graph's order), as the reader calls its models."""
    name = session.get_inputs()[0].name
    return lambda batch: tuple(session.run(None, {name: np.ascontiguousarray(batch)}))


@pytest.fixture(scope="module")
def models() -> tuple[dict, list[str]]:
    return text_reading.pipeline_models()


@pytest.fixture(scope="module")
def sessions(models) -> dict[str, onnxruntime.InferenceSession]:
    return {role: _session(path) for role, path in models[0].items()}


@pytest.fixture(scope="module")
def classes(models) -> list[str]:
    return models[1]


@pytest.fixture(scope="module")
def made() -> dict[str, tuple[bytes, list[text_reading.DrawnLine]]]:
    return text_reading.text_photos(PHOTOS)


@pytest.fixture(scope="module")
def drawn(made) -> dict[str, bytes]:
    return {name: data for name, (data, _lines) in made.items()}


@pytest.fixture(scope="module")
def rapidocr(drawn) -> dict:
    return text_reading.reference(drawn)


def _read(drawn, sessions, classes, batching) -> dict[str, list[reader.Line]]:
    models = {role: _runner(session) for role, session in sessions.items()}
    return {
        name: reader.read(
            text_reading.decode_bgr(data), models["detector"], models["recognizer"], classes, models["classifier"], batching=batching
        )
        for name, data in drawn.items()
    }


def test_the_wheel_models_have_the_shapes_and_characters_the_reader_assumes(sessions, classes):
    recognizer = sessions["recognizer"]
    assert list(recognizer.get_inputs()[0].shape[1:3]) == [3, 48]
    # Greedy CTC in the recognizer's graph: each 8 px step's best class (of the blank, 18708 characters and a space) and its probability.
    assert [output.name for output in recognizer.get_outputs()] == ["indices", "scores"] and len(classes) == 18710
    indices, scores = _runner(recognizer)(np.random.default_rng(0).normal(size=(2, 3, 48, 320)).astype(np.float32))
    assert indices.shape == scores.shape == (2, 40) and indices.dtype == np.int32 and 0 <= indices.min() <= indices.max() < len(classes)
    assert classes[0] == recognition.BLANK and classes[-1] == " " and "A" in classes and "\u3000" in classes
    assert sessions["classifier"].get_outputs()[0].shape[-1] == 2
    (probability,) = _runner(sessions["detector"])(np.zeros((1, 3, 64, 96), np.uint8))  # BGR pixels, normalized in its graph
    assert probability.shape == (1, 1, 64, 96)


def test_unclip_gives_pyclipper_s_points_and_box():
    rng = np.random.default_rng(7)
    boxes = []
    for index in range(300):
        width, height = rng.uniform(3, 300), rng.uniform(3, 60)
        cx, cy = rng.uniform(-5, 900), rng.uniform(-5, 900)
        corners = np.array([[-width, -height], [width, -height], [width, height], [-width, height]]) / 2
        angle = 0.0 if index % 3 == 0 else rng.uniform(-np.pi / 2, np.pi / 2)
        rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        points = corners @ rotation.T + [cx, cy]
        if index % 5 == 0:
            points = np.round(points)  # whole pixels, as minAreaRect often gives
        boxes.append(points.astype(np.float32))
    expected = text_reading.unclip_reference(boxes)
    for box, want in zip(boxes, expected):
        grown = detection.unclip(box, DEFAULT.detection.unclip_ratio)
        assert grown.reshape(-1, 2).tolist() == want["points"], box.tolist()
        fitted, short_side = detection.mini_box(grown)
        np.testing.assert_array_equal(fitted, np.array(want["box"], np.float32))
        assert short_side == pytest.approx(want["short_side"], abs=1e-4)


def test_detection_finds_rapidocr_s_boxes(drawn, sessions, rapidocr):
    run = _runner(sessions["detector"])
    for name, data in drawn.items():
        prepared = detection.prepare(text_reading.decode_bgr(data), DEFAULT.detection)
        assert prepared is not None
        found = detection.boxes_from_map(run(prepared.tensor[np.newaxis])[0], *prepared.image.shape[:2], DEFAULT.detection)
        want = rapidocr[name]["detections"]
        np.testing.assert_array_equal(detection.to_photo(found.boxes, prepared), np.array(want["boxes"], np.float32).reshape(-1, 4, 2))
        # RapidOCR sorts its boxes into reading order but leaves their scores in contour order
        # (ch_ppocr_det/main.py TextDetector.__call__); the reader keeps each score with its box.
        np.testing.assert_allclose(sorted(found.scores), sorted(want["scores"]), rtol=1e-6)


@pytest.mark.parametrize("batching", ["reference", "buckets"])
def test_the_two_stages_read_what_rapidocr_reads(drawn, sessions, classes, rapidocr, batching):
    read = _read(drawn, sessions, classes, batching)
    agreement = text_reading.against_rapidocr(rapidocr, read)
    print(f"\ntext_reader vs RapidOCR {rapidocr['']['rapidocr']} ({batching} batching, {len(drawn)} photos): {agreement.summary()}")
    for difference in agreement.differences:
        print(f"  {difference}")
    assert agreement.lines >= 3 * len(drawn)
    assert agreement.exact_rate >= MIN_EXACT, agreement.summary()
    assert agreement.cer <= MAX_CER, agreement.summary()
    assert agreement.mean_iou >= MIN_IOU, agreement.summary()
    assert agreement.min_iou >= MIN_IOU, agreement.summary()


def test_photos_read_together_in_chunks_read_as_each_alone(drawn, sessions, classes):
    """What a served postprocess does with a Triton batch: the crops of all its photos to the classifier and
    the recognizer in chunks of at most 4 (all in flight at once), back to their photos: the same lines as
    each photo read alone with width buckets."""
    models = {role: _runner(session) for role, session in sessions.items()}
    calls: list[int] = []

    def stage(model):
        async def infer(batch: np.ndarray) -> tuple[np.ndarray, ...]:
            calls.append(len(batch))
            return model(batch)

        return infer

    names = sorted(drawn)
    prepared = [detection.prepare(text_reading.decode_bgr(drawn[name]), DEFAULT.detection) for name in names]
    assert all(item is not None for item in prepared)
    maps = [models["detector"](item.tensor[np.newaxis])[0] for item in prepared if item is not None]
    stages = reader.Stages(stage(models["classifier"]), 4, stage(models["recognizer"]), 4)
    together = asyncio.run(reader.read_batch([item for item in prepared if item is not None], maps, stages, classes))
    alone = _read(drawn, sessions, classes, "buckets")
    assert max(calls) == 4
    for name, lines in zip(names, together):
        assert [(line.text, line.score) for line in lines] == [(line.text, line.score) for line in alone[name]], name
        np.testing.assert_array_equal(np.array([line.box for line in lines]), np.array([line.box for line in alone[name]]))
    outputs = reader.padded(together)
    assert outputs["COUNT"].reshape(-1).tolist() == [len(alone[name]) for name in names]
    assert outputs["TEXTS"].shape == outputs["SCORES"].shape == (len(names), max(len(lines) for lines in together))


def test_rapidocr_reads_most_of_the_drawn_text(made, rapidocr):
    """Not the reader's gate (that is agreement with RapidOCR): how hard the drawn photos are, for the record."""
    drawn_lines = [line for _data, lines in made.values() for line in lines]
    read = {line["text"] for name in made for line in rapidocr[name]["lines"]}
    found = [line for line in drawn_lines if line.text in read]
    print(f"\nRapidOCR read {len(found)} of {len(drawn_lines)} drawn lines exactly")
    for line in drawn_lines:
        if line not in found:
            print(f"  not read exactly: {line.text!r} ({line.font}, {line.size} px, {line.angle:.0f} degrees)")
    assert len(found) >= len(drawn_lines) // 2


@pytest.mark.slow
def test_forty_more_photos_read_with_width_buckets_as_rapidocr_reads_them(sessions, classes):
    """The wider measurement of docs/text-reader-plan.md (40 photos of another seed; minutes, and RapidOCR once)."""
    more = {name: data for name, (data, _lines) in text_reading.text_photos(40, seed=1).items()}
    answers = text_reading.reference(more)
    for batching in ("reference", "buckets"):
        read = _read(more, sessions, classes, batching)
        agreement = text_reading.against_rapidocr(answers, read)
        print(f"\ntext_reader vs RapidOCR ({batching} batching, {len(more)} photos, seed 1): {agreement.summary()}")
        for difference in agreement.differences:
            print(f"  {difference}")
        assert agreement.exact_rate >= MIN_EXACT and agreement.cer <= MAX_CER and agreement.mean_iou >= MIN_IOU, agreement.summary()
