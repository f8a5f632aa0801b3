"""Segment people in image files with the person_segmenter ensemble on a running Triton server.

    ./scripts/segment PATH [PATH ...] [--protocol grpc|http] [--url HOST:PORT]
                      [--model person_segmenter] [--out-dir DIR] [--overlay] [--json]

For each image it writes ``<name>.mask.png`` (8-bit, the image's own size:
0 background ... 255 person) next to the image, or into ``--out-dir``, and
with ``--overlay`` also ``<name>.overlay.jpg`` (the person tinted). It prints
each file's person coverage. Tensor names are read from the server's model
metadata (the BYTES input is the image; the BYTES output the mask PNG, the
FP32 output the coverage).

Exit codes: 0 all files segmented, 1 some file failed (each error reported for
its own file), 2 the server is not reachable or ready.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tritonclient.utils import InferenceServerException

from devtools.client import (
    ClassifyError,
    TritonConnection,
    add_connection_arguments,
    connect,
    error_message,
    input_files,
    read_file,
)

OVERLAY_COLOR = np.array([255, 64, 160], dtype=np.float32)  # BGR tint for person pixels
OUTPUT_SUFFIXES = (".mask.png", ".overlay.jpg")


@dataclass
class Segmented:
    file: str
    coverage: float | None = None
    mask_file: str | None = None
    overlay_file: str | None = None
    error: str | None = None


def tensor_names(connection: TritonConnection, model: str) -> tuple[str, str, str]:
    """(image input, mask output, coverage output), by datatype from the model metadata."""
    metadata, _ = connection.metadata_and_config(model)
    inputs = [t["name"] for t in metadata["inputs"] if t["datatype"] == "BYTES"]
    masks = [t["name"] for t in metadata["outputs"] if t["datatype"] == "BYTES"]
    coverage = [t["name"] for t in metadata["outputs"] if t["datatype"] == "FP32"]
    if len(inputs) != 1 or len(masks) != 1 or len(coverage) != 1:
        raise ClassifyError(f"model '{model}' does not look like a segmenter (one BYTES input; BYTES mask and FP32 coverage outputs)")
    return inputs[0], masks[0], coverage[0]


def overlay(image_bgr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The image with person pixels tinted, in proportion to the mask."""
    alpha = (mask.astype(np.float32) / 255.0 * 0.55)[..., None]
    return np.clip(image_bgr * (1 - alpha) + OVERLAY_COLOR * alpha, 0, 255).astype(np.uint8)


def segment_file(
    connection: TritonConnection, model: str, names: tuple[str, str, str], path: str, out_dir: Path | None, with_overlay: bool
) -> Segmented:
    result = Segmented(path)
    data = read_file(path)
    if isinstance(data, str):
        result.error = data
        return result
    image_name, mask_name, coverage_name = names
    image_input = connection.module.InferInput(image_name, [1, 1], "BYTES")
    image_input.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    try:
        response = connection.request("infer", model, [image_input], **connection.call_options())
    except (InferenceServerException, OSError) as error:
        result.error = error_message(error)
        return result
    png = response.as_numpy(mask_name).reshape(-1)[0]
    result.coverage = float(response.as_numpy(coverage_name).reshape(-1)[0])
    source = Path(path)
    folder = out_dir or source.parent
    folder.mkdir(parents=True, exist_ok=True)
    mask_path = folder / f"{source.stem}.mask.png"
    mask_path.write_bytes(png)
    result.mask_file = str(mask_path)
    if with_overlay:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        mask = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
        if image is not None and mask is not None and image.shape[:2] == mask.shape[:2]:
            overlay_path = folder / f"{source.stem}.overlay.jpg"
            cv2.imwrite(str(overlay_path), overlay(image, mask))
            result.overlay_file = str(overlay_path)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="segment", description=__doc__.split("\n\n")[0])
    add_connection_arguments(parser, "person_segmenter", "print one JSON document")
    parser.add_argument("--out-dir", type=Path, help="write masks here instead of next to each image")
    parser.add_argument("--overlay", action="store_true", help="also write <name>.overlay.jpg")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = input_files("segment", args, OUTPUT_SUFFIXES)  # not our own outputs from an earlier run
    if not files:
        return 2
    connection = connect(args)
    try:
        connection.check_ready(args.model)
        names = tensor_names(connection, args.model)
        results = [segment_file(connection, args.model, names, f, args.out_dir, args.overlay) for f in files]
    except ClassifyError as error:
        print(f"segment: error: {error}", file=sys.stderr)
        return 2
    finally:
        connection.close()
    if args.json:
        print(json.dumps([vars(r) for r in results], indent=2))
    for r in results:
        if r.error is not None:
            print(f"segment: error: {r.file}: {r.error}", file=sys.stderr)
        elif not args.json:
            extra = f", {r.overlay_file}" if r.overlay_file else ""
            print(f"{r.file}  person {(r.coverage or 0.0) * 100:5.1f}%  -> {r.mask_file}{extra}")
    return 1 if any(r.error is not None for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
