"""What a mutated upload costs the served decode path, against a valid photo of the same format; and, for PNG,
which decoder refuses bad data cheapest once the structural checks passed it.

In process, one thread (as each preprocess instance decodes). First what the structural checks cost valid photos:
the walk and the coded-data check of every package photo and two 12 MP phone photos against their whole
preprocess (decode and resize, the classifier's spec). Then every mutant of real photos
(devtools/upload_mutants.py) through :func:`vision_serving.image_codec.decode` with the served limits of a
pipeline's preprocess, its CPU time (``time.thread_time``) divided by the CPU of the valid photo it was
made from. Then the PNG mutants that pass the structural checks, and the valid PNGs, through three
decoders side by side: OpenCV's ``imdecode`` (the served one), Pillow's ``Image.open(...).convert("RGB")``,
and a streaming zlib inflate of the IDAT data (output discarded, bounded by the declared rows' size) before
OpenCV. docs/design.md ("Structural checks") records a run and what was chosen.

    .venv/bin/python -m benchmarks.decode_cost [--cases 3000] [--seed 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import statistics
import struct
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from benchmarks import cpu
from benchmarks.images import phone_payloads
from builders import photos
from devtools import fuzz_codec, upload_mutants
from vision_serving import image_codec, image_structure, layout, model_config, preprocessing

PHOTOS = ("coffee", "chelsea", "astronaut", "motorcycle_left", "rocket", "china")


def seed_uploads() -> list[bytes]:
    """Real photos as PNG (200-800 KB, as the served fuzzing found slow), JPEG and WebP; the HEIC/AVIF seeds."""
    uploads = []
    for name in PHOTOS:
        bgr = cv2.imdecode(np.frombuffer(photos.photo_bytes(name), np.uint8), cv2.IMREAD_COLOR)
        uploads += [cv2.imencode(".png", bgr)[1].tobytes(), cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()]
        uploads += [cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()]
        uploads.append(cv2.imencode(".webp", bgr, [cv2.IMWRITE_WEBP_QUALITY, 80])[1].tobytes())
    for image_format in ("heic", "avif"):
        uploads += [path.read_bytes() for path in fuzz_codec.seeds(image_format)]
    return uploads


def cpu_s(call: Callable[[], object]) -> tuple[float, str]:
    """(thread CPU seconds, outcome) of one call."""
    started = time.thread_time()
    try:
        call()
        outcome = "decoded"
    except (image_codec.ImageError, ValueError, OSError, SyntaxError, cv2.error, zlib.error) as error:
        outcome = "refused: " + str(error).split(":")[0][:40]
    return time.thread_time() - started, outcome


def served_limits(pipeline: str = "image_classifier") -> image_codec.ImageLimits:
    config = model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess"))
    return preprocessing.limits_from_config(config)


# --------------------------------------------------------------------------- the PNG decoders compared


def opencv_png(data: bytes) -> None:
    if cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is None:
        raise ValueError("OpenCV refused")


def pillow_png(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as image:
        image.convert("RGB")


def zlib_then_opencv(data: bytes) -> None:
    """Inflate the IDAT stream in 64 KB steps, output discarded, refusing at its first error or past the rows' size; then OpenCV."""
    width, height, depth, colour, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    expected, _ = image_structure.png_filtered_size(width, height, depth, colour, bool(interlace))
    inflater, produced, position = zlib.decompressobj(), 0, 8
    while position + 8 <= len(data):
        (length,) = struct.unpack_from(">I", data, position)
        if data[position + 4 : position + 8] == b"IDAT":
            chunk = data[position + 8 : position + 8 + length]
            while chunk:
                produced += len(inflater.decompress(chunk, 65536))
                chunk = inflater.unconsumed_tail
                if produced > expected:
                    raise ValueError("IDAT inflates past the declared rows")
        position += 12 + length
    if produced != expected:
        raise ValueError(f"IDAT inflates to {produced} bytes, the rows need {expected}")
    opencv_png(data)


PNG_DECODERS = {"opencv": opencv_png, "pillow": pillow_png, "zlib+opencv": zlib_then_opencv}


# --------------------------------------------------------------------------- the checks' cost on valid photos


def best_s(call: Callable[[], object], repeats: int) -> float:
    costs = []
    for _ in range(repeats):
        started = time.thread_time()
        call()
        costs.append(time.thread_time() - started)
    return min(costs)


