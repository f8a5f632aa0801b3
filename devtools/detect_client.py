"""Find faces in image files with the face_detector ensemble on a running Triton server.

    ./scripts/detect PATH [PATH ...] [--protocol grpc|http] [--url HOST:PORT]
                     [--model face_detector] [--score-threshold X] [--batch-size N]
                     [--draw OUT] [--recursive] [--json] [--timeout SECONDS] [--deadline SECONDS]

PATH is an image file or a folder (its *.jpg, *.jpeg and *.png files, sorted).
Files are sent as encoded bytes, several per request (--batch-size). For each
file it prints the faces' boxes (x_min, y_min, x_max, y_max, pixels of the
image) and scores, best first; --json also gives the six keypoints. With
``--draw OUT`` it writes a copy of each image with the boxes and keypoints
drawn: to OUT itself when OUT names a .jpg/.png file and there is one image,
else into the folder OUT as ``<name>.faces.jpg``. Tensor names are read from the
server's model metadata (the BYTES input is the image, the FP32 input the
optional score threshold; FP32 outputs by rank: boxes, scores, keypoints; the
INT32 output the face count).

Exit codes: 0 all files processed (finding no face is not an error), 1 some
file failed (each error is reported for its own file), 2 the server is not
reachable or ready, or the model does not look like a face detector.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tritonclient.utils import InferenceServerException

from devtools.client import (
    IMAGE_SUFFIXES,
    ClassifyError,
    TritonConnection,
    add_connection_arguments,
    connect,
    error_message,
    input_files,
    is_invalid_arg,
    positive_int,
    print_results,
    read_file,
)

KEYPOINT_NAMES = ("right_eye", "left_eye", "nose_tip", "mouth_center", "right_ear_tragion", "left_ear_tragion")
DRAWN_SUFFIX = ".faces.jpg"
BOX_COLOR = (0, 220, 0)  # BGR
KEYPOINT_COLORS = ((255, 64, 64), (64, 64, 255), (0, 200, 255), (255, 0, 200), (255, 255, 0), (0, 255, 255))


@dataclass(frozen=True)
class DetectorInterface:
    """The tensors of a face detector, found by datatype and rank in its metadata."""

    name: str
    image_input: str
    threshold_input: str | None
    boxes_output: str
    scores_output: str
    keypoints_output: str
    count_output: str
    max_batch_size: int


@dataclass(frozen=True)
class Face:
    box: tuple[float, float, float, float]  # x_min, y_min, x_max, y_max (pixels)
    score: float
    keypoints: tuple[tuple[float, float], ...]  # (x, y) pixels, KEYPOINT_NAMES order


@dataclass
class FileResult:
    file: str
    data: bytes = b""
    faces: list[Face] | None = None
    drawn: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"file": self.file, "error": self.error}
        faces = [
            {
                "box": [round(v, 2) for v in face.box],
                "score": round(face.score, 4),
                "keypoints": {name: [round(x, 2), round(y, 2)] for name, (x, y) in zip(KEYPOINT_NAMES, face.keypoints)},
            }
            for face in self.faces or []
        ]
        return {"file": self.file, "faces": faces, **({"drawn": self.drawn} if self.drawn else {})}


def interface_from_metadata(model: str, metadata: dict[str, Any], max_batch_size: int) -> DetectorInterface:
    """BYTES input = image, FP32 input = score threshold; FP32 outputs by rank (with the batch dim):
    3 boxes [N, K, 4], 2 scores [N, K], 4 keypoints [N, K, 6, 2]; INT32 output = count."""

    def pick(tensors: list[dict[str, Any]], datatype: str, rank: int | None = None) -> list[str]:
        return [t["name"] for t in tensors if t.get("datatype") == datatype and (rank is None or len(t.get("shape", [])) == rank)]

    inputs, outputs = metadata.get("inputs", []), metadata.get("outputs", [])
    images, thresholds = pick(inputs, "BYTES"), pick(inputs, "FP32")
    boxes, scores, keypoints, counts = pick(outputs, "FP32", 3), pick(outputs, "FP32", 2), pick(outputs, "FP32", 4), pick(outputs, "INT32")
    if (
        len(images) != 1
        or len(thresholds) > 1
        or len(inputs) != 1 + len(thresholds)
        or not all(len(found) == 1 for found in (boxes, scores, keypoints, counts))
    ):
        raise ClassifyError(
            f"model '{model}' does not look like a face detector: expected one BYTES input (images), at most one FP32 "
            "input (score threshold), FP32 boxes [N,K,4], scores [N,K], keypoints [N,K,6,2] and an INT32 count"
        )
    return DetectorInterface(
        model, images[0], thresholds[0] if thresholds else None, boxes[0], scores[0], keypoints[0], counts[0], max_batch_size
    )


def model_interface(connection: TritonConnection, model: str) -> DetectorInterface:
    metadata, config = connection.metadata_and_config(model)
    return interface_from_metadata(model, metadata, int(config.get("max_batch_size", 0)))


def infer(connection: TritonConnection, interface: DetectorInterface, images: list[bytes], threshold: float | None) -> list[list[Face]]:
    """One request for all ``images``; raises InferenceServerException (or OSError) on failure."""
    module = connection.module
    image_input = module.InferInput(interface.image_input, [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array([[image] for image in images], dtype=np.object_))
    inputs = [image_input]
    if threshold is not None and interface.threshold_input is not None:
        threshold_input = module.InferInput(interface.threshold_input, [len(images), 1], "FP32")
        threshold_input.set_data_from_numpy(np.full((len(images), 1), threshold, dtype=np.float32))
        inputs.append(threshold_input)
    names = (interface.boxes_output, interface.scores_output, interface.keypoints_output, interface.count_output)
    result = connection.request(
        "infer", interface.name, inputs, outputs=[module.InferRequestedOutput(n) for n in names], **connection.call_options()
    )
    boxes, scores, keypoints, counts = (result.as_numpy(name) for name in names)
    return [
        [
            Face(
                tuple(float(v) for v in boxes[i, j]),  # type: ignore[arg-type]
                float(scores[i, j]),
                tuple((float(x), float(y)) for x, y in keypoints[i, j]),
            )
            for j in range(int(counts[i, 0]))
        ]
        for i in range(len(images))
    ]


def detect(
    connection: TritonConnection, interface: DetectorInterface, files: list[str], batch_size: int, threshold: float | None
) -> list[FileResult]:
    results = [FileResult(file=name) for name in files]
    pending: list[FileResult] = []
    for result in results:
        data = read_file(result.file)
        if isinstance(data, str):
            result.error = data
        else:
            result.data = data
            pending.append(result)
    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        try:
            for result, faces in zip(batch, infer(connection, interface, [r.data for r in batch], threshold)):
                result.faces = faces
        except (InferenceServerException, OSError) as error:
            if len(batch) == 1 or not is_invalid_arg(error):
                for result in batch:
                    result.error = error_message(error)
                continue
            # One bad file fails its whole request: retry one by one to find which.
            for result in batch:
                try:
                    result.faces = infer(connection, interface, [result.data], threshold)[0]
                except (InferenceServerException, OSError) as single_error:
                    result.error = error_message(single_error)
    return results


def draw(image_bgr: np.ndarray, faces: list[Face]) -> np.ndarray:
    """A copy of the image with each face's box, score and keypoints drawn."""
    out = image_bgr.copy()
    thickness = max(1, round(max(out.shape[:2]) / 400))
    for face in faces:
        x0, y0, x1, y1 = (round(v) for v in face.box)
        cv2.rectangle(out, (x0, y0), (x1, y1), BOX_COLOR, thickness, cv2.LINE_AA)
        cv2.putText(
            out, f"{face.score:.2f}", (x0, max(0, y0 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.4 * thickness, BOX_COLOR, thickness, cv2.LINE_AA
        )
        for (x, y), color in zip(face.keypoints, KEYPOINT_COLORS):
            cv2.circle(out, (round(x), round(y)), 2 * thickness, color, -1, cv2.LINE_AA)
    return out


def drawn_path(source: str, out: Path, single: bool) -> Path:
    if single and out.suffix.lower() in IMAGE_SUFFIXES:
        return out
    return out / f"{Path(source).stem}{DRAWN_SUFFIX}"


def write_drawings(results: list[FileResult], out: Path) -> None:
    single = len(results) == 1
    for result in results:
        if result.faces is None:
            continue
        image = cv2.imdecode(np.frombuffer(result.data, np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            result.error = "the server decoded this file but OpenCV cannot, nothing drawn"
            continue
        path = drawn_path(result.file, out, single)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(path), draw(image, result.faces)):
            result.error = f"cannot write {path}"
            continue
        result.drawn = str(path)


def format_table(result: FileResult) -> str:
    faces = result.faces or []
    lines = [f"{result.file}: {len(faces)} face{'' if len(faces) == 1 else 's'}" + (f" -> {result.drawn}" if result.drawn else "")]
    if faces:
        lines.append(f"  {'face':>4}  {'score':>6}  {'x_min':>7}  {'y_min':>7}  {'x_max':>7}  {'y_max':>7}")
        for index, face in enumerate(faces, start=1):
            x0, y0, x1, y1 = face.box
            lines.append(f"  {index:>4}  {face.score:>6.3f}  {x0:>7.1f}  {y0:>7.1f}  {x1:>7.1f}  {y1:>7.1f}")
    return "\n".join(lines)


def score_threshold(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="detect",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 all processed, 1 some file failed, 2 server/model problem.",
    )
    add_connection_arguments(parser, "face_detector", "print one JSON document (with keypoints) instead of tables")
    parser.add_argument("--score-threshold", type=score_threshold, metavar="X", help="minimum face score in [0, 1] (default: the model's)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=8, help="images per request (default 8, at most the model's max_batch_size)"
    )
    parser.add_argument(
        "--draw",
        type=Path,
        metavar="OUT",
        help=f"write images with the faces drawn: OUT.jpg/.png for one image, else <name>{DRAWN_SUFFIX} in folder OUT",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = input_files("detect", args, (DRAWN_SUFFIX,))  # not our own drawings from an earlier run
    if not files:
        return 2
    connection = connect(args)
    try:
        connection.check_ready(args.model)
        interface = model_interface(connection, args.model)
        if args.score_threshold is not None and interface.threshold_input is None:
            raise ClassifyError(f"model '{args.model}' has no FP32 score-threshold input; --score-threshold cannot be used with it")
        batch_size = min(args.batch_size, interface.max_batch_size) if interface.max_batch_size > 0 else 1
        results = detect(connection, interface, files, batch_size, args.score_threshold)
    except ClassifyError as error:
        print(f"detect: error: {error}", file=sys.stderr)
        return 2
    finally:
        connection.close()
    if args.draw is not None:
        write_drawings(results, args.draw)
    return print_results("detect", results, format_table, args.json)


if __name__ == "__main__":
    sys.exit(main())
