"""From text boxes to text: each box cut out upright, its direction fixed, read by the CTC recognizer.

Computed as RapidOCR 3.10.0 computes it (paths inside its wheel):

* :func:`crop`: ``utils/process_img.py`` ``get_rotate_crop_image`` (a perspective warp of the
  quadrilateral to its longer edges' lengths, cubic, replicated border; a crop at least 1.5 times
  taller than wide turned a quarter counter-clockwise, ``np.rot90``);
* :func:`classifier_input` and :func:`directions`: ``ch_ppocr_cls/main.py``
  ``TextClassifier.resize_norm_img`` (height 48, width ``ceil(48 x aspect)`` at most 192, linear,
  ``(pixel / 255 - 0.5) / 0.5``, zero-padded to 192) and ``ch_ppocr_cls/utils.py`` ``ClsPostProcess``
  (argmax over ``["0", "180"]``; "180" above ``cls_thresh`` turns the crop upside down);
* :func:`recognition_input` and :func:`reference_batches`: ``ch_ppocr_rec/main.py``
  ``TextRecognizer.__call__`` / ``resize_norm_img`` (crops in ``np.argsort`` order of aspect ratio,
  ``rec_batch_num`` at a time, each batch ``int(48 x max(320 / 48, its widest aspect))`` wide; a
  crop resized to height 48 and ``ceil(48 x aspect)`` wide, at most the batch width, linear, the
  same normalization, zero-padded on the right);
* :func:`greedy_steps` and :func:`ctc_decode`: ``ch_ppocr_rec/utils.py`` ``CTCLabelDecode`` (greedy: the
  most probable class at each step and its probability, which the served recognizer's graph computes
  itself (``builders.stage_decode``); repeats merged, blanks dropped; the score is the mean of the kept
  steps' probabilities, each rounded to 5 decimals, the mean rounded to 5; no kept step scores 0);
  :func:`characters`: its character list
  (``"blank"`` first, the model's own list, a space last), the model's list being the ONNX
  metadata ``character`` (``inference_engine/onnxruntime/main.py`` ``get_character_list``:
  ``splitlines()``).

A served recognizer cannot let neighbours decide a crop's padding, since requests are batched
with strangers: :func:`bucket_width` gives each crop the narrowest of a fixed set of widths it fits
(TensorRT optimization profiles, one Triton batch per width). The padding is then the crop's own,
and the answers can differ slightly from RapidOCR's, whose padding depends on the photo's other
crops (tests/onnx/vision_serving/test_text_reading.py measures both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from .settings import ClassifierSettings, RecognitionSettings

FloatArray = npt.NDArray[np.float32]
BLANK = "blank"  # ch_ppocr_rec/utils.py CTCLabelDecode.get_character: index 0, the CTC blank
# Width buckets for a served recognizer: multiples of 8 (the recognizer's output step) from the reference's least width.
DEFAULT_BUCKETS = (320, 480, 640, 960, 1280, 1920)


# --------------------------------------------------------------------------- crops


def crop(image: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The quadrilateral ``box`` (float32 ``[4, 2]``, clockwise from the top-left) of ``image`` warped
    upright; turned a quarter counter-clockwise when at least 1.5 times taller than wide."""
    points = np.asarray(box, dtype=np.float32)
    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]]).astype(np.float32)
    matrix = cv2.getPerspectiveTransform(points, target)
    warped = cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    if warped.shape[0] * 1.0 / warped.shape[1] >= 1.5:
        warped = np.rot90(warped)
    return warped


def _resized_normalized(image: np.ndarray, height: int, width: int, interpolation: int) -> FloatArray:
    """Height ``height``, width ``ceil(height x aspect)`` at most ``width``; ``(pixel / 255 - 0.5) / 0.5``
    as float32 CHW, zero-padded on the right to ``width``."""
    ratio = image.shape[1] / float(image.shape[0])
    resized_width = width if math.ceil(height * ratio) > width else math.ceil(height * ratio)
    resized = cv2.resize(image, (resized_width, height), interpolation=interpolation).astype("float32")
    values = resized.transpose((2, 0, 1)) / 255
    values -= 0.5
    values /= 0.5
    padded = np.zeros((image.shape[2], height, width), dtype=np.float32)
    padded[:, :, :resized_width] = values
    return padded


def aspect_ratio(image: np.ndarray) -> float:
    return image.shape[1] / float(image.shape[0])


# --------------------------------------------------------------------------- direction


def classifier_input(image: np.ndarray, settings: ClassifierSettings) -> FloatArray:
    """One crop -> the direction classifier's ``[3, 48, 192]`` input."""
    return _resized_normalized(image, settings.height, settings.width, cv2.INTER_LINEAR)


@dataclass(frozen=True)
class Directions:
    """The classifier's answer per crop: ``labels`` ("0" or "180"), ``scores`` and ``flip`` (turn it)."""

    labels: list[str]
    scores: npt.NDArray[np.float32]
    flip: npt.NDArray[np.bool_]


