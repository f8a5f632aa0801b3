"""Validation and decoding of encoded images (no server)."""

from __future__ import annotations

import dataclasses
import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from tests.support.images import png_with_declared_size
from vision_serving import image_codec, preprocessing
from vision_serving.image_codec import (
    ImageError,
    ImageLimits,
    MinimumSize,
    check,
    declared_size,
    decode_rgb,
)
from vision_serving.preprocessing import PreprocessSpec

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
        check(payload, LIMITS)


def test_payload_over_byte_limit(rgb):
    data = encode(rgb, "PNG")
    with pytest.raises(ImageError, match=f"{len(data)} bytes, over the limit of 100 bytes"):
        check(data, ImageLimits(max_bytes=100, max_pixels=10**9))


def test_format_not_accepted(rgb):
    with pytest.raises(ImageError, match="PNG is not accepted"):
        check(encode(rgb, "PNG"), ImageLimits(max_bytes=10**6, max_pixels=10**6, accepted_formats=("jpeg",)))


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


# --------------------------------------------------------------------------- reduced JPEG decoding, EXIF, trailing data, WebP

WIDE_LIMITS = ImageLimits(max_bytes=50_000_000, max_pixels=50_000_000, accepted_formats=("jpeg", "png", "webp"))


def smooth_photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image (smooth random colour fields), so JPEG and resizing behave as on photos."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(height // 50, 2), max(width // 50, 2), 3), dtype=np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)


