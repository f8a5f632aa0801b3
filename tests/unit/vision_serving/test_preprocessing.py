"""The served preprocessing against an independent reference implementation (no server).

The reference decodes with Pillow (not OpenCV) and resizes with a plain numpy
bicubic (Keys kernel, a = -0.75, half-pixel centres, replicated border: the
convention of cv2.INTER_CUBIC and of TF/PyTorch "bicubic" without antialias),
then crops and normalizes with parameters read from the same config. PNG
photos decode identically in both libraries; the remaining difference is
OpenCV's 11-bit fixed-point interpolation and 1/32-pixel coordinate grid,
bounded below.
"""

from __future__ import annotations

import dataclasses
import io
import re

import cv2
import numpy as np
import pytest
from PIL import Image

from vision_serving import detection, image_codec, image_to_tensor, layout, model_config, preprocessing
from vision_serving.image_codec import decode_rgb

PNG_PHOTOS = ["chelsea", "coffee", "camera", "astronaut"]
# In normalized units (one uint8 level is 1/128 here).
MAX_ABS_TOLERANCE = 3 / 128
MEAN_ABS_TOLERANCE = 0.25 / 128


@pytest.fixture(scope="module")
def preprocess_config():
    return model_config.load_config(layout.pipeline("image_classifier").model_dir("preprocess"))


@pytest.fixture(scope="module")
def spec(preprocess_config):
    return preprocessing.PreprocessSpec.from_config(preprocess_config)


def cubic_weights(in_size: int, out_size: int, a: float = -0.75) -> np.ndarray:
    """[out_size, in_size] interpolation matrix of a 1-D bicubic resize."""
    matrix = np.zeros((out_size, in_size))
    for d in range(out_size):
        source = (d + 0.5) * in_size / out_size - 0.5
        base = int(np.floor(source))
        t = source - base
        for offset in range(-1, 3):
            x = abs(offset - t)
            weight = (a + 2) * x**3 - (a + 3) * x**2 + 1 if x <= 1 else a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
            matrix[d, min(max(base + offset, 0), in_size - 1)] += weight
    return matrix


def reference_preprocess(data: bytes, spec: preprocessing.PreprocessSpec) -> np.ndarray:
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)
    height, width = image.shape[:2]
    short = spec.resize_shorter_side
    new_w, new_h = (short, int(short * height / width)) if width <= height else (int(short * width / height), short)
    rows, cols = cubic_weights(height, new_h), cubic_weights(width, new_w)
    resized = np.stack([rows @ image[..., c] @ cols.T for c in range(3)], axis=-1)
    resized = np.clip(np.rint(resized), 0, 255)
    top, left = round((new_h - spec.crop_size) / 2), round((new_w - spec.crop_size) / 2)
    crop = resized[top : top + spec.crop_size, left : left + spec.crop_size]
    normalized = (crop - np.array(spec.mean)) / np.array(spec.std)
    return normalized.transpose(2, 0, 1).astype(np.float32)


def test_spec_is_read_from_the_config(spec):
    assert spec.resize == "center_crop"
    assert spec.crop_size == 224 and spec.resize_shorter_side == 256
    assert spec.interpolation == "bicubic" and spec.layout == "NCHW" and spec.color_order == "RGB"
    assert spec.mean == (127.0, 127.0, 127.0) and spec.std == (128.0, 128.0, 128.0)
    assert spec.output_shape == (3, 224, 224)


@pytest.mark.parametrize("name", PNG_PHOTOS)
def test_matches_reference_on_real_photos(name, photo_bytes, spec, preprocess_config):
    data = photo_bytes[name]
    limits = preprocessing.limits_from_config(preprocess_config)
    image = decode_rgb(data, limits)
    # These photos are at most the reducing gap times the resize target: no area reduction, so the
    # plain bicubic reference applies.
    new_width, new_height = preprocessing.resized_size(image.shape[1], image.shape[0], spec.resize_shorter_side)
    assert preprocessing.reduce_for_resize(image, new_width, new_height, spec.resize_reducing_gap) is image
    served = preprocessing.preprocess_batch([image], spec)[0]
    expected = reference_preprocess(data, spec)
    assert served.shape == expected.shape == spec.output_shape
    difference = np.abs(served - expected)
    assert difference.max() <= MAX_ABS_TOLERANCE, f"{name}: max |diff| {difference.max() * 128:.2f} levels"
    assert difference.mean() <= MEAN_ABS_TOLERANCE, f"{name}: mean |diff| {difference.mean() * 128:.3f} levels"


