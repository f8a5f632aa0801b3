"""Validate encoded image bytes before decoding, then decode them with OpenCV.

Checks run cheapest first and never decode a payload that fails one:
empty payload -> size limit -> format by magic bytes -> declared pixel count
from the header (decompression bombs) -> truncation -> decode. Every failure
is an ``ImageError`` whose message names the problem; callers map it to
Triton's ``INVALID_ARG``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cv2
import numpy as np

# Format name -> magic bytes at offset 0.
MAGIC_BYTES: dict[str, bytes] = {
    "jpeg": b"\xff\xd8\xff",
    "png": b"\x89PNG\r\n\x1a\n",
}

# JPEG start-of-frame markers carry the image size (SOF0..SOF15 except DHT, JPG, DAC).
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# JPEG markers without a length field.
_JPEG_STANDALONE_MARKERS = frozenset(range(0xD0, 0xDA)) | {0x01}
_JPEG_EOI = b"\xff\xd9"
_PNG_IEND = b"IEND"
# How far from the end an end-of-image marker may sit (some encoders pad).
_TRAILER_WINDOW = 4096


class ImageError(ValueError):
    """The payload is not an acceptable image; the message says why."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int
    max_pixels: int
    accepted_formats: tuple[str, ...] = ("jpeg", "png")

    def __post_init__(self) -> None:
        unknown = set(self.accepted_formats) - MAGIC_BYTES.keys()
        if unknown:
            raise ValueError(f"unsupported accepted_formats {sorted(unknown)}; known: {sorted(MAGIC_BYTES)}")
        if self.max_bytes <= 0 or self.max_pixels <= 0:
            raise ValueError("max_bytes and max_pixels must be positive")


def sniff_format(data: bytes) -> str | None:
    for name, magic in MAGIC_BYTES.items():
        if data.startswith(magic):
            return name
    return None


def declared_size(data: bytes, image_format: str) -> tuple[int, int]:
    """(width, height) as declared by the header, without decoding pixels."""
    if image_format == "png":
        # Signature (8) + IHDR length (4) + b"IHDR" (4) + width (4) + height (4).
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageError("corrupt PNG: missing IHDR header")
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    if image_format == "jpeg":
        return _jpeg_declared_size(data)
    raise ImageError(f"unsupported format {image_format!r}")


def _jpeg_declared_size(data: bytes) -> tuple[int, int]:
    position = 2  # after SOI
    end = len(data)
    while position + 4 <= end:
        if data[position] != 0xFF:
            raise ImageError(f"corrupt JPEG: expected a marker at byte {position}")
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        (segment_length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if segment_length < 2:
            raise ImageError(f"corrupt JPEG: bad segment length at byte {position}")
        if marker in _JPEG_SOF_MARKERS:
            if position + 9 > end:
                break
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return width, height
        if marker == 0xDA:  # start of scan before any frame header
            raise ImageError("corrupt JPEG: no frame header before image data")
        position += 2 + segment_length
    raise ImageError("truncated JPEG: header ends before the frame size")


def _has_trailer(data: bytes, image_format: str) -> bool:
    tail = data[-_TRAILER_WINDOW:]
    if image_format == "jpeg":
        return _JPEG_EOI in tail
    return _PNG_IEND in tail


def validate(data: bytes, limits: ImageLimits) -> str:
    """Check a payload without decoding it; returns its format or raises ``ImageError``."""
    if len(data) == 0:
        raise ImageError("empty image payload")
    if len(data) > limits.max_bytes:
        raise ImageError(f"image payload is {len(data)} bytes, over the limit of {limits.max_bytes} bytes")
    image_format = sniff_format(data)
    if image_format is None or image_format not in limits.accepted_formats:
        accepted = ", ".join(f.upper() for f in limits.accepted_formats)
        what = f"{image_format.upper()} is not accepted" if image_format else "unrecognized image format"
        raise ImageError(f"{what} (first bytes {data[:8].hex()}); accepted formats: {accepted}")
    width, height = declared_size(data, image_format)
    if width == 0 or height == 0:
        raise ImageError(f"corrupt {image_format.upper()}: declared size {width}x{height}")
    if width * height > limits.max_pixels:
        raise ImageError(
            f"{image_format.upper()} declares {width}x{height} = {width * height} pixels, "
            f"over the limit of {limits.max_pixels} pixels"
        )
    if not _has_trailer(data, image_format):
        raise ImageError(f"truncated {image_format.upper()}: no end-of-image marker")
    return image_format


def decode_rgb(data: bytes, limits: ImageLimits) -> np.ndarray:
    """Validate and decode to an 8-bit RGB HxWx3 array.

    EXIF orientation is applied; grayscale, alpha (dropped) and 16-bit images
    become 8-bit RGB (OpenCV's ``IMREAD_COLOR``).
    """
    image_format = validate(data, limits)
    buffer = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    if image is None:
        raise ImageError(f"corrupt {image_format.upper()}: the decoder rejected the data")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
