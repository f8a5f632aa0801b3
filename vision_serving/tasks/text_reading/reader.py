"""The two stages in one process: photo -> detector -> boxes -> crops -> (direction) -> recognizer -> lines.

The models are plain callables (a batch in, the model's outputs out as a tuple: onnxruntime sessions
in the tests, Triton models once served; the recognizer's are each step's best class and its
probability, :func:`.recognition.greedy_steps`), so this is the computation a served ``text_reader`` pipeline
spreads over its steps, and what the tests compare with RapidOCR's own pipeline
(``RapidOCR.__call__`` in ``rapidocr/main.py``: detection on the resized, padded photo; crops of
the sorted boxes; direction; recognition; lines with empty text or a score below ``text_score``
dropped; boxes mapped back to the photo).

``batching`` says how crops meet the recognizer: ``"reference"`` as RapidOCR groups them (its
batches of 6 in aspect-ratio order, each padded to its widest crop), ``"buckets"`` as a server
can (each crop padded to its own width bucket, :func:`.recognition.bucket_width`, batches of
crops of one bucket).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from . import detection, fanout, recognition
from .settings import DEFAULT, ReaderSettings

Model = Callable[[np.ndarray], fanout.Outputs]
Batching = Literal["reference", "buckets"]


@dataclass(frozen=True)
class Line:
    """One line of text: what it says, the recognizer's score, its box (float32 ``[4, 2]``, the
    photo's pixels, clockwise from the top-left) and the detector's score for that box."""

    text: str
    score: float
    box: npt.NDArray[np.float32]
    box_score: float


def _in_batches(inputs: Sequence[np.ndarray], model: Model, size: int) -> list[np.ndarray]:
    """The first output's rows of ``model`` over ``inputs``, ``size`` at a time."""
    outputs: list[np.ndarray] = []
    for start in range(0, len(inputs), size):
        outputs.extend(np.asarray(model(np.stack(inputs[start : start + size]))[0]))
    return outputs


def decode_rows(rows: Sequence[fanout.Outputs], classes: Sequence[str]) -> list[tuple[str, float]]:
    """Each crop's (best classes, their probabilities) -> its (text, score); crops of different widths have
    different numbers of steps, so each is decoded on its own."""
    return [recognition.ctc_decode(indices[np.newaxis], scores[np.newaxis], classes)[0] for indices, scores in rows]


def recognize(
    crops: Sequence[np.ndarray],
    recognizer: Model,
    classes: Sequence[str],
    settings: ReaderSettings = DEFAULT,
    batching: Batching = "reference",
    buckets: Sequence[int] = recognition.DEFAULT_BUCKETS,
    max_batch: int | None = None,
) -> list[tuple[str, float]]:
    """(text, score) per crop, in the crops' order. ``max_batch``: crops per recognizer call with
    ``"buckets"`` (the served recognizer's ``max_batch_size``; RapidOCR's batch by default)."""
    rec = settings.recognition
    chunks: list[fanout.Chunk]
    if batching == "reference":
        chunks = [fanout.Chunk(tuple(members), width) for members, width in recognition.reference_batches(crops, rec)]
    else:
        widths = [recognition.bucket_width(image, rec, buckets) for image in crops]
        chunks = fanout.plan(widths, max_batch or rec.batch)

    def batch_of(chunk: fanout.Chunk) -> np.ndarray:
        return np.stack([recognition.recognition_input(crops[index], chunk.width, rec) for index in chunk.members])

    return decode_rows(fanout.run_sync(chunks, len(crops), batch_of, recognizer), classes)


def upright(crops: Sequence[np.ndarray], classifier: Model, settings: ReaderSettings = DEFAULT) -> list[np.ndarray]:
    """The crops with those the direction classifier finds upside down turned (RapidOCR's ``cls_batch_num`` batches)."""
    cls = settings.classifier
    order = np.argsort(np.array([recognition.aspect_ratio(image) for image in crops])).tolist()
    outputs = _in_batches([recognition.classifier_input(crops[index], cls) for index in order], classifier, cls.batch)
    probabilities = np.zeros((len(crops), len(cls.labels)), np.float32)
    for index, output in zip(order, outputs):
        probabilities[index] = output
    return recognition.turned(crops, recognition.directions(probabilities, cls).flip)


def read(
    photo: np.ndarray,
    detector: Model,
    recognizer: Model,
    classes: Sequence[str],
    classifier: Model | None = None,
    settings: ReaderSettings = DEFAULT,
    batching: Batching = "reference",
    buckets: Sequence[int] = recognition.DEFAULT_BUCKETS,
) -> list[Line]:
    """The lines of text in a BGR photo ``[h, w, 3]`` uint8, in reading order. ``classifier``: the
    direction model, run when ``settings.use_classifier``."""
    prepared = detection.prepare(photo, settings.detection)
    if prepared is None:
        return []
    height, width = prepared.image.shape[:2]
    found = detection.boxes_from_map(detector(prepared.tensor[np.newaxis])[0], height, width, settings.detection)
    if not len(found):
        return []
    crops = [recognition.crop(prepared.image, box) for box in found.boxes]
    if settings.use_classifier:
        if classifier is None:
            raise ValueError("settings.use_classifier needs the direction classifier")
        crops = upright(crops, classifier, settings)
    texts = recognize(crops, recognizer, classes, settings, batching, buckets)
    return lines_of(found, texts, prepared, settings)


