"""The text reader's CPU cost per photo by step, at 0, 5 and 50 lines of text
(``python -m benchmarks.steps --parts text_reading``).

Each photo is a package photo (640 x 480) with exactly that many lines drawn on a light band (OpenCV's
Hershey font, so nothing but the project's environment is needed), read by the served computation: the
preprocess (decode with every pipeline's limits, RapidOCR's detector sizing), the detector, the DB boxes
and crops, the direction classifier and the recognizer in the postprocess's chunks (``reader.read_batch``
with the models called in this thread), each model on onnxruntime with one thread. CPU time
(``time.process_time``), best of ``repeats``, per photo: ``postprocess_python`` is the postprocess's own
code (DB boxes, crops, the models' inputs, CTC decoding), ``classifier`` and ``recognizer`` the models'
calls; ``crops`` says what the detector found, ``lines_read`` what was kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime

from benchmarks.cpu import TimedStage, cpu_ms
from builders import export, loaded, photos
from vision_serving import image_codec, layout
from vision_serving.tasks.text_reading import reader, steps
from vision_serving.tasks.text_reading.settings import DEFAULT
from vision_serving.tasks.text_reading.task import TextReadingPostprocessor

LINES = (0, 5, 50)
CROP_BATCH = 16  # the classifier's and the recognizer's chunks, as the served postprocess sends them
WORDS = ("TOTAL", "Receipt 0042", "Milk 1.29", "Bread", "Thank you", "Station Road 7", "EXIT", "Open 9-17")
LIMITS = image_codec.ImageLimits(
    max_bytes=20 * 2**20, max_pixels=50_000_000, accepted_formats=("jpeg", "png", "webp"), max_side=32766, max_jpeg_scans=64
)


def photo_with_lines(count: int) -> bytes:
    """A 640 x 480 package photo, ``count`` lines drawn on it (rows of 9 px when there are 50), as a JPEG."""
    image = cv2.resize(cv2.imread(str(photos.photo_path("astronaut"))), (640, 480))
    if count:
        rows = max(1, min(count, 25))
        columns = -(-count // rows)
        height = 480 // rows
        drawn = 0
        for column in range(columns):
            for row in range(rows):
                if drawn == count:
                    break
                x, y = 10 + column * 320, row * height
                cv2.rectangle(image, (x, y + 2), (x + 300, y + height - 2), (235, 235, 235), -1)
                scale = min(1.0, (height - 6) / 30)
                text = WORDS[drawn % len(WORDS)]
                cv2.putText(image, text, (x + 6, y + height - 5), cv2.FONT_HERSHEY_SIMPLEX, scale, (20, 20, 20), 2 if scale > 0.6 else 1)
                drawn += 1
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return encoded.tobytes()


def pipeline_models() -> tuple[dict[str, Path], list[str]]:
    """The text_reader pipeline's ONNX files by the reader's roles (exported when missing) and the recognizer's classes."""
    pipeline = loaded.load(layout.pipeline("text_reader"))
    export.export(pipeline, log=lambda message: None)
    post = pipeline.configs.postprocessor()
    assert isinstance(post, TextReadingPostprocessor)
    paths = {"detector": pipeline.layout.onnx("fp32"), **{role: pipeline.layout.stage_onnx(role) for role in post.stage_models}}
    return paths, post.classes