def test_batch_equals_one_by_one(photo_bytes, spec, preprocess_config):
    limits = preprocessing.limits_from_config(preprocess_config)
    images = [decode_rgb(photo_bytes[name], limits) for name in PNG_PHOTOS]
    batch = preprocessing.preprocess_batch(images, spec)
    assert batch.dtype == np.float32 and batch.flags.c_contiguous
    for index, image in enumerate(images):
        assert np.array_equal(batch[index], preprocessing.preprocess_batch([image], spec)[0])


@pytest.mark.parametrize("shape", [(1, 1), (1, 5000), (3000, 2), (7, 300)])
def test_tiny_and_elongated_images(shape, spec):
    image = np.full((*shape, 3), 200, dtype=np.uint8)
    out = preprocessing.preprocess_batch([image], spec)
    assert out.shape == (1, *spec.output_shape)
    np.testing.assert_allclose(out, (200 - 127) / 128, atol=1e-6)


def test_layout_and_color_order_options(spec):
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, size=(300, 400, 3), dtype=np.uint8)
    nchw = preprocessing.preprocess_batch([image], spec)[0]
    nhwc_bgr = preprocessing.PreprocessSpec(**{**spec.__dict__, "layout": "NHWC", "color_order": "BGR"})
    other = preprocessing.preprocess_batch([image], nhwc_bgr)[0]
    np.testing.assert_array_equal(other[..., ::-1].transpose(2, 0, 1), nchw)


def test_bad_parameters_are_config_errors(spec):
    with pytest.raises(model_config.ConfigError, match="interpolation 'lanczos'"):
        preprocessing.PreprocessSpec(**{**spec.__dict__, "interpolation": "lanczos"})
    with pytest.raises(model_config.ConfigError, match="smaller than the crop"):
        preprocessing.PreprocessSpec(**{**spec.__dict__, "resize_shorter_side": 200})
    with pytest.raises(model_config.ConfigError, match="resize 'pad'"):
        preprocessing.PreprocessSpec(**{**spec.__dict__, "resize": "pad"})
    with pytest.raises(model_config.ConfigError, match=re.escape("resize_reducing_gap must be 0 (off) or >= 1, got 0.5")):
        preprocessing.PreprocessSpec(**{**spec.__dict__, "resize_reducing_gap": 0.5})
    with pytest.raises(model_config.ConfigError, match="resize_reducing_gap applies to resize center_crop only"):
        preprocessing.PreprocessSpec(**{**spec.__dict__, "resize": "letterbox", "resize_reducing_gap": 2.0})
    # A stretch never crops, so the shorter-side resize does not apply to it.
    assert (
        preprocessing.PreprocessSpec(
            **{**spec.__dict__, "resize": "stretch", "resize_shorter_side": 200, "resize_reducing_gap": 0.0}
        ).resize
        == "stretch"
    )


