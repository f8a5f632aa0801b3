"""HEIC and AVIF files for the tests, made by real encoders in the ``heif-encode`` environment.

The server decodes with decode-only libraries; the encoders (pillow-heif's x265, Pillow's and imagecodecs'
libavif with aom) live in their own environment, ``.build/envs/heif-encode`` (requirements/heif-encode.in),
created on first use like the other reference environments. :func:`encode` runs
tests/support/heif_encoder.py there on the given images and caches the files under ``.build/references/``,
keyed by the images, the specs, the script and the environment's lock. The crafted variants (cut files,
containers that lie) are byte patches of real files (:func:`patch_property`).
"""

from __future__ import annotations

import hashlib
import json
import struct
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
    """Spec name -> the encoded file (tests/support/heif_encoder.py says what a spec holds)."""
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


def boxes_of_type(data: bytes, kind: bytes) -> list[int]:
    """Offsets of the boxes of type ``kind`` (their size field) anywhere in ``data``, found by their type bytes
    preceded by a plausible size: good enough for the small files the tests make."""
    found, position = [], data.find(kind)
    while position >= 4:
        (size,) = struct.unpack_from(">I", data, position - 4)
        if 8 <= size <= len(data) - position + 4:
            found.append(position - 4)
        position = data.find(kind, position + 1)
    return found


def patch_property(data: bytes, kind: bytes, payload: bytes, index: int = 0) -> bytes:
    """``data`` with the payload of its ``index``-th ``kind`` box replaced by ``payload`` (same length)."""
    start = boxes_of_type(data, kind)[index] + 8
    return data[:start] + payload + data[start + len(payload) :]


def with_ispe(data: bytes, width: int, height: int, index: int = 0) -> bytes:
    """The ``index``-th ispe property (a FullBox: version and flags, then width and height) declaring width x height."""
    return patch_property(data, b"ispe", b"\x00\x00\x00\x00" + struct.pack(">II", width, height), index)


def with_irot(data: bytes, angle: int) -> bytes:
    """The irot property turned to ``angle`` anticlockwise quarter turns (0: the file's Exif orientation remains)."""
    return patch_property(data, b"irot", bytes([angle & 3]))