def opencv_reference(data: bytes) -> np.ndarray:
    """The previous decoder (OpenCV, EXIF orientation applied), RGB."""
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def jpeg_12mp() -> bytes:
    ok, encoded = cv2.imencode(".jpg", smooth_photo(4000, 3000), [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return encoded.tobytes()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_match_opencv(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(smooth_photo(120, 80), "JPEG", quality=90, exif=exif.tobytes())
    reference = opencv_reference(data)
    assert image_codec.jpeg_orientation(data) == orientation
    assert np.array_equal(decode_rgb(data, LIMITS), reference)
    # The minimum is for the image as displayed: a rotated photo's stored sides are swapped before scaling.
    decoded = image_codec.decode(data, LIMITS, MinimumSize(width=60, height=20))
    assert (decoded.height, decoded.width) == reference.shape[:2]
    height, width = decoded.image.shape[:2]
    assert width >= 60 and height >= 20 and height < reference.shape[0]
    assert (width, height) == ((60, 40) if orientation < 5 else (60, 90))


def test_full_decode_equals_opencv_for_color_and_gray(rgb):
    for data in (encode(rgb, "JPEG", quality=90), encode(rgb[..., 0], "JPEG"), encode(rgb, "JPEG", progressive=True)):
        assert np.array_equal(decode_rgb(data, LIMITS), opencv_reference(data))


def test_12mp_jpeg_decodes_reduced_but_never_below_the_minimum(jpeg_12mp):
    full = image_codec.decode(jpeg_12mp, WIDE_LIMITS)
    assert full.image.shape == (3000, 4000, 3)
    for minimum, shape in [
        (MinimumSize(shorter_side=256), (375, 500, 3)),  # 1/8: shorter side 375 >= 256
        (MinimumSize(shorter_side=400), (750, 1000, 3)),  # 1/8 would give 375 < 400
        (MinimumSize(width=256, height=256), (375, 500, 3)),
        (MinimumSize(width=600, height=256), (750, 1000, 3)),  # 2/8: 4000 * 1/8 = 500 < 600
        (MinimumSize(width=5000, height=5000), (3000, 4000, 3)),  # never upscaled
    ]:
        decoded = image_codec.decode(jpeg_12mp, WIDE_LIMITS, minimum)
        assert (decoded.height, decoded.width) == (3000, 4000)
        height, width = decoded.image.shape[:2]
        assert height >= min(minimum.height, 3000) and width >= min(minimum.width, 4000) and min(height, width) >= minimum.shorter_side
        assert decoded.image.shape == shape


@pytest.mark.parametrize(
    "resize, size, interpolation, expected",
    [
        ("center_crop", 224, "bicubic", (750, 1000)),  # the shorter side >= 2 x 256: 1/4
        ("stretch", 256, "bilinear", (750, 1000)),  # both sides >= 2 x 256: 1/4
        ("letterbox", 128, "bilinear", (375, 500)),  # fitted into 2 x 128, the width binds: 1/8
        ("yolo_letterbox", 320, "bilinear", (750, 1000)),  # fitted into 2 x 320: 1/4
    ],
)
def test_reduced_decode_then_resize_stays_close_to_full_decode(jpeg_12mp, resize, size, interpolation, expected):
    """The model's uint8 input from a 12 MP JPEG decoded reduced (decode_oversampling 2), against its full decode.

    The warps sample the reduced image at the photo's own coordinates: a reduced pixel averages the photo's
    pixels around the same point. Without the photo's size (the reduced image taken as the photo) MediaPipe's
    corner-aligned warp would shift every sample by (s - 1) / 2 photo pixels at scale 1/s."""
    spec = PreprocessSpec(
        height=size,
        width=size,
        resize_shorter_side=256 if resize == "center_crop" else 0,
        interpolation=interpolation,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        resize=resize,
    )
    decoded = image_codec.decode(jpeg_12mp, WIDE_LIMITS, preprocessing.decode_minimum(spec))
    assert decoded.image.shape == (*expected, 3) and (decoded.height, decoded.width) == (3000, 4000)
    reference = preprocessing.resize_and_crop(decode_rgb(jpeg_12mp, WIDE_LIMITS), spec).astype(np.float64)
    served = preprocessing.resize_and_crop(decoded.image, spec, size=(decoded.height, decoded.width)).astype(np.float64)
    assert np.abs(reference - served).mean() < 1.0
    if resize in ("stretch", "letterbox"):
        unplaced = preprocessing.resize_and_crop(decoded.image, spec).astype(np.float64)
        assert np.abs(reference - unplaced).mean() > 2 * np.abs(reference - served).mean()


def test_reduced_warp_keeps_the_photos_edge_against_the_bars():
    """A letterboxed photo's edge rows blend with the zero bars exactly as much as at full size."""
    photo = np.full((3000, 4000, 3), 200, dtype=np.uint8)
    data = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    spec = PreprocessSpec(128, 128, 0, "bilinear", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), resize="letterbox")
    decoded = image_codec.decode(data, WIDE_LIMITS, preprocessing.decode_minimum(spec))
    assert decoded.image.shape[:2] == (375, 500)
    full = preprocessing.resize_and_crop(decode_rgb(data, WIDE_LIMITS), spec).astype(int)
    served = preprocessing.resize_and_crop(decoded.image, spec, size=(3000, 4000)).astype(int)
    assert np.abs(full - served).max() <= 2
    assert (served[:15] == 0).all() and (served[-15:] == 0).all() and (served[17:-17] >= 198).all()


def test_decode_minimum_from_the_spec():
    crop = PreprocessSpec(224, 224, 256, "bicubic", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    assert preprocessing.decode_minimum(crop) == MinimumSize(shorter_side=512)  # decode_oversampling 2 (the default)
    exact = PreprocessSpec(224, 224, 256, "bicubic", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), decode_oversampling=1.0)
    assert preprocessing.decode_minimum(exact) == MinimumSize(shorter_side=256)
    off = PreprocessSpec(224, 224, 256, "bicubic", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), decode_oversampling=0.0)
    assert preprocessing.decode_minimum(off) is None
    stretch = PreprocessSpec(144, 256, 0, "bilinear", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), layout="NHWC", resize="stretch")
    assert preprocessing.decode_minimum(stretch) == MinimumSize(width=512, height=288)
    for mode in ("letterbox", "yolo_letterbox"):
        fitted = PreprocessSpec(144, 256, 0, "bilinear", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), resize=mode, decode_oversampling=4.0)
        assert preprocessing.decode_minimum(fitted) == MinimumSize(fit_width=1024, fit_height=576)
        assert preprocessing.decode_minimum(dataclasses.replace(fitted, decode_oversampling=0.0)) is None