def directions(probabilities: np.ndarray, settings: ClassifierSettings) -> Directions:
    """The classifier's ``[N, 2]`` output -> each crop's direction (``ClsPostProcess`` and the rotation rule)."""
    probabilities = np.asarray(probabilities).reshape(-1, len(settings.labels))
    best = probabilities.argmax(axis=1)
    labels = [settings.labels[int(index)] for index in best]
    scores = probabilities[np.arange(len(best)), best].astype(np.float32)
    flip = np.array([("180" in label) and bool(score > settings.thresh) for label, score in zip(labels, scores)], dtype=bool)
    return Directions(labels, scores, flip)


def turned(crops: Sequence[np.ndarray], flip: npt.NDArray[np.bool_]) -> list[np.ndarray]:
    """The crops, those marked turned upside down (``cv2.rotate(crop, 1)``: ROTATE_180)."""
    return [cv2.rotate(image, cv2.ROTATE_180) if turn else image for image, turn in zip(crops, flip)]


# --------------------------------------------------------------------------- recognition input


def reference_width(aspect_ratios: Sequence[float], settings: RecognitionSettings) -> int:
    """RapidOCR's batch width: ``int(48 x max(320 / 48, the batch's aspect ratios))``."""
    widest = settings.width / settings.height
    for ratio in aspect_ratios:
        widest = max(widest, ratio)
    return int(settings.height * widest)


def reference_batches(crops: Sequence[np.ndarray], settings: RecognitionSettings) -> list[tuple[list[int], int]]:
    """RapidOCR's recognition batches: (crop indices, the batch's width), ``batch`` crops at a time in
    ``np.argsort`` order of aspect ratio (ties as numpy's default sort leaves them)."""
    ratios = [image.shape[1] / float(image.shape[0]) for image in crops]
    order = np.argsort(np.array(ratios)).tolist()
    batches = []
    for start in range(0, len(order), settings.batch):
        members = order[start : start + settings.batch]
        batches.append((members, reference_width([ratios[i] for i in members], settings)))
    return batches


def bucket_width(image: np.ndarray, settings: RecognitionSettings, buckets: Sequence[int] = DEFAULT_BUCKETS) -> int:
    """The narrowest bucket at least the crop's own reference width (``int(48 x max(320 / 48, aspect))``);
    the widest bucket when none is (the crop is then squeezed into it)."""
    own = reference_width([aspect_ratio(image)], settings)
    for width in sorted(buckets):
        if width >= own:
            return width
    return max(buckets)


def recognition_input(image: np.ndarray, width: int, settings: RecognitionSettings) -> FloatArray:
    """One crop -> the recognizer's ``[3, 48, width]`` input."""
    return _resized_normalized(image, settings.height, width, cv2.INTER_LINEAR)


# --------------------------------------------------------------------------- CTC decoding


def characters(model_list: str | Sequence[str]) -> list[str]:
    """The decoder's classes: ``"blank"``, the model's characters (its ONNX metadata ``character``, one
    per line, or the list), then a space; class ``i`` of the recognizer's output is ``characters[i]``."""
    listed = model_list.splitlines() if isinstance(model_list, str) else list(model_list)
    return [BLANK, *listed, " "]


def greedy_steps(probabilities: np.ndarray) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
    """The recognizer's class probabilities ``[N, T, C]`` -> each step's most probable class (INT32 ``[N, T]``,
    the first of equals) and its probability (``[N, T]``): what the served recognizer's graph outputs."""
    probabilities = np.asarray(probabilities)
    return probabilities.argmax(axis=2).astype(np.int32), probabilities.max(axis=2)


def ctc_decode(indices: np.ndarray, scores: np.ndarray, classes: Sequence[str]) -> list[tuple[str, float]]:
    """Each step's best class and its probability (``[N, T]`` each: :func:`greedy_steps`) -> (text, score) per
    crop, greedy, as ``CTCLabelDecode``."""
    indices, scores = np.asarray(indices), np.asarray(scores)
    if indices.shape != scores.shape or indices.ndim != 2:
        raise ValueError(f"the recognizer's steps {indices.shape} and their scores {scores.shape} must both be [N, T]")
    if indices.size and (indices.min() < 0 or indices.max() >= len(classes)):
        raise ValueError(f"the recognizer gives class {int(indices.max())}, the character list has {len(classes)} classes")
    results = []
    for tokens, token_probabilities in zip(indices, scores):
        keep = np.ones(len(tokens), dtype=bool)
        keep[1:] = tokens[1:] != tokens[:-1]
        keep &= tokens != 0
        confidences = [round(value, 5) for value in np.array(token_probabilities[keep]).tolist()] or [0]
        text = "".join(classes[index] for index in tokens[keep])
        results.append((text, float(np.mean(confidences).round(5).tolist())))
    return results
