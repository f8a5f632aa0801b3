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
    assert outputs[steps.DETECTOR_INPUT].dtype == np.uint8  # the detector normalizes in its graph
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


def detector_input(height: int, width: int, max_side: int = steps.MAX_DETECTOR_SIDE) -> tuple[int, int] | None:
    """The detector input's (H, W) the served preprocess makes of a photo of this size; None when it refuses it."""
    photo = image_codec.Decoded(np.zeros((height, width, 3), np.uint8), height, width)
    try:
        found = steps.prepare_photo(photo, 0, 1, DEFAULT.detection, max_side)
    except ValueError:
        return None
    return found.tensor.shape[1], found.tensor.shape[2]


def photo_sizes(count: int, seed: int = 0) -> list[tuple[int, int]]:
    """Photo sizes from thumbnails to 12 MP, aspects from 1:12 to 12:1, and the edges of the rules (far thinner photos
    are refused, and cost a large resize each)."""
    rng = np.random.default_rng(seed)
    aspects = np.exp(rng.uniform(np.log(1 / 12), np.log(12), count))
    sizes = [(max(8, int(side / np.sqrt(a))), max(8, int(side * np.sqrt(a)))) for side, a in zip(rng.integers(40, 3000, count), aspects)]
    edges = [(2000, 2000), (2001, 2001), (2015, 2015), (736, 736), (735, 735), (737, 4000), (3000, 4000), (3024, 4032)]
    edges += [(720, 2000), (2000, 720), (400, 2000), (360, 2000), (2000, 360), (30, 240), (31, 250), (8, 8), (240, 2000)]
    return sizes + edges


def test_every_detector_input_fits_one_profile_and_each_profile_s_bounds_are_reached():
    """The detector's TensorRT profiles are exactly what the preprocess sends: every photo it serves gives an input in
    one profile (they do not overlap), and each profile's min and max sides are inputs some photo gets."""
    profiles = steps.detector_profiles(DEFAULT.detection)
    assert [p.name for p in profiles] == ["photo", "wide", "tall"]
    assert [(p.min, p.max) for p in profiles] == [
        ((3, 736, 736), (3, 1984, 1984)),
        ((3, 736, 2016), (3, 736, 4096)),
        ((3, 2016, 736), (3, 4096, 736)),
    ]
    seen: set[tuple[int, int]] = set()
    for height, width in photo_sizes(12):
        size = detector_input(height, width)
        if size is None:
            continue
        seen.add(size)
        fitting = [p.name for p in profiles if p.fits((3, *size))]
        assert len(fitting) == 1, f"{width}x{height} photo -> {size[1]}x{size[0]} input fits {fitting}"
    assert min(min(size) for size in seen) == 736 and max(min(size) for size in seen) == 1984
    assert (1984, 1984) in seen  # a 2000 x 2000 photo: the photo profile's max
    long_sides = {max(size) for size in seen if min(size) == 736 and max(size) > 1984}
    assert min(long_sides) <= 2048 and max(long_sides) >= 3968  # the wide and tall profiles' ranges, nearly to 4096
    assert {size[0] > size[1] for size in seen if max(size) > 1984} == {True, False}  # tall and wide both come


def test_the_detector_profiles_follow_max_detector_side():
    """A smaller max_detector_side shrinks the profiles with what is served; one at or under 1984 needs no wide or tall."""
    (photo,) = steps.detector_profiles(DEFAULT.detection, 1500)
    assert photo.max == (3, 1472, 1472) and photo.min == (3, 736, 736)
    assert detector_input(1480, 1480, 1500) == (1472, 1472) and detector_input(1600, 1600, 1500) is None
    photo, wide, tall = steps.detector_profiles(DEFAULT.detection, 3000)
    assert wide.max == (3, 736, 2976) and tall.max == (3, 2976, 736) and wide.opt == (3, 736, 2944)
    with pytest.raises(ValueError, match="below the shortest detector input side 736"):
        steps.detector_profiles(DEFAULT.detection, 512)
