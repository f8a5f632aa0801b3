"""SAHI in the client, the way users tile today: SAHI 0.12.8's ``get_sliced_prediction`` cutting each photo, every tile
sent alone (one gRPC request per tile) to a served pipeline's core, Ultralytics' letterbox before and its NMS after, in
this process; SAHI merging (greedy NMM by IoS 0.5). ``python -m benchmarks.tiling`` runs it beside the tiled pipeline.

STANDALONE: runs inside the ``ultralytics`` build environment (``.build/envs/ultralytics``, ``requirements/ultralytics.txt``; SAHI is MIT,
Ultralytics AGPL-3.0: neither enters ``.venv`` or an image); it imports only sahi, ultralytics, torch, tritonclient,
numpy, the standard library and its sibling tests/support/sahi_reference.py (standalone too), never the project.

Usage::

    python benchmarks/tiling_sahi.py --url HOST:PORT --core MODEL --names a,b,c --imgsz H,W --tile H,W
        [--overlap 0.2] [--conf 0.25] --out OUT.json IMAGE...

The .json holds per image its wall and CPU seconds (``time.perf_counter``, ``time.process_time``: this client's own
CPU, decode, slicing, letterbox, NMS and merge), its core requests and its detections (boxes x0, y0, x1, y1, scores,
classes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("YOLO_OFFLINE", "1")  # nothing downloads: no hub, no fonts, no telemetry

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
import sahi_reference  # the tests' SAHI reference: the same sliced prediction, its model the served core


def size(text: str) -> tuple[int, int]:
    height, width = (int(part) for part in text.split(","))
    return height, width


def served_model(url: str, core: str, names: list[str], imgsz: tuple[int, int], conf: float) -> Any:
    """A SAHI detection model whose inference is one gRPC request per tile to ``core`` (UINT8 RGB CHW letterboxed in,
    the raw ``[4 + C, A]`` head out), decoded as Ultralytics' predictor decodes it."""
    import torch
    import tritonclient.grpc as grpcclient
    from sahi.models.ultralytics import UltralyticsDetectionModel
    from ultralytics.data.augment import LetterBox
    from ultralytics.utils import nms, ops

    client = grpcclient.InferenceServerClient(url)
    metadata = client.get_model_metadata(core, as_json=True)
    input_name, output_name = metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]
    letterbox = LetterBox(new_shape=imgsz, auto=False, stride=32)

    class ServedCore(UltralyticsDetectionModel):
        def load_model(self) -> None:
            self.set_model(SimpleNamespace(names=dict(enumerate(names)), overrides={"task": "detect"}, task="detect"))

        def perform_batch_inference(self, images: list[np.ndarray]) -> None:
            predictions = []
            for image in images:  # RGB, as SAHI hands them
                tile = letterbox(image=np.ascontiguousarray(image[:, :, ::-1]))[:, :, ::-1]  # Ultralytics' letterbox of the BGR
                tensor = grpcclient.InferInput(input_name, [1, 3, *imgsz], "UINT8")
                tensor.set_data_from_numpy(np.ascontiguousarray(tile.transpose(2, 0, 1))[None])
                raw = client.infer(core, [tensor]).as_numpy(output_name)
                (found,) = nms.non_max_suppression(torch.from_numpy(raw), conf_thres=self.confidence_threshold, iou_thres=0.7, max_det=300)
                found[:, :4] = ops.scale_boxes(imgsz, found[:, :4], image.shape[:2])
                predictions.append(found)
            self._original_predictions = predictions
            self._original_shapes = [image.shape for image in images]

    return ServedCore(confidence_threshold=conf, image_size=list(imgsz), device="cpu", load_at_init=True)


def predict(arguments: argparse.Namespace) -> list[dict[str, Any]]:
    from PIL import Image
    from sahi.slicing import get_slice_bboxes

    model = served_model(arguments.url, arguments.core, arguments.names.split(","), arguments.imgsz, arguments.conf)
    records = []
    for path in arguments.images:
        wall, cpu = time.perf_counter(), time.process_time()
        found = sahi_reference.sliced(path, model, arguments.tile, arguments.overlap)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        with Image.open(path) as image:
            width, height = image.size
        tiles = len(get_slice_bboxes(height, width, *arguments.tile, False, arguments.overlap, arguments.overlap))
        record = {"image": str(path), "wall_s": wall, "cpu_s": cpu, "core_requests": tiles + (tiles > 1)}
        records.append(record | {key: value.tolist() for key, value in found.items()})
    return records


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--core", required=True)
    parser.add_argument("--names", required=True)
    parser.add_argument("--imgsz", type=size, required=True)
    parser.add_argument("--tile", type=size, required=True)
    parser.add_argument("--overlap", type=float, default=0.2)
    parser.add_argument("--conf", type=float, default=0.25)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("images", type=Path, nargs="+")
    arguments = parser.parse_args(argv)
    arguments.out.write_text(json.dumps(predict(arguments), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
