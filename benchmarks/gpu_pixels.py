"""What the pod's CPUs still do per image with the GPU pixel path (``pixel_device = "gpu"``), side by side with the
served CPU preprocess, and the vCPUs per 1000 images/s either way.

    python -m benchmarks.gpu_pixels --measure      # this machine, one run: writes benchmarks/results/gpu_pixels.json
    python -m benchmarks.gpu_pixels                # the table from the recorded run (docs/gpu-pixels.md)

Per image and upload kind (thumbnail, web, 12 MP phone JPEGs: ``benchmarks/images.py``), one thread, through the
served code (:func:`benchmarks.steps.served_costs` for the CPU mode):

- **CPU mode**: the served decode, preprocess (resize, layout) and its drift statistics, and the postprocess and its
  drift statistics;
- **GPU mode**: what :meth:`vision_serving.gpu_pixels.step.GpuPreprocess.parse` does per request (the served upload
  checks, the routing, the geometry the DALI pipeline takes), the drift statistics of the 64 x 64 thumbnails DALI
  hands back, and the same postprocess. The decode, resize and layout are the GPU's (their share is the GPU images/s
  the user measures with ``perf_analyzer``, as for the core). DALI's host work for nvJPEG is not counted: with
  ``hw_decoder_load`` 1.0 on a GPU with a hardware JPEG decoder it is small, and it can only be measured on a GPU;
- **the hops** (gRPC, the ensemble scheduler, the Python backend's hand-over of every tensor): the serving
  overhead ``python -m benchmarks.capacity --measure`` recorded with the local tritonserver
  (``benchmarks/results/capacity.json``), the same in both modes. That is an upper bound for the GPU mode, whose
  pixels travel in GPU memory instead of the shared memory the overhead was measured with.

vCPUs per 1000 images/s = ms per image / ``--utilization`` (0.7, the capacity planner's). One pod of ``--vcpus``
keeps a GPU of ``--gpu-images-per-s`` busy at min(1, (vcpus x utilization x 1000 / ms) / GPU images/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import capacity, cpu, images
from vision_serving import drift, layout

RESULTS = capacity.GPU_PIXELS
# The pipelines the GPU pixel path takes (the image-to-tensor resize; the text reader's preprocessor of its own: no).
PIPELINES = ("image_classifier", "face_detector", "person_segmenter")
DEFAULT_VCPUS = 8.0


def gpu_mode_costs(pipeline: layout.Pipeline, payloads: list[bytes], repeats: int) -> dict[str, float]:
    """CPU ms per image of the GPU mode's preprocess: the per-request parse, the thumbnails' drift statistics."""
    from vision_serving import model_config
    from vision_serving.gpu_pixels.step import GpuPreprocess  # DALI: only where the mode is measured

    gpu = GpuPreprocess(model_config.load_config(pipeline.model_dir("preprocess")), device="cpu", device_id=None)
    requests = [np.array([data], dtype=np.object_).reshape(1, 1) for data in payloads]
    parsed = [gpu.parse(request) for request in requests]
    assert all(item.plans is not None for item in parsed), "every benchmark upload is a JPEG the GPU decoder takes"
    outcomes = gpu.compute(parsed)  # the thumbnails DALI's CPU operators give (the GPU's are the same size)
    thumbnails = [image for outcome in outcomes if not isinstance(outcome, Exception) for image in outcome.images]
    sizes = np.array([sample.decoded for item in parsed for sample in item.plans or []], dtype=np.int32)
    facts = drift.payload_facts(payloads)
    count = len(payloads)
    return {
        "checks": cpu.cpu_ms(lambda: [gpu.parse(request) for request in requests], count, repeats),
        "preprocess_drift": cpu.cpu_ms(lambda: drift.image_features(thumbnails, sizes, *facts), count, repeats),
    }


def measure(repeats: int, command: str) -> dict[str, Any]:
    from benchmarks import inprocess, steps

    measured: dict[str, Any] = {}
    for name in PIPELINES:
        pipeline = layout.pipeline(name)
        served = inprocess.load(pipeline)
        measured[name] = {}
        for kind in capacity.KINDS:
            payloads = [payload.data for payload in images.upload_mix(kind)]
            measured[name][kind] = {
                "cpu_mode": steps.served_costs(served, payloads, repeats, core=False),
                "gpu_mode": gpu_mode_costs(pipeline, payloads, repeats),
            }
    return {
        "command": command,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": cpu.machine(),
        "pipelines": measured,
    }


def table(recorded: dict[str, Any], overhead: dict[str, Any], vcpus: float, gpu_images_per_s: float, utilization: float) -> str:
    lines = [
        f"Measured on {cpu.describe(recorded['machine'])}, {recorded['created_at']} (`{recorded['command']}`); the hops "
        f"from `{overhead['command']}` ({overhead['created_at']}, {cpu.describe(overhead['machine'])}). "
        f"{100 * utilization:.0f} % of each vCPU used; a pod of {vcpus:g} vCPUs and one GPU of {gpu_images_per_s:g} images/s.",
        "",
        "| pipeline | uploads | mode | preprocess ms | postprocess ms | hops ms | CPU ms/image | vCPUs per 1000 images/s | GPU busy |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pipeline in recorded["pipelines"]:
        for mix in capacity.MIXES:
            for mode in ("cpu", "gpu"):
                parts = capacity.pixel_path_ms(recorded, overhead, pipeline, mix, mode)
                ms = sum(parts.values())
                busy = min(1.0, vcpus * utilization * 1000.0 / ms / gpu_images_per_s)
                lines.append(
                    f"| {pipeline} | {mix} | {mode} | {parts['preprocess']:.2f} | {parts['postprocess']:.2f} | {parts['hops']:.2f} | "
                    f"{ms:.2f} | {ms / utilization:.1f} | {100 * busy:.0f} % |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_pixels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help=f"measure this machine first (writes {RESULTS.name})")
    parser.add_argument("--repeats", type=int, default=3, help="--measure: passes per cost (best of)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the recorded run (default: %(default)s)")
    parser.add_argument("--costs", type=Path, default=capacity.RESULTS, help="the capacity planner's run, for the hops")
    parser.add_argument("--vcpus", type=float, default=DEFAULT_VCPUS, help="vCPUs of the pod (default: %(default)s)")
    parser.add_argument("--gpu-images-per-s", type=float, default=capacity.DEFAULT_GPU_IMAGES_PER_S, help="one GPU's images/s")
    parser.add_argument("--utilization", type=float, default=capacity.DEFAULT_UTILIZATION, help="share of each vCPU planned for")
    args = parser.parse_args(argv)
    if args.measure:
        command = " ".join(["python -m benchmarks.gpu_pixels", *(argv if argv is not None else sys.argv[1:])])
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(measure(args.repeats, command), indent=2) + "\n")
    try:
        recorded = json.loads(args.results.read_text())
        overhead = capacity.load(args.costs)
    except FileNotFoundError as error:
        print(f"gpu_pixels: error: {error} (run with --measure)", file=sys.stderr)
        return 2
    print(table(recorded, overhead, args.vcpus, args.gpu_images_per_s, args.utilization))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
