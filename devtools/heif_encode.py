"""HEIC and AVIF files made by real encoders, for the tests and the benchmarks (the server only decodes).

The encoders (pillow-heif's x265, Pillow's and imagecodecs' libavif with aom) live in their own environment,
``.build/envs/heif-encode`` (requirements/heif-encode.in), created on first use like the reference
environments; never in .venv or an image. :func:`encode` runs devtools/heif_encoder.py there on the given
images and caches the files under ``.build/references/``, keyed by the images, the specs, the script and the
environment's lock.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from builders import Log, build_envs, stderr_logger
from builders.artifacts import sha256_bytes, sha256_file
from vision_serving import layout

SCRIPT = Path(__file__).resolve().parent / "heif_encoder.py"
CACHE_DIR = layout.BUILD_DIR / "references"
ENV = "heif-encode"

log_to_stderr = stderr_logger("heif-encode")


def encode(specs: list[dict[str, Any]], images: dict[str, np.ndarray], log: Log = log_to_stderr) -> dict[str, bytes]:
    """Spec name -> the encoded file (devtools/heif_encoder.py says what a spec holds)."""
    digest = hashlib.sha256(json.dumps(specs, sort_keys=True).encode())
    for key in sorted(images):
        digest.update(f"{key}:{images[key].shape}:{images[key].dtype}:".encode() + sha256_bytes(images[key].tobytes()).encode())
    digest.update(sha256_file(SCRIPT).encode() + sha256_file(build_envs.requirements_file(ENV)).encode())
    cache = CACHE_DIR / f"heif-{digest.hexdigest()[:20]}"
    if not cache.is_dir():
        build_envs.ensure_env(ENV, log)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            spec_path, arrays_path, out = Path(scratch) / "spec.json", Path(scratch) / "images.npz", Path(scratch) / "out"
            out.mkdir()
            spec_path.write_text(json.dumps(specs))
            np.savez(arrays_path, **images)
            log(f"encoding {len(specs)} HEIC/AVIF files")
            build_envs.run_in_env(ENV, [str(SCRIPT), str(spec_path), str(arrays_path), str(out)], log, timeout=600)
            out.replace(cache)
    return {spec["name"]: (cache / f"{spec['name']}.{spec['format']}").read_bytes() for spec in specs}