def test_stretch_spec_is_read_from_the_segmenter_config():
    config = model_config.load_config(layout.pipeline("person_segmenter").model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(config)
    assert spec.resize == "stretch" and spec.crop_size == 256 and spec.resize_shorter_side == 256
    assert spec.interpolation == "bilinear" and spec.layout == "NHWC" and spec.color_order == "RGB"
    assert spec.mean == (0.0, 0.0, 0.0) and spec.std == (255.0, 255.0, 255.0)
    assert spec.output_shape == (256, 256, 3)


def test_stretch_scales_the_whole_image_ignoring_its_aspect_ratio(spec):
    """Nothing is cropped: each half of a two-colour wide image fills half of the output.

    The last row and column are left out: the stretch is corner-aligned like MediaPipe's
    ImageToTensorCalculator, whose border (constant 0) is sampled there."""
    stretch = preprocessing.PreprocessSpec(**{**spec.__dict__, "resize": "stretch", "interpolation": "nearest", "resize_reducing_gap": 0.0})
    image = np.zeros((100, 400, 3), dtype=np.uint8)
    image[:, 200:] = 255
    out = preprocessing.preprocess_batch([image], stretch)[0]
    assert out.shape == stretch.output_shape
    half = stretch.crop_size // 2
    np.testing.assert_allclose(out[:, :-1, :half], (0 - 127) / 128, atol=1e-6)
    np.testing.assert_allclose(out[:, :-1, half:-1], (255 - 127) / 128, atol=1e-6)
    assert preprocessing.resize_and_crop(image, stretch).shape == (stretch.crop_size, stretch.crop_size, 3)


def test_image_sizes_are_height_then_width():
    images = [np.zeros((10, 20, 3), dtype=np.uint8), np.zeros((7, 3, 3), dtype=np.uint8)]
    sizes = preprocessing.image_sizes(images)
    assert sizes.dtype == np.int32 and sizes.tolist() == [[10, 20], [7, 3]]


@pytest.fixture(scope="module")
def letterbox_spec():
    return preprocessing.PreprocessSpec.from_config(model_config.load_config(layout.pipeline("face_detector").model_dir("preprocess")))


def test_letterbox_spec_is_read_from_the_detector_config(letterbox_spec):
    assert letterbox_spec.resize == "letterbox" and letterbox_spec.crop_size == 128
    assert letterbox_spec.interpolation == "bilinear" and letterbox_spec.layout == "NHWC" and letterbox_spec.color_order == "RGB"
    assert letterbox_spec.mean == (127.5, 127.5, 127.5) and letterbox_spec.std == (127.5, 127.5, 127.5)


def test_letterbox_keeps_the_aspect_ratio_with_zero_bars(spec):
    """A 2:1 white image fills the middle half of the rows; the bars are zero pixels (-1 in [-1, 1])."""
    letterbox = preprocessing.PreprocessSpec(
        **{**spec.__dict__, "resize": "letterbox", "resize_reducing_gap": 0.0, "layout": "NHWC", "mean": (127.5,) * 3, "std": (127.5,) * 3}
    )
    out = preprocessing.preprocess_batch([np.full((100, 200, 3), 255, dtype=np.uint8)], letterbox)[0]
    size = letterbox.crop_size
    quarter = size // 4
    assert np.all(out[: quarter - 1] == -1.0) and np.all(out[-quarter + 1 :] == -1.0)
    np.testing.assert_allclose(out[quarter + 1 : -quarter - 1, :-1], 1.0, atol=1e-6)


@pytest.mark.parametrize("name", ["astronaut", "grace_hopper", "coffee", "camera"])
def test_letterbox_is_the_detection_modules_imagetotensor_warp(name, photo_bytes, letterbox_spec, preprocess_config):
    """The served letterbox warps exactly like vision_serving.detection.letterbox (MediaPipe's
    ImageToTensorCalculator, parity-tested there); only the [-1, 1] scaling rounds differently:
    (x - 127.5) / 127.5 in float32 against MediaPipe's fused x * (2/255) - 1, at most one ulp."""
    limits = preprocessing.limits_from_config(preprocess_config)
    image = decode_rgb(photo_bytes[name], limits)
    size = letterbox_spec.crop_size
    served_pixels = preprocessing.resize_and_crop(image, letterbox_spec)
    roi = detection.letterbox_params([image.shape[0]], [image.shape[1]], size).roi(0)
    np.testing.assert_array_equal(served_pixels, image_to_tensor.warp_roi(image, roi, size, size))
    served = preprocessing.preprocess_batch([image], letterbox_spec)
    expected, _ = detection.letterbox(image, size)
    assert np.abs(served - expected).max() <= np.spacing(np.float32(1.0))


def test_stretch_is_the_whole_image_roi(photo_bytes, preprocess_config):
    image = decode_rgb(photo_bytes["astronaut"], preprocessing.limits_from_config(preprocess_config))
    np.testing.assert_array_equal(
        preprocessing.stretch(image, 96, 64, preprocessing.INTERPOLATIONS["bilinear"]),
        image_to_tensor.warp_roi(image, (0.0, 0.0, float(image.shape[1]), float(image.shape[0])), 96, 64),
    )


def test_the_shipped_classifier_anti_aliases_and_the_mediapipe_warps_do_not(spec, letterbox_spec):
    assert spec.resize_reducing_gap == 2.0
    assert letterbox_spec.resize_reducing_gap == 0.0
    segmenter = model_config.load_config(layout.pipeline("person_segmenter").model_dir("preprocess"))
    assert preprocessing.PreprocessSpec.from_config(segmenter).resize_reducing_gap == 0.0


def test_bad_reducing_gap_in_a_config_is_one_config_error(preprocess_config):
    config = type(preprocess_config)()
    config.CopyFrom(preprocess_config)
    config.parameters["resize_reducing_gap"].string_value = "two"
    with pytest.raises(model_config.ConfigError, match="parameter 'resize_reducing_gap' must be a number, got 'two'"):
        preprocessing.PreprocessSpec.from_config(config)


@pytest.mark.parametrize(
    ("width", "height", "reduced"),
    [
        (512, 700, None),  # exactly 2x the 256 target: below the gap, untouched
        (400, 300, None),  # upscale-free small downscale
        (1000, 750, None),  # 2.93x: an integer box of 2 would go below 2x the target
        (1100, 1100, (550, 550)),  # 4.3x: boxes of 2
        (2048, 1536, (682, 512)),  # 6x: boxes of 3
        (4000, 3000, (800, 600)),  # 11.7x: boxes of 5
        (3000, 4000, (600, 800)),
        (4003, 3002, (800, 600)),  # the rows/columns short of a whole box are cropped
    ],
)
def test_area_reduction_only_above_the_gap(width, height, reduced):
    image = np.zeros((height, width, 3), dtype=np.uint8)
    new_width, new_height = preprocessing.resized_size(width, height, 256)
    out = preprocessing.reduce_for_resize(image, new_width, new_height, 2.0)
    if reduced is None:
        assert out is image
    else:
        assert out.shape == (reduced[1], reduced[0], 3)
    assert preprocessing.reduce_for_resize(image, new_width, new_height, 0.0) is image


def _phone_photo(photo: np.ndarray) -> bytes:
    """A 4000 x 3000 JPEG made from a real photo: 4:3 crop, bicubic upscale, sensor-like noise."""
    height, width = photo.shape[:2]
    crop_height = min(height, width * 3 // 4)
    crop_width = crop_height * 4 // 3
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    big = cv2.resize(photo[top : top + crop_height, left : left + crop_width], (4000, 3000), interpolation=cv2.INTER_CUBIC)
    noisy = np.clip(big + np.random.default_rng(5).normal(0.0, 6.5, big.shape), 0, 255).astype(np.uint8)
    return cv2.imencode(".jpg", cv2.cvtColor(noisy, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def test_a_12mp_photo_and_its_reduced_decode_give_nearly_the_same_model_input(photo_bytes, spec, preprocess_config):
    """The served 1/4 DCT decode (1000 x 750) and a full decode of the same 12 MP JPEG: with the
    reducing gap the model inputs nearly match; plain bicubic from 4000 px aliases and they differ."""
    limits = preprocessing.limits_from_config(preprocess_config)
    data = _phone_photo(decode_rgb(photo_bytes["coffee"], limits))
    full = image_codec.decode(data, limits).image
    reduced = image_codec.decode(data, limits, preprocessing.decode_minimum(spec)).image
    assert full.shape == (3000, 4000, 3) and reduced.shape == (750, 1000, 3)
    off = dataclasses.replace(spec, resize_reducing_gap=0.0)
    difference = {}
    for name, which in (("gap", spec), ("off", off)):
        a, b = preprocessing.preprocess_batch([full, reduced], which)
        difference[name] = float(np.abs(a - b).mean() * 128)  # uint8 levels
    assert difference["gap"] < 1.0, difference
    assert difference["off"] > 3 * difference["gap"], difference


def test_elongated_warp_path_reduces_like_the_resize_path(spec, monkeypatch):
    """9000 x 1500 resizes to 1536 x 256, over MAX_RESIZE_AREA_RATIO crops: the warp path, after the
    same area reduction (boxes of 2, to 4500 x 750, never larger than the image), agrees with resize-then-crop."""
    rng = np.random.default_rng(3)
    image = cv2.resize(rng.integers(0, 256, size=(150, 900, 3), dtype=np.uint8), (9000, 1500), interpolation=cv2.INTER_LINEAR)
    warped = preprocessing.resize_and_crop(image, spec)
    monkeypatch.setattr(preprocessing, "MAX_RESIZE_AREA_RATIO", 1e9)
    resized = preprocessing.resize_and_crop(image, spec)
    difference = np.abs(warped.astype(int) - resized.astype(int))
    assert difference.max() <= 3 and difference.mean() <= 0.25, (difference.max(), difference.mean())
