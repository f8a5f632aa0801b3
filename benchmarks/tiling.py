"""Tiled detection on 12 MP photos of small objects: recall tiled vs untiled, and the cost per photo against SAHI in
the client, side by side in one run (``python -m benchmarks.tiling``; results in benchmarks/results/tiling/).

The detector is the tests' (tests/support/yolo.py: a YOLOv8n trained on drawn circles, squares and triangles, its
128x192 ``yolo`` export), brought with ``new-pipeline --from yolo --tiling`` into ``.build/bench/tiling`` (its spec's
``max_tiles`` raised to 1024: a 12 MP photo takes 780 tiles at the model's input), built, and served alone on this
machine's CPUs. The photos are drawn 4032x3024 JPEGs (tests/support/tiling_scenes.py), ``--shapes`` shapes of 20 to
58 px each. For each tile size (a request's ``TILING``; "untiled": ``{"enabled": false}``):

- **the tiled pipeline**: one photo per request, one at a time. Recall: the drawn shapes matched within their class at
  IoU >= 0.5; the cost per photo: wall time, the Python steps' CPU (the preprocess's and the postprocess's stub
  processes, ``/proc``), the core's CPU and its mean batch (Triton's statistics: items per execution), its core
  passes (views);
- **SAHI in the client** (benchmarks/tiling_sahi.py in ``.build/envs/ultralytics``): the same photos, SAHI slicing and merging
  in the client, every tile one gRPC request to the same served core: the client's CPU, the core's CPU and mean batch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks import report, triton_stats
from benchmarks.cpu import _stat
from builders import build_envs
from builders.artifacts import sha256_file
from devtools import loadgen
from devtools.triton_server import LocalTritonServer
from vision_serving import layout
from vision_serving.tasks import detection

if TYPE_CHECKING:
    from tests.support import tiling_scenes

BENCHMARK = "tiling"
NAME = "bench_tiled"
WORK = layout.BUILD_DIR / "bench" / "tiling"
CLIENT = Path(__file__).resolve().parent / "tiling_sahi.py"
HEIGHT, WIDTH = 3024, 4032
TILE_SIZES = ("untiled", "512x768", "256x384", "128x192")
MAX_TILES = 1024


def tile(text: str) -> tuple[int, int] | None:
    if text == "untiled":
        return None
    height, width = (int(part) for part in text.split("x"))
    return height, width


def pipeline_repository(model_file: Path) -> Path:
    """``.build/bench/tiling/model_repository`` with the tiled pipeline, made as docs/tiling.md says (again when the
    model has changed) and built (the build is skipped when up to date)."""
    from tests.support import yolo  # the tests' detector and its scenes (onnx: imported only to measure)

    repository = WORK / "model_repository"
    recipe = repository / NAME / "pipeline.toml"
    python = [sys.executable, "-m", "builders"]
    if recipe.is_file() and sha256_file(model_file) not in recipe.read_text():  # the tests' detector has changed
        shutil.rmtree(repository / NAME)
    if not recipe.is_file():
        repository.mkdir(parents=True, exist_ok=True)
        command = [*python, "new-pipeline", NAME, "--from=yolo", "--model", str(model_file), "--tiling"]
        subprocess.run([*command, "--model-repository", str(repository)], check=True)
        images = WORK / "images"
        draw = lambda rng, height, width, background: yolo.scene(rng, height, width, background)[0]  # noqa: E731
        yolo.write_new_scenes(images / "calibration", 24, 11, "scene", draw)
        yolo.write_new_scenes(images / "held_out", 12, 12, "scene", draw)
        text = re.sub(r"^max_tiles = \d+$", f"max_tiles = {MAX_TILES}", recipe.read_text(), flags=re.M)
        text = text.replace(
            "exclude = []", f'calibration_dir = "{images / "calibration"}"\nevaluation_dir = "{images / "held_out"}"\nexclude = []'
        )
        recipe.write_text(text)
        subprocess.run([*python, "configs", "--pipeline", NAME, "--model-repository", str(repository)], check=True)
    subprocess.run([*python, "all", "--pipeline", NAME, "--model-repository", str(repository)], check=True)
    return repository


def stub_cpu_seconds(model: str) -> float:
    """User + system CPU seconds of the Python backend stubs serving ``model`` (its instances)."""
    total = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(command) > 1 and command[0].endswith(b"triton_python_backend_stub") and f"/{model}/1/model.py".encode() in command[1]:
            found = _stat(int(entry.name))
            total += found[1] if found else 0.0
    return total


class Window:
    """The server's per-model statistics and the stubs' CPU over a measurement."""

    models = (f"{NAME}_preprocess", f"{NAME}_core", f"{NAME}_postprocess")

    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self.client = client

    def __enter__(self) -> Window:
        self.before = triton_stats.snapshot(self.client, list(self.models))
        self.cpu = {model: stub_cpu_seconds(model) for model in self.models}
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self.started
        self.stats = triton_stats.delta(self.before, triton_stats.snapshot(self.client, list(self.models)))
        self.cpu = {model: stub_cpu_seconds(model) - before for model, before in self.cpu.items()}

    def cost(self, photos: int) -> dict[str, Any]:
        core = self.stats[f"{NAME}_core"]
        return {
            "wall_ms": round(1000 * self.wall_s / photos, 1),
            "preprocess_cpu_ms": round(1000 * self.cpu[f"{NAME}_preprocess"] / photos, 1),
            "postprocess_cpu_ms": round(1000 * self.cpu[f"{NAME}_postprocess"] / photos, 1),
            "core_cpu_ms": round(1000 * self.cpu[f"{NAME}_core"] / photos, 1),
            "core_items": core["items"] // photos,
            "core_mean_batch": core["avg_batch"],
        }


def recall(found: dict[str, Any], photo: tiling_scenes.LargePhoto) -> float:
    matches = detection.match_by_class(
        (photo.boxes, photo.classes), (np.asarray(found["boxes"]).reshape(-1, 4), np.asarray(found["classes"])), 0.5
    )
    return len(matches) / len(photo.classes)


def served(client: grpcclient.InferenceServerClient, data: bytes, size: tuple[int, int] | None) -> dict[str, np.ndarray]:
    """One photo through the tiled pipeline at tile ``size`` (None: untiled)."""
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    option = grpcclient.InferInput("TILING", [1, 1], "BYTES")
    setting = {"enabled": False} if size is None else {"tile_size": list(size)}
    option.set_data_from_numpy(np.array([[json.dumps(setting).encode()]], dtype=np.object_))
    result = client.infer(NAME, [image, option])
    count = int(result.as_numpy("COUNT")[0, 0])
    return {"boxes": result.as_numpy("BOXES")[0, :count], "classes": result.as_numpy("CLASS_IDS")[0, :count]}


def measure(result: dict[str, Any], server: LocalTritonServer, photos: Sequence[tiling_scenes.LargePhoto], paths: list[Path]) -> None:
    from tests.support import yolo

    client = grpcclient.InferenceServerClient(server.grpc_url)
    for text in TILE_SIZES:
        size = tile(text)
        served(client, photos[0].jpeg(), size)  # warm
        with Window(client) as window:
            answers = [served(client, data.read_bytes(), size) for data in paths]
        recalls = [recall(found, photo) for found, photo in zip(answers, photos)]
        detections = float(np.mean([len(found["classes"]) for found in answers]))
        report.add(
            result,
            "cost",
            tiles=text,
            system="tiled pipeline",
            recall=round(float(np.mean(recalls)), 3),
            detections=detections,
            **window.cost(len(photos)),
        )
        if size is None:
            continue
        out = WORK / f"sahi_{text}.json"
        command = ["--url", server.grpc_url, "--core", f"{NAME}_core", "--names", ",".join(yolo.CLASSES), "--imgsz", "128,192"]
        command += ["--tile", f"{size[0]},{size[1]}", "--out", str(out), *map(str, paths)]
        with Window(client) as window:
            build_envs.run_in_env(yolo.ENV, [str(CLIENT), *command], timeout=3600)
        records = json.loads(out.read_text())
        cost = window.cost(len(photos))
        cost["wall_ms"] = round(1000 * sum(r["wall_s"] for r in records) / len(records), 1)  # SAHI's own, without its start
        cost["client_cpu_ms"] = round(1000 * sum(r["cpu_s"] for r in records) / len(records), 1)
        recalls = [recall(found, photo) for found, photo in zip(records, photos)]
        detections = float(np.mean([len(r["classes"]) for r in records]))
        report.add(
            result, "cost", tiles=text, system="SAHI in the client", recall=round(float(np.mean(recalls)), 3), detections=detections, **cost
        )
        report.log(BENCHMARK, f"{text}: done")


COLUMNS = {
    "tiles": "tile (h x w)",
    "system": "system",
    "core_items": "core passes / photo",
    "recall": "recall",
    "detections": "detections / photo",
    "wall_ms": "wall ms / photo",
    "preprocess_cpu_ms": "preprocess CPU ms",
    "postprocess_cpu_ms": "postprocess CPU ms",
    "client_cpu_ms": "client CPU ms",
    "core_cpu_ms": "core CPU ms",
    "core_mean_batch": "core mean batch",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=2, help="drawn 12 MP photos (default 2)")
    parser.add_argument("--shapes", type=int, default=40, help="small shapes per photo (default 40)")
    report.add_output_arguments(parser, BENCHMARK)
    args = parser.parse_args(argv)
    output = args.output or layout.REPOSITORY_ROOT / "benchmarks" / "results" / "tiling"
    if report.rendered_only(args, BENCHMARK):
        return 0
    from tests.support import tiling_scenes, yolo  # onnx: imported only to measure

    repository = pipeline_repository(yolo.trained() / "yolo.onnx")
    photos = [tiling_scenes.large_photo(seed, HEIGHT, WIDTH, args.shapes) for seed in range(args.photos)]
    (WORK / "photos").mkdir(parents=True, exist_ok=True)
    paths = []
    for index, photo in enumerate(photos):
        paths.append(WORK / "photos" / f"photo_{index}.jpg")
        paths[-1].write_bytes(photo.jpeg())
    settings = {"photos": args.photos, "shapes": args.shapes, "size": f"{WIDTH}x{HEIGHT}", "tile_sizes": list(TILE_SIZES), "overlap": 0.2}
    result = report.new(
        BENCHMARK, "Tiled detection on 12 MP photos vs SAHI in the client", report.command_line("benchmarks.tiling", argv), settings
    )
    report.table(
        result,
        "cost",
        "Recall and cost per photo by tile size: the tiled pipeline vs SAHI in the client (one gRPC request per tile)",
        COLUMNS,
        "One photo at a time. CPU from /proc of the Python stubs (preprocess, postprocess, core: onnxruntime in a Python "
        "stub on this CPU) and of the SAHI client; the core's mean batch from Triton's statistics (items per execution).",
    )
    log_file = WORK / "tritonserver.log"
    server = LocalTritonServer(
        http_port=loadgen.free_port(), grpc_port=loadgen.free_port(), metrics_port=loadgen.free_port(),
        log_file=log_file, model_repository=repository, pipelines=[NAME],
    )  # fmt: skip
    server.start()
    try:
        server.wait_ready(timeout_s=600)
        measure(result, server, photos, paths)
    finally:
        server.stop()
    for path in report.write(report.finish(result), output):
        report.log(BENCHMARK, f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
