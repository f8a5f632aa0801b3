"""The fuzzers' seed uploads: small real photos written by real encoders, one file per encoder and option.

JPEG (Pillow's libjpeg, OpenCV's, simplejpeg's libjpeg-turbo: baseline, progressive, optimized, 4:4:4,
4:2:2, grey, CMYK, Exif orientation, an ICC profile, restart markers), PNG (OpenCV's libpng at several
levels, Pillow's zlib: 16-bit, grey, alpha, palette, 1- and 4-bit, text chunks, stored blocks, and an
interlaced file whose rows this module filters itself: neither writes Adam7), WebP (libwebp through both:
lossy, lossless, alpha, extended with Exif and ICC), HEIC and AVIF (the ``heif-encode`` environment's
x265 and aom, devtools/heif_encode.py: plain, grid, alpha, 10-bit, rotated).

The corpus is committed under :data:`SEEDS_DIR` (``<format>/<name>.<format>``), read by the coverage-guided
fuzz targets (devtools/fuzz_codec.py) and the served fuzz benchmark (benchmarks/fuzz_served.py).
tests/unit/vision_serving/test_upload_seeds.py checks that it is what these encoders write now; to
rewrite it (after an encoder's upgrade)::

    .venv/bin/python -m tests.support.upload_seeds
"""

from __future__ import annotations

import io
import struct
import sys
import zlib
from collections.abc import Callable
from functools import cache

import cv2
import numpy as np
import simplejpeg
from PIL import Image, PngImagePlugin

from builders import photos
from devtools.fuzz_codec import SEEDS_DIR

# The photos the seeds are made of, and their size: small, so a fuzzer runs thousands of them a second.
SEED_PHOTOS = ("coffee", "chelsea", "camera")
SEED_SIZE = (96, 64)


