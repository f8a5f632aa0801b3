"""The benchmark's upload mixes: phone photos are what a phone sends (12 MP, 2.5-4 MB, EXIF orientation), shares as stated."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from benchmarks import images
from vision_serving import image_codec

LIMITS = image_codec.ImageLimits(max_bytes=20_971_520, max_pixels=50_000_000)


def test_exif_orientation_segment_is_read_and_applied_by_the_served_decoder():
    stored = np.zeros((40, 60, 3), np.uint8)
    stored[:10, :20] = 255  # a white block in the top-left corner
    jpeg = cv2.imencode(".jpg", stored, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    rotated = images.with_exif_orientation(jpeg, 6)
    assert image_codec.jpeg_orientation(rotated) == 6 and image_codec.jpeg_orientation(jpeg) == 1
    shown = image_codec.decode_rgb(rotated, LIMITS)
    assert shown.shape[:2] == (60, 40)  # displayed portrait
    # orientation 6 turns the stored image clockwise: its top-left corner goes to the top-right
    assert shown[:20, -10:].mean() > 200 and shown[:20, :10].mean() < 50
    with pytest.raises(ValueError):
        images.with_exif_orientation(b"\x89PNG", 6)


def test_phone_photo_is_12_megapixels_and_compresses_like_one():
    rng = np.random.default_rng(1)
    photo = cv2.GaussianBlur(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8), (0, 0), 3)
    data = images.phone_photo(photo, seed=0, rotated=True)
    assert image_codec.declared_size(data, "jpeg") == images.PHONE_SIZE  # stored landscape (width, height)
    assert image_codec.jpeg_orientation(data) == images.PHONE_ROTATED_ORIENTATION
    assert 2_000_000 <= len(data) <= 4_500_000
    shown = image_codec.decode(data, LIMITS).image
    assert shown.shape[:2] == (4000, 3000)  # portrait as displayed


def test_mix_shares_and_scenarios():
    mix = images.upload_mix("mix")
    described = images.describe(mix)
    assert described["shares"] == images.MIX_SHARES
    assert described["exif_rotated"] > 0
    assert {max(p.width, p.height) for p in images.upload_mix("web")} == set(images.WEB_SIZES)
    assert all(images._kind(p) == "phone" for p in images.upload_mix("phone"))
    assert [p.name for p in mix] == [p.name for p in images.upload_mix("mix")]  # deterministic
    with pytest.raises(ValueError, match="unknown upload mix"):
        images.upload_mix("video")
