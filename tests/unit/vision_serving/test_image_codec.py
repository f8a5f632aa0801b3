"""Validation and decoding of encoded images (no server)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from tests.support.images import png_with_declared_size
from vision_serving.image_codec import (
    ImageError,
    ImageLimits,
    declared_size,
    decode_rgb,
    validate,
)

LIMITS = ImageLimits(max_bytes=5_000_000, max_pixels=40_000_000)


def encode(array: np.ndarray, fmt: str, **save_args) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **save_args)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def rgb() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)


def test_png_round_trip_is_exact(rgb):
    assert np.array_equal(decode_rgb(encode(rgb, "PNG"), LIMITS), rgb)


def test_jpeg_decodes_to_rgb_order(photo_bytes):
    from_jpeg = decode_rgb(photo_bytes["coffee"], LIMITS) if "coffee" in photo_bytes else None
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 0] = 255
    decoded = decode_rgb(encode(red, "JPEG", quality=95), LIMITS)
    assert decoded[..., 0].mean() > 240 and decoded[..., 2].mean() < 15
    assert from_jpeg is None or from_jpeg.dtype == np.uint8


def test_exif_orientation_is_applied(rgb):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    data = encode(rgb, "JPEG", quality=95, exif=exif.tobytes())
    assert decode_rgb(data, LIMITS).shape == (64, 48, 3)


def test_grayscale_becomes_rgb():
    gray = np.tile(np.arange(64, dtype=np.uint8), (16, 1))
    decoded = decode_rgb(encode(gray, "PNG"), LIMITS)
    assert decoded.shape == (16, 64, 3)
    assert np.array_equal(decoded[..., 0], gray) and np.array_equal(decoded[..., 2], gray)


def test_alpha_is_dropped(rgb):
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])
    decoded = decode_rgb(encode(rgba, "PNG"), LIMITS)
    assert np.array_equal(decoded, rgb)


def test_16_bit_becomes_8_bit():
    wide = (np.arange(256, dtype=np.uint16).reshape(16, 16) * 257)[..., None].repeat(3, axis=2)
    ok, encoded = cv2.imencode(".png", wide)
    assert ok
    decoded = decode_rgb(encoded.tobytes(), LIMITS)
    assert decoded.dtype == np.uint8
    assert np.abs(decoded[..., 0].astype(int) - np.arange(256).reshape(16, 16)).max() <= 1


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "empty image payload"),
        (b"GIF89a" + b"\x00" * 64, "unrecognized image format"),
        (b"BM" + b"\x00" * 64, "unrecognized image format"),
        (bytes(range(256)) * 4, "unrecognized image format"),
        (png_with_declared_size(100_000, 100_000), "declares 100000x100000 = 10000000000 pixels, over the limit"),
        (png_with_declared_size(0, 10), "declared size 0x10"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "missing IHDR"),
        (b"\xff\xd8\xff\xe0\x00", "truncated JPEG"),
    ],
)
def test_rejected_before_decoding(payload, message):
    with pytest.raises(ImageError, match=message.replace("(", r"\(")):
        validate(payload, LIMITS)


def test_payload_over_byte_limit(rgb):
    data = encode(rgb, "PNG")
    with pytest.raises(ImageError, match=f"{len(data)} bytes, over the limit of 100 bytes"):
        validate(data, ImageLimits(max_bytes=100, max_pixels=10**9))


def test_format_not_accepted(rgb):
    with pytest.raises(ImageError, match="PNG is not accepted"):
        validate(encode(rgb, "PNG"), ImageLimits(max_bytes=10**6, max_pixels=10**6, accepted_formats=("jpeg",)))


def test_truncated_jpeg_and_png(rgb):
    jpeg, png = encode(rgb, "JPEG"), encode(rgb, "PNG")
    with pytest.raises(ImageError, match="truncated JPEG"):
        decode_rgb(jpeg[: len(jpeg) // 2], LIMITS)
    with pytest.raises(ImageError, match="truncated PNG"):
        decode_rgb(png[: len(png) // 2], LIMITS)


def test_corrupt_png_data_is_rejected_by_the_decoder(rgb):
    data = bytearray(encode(rgb, "PNG"))
    start = data.index(b"IDAT") + 8
    data[start : start + 64] = bytes(64)  # zero compressed pixel data: zlib/CRC errors
    with pytest.raises(ImageError, match="corrupt PNG"):
        decode_rgb(bytes(data), LIMITS)


def test_declared_size_matches_real_images(rgb):
    assert declared_size(encode(rgb, "PNG"), "png") == (64, 48)
    assert declared_size(encode(rgb, "JPEG"), "jpeg") == (64, 48)
    assert declared_size(encode(rgb, "JPEG", progressive=True), "jpeg") == (64, 48)