def structure_cost(limits: image_codec.ImageLimits, pipeline: str = "image_classifier", phone_photos: int = 2) -> dict:
    """The structural walk and coded-data check (all of it, the JPEG scan walk the codec had before included) of each
    valid photo against its whole preprocess CPU."""
    config = model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(config)
    minimum = preprocessing.decode_minimum(spec)
    uploads = {name: photos.photo_bytes(name) for name in photos.registry()}
    uploads |= {payload.name: payload.data for payload in phone_payloads()[:phone_photos]} if phone_photos else {}
    rows, walked, total, most = [], 0.0, 0.0, 0.0
    for name, data in uploads.items():
        image_format = image_codec.sniff_format(data) or ""

        def walk(data: bytes = data, image_format: str = image_format) -> None:
            image_structure.check_coded_data(image_codec.walk_structure(data, image_format, limits), image_format.upper())

        def whole(data: bytes = data) -> None:
            preprocessing.preprocess_batch([image_codec.decode(data, limits, minimum).image], spec)

        walk_s, whole_s = best_s(walk, 30), best_s(whole, 5)
        walked, total, most = walked + walk_s, total + whole_s, max(most, 100 * walk_s / whole_s)
        rows.append(
            {
                "upload": name,
                "bytes": len(data),
                "checks_us": round(walk_s * 1e6, 1),
                "preprocess_us": round(whole_s * 1e6),
                "share_percent": round(100 * walk_s / whole_s, 3),
            }
        )
    return {
        "pipeline": pipeline,
        "total_share_percent": round(100 * walked / total, 3),
        "max_share_percent": round(most, 3),
        "uploads": rows,
    }


# --------------------------------------------------------------------------- the run


def measure(cases: int, seed: int, limits: image_codec.ImageLimits, phone_photos: int = 2) -> dict:
    preprocessing.set_threads(1)
    uploads = seed_uploads()
    # Each seed's own valid decode: a mutant's cost is compared with its photo's.
    baseline = [min(cpu_s(functools.partial(image_codec.decode, data, limits))[0] for _ in range(3)) for data in uploads]
    valid: dict[str, list[float]] = defaultdict(list)
    for data, cost in zip(uploads, baseline):
        valid[upload_mutants.sniffed(data)].append(cost)
    by_format: dict[str, list[float]] = defaultdict(list)
    outcomes: Counter[str] = Counter()
    slowest: list[tuple[float, str, str, str]] = []
    passed_png: list[bytes] = []
    for index in range(cases):
        case = upload_mutants.mutant(uploads, seed, index)
        data, image_format, how = case.data, case.format, case.mutations
        spent, outcome = cpu_s(functools.partial(image_codec.decode, data, limits))
        ratio = spent / baseline[case.seed_index]
        by_format[image_format].append(ratio)
        outcomes[f"{image_format} {outcome.split(':')[0]}"] += 1
        slowest = sorted([*slowest, (ratio, image_format, how, outcome)], reverse=True)[:8]
        if image_format == "png":
            try:
                image_codec.check(data, limits)
                passed_png.append(data)
            except image_codec.ImageError:
                pass
    report: dict = {
        "machine": cpu.describe(cpu.machine()),
        "cases": cases,
        "seed": seed,
        "valid_median_ms": {key: round(statistics.median(costs) * 1000, 2) for key, costs in sorted(valid.items())},
        "mutant_cost_over_valid": {
            key: {
                "cases": len(ratios),
                "median": round(statistics.median(ratios), 2),
                "p99": round(float(np.percentile(ratios, 99)), 2),
                "max": round(max(ratios), 2),
                "over_5x": sum(ratio > 5 for ratio in ratios),
            }
            for key, ratios in sorted(by_format.items())
        },
        "outcomes": dict(sorted(outcomes.items())),
        "slowest": [{"ratio": round(r, 2), "format": f, "mutations": h, "outcome": o} for r, f, h, o in slowest],
    }
    report["png_decoders"] = compare_png_decoders(passed_png, [d for d in uploads if upload_mutants.sniffed(d) == "png"])
    report["structure_cost"] = structure_cost(limits, phone_photos=phone_photos)
    return report


def compare_png_decoders(mutants: list[bytes], valid: list[bytes]) -> dict:
    """Each decoder's CPU on the mutants that pass the structural checks and on the valid PNGs (ms: median, p99, max)."""
    result: dict[str, Any] = {"mutants_past_the_checks": len(mutants)}
    for name, decoder in PNG_DECODERS.items():
        on_mutants = [cpu_s(functools.partial(decoder, data))[0] * 1000 for data in mutants] or [0.0]
        on_valid = [min(cpu_s(functools.partial(decoder, data))[0] for _ in range(3)) * 1000 for data in valid]
        result[name] = {
            "mutants_ms": {
                "median": round(statistics.median(on_mutants), 2),
                "p99": round(float(np.percentile(on_mutants, 99)), 2),
                "max": round(max(on_mutants), 2),
            },
            "valid_total_ms": round(sum(on_valid), 1),
        }
    for name in PNG_DECODERS:
        result[name]["valid_vs_opencv"] = round(result[name]["valid_total_ms"] / result["opencv"]["valid_total_ms"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pipeline", default="image_classifier", help="whose preprocess limits apply")
    parser.add_argument("--json", type=Path, help="also write the report here")
    options = parser.parse_args(argv)
    report = measure(options.cases, options.seed, served_limits(options.pipeline))
    text = json.dumps(report, indent=1)
    print(text)
    if options.json:
        options.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
