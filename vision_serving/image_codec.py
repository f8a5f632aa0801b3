"""Validate encoded image bytes before decoding, then decode them (JPEG: libjpeg-turbo via simplejpeg; PNG, WebP: OpenCV;
HEIC and AVIF: libheif and libavif, :mod:`vision_serving.heif`).

Checks run cheapest first and never decode a payload that fails one:
empty payload -> size limit -> format by magic bytes -> the structure: PNG chunks, JPEG
segments and scan count (progressive-scan CPU bombs), WebP chunks
(:mod:`vision_serving.image_structure`), HEIF boxes (:mod:`vision_serving.heif`): every
length inside the payload (truncation), counts capped, parts in a decoder's order ->
declared pixel count and side length (decompression bombs) -> enough coded data for the
declared pixels -> decode -> decoded size equals the declared one (or, decoding reduced,
a libjpeg scale of it).
Every failure is an ``ImageError`` whose message names the problem; callers
map it to Triton's ``INVALID_ARG``. Nothing else escapes ``decode``/``decode_rgb``: an
unexpected exception inside a Triton ``execute()`` would fail every request of
the dynamic batch, not just the bad one.

**Reduced JPEG decoding.** ``decode(data, limits, MinimumSize(...))`` decodes a JPEG at the
smallest libjpeg-turbo DCT scale (n/8) whose result is still at least the given size, so
the resize that follows is still a downscale: a 12 MP photo for a 256-pixel model decodes
at 1/8 in about a quarter of the time of a full decode. The photo's own size is returned
with the pixels (postprocessing maps results back to it).

**EXIF orientation** of JPEGs is applied here (tag 0x0112 of the first Exif APP1 segment),
exactly as OpenCV's ``imdecode`` applies it (tests/unit/vision_serving/test_image_codec.py
compares all eight orientations).

**Strict JPEG decoding.** libjpeg's warnings (corrupt entropy-coded data, premature end of
data) are errors: a damaged JPEG is refused, not classified as a partly grey image.
CMYK/YCCK JPEGs, which libjpeg-turbo cannot convert to RGB, are decoded by OpenCV at full size.

**HEIC and AVIF** (:mod:`vision_serving.heif`): the size is the primary image's, from its
container (``ispe``), checked like the others; the grid tiles, the coded streams' own sizes and
the byte ranges are checked before decoding, and their ``irot``/``imir`` orientation (not Exif's)
is applied once. They always decode at full size.

**Trailing data.** A JPEG ends at its first end-of-image marker found by walking its
segments; data after it (phones append a motion photo's video) is ignored. A PNG ends
after its IEND chunk, a WebP where its RIFF header says. Truncated files are refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cv2
import numpy as np
import simplejpeg

from . import heif, image_structure

# Format name -> magic bytes at offset 0.
MAGIC_BYTES: dict[str, bytes] = {
    "jpeg": b"\xff\xd8\xff",
    "png": b"\x89PNG\r\n\x1a\n",
}
# WebP: a RIFF container (b"RIFF", little-endian size, b"WEBP").
_RIFF, _WEBP = b"RIFF", b"WEBP"
FORMATS = (*MAGIC_BYTES, "webp", *heif.FORMATS)
# sniff_format reads at most this many leading bytes (a HEIF file's brands are in its first box).
SNIFF_BYTES = heif.SNIFF_BYTES

# Formats we recognise but do not accept: name -> (offset, magic). Named in the
# error so a client learns what was wrong with its payload.
KNOWN_UNACCEPTED: dict[str, tuple[tuple[int, bytes], ...]] = {
    "GIF": ((0, b"GIF87a"), (0, b"GIF89a")),
    "BMP": ((0, b"BM"),),
    "TIFF": ((0, b"II*\x00"), (0, b"MM\x00*")),
    "ISO media (MP4, MOV, or HEIF of another coding)": ((4, b"ftyp"),),
    "JPEG 2000": ((0, b"\x00\x00\x00\x0cjP  \r\n\x87\n"), (0, b"\xff\x4f\xff\x51")),
    "ICO": ((0, b"\x00\x00\x01\x00"),),
}

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
# A JPEG whose scans hold fewer bits than this per 8x8 block is probed at libjpeg's 1/8 scale before it is
# decoded larger. Photos hold 40 to 4000 bits per block (measured on every photo and encoder of the tests); a
# file edited to declare more pixels than its data codes holds few, and libjpeg decodes every declared block
# before strict decoding refuses it: the 1/8-scale probe refuses it at a fifteenth of the full decode's CPU
# (docs/design.md, "Structural checks").
JPEG_PROBE_BITS_PER_BLOCK = 16


class ImageError(ValueError):
    """The payload is not an acceptable image; the message says why."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int
    max_pixels: int
    accepted_formats: tuple[str, ...] = ("jpeg", "png")
    max_jpeg_scans: int = DEFAULT_MAX_JPEG_SCANS
    max_side: int = DEFAULT_MAX_SIDE
    max_png_chunks: int = image_structure.DEFAULT_MAX_PNG_CHUNKS

    def __post_init__(self) -> None:
        unknown = set(self.accepted_formats) - set(FORMATS)
        if unknown:
            raise ValueError(f"unsupported accepted_formats {sorted(unknown)}; known: {sorted(FORMATS)}")
        if min(self.max_bytes, self.max_pixels, self.max_jpeg_scans, self.max_side, self.max_png_chunks) <= 0:
            raise ValueError("max_bytes, max_pixels, max_jpeg_scans, max_side and max_png_chunks must be positive")