def _model(path: Path) -> Callable[[np.ndarray], tuple[np.ndarray, ...]]:
    """A model file on onnxruntime, one thread: a batch in, every output out (the graph's order)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda batch: tuple(session.run(None, {name: np.ascontiguousarray(batch)}))


def _best(function: Callable[[], object], repeats: int) -> float:
    """CPU ms of one call, best of ``repeats``."""
    return cpu_ms(function, 1, repeats)


def _preprocess(payload: np.ndarray) -> dict[str, np.ndarray]:
    return steps.preprocess_outputs(steps.prepare_request(payload, LIMITS, DEFAULT.detection))


def measure(repeats: int) -> list[dict[str, Any]]:
    """One row per line count: CPU ms per photo of each step, and the lines found and read."""
    paths, classes = pipeline_models()
    models = {role: _model(path) for role, path in paths.items()}
    cv2.setNumThreads(1)
    rows = []
    for count in LINES:
        payload = np.array([[photo_with_lines(count)]], dtype=np.object_)
        prepared = steps.prepare_request(payload, LIMITS, DEFAULT.detection)
        (probability,) = models["detector"](prepared[0].tensor[np.newaxis])
        passes = []
        for _ in range(repeats + 1):  # the first is the warm-up
            classifier, recognizer = TimedStage(models["classifier"]), TimedStage(models["recognizer"])
            stages = reader.Stages(classifier, CROP_BATCH, recognizer, CROP_BATCH)
            started = time.process_time()
            lines = asyncio.run(reader.read_batch(prepared, [probability], stages, classes))
            passes.append(((time.process_time() - started) * 1e3, classifier.ms, recognizer.ms, classifier.items, len(lines[0])))
        postprocess, classifier_ms, recognizer_ms, crops, read = min(passes[1:])
        row = {
            "lines_drawn": count,
            "crops": crops,
            "lines_read": read,
            "preprocess": _best(partial(_preprocess, payload), repeats),
            "detector": _best(partial(models["detector"], prepared[0].tensor[np.newaxis]), repeats),
            "postprocess_python": postprocess - classifier_ms - recognizer_ms,
            "classifier": classifier_ms,
            "recognizer": recognizer_ms,
        }
        row["total"] = row["preprocess"] + row["detector"] + postprocess
        rows.append({key: round(value, 2) if isinstance(value, float) else value for key, value in row.items()})
    return rows


# --------------------------------------------------------------------------- a padded canvas instead of each photo's size

# Canvases the detector's input could be padded to so that photos of different sizes batch together: each photo's
# own size (what is served), the next multiples of 256, and fixed squares (a photo whose input is larger is left out).
CANVASES = ("own size", "multiples of 256", "fixed 1280", "fixed 1536")


def canvas_size(canvas: str, height: int, width: int) -> tuple[int, int] | None:
    if canvas == "own size":
        return height, width
    if canvas == "multiples of 256":
        return -(-height // 256) * 256, -(-width // 256) * 256
    side = int(canvas.split()[1])
    return (side, side) if height <= side and width <= side else None


def canvas_costs() -> list[dict[str, Any]]:
    """Per canvas, on the ``text`` upload mix: the detector's CPU ms and megapixels per photo, and how far the lines
    read with the input padded (black, as RapidOCR's own vertical padding) agree with the served reading."""
    from benchmarks import images
    from vision_serving.tasks.text_reading import agreement
    from vision_serving.tasks.text_reading.task import TextReadingResult

    served = loaded.load(layout.pipeline("text_reader")).served(parameters={"intra_op_threads": "1"})
    cv2.setNumThreads(1)
    payloads = [payload.data for payload in images.text_payloads()]
    prepared = [served.preprocessed([served.decode(data)]) for data in payloads]

    def read(tensors: dict[str, np.ndarray], canvas: str) -> tuple[list[reader.Line] | None, float, int]:
        pixels = np.asarray(tensors["det_input"])
        height, width = pixels.shape[2:]
        size = canvas_size(canvas, height, width)
        if size is None:
            return None, 0.0, 0
        padded = np.zeros((1, 3, *size), np.uint8)  # black, the detector's -1.0 once normalized
        padded[:, :, :height, :width] = pixels
        started = time.process_time()
        (probability,) = served.core.run({"images": padded})
        spent = (time.process_time() - started) * 1e3
        result = served.postprocess({**tensors, "probability": probability[:, :, :height, :width]})
        assert isinstance(result, TextReadingResult)
        return result.lines[0], spent, size[0] * size[1]

    reference = [read(tensors, "own size")[0] for tensors in prepared]
    rows = []
    for canvas in CANVASES:
        counts, spent, pixels, photos_read = agreement.Agreement(), 0.0, 0, 0
        for tensors, own in zip(prepared, reference):
            lines, ms, area = read(tensors, canvas)
            if lines is None or own is None:
                continue
            counts.add(own, lines)
            spent, pixels, photos_read = spent + ms, pixels + area, photos_read + 1
        rows.append(
            {
                "canvas": canvas,
                "photos": photos_read,
                "left_out": len(prepared) - photos_read,
                "detector_ms": round(spent / max(photos_read, 1), 1),
                "megapixels": round(pixels / max(photos_read, 1) / 1e6, 2),
                "exact_lines": round(counts.exact_rate, 4),
                "cer": round(counts.cer, 4),
                "box_iou_mean": round(counts.mean_iou, 4),
                "box_iou_min": round(counts.min_iou, 4),
            }
        )
    return rows
