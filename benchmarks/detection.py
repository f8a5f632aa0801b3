"""The YOLO postprocessing's CPU cost by the number of candidates above the score threshold
(``python -m benchmarks.steps --parts detection``).

The postprocess model of a pipeline ``new-pipeline --from yolo`` writes, for every head a YOLO
export may carry (the registry's), in the common COCO case (80 classes at 640x640: ``yolo``
[N, 84, 8400], ``yolo_v5`` [N, 25200, 85], ``end2end`` [N, 300, 6]; each head's
``example_shapes``), on a batch of raw outputs in which each image has exactly 0, 10 or 100
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
from vision_serving.tasks.detection_heads import registry as detection_heads

CLASSES = 80
SIZE = 640
CANDIDATES = (0, 10, 100)


def heads() -> dict[str, list[tuple[int, ...]]]:
    """Every head a YOLO export may carry (the registry's), with its outputs for 80 classes at 640x640."""
    return {head.name: head.example_shapes(CLASSES, SIZE, SIZE) for head in detection_heads.yolo_export_heads()}


def postprocessor(head: str, folder: Path) -> DetectionPostprocessor:
    """The postprocess model new-pipeline writes for such a model (its config and labels), loaded."""
    shapes = heads()[head]
    kind = detection_heads.head_class(head)
    model = yolo_family.YoloModel(
        input_name="images",
        height=SIZE,
        width=SIZE,
        output_names=tuple(f"output{index}" for index in range(len(shapes))),
        output_shapes=tuple((1, *shape) for shape in shapes),
        head=head,
        names=tuple(f"class_{i}" for i in range(CLASSES)),
        static_batch=False,
        ultralytics=True,
        task=kind.task,
        head_parameters=tuple(kind.example_parameters.items()),
    )
    files = yolo_family.files("bench", model, "bench.onnx", "0" * 64, ["stable_io_names"], 16)
    (folder / yolo_family.LABELS_FILE).write_text(files[f"bench_postprocess/{yolo_family.LABELS_FILE}"])
    config = model_config.parse_config_text(files["bench_postprocess/config.pbtxt"])
    return DetectionPostprocessor(config, folder)


def measure(head: str, candidates: int, batch: int, repeats: int, folder: Path) -> dict[str, Any]:
    post = postprocessor(head, folder)
    rng = np.random.default_rng([candidates, len(head)])
    raw = detection_heads.head_class(head).synthetic_outputs(heads()[head], batch, candidates, (SIZE, SIZE), rng)
    roles = [role.role for role in post.settings.head.input_roles() if role.from_core]
    tensors = {
        **{role.upper(): value for role, value in zip(roles, raw)},  # the names the family writes
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