def sniff_format(data: bytes) -> str | None:
    for name, magic in MAGIC_BYTES.items():
        if data.startswith(magic):
            return name
    if data[:4] == _RIFF and data[8:12] == _WEBP:
        return "webp"
    return heif.sniff(data)


def unaccepted_format(data: bytes) -> str | None:
    """The name of a known image format we do not accept (GIF, BMP, WebP, ...), if ``data`` looks like one."""
    for name, signatures in KNOWN_UNACCEPTED.items():
        if any(data[offset : offset + len(magic)] == magic for offset, magic in signatures):
            return name
    return None


def declared_size(data: bytes, image_format: str) -> tuple[int, int]:
    """(width, height) as declared by the header, without decoding pixels or walking the whole structure."""
    try:
        if image_format == "png":
            # Signature (8) + IHDR length (4) + b"IHDR" (4) + width (4) + height (4).
            if len(data) < 24 or data[12:16] != b"IHDR":
                raise ImageError("corrupt PNG: missing IHDR header")
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if image_format == "jpeg":
            return image_structure.jpeg_frame_size(data)
        if image_format == "webp":
            return _webp_declared_size(data)
    except image_structure.StructureError as error:
        raise ImageError(str(error)) from None
    if image_format in heif.FORMATS:
        header = _heif_header(data, image_format)
        return header.width, header.height
    raise ImageError(f"unsupported format {image_format!r}")


def _webp_declared_size(data: bytes) -> tuple[int, int]:
    """The canvas size of a still WebP (simple lossy VP8, lossless VP8L or extended VP8X)."""
    if len(data) < 30:
        raise ImageError("truncated WebP: header ends before the frame size")
    chunk = data[12:16]
    if chunk in (b"VP8 ", b"VP8L"):
        return image_structure.webp_frame_size(data, 12, chunk, int.from_bytes(data[16:20], "little"))
    if chunk == b"VP8X":
        if data[20] & 0x02:
            raise ImageError("animated WebP is not accepted")
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    raise ImageError(f"corrupt WebP: unknown first chunk {chunk!r}")


def walk_structure(data: bytes, image_format: str, limits: ImageLimits) -> image_structure.Layout:
    """The PNG chunks, JPEG segments or WebP chunks, checked (:mod:`vision_serving.image_structure`)."""
    try:
        if image_format == "png":
            return image_structure.walk_png(data, limits.max_bytes, limits.max_png_chunks)
        if image_format == "jpeg":
            return image_structure.walk_jpeg(data, limits.max_jpeg_scans)
        return image_structure.walk_webp(data, limits.max_bytes)
    except image_structure.StructureError as error:
        raise ImageError(str(error)) from None