@pytest.mark.parametrize(
    "width, height, orientation, expected",
    [
        (4000, 3000, 1, (375, 500)),  # wide: the width binds (500 >= 256 at 1/8)
        (3000, 4000, 1, (500, 375)),  # tall: the height binds
        (4000, 3000, 6, (500, 375)),  # stored wide, displayed tall
        (1000, 100, 1, (38, 375)),  # a panorama: its width binds (375 >= 256, at 3/8), however short it is
        (200, 150, 1, (150, 200)),  # already smaller than the fit: full size
    ],
)
def test_fitted_minimum_keeps_the_fitted_photo_filled(width, height, orientation, expected):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(smooth_photo(width, height), "JPEG", quality=90, exif=exif.tobytes())
    decoded = image_codec.decode(data, WIDE_LIMITS, MinimumSize(fit_width=256, fit_height=256))
    assert decoded.image.shape[:2] == expected


def test_original_sizes_are_the_photos_not_the_reduced_decode(jpeg_12mp):
    decoded = preprocessing.decode_payloads(np.array([[jpeg_12mp]], dtype=np.object_), WIDE_LIMITS, MinimumSize(shorter_side=256))
    assert decoded[0].image.shape[:2] == (375, 500)
    assert preprocessing.original_sizes(decoded).tolist() == [[3000, 4000]]


def test_jpeg_with_appended_data_is_accepted(rgb):
    """A motion photo: an MP4 after the JPEG's end-of-image marker (and no marker near the end)."""
    data = encode(rgb, "JPEG", quality=90)
    video = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 64
    assert np.array_equal(decode_rgb(data + video, LIMITS), decode_rgb(data, LIMITS))
    assert check(data + video, LIMITS).end == len(data)


def test_truncated_jpeg_with_appended_data_is_still_refused(rgb):
    data = encode(rgb, "JPEG", quality=90)
    with pytest.raises(ImageError, match=r"truncated JPEG|corrupt JPEG"):
        decode_rgb(data[: len(data) // 2] + bytes(5000), LIMITS)
    with pytest.raises(ImageError, match="corrupt JPEG"):  # cut inside the scan, an EOI appended: strict decoding refuses it
        decode_rgb(data[: len(data) // 2] + b"\xff\xd9", LIMITS)


def test_corrupt_entropy_data_is_refused(rgb):
    data = bytearray(encode(smooth_photo(256, 256), "JPEG", quality=90))
    scan = data.index(b"\xff\xda")
    data[scan + 200 : scan + 260] = bytes(range(60))
    with pytest.raises(ImageError, match="corrupt JPEG"):
        decode_rgb(bytes(data), LIMITS)


def test_webp_lossy_lossless_and_limits():
    image = smooth_photo(64, 48)
    for quality in (80, 101):  # 101: lossless (VP8L)
        _, encoded = cv2.imencode(".webp", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_WEBP_QUALITY, quality])
        data = encoded.tobytes()
        assert declared_size(data, "webp") == (64, 48)
        decoded = decode_rgb(data, WIDE_LIMITS)
        assert decoded.shape == (48, 64, 3) and np.abs(decoded.astype(int) - image).mean() < 8
        assert quality != 101 or np.array_equal(decoded, image)
        with pytest.raises(ImageError, match="over the limit of 1000 pixels"):
            check(data, ImageLimits(max_bytes=10**6, max_pixels=1000, accepted_formats=("webp",)))
        with pytest.raises(ImageError, match="truncated WebP: the RIFF header at byte 0 declares"):
            check(data[: len(data) // 2], WIDE_LIMITS)
    with pytest.raises(ImageError, match="WEBP is not accepted"):
        check(data, LIMITS)


def test_extended_webp_header_and_animation():
    header = b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8X" + struct.pack("<I", 10)
    still = header + bytes([0, 0, 0, 0]) + (639).to_bytes(3, "little") + (479).to_bytes(3, "little")
    assert declared_size(still, "webp") == (640, 480)
    with pytest.raises(ImageError, match="animated WebP"):
        declared_size(header + bytes([0x02, 0, 0, 0]) + bytes(6), "webp")