@cache
def seed_photo(name: str) -> np.ndarray:
    """A real photo scaled to :data:`SEED_SIZE`, RGB."""
    image = cv2.imdecode(np.frombuffer(photos.photo_bytes(name), np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(cv2.resize(image, SEED_SIZE, interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2RGB)


def _pillow(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _opencv(extension: str, image: np.ndarray, *parameters: int) -> bytes:
    ok, encoded = cv2.imencode(extension, image, list(parameters))
    if not ok:
        raise RuntimeError(f"OpenCV cannot encode {extension}")
    return encoded.tobytes()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def adam7_png(image: np.ndarray) -> bytes:
    """An interlaced (Adam7) 8-bit RGB PNG: each pass's rows with filter 0, deflated by zlib."""
    height, width = image.shape[:2]
    rows = []
    for column, row, column_step, row_step in (
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ):
        part = image[row::row_step, column::column_step]
        if part.size:
            rows += [b"\x00" + line.tobytes() for line in part]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")


def _text_chunks() -> PngImagePlugin.PngInfo:
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "a photo " * 40)
    info.add_itxt("Description", "compressed text " * 20, zip=True)
    return info


def _encoders(name: str) -> dict[str, Callable[[], bytes]]:
    """Seed name -> how to write it, for one photo."""
    rgb = seed_photo(name)
    pil, bgr = Image.fromarray(rgb), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    grey = pil.convert("L")
    return {
        f"jpeg/{name}_baseline": lambda: _pillow(pil, "JPEG", quality=85),
        f"jpeg/{name}_progressive": lambda: _pillow(pil, "JPEG", quality=75, progressive=True),
        f"jpeg/{name}_optimized_444": lambda: _pillow(pil, "JPEG", quality=90, optimize=True, subsampling=0),
        f"jpeg/{name}_422_exif6": lambda: _pillow(pil, "JPEG", quality=90, subsampling=1, exif=_exif(6)),
        f"jpeg/{name}_grey_progressive": lambda: _pillow(grey, "JPEG", quality=80, progressive=True),
        f"jpeg/{name}_cmyk": lambda: _pillow(pil.convert("CMYK"), "JPEG", quality=85),
        f"jpeg/{name}_icc_comment": lambda: _pillow(pil, "JPEG", quality=80, icc_profile=bytes(range(256)) * 8, comment=b"seed"),
        f"jpeg/{name}_opencv_restarts": lambda: _opencv(".jpg", bgr, cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_RST_INTERVAL, 2),
        f"jpeg/{name}_opencv_progressive": lambda: _opencv(".jpg", bgr, cv2.IMWRITE_JPEG_PROGRESSIVE, 1),
        f"jpeg/{name}_simplejpeg": lambda: simplejpeg.encode_jpeg(np.ascontiguousarray(rgb), quality=80),
        f"png/{name}_opencv": lambda: _opencv(".png", bgr),
        f"png/{name}_opencv_level9": lambda: _opencv(".png", bgr, cv2.IMWRITE_PNG_COMPRESSION, 9),
        f"png/{name}_opencv_16bit": lambda: _opencv(".png", bgr.astype(np.uint16) * 257),
        f"png/{name}_opencv_grey": lambda: _opencv(".png", cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)),
        f"png/{name}_opencv_alpha": lambda: _opencv(".png", cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA)),
        f"png/{name}_pillow_stored": lambda: _pillow(pil, "PNG", compress_level=0),
        f"png/{name}_pillow_palette": lambda: _pillow(pil.convert("P"), "PNG", optimize=True),
        f"png/{name}_pillow_4bit": lambda: _pillow(pil.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG", bits=4),
        f"png/{name}_pillow_1bit": lambda: _pillow(pil.convert("1"), "PNG"),
        f"png/{name}_pillow_grey_alpha_text": lambda: _pillow(pil.convert("LA"), "PNG", pnginfo=_text_chunks()),
        f"png/{name}_interlaced": lambda: adam7_png(rgb),
        f"webp/{name}_lossy": lambda: _opencv(".webp", bgr, cv2.IMWRITE_WEBP_QUALITY, 80),
        f"webp/{name}_lossless": lambda: _opencv(".webp", bgr, cv2.IMWRITE_WEBP_QUALITY, 101),
        f"webp/{name}_alpha": lambda: _pillow(pil.convert("RGBA"), "WEBP", quality=80),
        f"webp/{name}_lossless_alpha": lambda: _pillow(pil.convert("RGBA"), "WEBP", lossless=True),
        f"webp/{name}_exif_icc": lambda: _pillow(pil, "WEBP", quality=70, exif=_exif(3), icc_profile=bytes(range(256)) * 2),
    }


ENCODED: dict[str, Callable[[], bytes]] = {key: value for name in SEED_PHOTOS for key, value in _encoders(name).items()}

# HEIC and AVIF seeds: devtools/heif_encoder.py specs (the image is a seed photo's name).
HEIF_SPECS = [
    {"name": "heic/coffee", "format": "heic", "image": "coffee", "quality": 60},
    {"name": "heic/chelsea_rotated", "format": "heic", "image": "chelsea", "quality": 60, "orientation": 6},
    {"name": "heic/camera_10bit", "format": "heic", "image": "camera", "quality": 60, "bits": 10},
    {"name": "heic/coffee_alpha", "format": "heic", "image": "coffee_alpha", "quality": 60},
    {"name": "heic/coffee_grid", "format": "heic", "image": "coffee_large", "quality": 40, "tile_size": 512},
    {"name": "avif/coffee", "format": "avif", "image": "coffee", "quality": 60, "speed": 8},
    {"name": "avif/chelsea_rotated", "format": "avif", "image": "chelsea", "quality": 60, "speed": 8, "orientation": 6},
    {"name": "avif/camera_10bit", "format": "avif", "image": "camera", "quality": 60, "speed": 8, "bits": 10},
    {"name": "avif/coffee_alpha", "format": "avif", "image": "coffee_alpha", "quality": 60, "speed": 8},
    {"name": "avif/coffee_large", "format": "avif", "image": "coffee_large", "quality": 40, "speed": 8},
]


def heif_seeds() -> dict[str, bytes]:
    """The HEIC and AVIF seeds, written in the ``heif-encode`` environment (cached under .build)."""
    from devtools import heif_encode

    images = {name: seed_photo(name) for name in SEED_PHOTOS}
    alpha = np.full((*SEED_SIZE[::-1], 1), 200, np.uint8)
    images["coffee_alpha"] = np.concatenate([images["coffee"], alpha], axis=2)
    coffee = cv2.imdecode(np.frombuffer(photos.photo_bytes("coffee"), np.uint8), cv2.IMREAD_COLOR)
    images["coffee_large"] = cv2.cvtColor(cv2.resize(coffee, (600, 400)), cv2.COLOR_BGR2RGB)
    specs = [{**spec, "name": spec["name"].replace("/", "_")} for spec in HEIF_SPECS]
    encoded = heif_encode.encode(specs, images)
    return {spec["name"]: encoded[spec["name"].replace("/", "_")] for spec in HEIF_SPECS}


def seed_path(name: str):
    image_format = name.split("/", 1)[0]
    return SEEDS_DIR / f"{name}.{image_format}"


def write(with_heif: bool = True) -> list[str]:
    """Rewrite the committed corpus; the names written."""
    seeds = {name: make() for name, make in ENCODED.items()}
    if with_heif:
        seeds |= heif_seeds()
    for name, data in seeds.items():
        path = seed_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return sorted(seeds)


if __name__ == "__main__":
    written = write(with_heif="--no-heif" not in sys.argv)
    print(f"wrote {len(written)} seeds under {SEEDS_DIR}")