def jpeg_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) of a JPEG: tag 0x0112 in IFD0 of its first Exif APP1 segment; 1 if absent or invalid."""
    position, end, segments = 2, len(data), 0
    while position + 4 <= end and segments < image_structure.JPEG_MAX_SEGMENTS:
        found = image_structure.next_marker(data, position)
        if found is None:
            return 1
        position, marker = found
        segments += 1
        if marker in image_structure.JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        if marker in (image_structure.JPEG_SOS, image_structure.JPEG_EOI) or position + 4 > end:
            return 1
        (segment_length,) = struct.unpack(">H", data[position + 2 : position + 4])
        if segment_length < 2:
            return 1
        payload = data[position + 4 : position + 2 + segment_length]
        if marker == 0xE1 and payload.startswith(b"Exif\x00\x00"):
            return _exif_orientation(payload[6:])
        position += 2 + segment_length
    return 1


def _exif_orientation(tiff: bytes) -> int:
    if tiff[:4] not in (b"II*\x00", b"MM\x00*"):
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", tiff[4:8])
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
    for index in range(min(count, 1000)):
        entry = ifd + 2 + 12 * index
        if entry + 12 > len(tiff):
            return 1
        tag, kind = struct.unpack(order + "HH", tiff[entry : entry + 4])
        if tag == 0x0112:
            if kind != 3:  # SHORT
                return 1
            (value,) = struct.unpack(order + "H", tiff[entry + 8 : entry + 10])
            return value if 1 <= value <= 8 else 1
    return 1


def apply_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """The stored pixels -> as displayed, for EXIF orientation 1-8 (OpenCV's ExifTransform)."""
    if orientation in (5, 6, 7, 8):
        image = cv2.transpose(image)
    flip = {2: 1, 3: -1, 4: 0, 6: 1, 7: -1, 8: 0}.get(orientation)
    return image if flip is None else cv2.flip(image, flip)


@dataclass(frozen=True)
class Checked:
    """A payload that passed validation: its format, declared size and where the image ends."""

    format: str
    width: int
    height: int
    end: int  # the image's bytes are data[:end]; anything after it is ignored
    heif: heif.Header | None = None  # HEIC and AVIF: the parsed container
    thin: bool = False  # JPEG: under JPEG_PROBE_BITS_PER_BLOCK (probed at 1/8 scale before a larger decode)


@dataclass(frozen=True)
class MinimumSize:
    """The smallest decoded image (as displayed, after EXIF orientation) the following resize needs.

    ``width``, ``height``, ``shorter_side``: each side at least that; ``fit_width`` x ``fit_height``: the
    image fitted inside that box keeping its aspect ratio (a letterbox) at least fills it along one side,
    the side its aspect ratio makes it touch first."""

    width: int = 0
    height: int = 0
    shorter_side: int = 0
    fit_width: int = 0
    fit_height: int = 0


@dataclass(frozen=True)
class Decoded:
    """RGB pixels (possibly a reduced decode) and the photo's own displayed size."""

    image: np.ndarray
    height: int
    width: int


def check(data: bytes, limits: ImageLimits) -> Checked:
    """Check a payload without decoding it (every check of the module docstring before the decoder)."""
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
    if image_format in heif.FORMATS:
        header = _heif_header(data, image_format)
        check_size(image_format, header.width, header.height, limits)
        try:  # tiles, coded sizes, byte ranges (truncation)
            heif.check_images(data, header, limits.max_pixels, limits.max_side)
        except heif.HeifError as error:
            raise ImageError(str(error)) from None
        return Checked(image_format, header.width, header.height, len(data), header)
    layout = walk_structure(data, image_format, limits)
    check_size(image_format, layout.width, layout.height, limits)
    try:  # enough coded data to fill the declared pixels, and not more than they can need
        image_structure.check_coded_data(layout, image_format.upper())
    except image_structure.StructureError as error:
        raise ImageError(str(error)) from None
    thin = layout.bits_per_block is not None and layout.bits_per_block < JPEG_PROBE_BITS_PER_BLOCK
    return Checked(image_format, layout.width, layout.height, layout.end, thin=thin)


def check_size(image_format: str, width: int, height: int, limits: ImageLimits) -> None:
    """The declared size against the limits: not empty, at most ``max_pixels``, no side over ``max_side``."""
    name = image_format.upper()
    if width == 0 or height == 0:
        raise ImageError(f"corrupt {name}: declared size {width}x{height}")
    if width * height > limits.max_pixels:
        raise ImageError(f"{name} declares {width}x{height} = {width * height} pixels, over the limit of {limits.max_pixels} pixels")
    if max(width, height) > limits.max_side:
        raise ImageError(f"{name} declares {width}x{height}: a side over the limit of {limits.max_side} pixels")


def _heif_header(data: bytes, image_format: str) -> heif.Header:
    try:
        return heif.parse(data, image_format)
    except heif.HeifError as error:
        raise ImageError(str(error)) from None


def decode_rgb(data: bytes, limits: ImageLimits) -> np.ndarray:
    """Validate and decode to an 8-bit RGB HxWx3 array at full size.

    EXIF orientation is applied; grayscale, alpha (dropped) and 16-bit images
    become 8-bit RGB (OpenCV's ``IMREAD_COLOR``).
    """
    return decode(data, limits).image


def decode(data: bytes, limits: ImageLimits, minimum: MinimumSize | None = None) -> Decoded:
    """Validate and decode to 8-bit RGB; a JPEG at the smallest DCT scale still at least ``minimum``."""
    checked = check(data, limits)
    payload = data[: checked.end]
    if checked.format == "jpeg":
        decoded = _decode_jpeg(payload, checked, minimum or MinimumSize())
        if decoded is not None:
            return decoded
    if checked.heif is not None:
        return _decode_heif(payload, checked.heif)
    image = _decode_opencv(payload, checked)
    return Decoded(image, image.shape[0], image.shape[1])


def _decode_opencv(data: bytes, checked: Checked) -> np.ndarray:
    name = checked.format.upper()
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
    width, height = checked.width, checked.height
    if image.ndim != 3 or image.shape[2] != 3 or sorted(image.shape[:2]) != sorted((height, width)):
        raise ImageError(f"corrupt {name}: decoded {image.shape[1]}x{image.shape[0]} image, header declares {width}x{height}")
    try:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    except cv2.error:
        raise ImageError(f"corrupt {name}: cannot convert the decoded image") from None


def _decode_heif(data: bytes, header: heif.Header) -> Decoded:
    """HEIC/AVIF at full size, its irot/imir orientation applied once (by libheif, or here for AVIF)."""
    try:
        pixels, orientation = heif.decode(data, header)
    except heif.HeifError as error:
        raise ImageError(str(error)) from None
    image = apply_orientation(pixels, orientation)
    width, height = header.displayed
    got_height, got_width = image.shape[:2]
    # Defence in depth, as for the other formats; libheif crops to a clean aperture (clap), never grows.
    if (got_width, got_height) != (width, height) and not (header.cropped and got_width <= width and got_height <= height):
        raise ImageError(f"corrupt {header.format.upper()}: decoded {got_width}x{got_height} image, header declares {width}x{height}")
    return Decoded(np.ascontiguousarray(image), got_height, got_width)


def stored_minimum(checked: Checked, minimum: MinimumSize, transposed: bool) -> tuple[int, int]:
    """(min_width, min_height) of the stored (not yet oriented) image, never above its size (no upscaling)."""
    min_width, min_height = (minimum.height, minimum.width) if transposed else (minimum.width, minimum.height)
    if checked.width <= checked.height:
        min_width = max(min_width, minimum.shorter_side)
    else:
        min_height = max(min_height, minimum.shorter_side)
    if minimum.fit_width > 0 and minimum.fit_height > 0:
        fit_width, fit_height = (minimum.fit_height, minimum.fit_width) if transposed else (minimum.fit_width, minimum.fit_height)
        # The side whose ratio to the box is the larger one touches the box first: it alone binds.
        if checked.width * fit_height >= checked.height * fit_width:
            min_width = max(min_width, fit_width)
        else:
            min_height = max(min_height, fit_height)
    return min(min_width, checked.width), min(min_height, checked.height)


def _decode_jpeg(data: bytes, checked: Checked, minimum: MinimumSize) -> Decoded | None:
    """libjpeg-turbo, strict, at the smallest DCT scale n/8 that keeps ``minimum``; None for CMYK/YCCK (OpenCV decodes those)."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except Exception:  # ValueError from libjpeg; anything else must not escape either
        raise ImageError("corrupt JPEG: the decoder rejected the header") from None
    if (width, height) != (checked.width, checked.height):
        raise ImageError(f"corrupt JPEG: the decoder reads {width}x{height}, the header declares {checked.width}x{checked.height}")
    orientation = jpeg_orientation(data)
    transposed = orientation in (5, 6, 7, 8)
    min_width, min_height = stored_minimum(checked, minimum, transposed)
    cmyk = colorspace in ("CMYK", "YCCK")  # OpenCV decodes those, at full size
    larger_than_an_eighth = cmyk or (min_width <= 0 and min_height <= 0) or min_width > -(-width // 8) or min_height > -(-height // 8)
    if checked.thin and larger_than_an_eighth:
        _strict_jpeg(data, min_width=1, min_height=1)  # the 1/8-scale probe refuses an inflated header cheaply
    if cmyk:
        return None
    image = _strict_jpeg(data, min_width=min_width, min_height=min_height)
    got_height, got_width = image.shape[:2]
    if (
        image.ndim != 3
        or image.shape[2] != 3
        or not any((got_width, got_height) == (-(-width * n // 8), -(-height * n // 8)) for n in range(1, 9))
    ):
        raise ImageError(f"corrupt JPEG: decoded {got_width}x{got_height} image, header declares {width}x{height}")
    image = apply_orientation(image, orientation)
    shown_height, shown_width = (width, height) if transposed else (height, width)
    return Decoded(np.ascontiguousarray(image), shown_height, shown_width)


def _strict_jpeg(data: bytes, min_width: int, min_height: int) -> np.ndarray:
    """libjpeg-turbo's RGB decode at the smallest DCT scale that keeps min_width x min_height; its warnings are errors."""
    try:
        return simplejpeg.decode_jpeg(
            data, colorspace="RGB", fastdct=False, fastupsample=False, min_width=min_width, min_height=min_height, strict=True
        )
    except Exception as error:  # strict: libjpeg's warnings (corrupt or missing data) are errors
        reason = str(error).split(":")[-1].strip()[:80] or type(error).__name__
        raise ImageError(f"corrupt JPEG: the decoder rejected the data ({reason})") from None
