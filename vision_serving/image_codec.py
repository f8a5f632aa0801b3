"""Validate encoded image bytes before decoding, then decode them with OpenCV.

Checks run cheapest first and never decode a payload that fails one:
empty payload -> size limit -> format by magic bytes -> declared pixel count
and side length from the header (decompression bombs) -> JPEG scan count
(progressive-scan CPU bombs) -> truncation -> decode -> decoded size equals
the declared one.
Every failure is an ``ImageError`` whose message names the problem; callers
map it to Triton's ``INVALID_ARG``. Nothing else escapes ``decode_rgb``: an
unexpected exception inside a Triton ``execute()`` would fail every request of
the dynamic batch, not just the bad one.

Known limits of what is checked (libjpeg's, measured in tests/integration/test_fuzz.py):
libjpeg treats corrupt entropy-coded data as a warning and returns a partly
grey image, so a JPEG with a valid header and damaged data is classified, not
rejected; its cost is bounded by ``max_pixels`` and ``max_jpeg_scans``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import cv2
import numpy as np

# Format name -> magic bytes at offset 0.
MAGIC_BYTES: dict[str, bytes] = {
    "jpeg": b"\xff\xd8\xff",
    "png": b"\x89PNG\r\n\x1a\n",
}

# Formats we recognise but do not accept: name -> (offset, magic). Named in the
# error so a client learns what was wrong with its payload.
KNOWN_UNACCEPTED: dict[str, tuple[tuple[int, bytes], ...]] = {
    "GIF": ((0, b"GIF87a"), (0, b"GIF89a")),
    "BMP": ((0, b"BM"),),
    "WebP": ((8, b"WEBP"),),
    "TIFF": ((0, b"II*\x00"), (0, b"MM\x00*")),
    "HEIF/AVIF (ISO media)": ((4, b"ftyp"),),
    "JPEG 2000": ((0, b"\x00\x00\x00\x0cjP  \r\n\x87\n"), (0, b"\xff\x4f\xff\x51")),
    "ICO": ((0, b"\x00\x00\x01\x00"),),
}

# JPEG start-of-frame markers carry the image size (SOF0..SOF15 except DHT, JPG, DAC).
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# JPEG markers without a length field.
_JPEG_STANDALONE_MARKERS = frozenset(range(0xD0, 0xDA)) | {0x01}
_JPEG_SOS = 0xDA
_JPEG_EOI_MARKER = 0xD9
_JPEG_EOI = b"\xff\xd9"
# The end of entropy-coded data: 0xFF followed by anything but a stuffed zero,
# a restart marker (RST0-7) or a fill byte.
_JPEG_MARKER_AFTER_SCAN = re.compile(b"\xff[^\x00\xd0-\xd7\xff]")
# A marker: 0xFF, any number of 0xFF fill bytes, then the marker code.
_JPEG_MARKER = re.compile(b"\xff+([\x00-\xfe])")
# Real JPEGs have a few dozen segments (a large ICC profile is split in 64 KB
# APP2 chunks); walking millions of tiny ones in Python would cost seconds.
_JPEG_MAX_SEGMENTS = 1000
# Progressive JPEGs from libjpeg/mozjpeg/Photoshop have 3-12 scans. Each scan
# costs libjpeg a pass over all the image's coefficients, so a small file with
# thousands of scans (libjpeg-turbo's LJT-01-003: EOB runs make a scan a few
# bytes) decodes for minutes: measured here, 1000 scans of a 16-megapixel gray
# image in 125 KB took 14 s. DALI caps scans at 500; our per-image latency
# budget is tighter.
DEFAULT_MAX_JPEG_SCANS = 64
# OpenCV's remap/warpAffine (the resize-and-crop step) asserts that both sides
# are below SHRT_MAX; a 65344x383 image (25 MP, under the pixel limit, found by
# tests/integration/test_fuzz.py) raised cv2.error inside execute() and failed its whole
# dynamic batch with INTERNAL. Reject such sides here, clearly.
DEFAULT_MAX_SIDE = 32766
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
    max_jpeg_scans: int = DEFAULT_MAX_JPEG_SCANS
    max_side: int = DEFAULT_MAX_SIDE

    def __post_init__(self) -> None:
        unknown = set(self.accepted_formats) - MAGIC_BYTES.keys()
        if unknown:
            raise ValueError(f"unsupported accepted_formats {sorted(unknown)}; known: {sorted(MAGIC_BYTES)}")
        if min(self.max_bytes, self.max_pixels, self.max_jpeg_scans, self.max_side) <= 0:
            raise ValueError("max_bytes, max_pixels, max_jpeg_scans and max_side must be positive")


def sniff_format(data: bytes) -> str | None:
    for name, magic in MAGIC_BYTES.items():
        if data.startswith(magic):
            return name
    return None


def unaccepted_format(data: bytes) -> str | None:
    """The name of a known image format we do not accept (GIF, BMP, WebP, ...), if ``data`` looks like one."""
    for name, signatures in KNOWN_UNACCEPTED.items():
        if any(data[offset : offset + len(magic)] == magic for offset, magic in signatures):
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


def _next_marker(data: bytes, position: int) -> tuple[int, int] | None:
    """(offset of the marker's 0xFF, marker code) at ``position``, past any fill bytes (one C-speed match).

    None if there is no 0xFF at ``position`` or only fill bytes follow it.
    """
    match = _JPEG_MARKER.match(data, position)
    if match is None:
        return None
    return match.start(1) - 1, match.group(1)[0]


def _jpeg_declared_size(data: bytes) -> tuple[int, int]:
    position = 2  # after SOI
    end = len(data)
    segments = 0
    while position + 4 <= end:
        found = _next_marker(data, position)
        if found is None:
            if data[position] != 0xFF:
                raise ImageError(f"corrupt JPEG: expected a marker at byte {position}")
            break  # fill bytes up to the end
        position, marker = found
        segments += 1
        if segments > _JPEG_MAX_SEGMENTS:
            raise ImageError(f"corrupt JPEG: more than {_JPEG_MAX_SEGMENTS} segments before the frame header")
        if marker in _JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        if position + 4 > end:
            break
        (segment_length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if segment_length < 2:
            raise ImageError(f"corrupt JPEG: bad segment length at byte {position}")
        if marker in _JPEG_SOF_MARKERS:
            if position + 9 > end:
                break
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return width, height
        if marker == _JPEG_SOS:  # start of scan before any frame header
            raise ImageError("corrupt JPEG: no frame header before image data")
        position += 2 + segment_length
    raise ImageError("truncated JPEG: header ends before the frame size")


def jpeg_scan_count(data: bytes, limit: int | None = None) -> int:
    """Number of scans (SOS segments) of a JPEG, walking its marker structure.

    Entropy-coded data is skipped with a byte search, so markers inside APP
    segments (an EXIF thumbnail's own scans) are not counted. Stops at the
    first EOI, at data it cannot walk (the decoder judges that), after
    ``_JPEG_MAX_SEGMENTS`` segments or, when ``limit`` is given, as soon as the
    count exceeds it. Its cost is linear in the payload and mostly C.
    """
    position, end, scans, segments = 2, len(data), 0, 0
    while position + 4 <= end and segments < _JPEG_MAX_SEGMENTS:
        found = _next_marker(data, position)
        if found is None:
            break
        position, marker = found
        segments += 1
        if marker == _JPEG_EOI_MARKER:
            break
        if marker in _JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        if position + 4 > end:
            break
        (segment_length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if segment_length < 2:
            break
        position += 2 + segment_length
        if marker == _JPEG_SOS:
            scans += 1
            if limit is not None and scans > limit:
                break
            after_scan = _JPEG_MARKER_AFTER_SCAN.search(data, position)
            if after_scan is None:
                break
            position = after_scan.start()
    return scans


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
        if image_format:
            what = f"{image_format.upper()} is not accepted"
        elif (other := unaccepted_format(data)) is not None:
            what = f"unrecognized image format: looks like {other}, which is not accepted"
        else:
            what = "unrecognized image format"
        raise ImageError(f"{what} (first bytes {data[:8].hex()}); accepted formats: {accepted}")
    width, height = declared_size(data, image_format)
    if width == 0 or height == 0:
        raise ImageError(f"corrupt {image_format.upper()}: declared size {width}x{height}")
    if width * height > limits.max_pixels:
        raise ImageError(
            f"{image_format.upper()} declares {width}x{height} = {width * height} pixels, over the limit of {limits.max_pixels} pixels"
        )
    if max(width, height) > limits.max_side:
        raise ImageError(f"{image_format.upper()} declares {width}x{height}: a side over the limit of {limits.max_side} pixels")
    if image_format == "jpeg":
        scans = jpeg_scan_count(data, limit=limits.max_jpeg_scans)
        if scans > limits.max_jpeg_scans:
            raise ImageError(
                f"JPEG has more than {limits.max_jpeg_scans} scans (the limit); progressive images normally have at most a dozen"
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
    name = image_format.upper()
    buffer = np.frombuffer(data, dtype=np.uint8)
    try:
        image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    except cv2.error:  # OpenCV's own limits (OPENCV_IO_MAX_IMAGE_PIXELS), allocation failures
        # Not echoed: OpenCV's message carries its version and build paths.
        raise ImageError(f"corrupt {name}: the decoder failed") from None
    if image is None:
        raise ImageError(f"corrupt {name}: the decoder rejected the data")
    # Defence in depth: the pixel limit was checked on the header we parsed; the
    # decoder must have read the same size (EXIF orientation may swap the sides).
    width, height = declared_size(data, image_format)
    if image.ndim != 3 or image.shape[2] != 3 or sorted(image.shape[:2]) != sorted((height, width)):
        raise ImageError(f"corrupt {name}: decoded {image.shape[1]}x{image.shape[0]} image, header declares {width}x{height}")
    try:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    except cv2.error:
        raise ImageError(f"corrupt {name}: cannot convert the decoded image") from None
