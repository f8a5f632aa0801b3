"""The YOLO postprocessing's CPU cost by the number of candidates above the score threshold
(``python -m benchmarks.steps --parts detection``).

The postprocess model of a pipeline ``new-pipeline --from yolo`` writes, for the common COCO
case (80 classes at 640x640: ``yolo`` [N, 84, 8400], ``yolo_v5`` [N, 25200, 85], ``end2end``
[N, 300, 6]), on a batch of raw outputs in which each image has exactly 0, 10 or 100
candidates above the score threshold (0.25) and every other anchor below it: the whole
postprocessing as served (parse + threshold + class-aware hard NMS + the map back to the
photo + the response tensors), one thread. CPU time (``time.process_time``), best of
``repeats``, per image. Candidates are spread over the image and the classes, so NMS keeps
most of them (the expensive case for the kept-box loop).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from builders.families import yolo as yolo_family
from vision_serving import model_config
from vision_serving.tasks.detection import DetectionPostprocessor

CLASSES = 80
SIZE = 640
CANDIDATES = (0, 10, 100)
# head -> (output dims per image); anchors of a 640x640 input: 8400 for the anchor-free heads, 25200 for YOLOv5's.
HEADS = {"yolo": [4 + CLASSES, 8400], "yolo_v5": [25200, 5 + CLASSES], "end2end": [300, 6]}


def postprocessor(head: str, folder: Path) -> DetectionPostprocessor:
    """The postprocess model new-pipeline writes for such a model (its config and labels), loaded."""
    model = yolo_family.YoloModel(
        input_name="images",
        height=SIZE,
        width=SIZE,
        output_name="output0",
        output_shape=(1, *HEADS[head]),
        head=head,
        names=tuple(f"class_{i}" for i in range(CLASSES)),
        static_batch=False,
        ultralytics=True,
    )
    files = yolo_family.files("bench", model, "bench.onnx", "0" * 64, ["stable_io_names"], 16)
    (folder / yolo_family.LABELS_FILE).write_text(files[f"bench_postprocess/{yolo_family.LABELS_FILE}"])
    config = model_config.parse_config_text(files["bench_postprocess/config.pbtxt"])
    return DetectionPostprocessor(config, folder)


def raw_outputs(head: str, batch: int, candidates: int, rng: np.random.Generator) -> np.ndarray:
    """A batch of raw outputs with exactly ``candidates`` anchors per image above the threshold."""
    dims = HEADS[head]
    boxes_xywh = np.stack(
        [rng.uniform(20, SIZE - 20, size=dims[0] if head != "yolo" else dims[1]) for _ in range(2)]
        + [rng.uniform(8, 60, size=dims[0] if head != "yolo" else dims[1]) for _ in range(2)],
        axis=-1,
    ).astype(np.float32)
    out = []
    for _ in range(batch):
        anchors = len(boxes_xywh)
        chosen = rng.choice(anchors, size=candidates, replace=False)
        if head == "end2end":
            rows = np.zeros((anchors, 6), np.float32)
            xy, wh = boxes_xywh[:, :2], boxes_xywh[:, 2:]
            rows[:, :2], rows[:, 2:4] = xy - wh / 2, xy + wh / 2
            rows[:, 4] = rng.uniform(0.0, 0.2, anchors)
            rows[chosen, 4] = rng.uniform(0.3, 0.99, candidates)
            rows[:, 5] = rng.integers(0, CLASSES, anchors)
            out.append(rows)
            continue
        scores = rng.uniform(0.0, 0.2, size=(anchors, CLASSES)).astype(np.float32)
        scores[chosen, rng.integers(0, CLASSES, candidates)] = rng.uniform(0.3, 0.99, candidates)
        if head == "yolo":
            out.append(np.concatenate([boxes_xywh, scores], axis=1).T)
        else:  # objectness 1 for the candidates, 0.2 for the rest: the product is what the threshold sees
            objectness = np.full((anchors, 1), 0.2, np.float32)
            objectness[chosen] = 1.0
            out.append(np.concatenate([boxes_xywh, objectness, scores], axis=1))
    return np.stack(out)


def measure(head: str, candidates: int, batch: int, repeats: int, folder: Path) -> dict[str, Any]:
    post = postprocessor(head, folder)
    raw = raw_outputs(head, batch, candidates, np.random.default_rng([candidates, len(head)]))
    tensors = {
        "PREDICTIONS": raw,  # the names the family writes
        "IMAGE_SIZE": np.tile(np.array([[480, 640]], np.int32), (batch, 1)),
        "IMAGE_TRANSFORM": np.tile(np.array([[1.0, 1.0, 0.0, 80.0]], np.float32), (batch, 1)),
    }

    def once() -> Any:
        return post.run(post.parse(tensors)).outputs()

    outputs = once()
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        once()
        best = min(best, time.process_time() - started)
    return {"ms_per_image": best * 1e3 / batch, "kept_per_image": float(np.mean(outputs["COUNT"]))}
