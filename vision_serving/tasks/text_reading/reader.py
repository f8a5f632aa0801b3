"""The two stages in one process: photo -> detector -> boxes -> crops -> (direction) -> recognizer -> lines.

The models are plain callables (a batch in, the model's output out: onnxruntime sessions in the
tests, Triton models once served), so this is the computation a served ``text_reader`` pipeline
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

Model = Callable[[np.ndarray], np.ndarray]
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
    outputs: list[np.ndarray] = []
    for start in range(0, len(inputs), size):
        outputs.extend(np.asarray(model(np.stack(inputs[start : start + size]))))
    return outputs


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

    rows = fanout.run_sync(chunks, len(crops), batch_of, recognizer)
    return [recognition.ctc_decode(row[np.newaxis], classes)[0] for row in rows]


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
    found = detection.boxes_from_map(detector(prepared.tensor[np.newaxis]), height, width, settings.detection)
    if not len(found):
        return []
    crops = [recognition.crop(prepared.image, box) for box in found.boxes]
    if settings.use_classifier:
        if classifier is None:
            raise ValueError("settings.use_classifier needs the direction classifier")
        crops = upright(crops, classifier, settings)
    texts = recognize(crops, recognizer, classes, settings, batching, buckets)
    boxes = detection.to_photo(found.boxes, prepared)
    return [
        Line(text, score, box, float(box_score))
        for (text, score), box, box_score in zip(texts, boxes, found.scores)
        if text.strip() and not score < settings.recognition.text_score
    ]
