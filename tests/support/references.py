"""MediaPipe's own runtime as the tests' reference for the pipelines converted from its models.

``mediapipe==0.10.14`` runs its ``.tflite`` models (custom ops included) on
CPU, but cannot share an environment with the serving code or with tf2onnx, so
:func:`mediapipe_outputs` runs ``tests/support/mediapipe_reference.py`` inside the
``mediapipe`` build environment (``requirements/mediapipe.txt``) and caches the
result under ``.build/references/``, keyed by the photos, the script and the
environment's requirements.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from builders import Log, build_envs, stderr_logger
from builders.artifacts import sha256_bytes, sha256_file
from vision_serving import image_codec, layout

SCRIPT = Path(__file__).resolve().parent / "mediapipe_reference.py"
CACHE_DIR = layout.BUILD_DIR / "references"
ENV = "mediapipe"

log_to_stderr = stderr_logger("reference")


def _suffix(data: bytes) -> str:
    return ".jpg" if image_codec.sniff_format(data) == "jpeg" else ".png"


def mediapipe_outputs(task: str, photos: dict[str, bytes], log: Log = log_to_stderr, model_selection: int = 0) -> dict[str, Any]:
    """Per photo name: the float mask [H, W] (selfie_segmentation), or {"boxes", "scores",
    "keypoints"} in pixels (face_detection), from MediaPipe's own runtime with its ``model_selection``
    (selfie segmentation: 0 general 256x256, 1 landscape 144x256)."""
    names = sorted(photos)
    key = hashlib.sha256(
        "\n".join(
            [
                task,
                str(model_selection),
                sha256_file(SCRIPT),
                sha256_file(build_envs.requirements_file(ENV)),
                *(f"{n}:{sha256_bytes(photos[n])}" for n in names),
            ]
        ).encode()
    ).hexdigest()[:20]
    cache = CACHE_DIR / f"{task}{'' if model_selection == 0 else f'-{model_selection}'}-{key}.npz"
    if not cache.is_file():
        build_envs.ensure_env(ENV, log)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            paths = []
            for index, name in enumerate(names):
                path = Path(scratch) / f"{index:03d}_{name}{_suffix(photos[name])}"
                path.write_bytes(photos[name])
                paths.append(str(path))
            partial = Path(scratch) / "out.npz"
            log(f"running MediaPipe {task} (model_selection={model_selection}) on {len(names)} photos")
            build_envs.run_in_env(ENV, [str(SCRIPT), task, "--model-selection", str(model_selection), "--out", str(partial), *paths], log)
            partial.replace(cache)
    with np.load(cache, allow_pickle=False) as data:
        if task == "selfie_segmentation":
            return {name: np.array(data[str(i)]) for i, name in enumerate(names)}
        return {name: {field: np.array(data[f"{i}_{field}"]) for field in ("boxes", "scores", "keypoints")} for i, name in enumerate(names)}
