"""The served text reader's Python steps without Triton: the preprocess's outputs per request, and what the
postprocess rebuilds from them."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vision_serving import image_codec
from vision_serving.tasks.text_reading import steps
from vision_serving.tasks.text_reading.settings import DEFAULT

LIMITS = image_codec.ImageLimits(
    max_bytes=2**24, max_pixels=50_000_000, accepted_formats=("jpeg", "png"), max_side=32766, max_jpeg_scans=64
)


def png(height: int, width: int, value: int = 200) -> bytes:
    image = np.full((height, width, 3), value, np.uint8)
    image[:, : width // 2, 2] = 30  # red on the left half: the BGR order must survive the decode
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def request(*payloads: bytes) -> np.ndarray:
    return np.array(payloads, dtype=np.object_).reshape(-1, 1)


def test_outputs_hold_the_detector_input_the_image_and_its_transform():
    prepared = steps.prepare_request(request(png(480, 640)), LIMITS, DEFAULT.detection)
    outputs = steps.preprocess_outputs(prepared)
    assert outputs[steps.DETECTOR_INPUT].shape == (1, 3, 736, 992)  # shorter side up to 736, multiples of 32
    assert outputs[steps.DETECTOR_INPUT].dtype == np.float32
    assert outputs[steps.IMAGE].shape == (1, 480, 640, 3) and outputs[steps.IMAGE].dtype == np.uint8
    assert outputs[steps.IMAGE][0, 10, 10, 2] == 30 and outputs[steps.IMAGE][0, 10, 600, 2] == 200  # BGR, as RapidOCR reads
    np.testing.assert_allclose(outputs[steps.TRANSFORM], [[1.0, 1.0, 0, 480, 640]])


def test_the_postprocess_rebuilds_each_photo_from_the_image_and_transform():
    prepared = steps.prepare_request(request(png(100, 2000), png(100, 2000)), LIMITS, DEFAULT.detection)
    outputs = steps.preprocess_outputs(prepared)
    rebuilt = steps.from_preprocess(outputs[steps.IMAGE], outputs[steps.TRANSFORM])
    for before, after in zip(prepared, rebuilt):
        np.testing.assert_array_equal(before.image, after.image)
        assert (after.ratio_h, after.ratio_w) == pytest.approx((before.ratio_h, before.ratio_w))
        assert (after.pad_top, after.photo_shape) == (before.pad_top, before.photo_shape)
    assert rebuilt[0].pad_top > 0  # a photo 20 times wider than high is padded above and below


def test_photos_of_one_request_must_share_a_detector_size():
    with pytest.raises(ValueError, match=r"need one detector size, these need .*: send one photo per request"):
        steps.prepare_request(request(png(480, 640), png(640, 480)), LIMITS, DEFAULT.detection)


def test_a_bad_payload_names_its_image():
    # Images are counted from 0, as every pipeline's preprocess counts them.
    with pytest.raises(image_codec.ImageError, match="image 1 of 2: unrecognized image format"):
        steps.prepare_request(request(png(480, 640), b"not an image"), LIMITS, DEFAULT.detection)


def test_a_photo_whose_detector_input_is_too_long_is_refused_with_its_sizes():
    (prepared,) = steps.prepare_request(request(png(400, 2000)), LIMITS, DEFAULT.detection, max_side=4096)
    assert prepared.tensor.shape[1:] == (736, 3680)  # a 1:5 strip: the shorter side goes up to 736
    with pytest.raises(ValueError, match=r"2000x400 needs a 3680x736 text detector input, longer than 2048 \(max_detector_side\)"):
        steps.prepare_request(request(png(400, 2000)), LIMITS, DEFAULT.detection, max_side=2048)