def lines_of(
    found: detection.TextBoxes, texts: Sequence[tuple[str, float]], prepared: detection.DetectionInput, settings: ReaderSettings
) -> list[Line]:
    """One photo's lines: its boxes mapped back to the photo with their (text, score), those with empty
    text or a score below ``text_score`` dropped (``RapidOCR.filter_by_text_score``)."""
    boxes = detection.to_photo(found.boxes, prepared)
    return [
        Line(text, score, box, float(box_score))
        for (text, score), box, box_score in zip(texts, boxes, found.scores)
        if text.strip() and not score < settings.recognition.text_score
    ]


@dataclass(frozen=True)
class Stages:
    """The second-stage models as a served postprocess reaches them: each an async call (a batch in, the
    model's output out) and the most crops one call may hold (the model's ``max_batch_size``)."""

    classifier: fanout.Infer | None
    classifier_batch: int
    recognizer: fanout.Infer
    recognizer_batch: int


async def read_batch(
    prepared: Sequence[detection.DetectionInput],
    maps: Sequence[np.ndarray],
    stages: Stages,
    classes: Sequence[str],
    settings: ReaderSettings = DEFAULT,
    buckets: Sequence[int] = recognition.DEFAULT_BUCKETS,
) -> list[list[Line]]:
    """The lines of several photos from their detector maps: the crops of all photos go to the direction
    classifier, then to the recognizer, in chunks (:mod:`.fanout`: one width bucket, at most a batch, all
    in flight at once), and come back to their photo. ``maps[i]``: photo i's probability map."""
    found = [
        detection.boxes_from_map(probability, item.image.shape[0], item.image.shape[1], settings.detection)
        for item, probability in zip(prepared, maps)
    ]
    owners = [photo for photo, boxes in enumerate(found) for _ in range(len(boxes))]
    crops = [recognition.crop(item.image, box) for item, boxes in zip(prepared, found) for box in boxes.boxes]
    if crops and settings.use_classifier:
        if stages.classifier is None:
            raise ValueError("settings.use_classifier needs the direction classifier")
        cls = settings.classifier
        chunks = fanout.plan([cls.width] * len(crops), stages.classifier_batch)
        rows = await fanout.run(
            chunks,
            len(crops),
            lambda chunk: np.stack([recognition.classifier_input(crops[i], cls) for i in chunk.members]),
            stages.classifier,
        )
        crops = recognition.turned(crops, recognition.directions(np.stack([row[0] for row in rows]), cls).flip)
    rec = settings.recognition
    chunks = fanout.plan([recognition.bucket_width(image, rec, buckets) for image in crops], stages.recognizer_batch)
    rows = await fanout.run(
        chunks,
        len(crops),
        lambda chunk: np.stack([recognition.recognition_input(crops[i], chunk.width, rec) for i in chunk.members]),
        stages.recognizer,
    )
    texts = decode_rows(rows, classes)
    per_photo: list[list[tuple[str, float]]] = [[] for _ in prepared]
    for owner, text in zip(owners, texts):
        per_photo[owner].append(text)
    return [lines_of(boxes, photo_texts, item, settings) for boxes, photo_texts, item in zip(found, per_photo, prepared)]


def padded(lines: Sequence[Sequence[Line]]) -> dict[str, np.ndarray]:
    """The pipeline's outputs for several photos, each padded to the largest line count K: ``TEXTS``
    BYTES ``[N, K]`` (UTF-8), ``SCORES`` FP32 ``[N, K]``, ``BOXES`` FP32 ``[N, K, 4, 2]``,
    ``BOX_SCORES`` FP32 ``[N, K]``, ``COUNT`` INT32 ``[N, 1]``; rows past a photo's count are empty and zero."""
    count = len(lines)
    k = max((len(photo) for photo in lines), default=0)
    texts = np.full((count, k), b"", dtype=np.object_)
    scores = np.zeros((count, k), np.float32)
    boxes = np.zeros((count, k, 4, 2), np.float32)
    box_scores = np.zeros((count, k), np.float32)
    for row, photo in enumerate(lines):
        for column, line in enumerate(photo):
            texts[row, column] = line.text.encode("utf-8")
            scores[row, column] = line.score
            boxes[row, column] = line.box
            box_scores[row, column] = line.box_score
    counts = np.array([[len(photo)] for photo in lines], np.int32).reshape(count, 1)
    return {"TEXTS": texts, "SCORES": scores, "BOXES": boxes, "BOX_SCORES": box_scores, "COUNT": counts}
