"""Encodes HEIC and AVIF files for the tests and benchmarks. Runs INSIDE the ``heif-encode`` environment
(requirements/heif-encode.in: pillow-heif with x265, Pillow with libavif/aom, imagecodecs), never in .venv or the
server image; called by devtools/heif_encode.py:

    python heif_encoder.py SPEC.json ARRAYS.npz OUT_DIR

SPEC.json: a list of {"name", "format" ("heic" | "avif"), "image" (a key of ARRAYS.npz: uint8 HxWx3 RGB, HxWx4 RGBA
or HxW grey), "bits" (8 or 10), "quality" (0-100), "orientation" (an Exif orientation 1-8: pillow-heif and Pillow
write it as irot/imir), "speed" (AVIF: libaom's, 0-10), "tile_size" (HEIC: 0, or Apple's 512 for a grid), "images" (HEIC: keys of further images;
the file holds all, ``primary`` the index of the primary one), "frames" (AVIF: keys of further frames, an animated
AVIF)}. Writes OUT_DIR/<name>.<format>.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import imagecodecs
import numpy as np
import pillow_heif
from PIL import Image


def exif(orientation: int) -> bytes:
    data = Image.Exif()
    data[0x0112] = orientation
    return data.tobytes()


def widened(image: np.ndarray) -> np.ndarray:
    """uint8 -> uint16 holding 10-bit values (0..1023)."""
    return ((image.astype(np.uint32) * 1023 + 127) // 255).astype(np.uint16)


def heic(spec: dict, arrays: dict[str, np.ndarray]) -> bytes:
    keys = [spec["image"], *spec.get("images", [])]
    heif_file = pillow_heif.HeifFile()
    for key in keys:
        image = arrays[key]
        mode = {2: "L", 3: "RGB", 4: "RGBA"}[image.ndim if image.ndim == 2 else image.shape[2]]
        if spec.get("bits", 8) == 10:
            # 16-bit input: pillow-heif keeps its top 10 bits (options.SAVE_HDR_TO_12_BIT is off).
            wide = image.astype(np.uint16) * 257
            heif_file.add_frombytes({"L": "I;16", "RGB": "RGB;16", "RGBA": "RGBA;16"}[mode], image.shape[1::-1], wide.tobytes())
        else:
            heif_file.add_frombytes(mode, image.shape[1::-1], np.ascontiguousarray(image).tobytes())
    options: dict = {"quality": spec.get("quality", 90), "primary_index": spec.get("primary", 0)}
    if spec.get("orientation", 1) != 1:
        options["exif"] = exif(spec["orientation"])  # written as irot/imir AND kept in the Exif, as an iPhone does
    if spec.get("tile_size"):
        options["tile_size"] = spec["tile_size"]
    buffer = io.BytesIO()
    heif_file.save(buffer, **options)
    return buffer.getvalue()


def avif(spec: dict, arrays: dict[str, np.ndarray]) -> bytes:
    image = arrays[spec["image"]]
    if spec.get("bits", 8) == 10:
        return bytes(imagecodecs.avif_encode(widened(image), level=spec.get("quality", 90), speed=spec.get("speed", 6), bitspersample=10))
    frames = [Image.fromarray(arrays[key]) for key in spec.get("frames", [])]
    buffer = io.BytesIO()
    options: dict = {"quality": spec.get("quality", 90), "speed": spec.get("speed", 6)}
    if spec.get("orientation", 1) != 1:
        options["exif"] = exif(spec["orientation"])  # Pillow writes it as irot/imir
    if frames:
        options.update(save_all=True, append_images=frames)
    Image.fromarray(image).save(buffer, "AVIF", **options)
    return buffer.getvalue()


def main(spec_path: str, arrays_path: str, out: str) -> None:
    specs = json.loads(Path(spec_path).read_text())
    with np.load(arrays_path) as loaded:
        arrays = {key: loaded[key] for key in loaded.files}
    for spec in specs:
        data = heic(spec, arrays) if spec["format"] == "heic" else avif(spec, arrays)
        (Path(out) / f"{spec['name']}.{spec['format']}").write_bytes(data)


if __name__ == "__main__":
    main(*sys.argv[1:4])
