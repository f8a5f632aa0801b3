"""Reference outputs of MediaPipe itself, for checking the ONNX conversions of its models.

STANDALONE: runs inside the ``mediapipe`` build environment (``.build/envs/mediapipe``,
``requirements/mediapipe.txt``), not in ``.venv``; it imports only mediapipe, numpy,
cv2 and the standard library, never ``builders`` nor ``tests``.

Usage::

    python tests/support/mediapipe_reference.py selfie_segmentation [--model-selection 1] --out OUT.npz IMAGE...
    python tests/support/mediapipe_reference.py face_detection [--model-selection 1] --out OUT.npz IMAGE...

Images are read with cv2 and converted BGR -> RGB. The .npz holds:

``--model-selection`` picks MediaPipe's model (default 0): for selfie_segmentation 0 is the general
256x256 model, 1 the landscape 144x256 one; for face_detection 0 is the short-range model, 1 the full-range.

* ``mediapipe_version``, ``task``, ``model_selection``, ``images`` (the paths as given), ``sizes`` ([N, 2]: height, width);
* selfie_segmentation (``SelfieSegmentation(model_selection=M)``): key ``"<i>"``: image i's float32
  mask [H, W] at the original size, values in [0, 1];
* face_detection (``FaceDetection(model_selection=M, min_detection_confidence=0.5)``), per image i:
  ``"<i>_boxes"`` [F, 4] float32 pixels (x_min, y_min, x_max, y_max), ``"<i>_scores"`` [F],
  ``"<i>_keypoints"`` [F, 6, 2] pixels (x, y): right eye, left eye, nose tip, mouth centre,
  right ear tragion, left ear tragion (MediaPipe's order).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import cv2
import mediapipe as mp
import numpy as np

TASKS = ("selfie_segmentation", "face_detection")


def _read_rgb(path: str) -> np.ndarray:
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise SystemExit(f"mediapipe_reference: cannot read image {path}")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def selfie_segmentation(images: list[np.ndarray], model_selection: int) -> dict[str, np.ndarray]:
    results: dict[str, np.ndarray] = {}
    with mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=model_selection) as segmenter:
        for index, image in enumerate(images):
            mask = segmenter.process(image).segmentation_mask
            if mask is None:
                raise SystemExit(f"mediapipe_reference: no mask for image {index}")
            results[str(index)] = np.asarray(mask, dtype=np.float32)
    return results


def face_detection(images: list[np.ndarray], model_selection: int) -> dict[str, np.ndarray]:
    results: dict[str, np.ndarray] = {}
    with mp.solutions.face_detection.FaceDetection(model_selection=model_selection, min_detection_confidence=0.5) as detector:
        for index, image in enumerate(images):
            height, width = image.shape[:2]
            boxes, scores, keypoints = [], [], []
            for detection in detector.process(image).detections or []:
                box = detection.location_data.relative_bounding_box
                boxes.append(
                    [
                        box.xmin * width,
                        box.ymin * height,
                        (box.xmin + box.width) * width,
                        (box.ymin + box.height) * height,
                    ]
                )
                scores.append(detection.score[0])
                keypoints.append([[point.x * width, point.y * height] for point in detection.location_data.relative_keypoints])
            results[f"{index}_boxes"] = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
            results[f"{index}_scores"] = np.asarray(scores, dtype=np.float32).reshape(-1)
            results[f"{index}_keypoints"] = np.asarray(keypoints, dtype=np.float32).reshape(-1, 6, 2)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=TASKS)
    parser.add_argument("--model-selection", type=int, choices=(0, 1), default=0, help="MediaPipe's model_selection (default: 0)")
    parser.add_argument("--out", required=True, type=Path, help="the .npz to write")
    parser.add_argument("images", nargs="+", help="image files (anything cv2.imread reads)")
    args = parser.parse_args(argv)
    images = [_read_rgb(path) for path in args.images]
    run = selfie_segmentation if args.task == "selfie_segmentation" else face_detection
    outputs = run(images, args.model_selection)
    record = {
        "mediapipe_version": np.asarray(mp.__version__),
        "task": np.asarray(args.task),
        "model_selection": np.asarray(args.model_selection),
        "images": np.asarray(args.images),
        "sizes": np.asarray([image.shape[:2] for image in images], dtype=np.int64).reshape(-1, 2),
        **outputs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=args.out.parent, prefix=f".{args.out.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            np.savez(file, **record)  # type: ignore[arg-type]
        os.replace(temporary, args.out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    print(f"mediapipe_reference: {args.task} on {len(images)} image(s) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
