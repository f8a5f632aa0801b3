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

from vision_serving import image_codec, image_to_tensor, layout, model_config, preprocessing
from vision_serving.image_codec import decode_rgb

PNG_PHOTOS = ["chelsea", "coffee", "camera", "astronaut"]
# In normalized units (one uint8 level is 1/128 here).
MAX_ABS_TOLERANCE = 3 / 128
MEAN_ABS_TOLERANCE = 0.25 / 128


@pytest.fixture(scope="module")
def preprocess_config():
    return model_config.load_config(layout.pipeline("image_classifier").model_dir("preprocess"))


@pytest.fixture(scope="module")
def served_spec(preprocess_config):
    return preprocessing.PreprocessSpec.from_config(preprocess_config)


@pytest.fixture(scope="module")
def spec(served_spec):
    """The classifier's spec, normalized here (float32): what its core computes first from the uint8 pixels it is handed
    (test_uint8_pixels_are_normalized_as_the_float_path checks that the two are the same)."""
    return dataclasses.replace(served_spec, pixel_dtype="float32")


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
    top, left = round((new_h - spec.height) / 2), round((new_w - spec.width) / 2)
    crop = resized[top : top + spec.height, left : left + spec.width]
    normalized = (crop - np.array(spec.mean)) / np.array(spec.std)
    return normalized.transpose(2, 0, 1).astype(np.float32)


def test_uint8_pixels_are_normalized_as_the_float_path(served_spec, spec, photo_bytes, preprocess_config):
    """PIXELS TYPE_UINT8: the preprocess hands the resized pixels in the model's layout; normalize_pixels (what the
    builders fold into the core's graph, and check it against) gives exactly the float path's tensor."""
    assert served_spec.pixel_dtype == "uint8" and spec.pixel_dtype == "float32"
    images = [decode_rgb(photo_bytes[name], preprocessing.limits_from_config(preprocess_config)) for name in PNG_PHOTOS]
    pixels = preprocessing.preprocess_batch(images, served_spec)
    assert pixels.dtype == np.uint8 and pixels.shape == (len(images), *served_spec.output_shape)
    np.testing.assert_array_equal(preprocessing.normalize_pixels(pixels, served_spec), preprocessing.preprocess_batch(images, spec))
    bgr_nhwc = dataclasses.replace(served_spec, layout="NHWC", color_order="BGR")
    swapped = preprocessing.preprocess_batch(images, bgr_nhwc)
    np.testing.assert_array_equal(swapped, pixels.transpose(0, 2, 3, 1)[..., ::-1])
    float_nhwc = dataclasses.replace(bgr_nhwc, pixel_dtype="float32")
    np.testing.assert_array_equal(preprocessing.normalize_pixels(swapped, bgr_nhwc), preprocessing.preprocess_batch(images, float_nhwc))


def test_spec_is_read_from_the_config(spec):
    assert spec.resize == "center_crop"
    assert (spec.height, spec.width) == (224, 224) and spec.resize_shorter_side == 256 and spec.scale == 1.0
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
    assert spec.resize == "stretch" and (spec.height, spec.width) == (256, 256)
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
    half = stretch.width // 2
    np.testing.assert_allclose(out[:, :-1, :half], (0 - 127) / 128, atol=1e-6)
    np.testing.assert_allclose(out[:, :-1, half:-1], (255 - 127) / 128, atol=1e-6)
    assert preprocessing.resize_and_crop(image, stretch).shape == (stretch.height, stretch.width, 3)


def test_original_sizes_are_height_then_width_of_the_photo_not_the_decode():
    decoded = [image_codec.Decoded(np.zeros((10, 20, 3), dtype=np.uint8), 40, 80), image_codec.Decoded(np.zeros((7, 3, 3), np.uint8), 7, 3)]
    sizes = preprocessing.original_sizes(decoded)
    assert sizes.dtype == np.int32 and sizes.tolist() == [[40, 80], [7, 3]]


@pytest.fixture(scope="module")
def letterbox_spec():
    """The face detector's spec, normalized here (its core normalizes the uint8 pixels it is handed the same way)."""
    config = model_config.load_config(layout.pipeline("face_detector").model_dir("preprocess"))
    return dataclasses.replace(preprocessing.PreprocessSpec.from_config(config), pixel_dtype="float32")


def test_letterbox_spec_is_read_from_the_detector_config(letterbox_spec):
    assert letterbox_spec.resize == "letterbox" and (letterbox_spec.height, letterbox_spec.width) == (128, 128)
    assert letterbox_spec.interpolation == "bilinear" and letterbox_spec.layout == "NHWC" and letterbox_spec.color_order == "RGB"
    assert letterbox_spec.mean == (127.5, 127.5, 127.5) and letterbox_spec.std == (127.5, 127.5, 127.5)


def test_letterbox_keeps_the_aspect_ratio_with_zero_bars(spec):
    """A 2:1 white image fills the middle half of the rows; the bars are zero pixels (-1 in [-1, 1])."""
    letterbox = preprocessing.PreprocessSpec(
        **{**spec.__dict__, "resize": "letterbox", "resize_reducing_gap": 0.0, "layout": "NHWC", "mean": (127.5,) * 3, "std": (127.5,) * 3}
    )
    out = preprocessing.preprocess_batch([np.full((100, 200, 3), 255, dtype=np.uint8)], letterbox)[0]
    size = letterbox.height
    quarter = size // 4
    assert np.all(out[: quarter - 1] == -1.0) and np.all(out[-quarter + 1 :] == -1.0)
    np.testing.assert_allclose(out[quarter + 1 : -quarter - 1, :-1], 1.0, atol=1e-6)


@pytest.mark.parametrize("name", ["astronaut", "grace_hopper", "coffee", "camera"])
def test_letterbox_is_mediapipes_imagetotensor_warp(name, photo_bytes, letterbox_spec, preprocess_config):
    """The served letterbox is MediaPipe's ImageToTensorCalculator: its padded region warped onto the
    tensor; only the [-1, 1] scaling rounds differently: (x - 127.5) / 127.5 in float32 against
    MediaPipe's fused cv::Mat::convertTo(x * (2/255) - 1), at most one ulp."""
    limits = preprocessing.limits_from_config(preprocess_config)
    image = decode_rgb(photo_bytes[name], limits)
    size = letterbox_spec.height
    served_pixels = preprocessing.resize_and_crop(image, letterbox_spec)
    roi = image_to_tensor.letterbox_roi(image.shape[0], image.shape[1], size, size)
    warped = image_to_tensor.warp_roi(image, roi, size, size)
    np.testing.assert_array_equal(served_pixels, warped)
    served = preprocessing.preprocess_batch([image], letterbox_spec)[0]
    expected = (warped * np.float64(np.float32(2 / 255)) + np.float64(-1.0)).astype(np.float32)
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


# --------------------------------------------------------------------------- any input shape, Ultralytics' letterbox, transforms


def reference_yolo_letterbox(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Ultralytics' LetterBox (ultralytics/data/augment.py: center, scaleup, no auto), transcribed."""
    shape = image.shape[:2]
    r = min(height / shape[0], width / shape[1])
    new_unpad = max(round(shape[1] * r), 1), max(round(shape[0] * r), 1)
    dw, dh = (width - new_unpad[0]) / 2, (height - new_unpad[1]) / 2
    if shape[::-1] != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    return cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))


def yolo_spec(height: int, width: int) -> preprocessing.PreprocessSpec:
    return preprocessing.PreprocessSpec(
        height=height, width=width, resize_shorter_side=0, interpolation="bilinear", mean=(0.0,) * 3, std=(255.0,) * 3,
        resize="yolo_letterbox",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "target"), [((499, 816), (320, 320)), ((480, 640), (384, 640)), ((97, 33), (128, 96)), ((128, 128), (128, 128))]
)
def test_yolo_letterbox_is_ultralytics_letterbox(shape, target):
    image = np.random.default_rng(4).integers(0, 256, (*shape, 3), dtype=np.uint8)
    spec = yolo_spec(*target)
    np.testing.assert_array_equal(preprocessing.resize_and_crop(image, spec), reference_yolo_letterbox(image, *target))
    np.testing.assert_array_equal(
        preprocessing.preprocess_batch([image], spec)[0],
        (reference_yolo_letterbox(image, *target) / 255.0).astype(np.float32).transpose(2, 0, 1),
    )


@pytest.mark.parametrize(("shape", "target"), [((499, 816), (320, 320)), ((97, 33), (128, 96)), ((128, 96), (128, 96))])
def test_yolo_stretch_is_ultralytics_scale_fill_letterbox(shape, target):
    """LetterBox(scale_fill=True): cv2.resize of the whole image to W x H (linear), no padding; a photo of the tensor's
    size as it is. The transform maps the photo's edges onto the tensor's, per axis."""
    image = np.random.default_rng(7).integers(0, 256, (*shape, 3), dtype=np.uint8)
    spec = dataclasses.replace(yolo_spec(*target), resize="yolo_stretch")
    expected = image if shape == target else cv2.resize(image, (target[1], target[0]), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(preprocessing.resize_and_crop(image, spec), expected)
    transform = preprocessing.tensor_transforms(np.array([shape], np.int32), spec)[0]
    assert _through(transform, 0, 0) == (0.0, 0.0) and _through(transform, shape[1], shape[0]) == pytest.approx((target[1], target[0]))
    assert preprocessing.decode_minimum(spec) == preprocessing.MinimumSize(width=2 * target[1], height=2 * target[0])


def test_scale_multiplies_before_mean_and_std():
    image = np.random.default_rng(5).integers(0, 256, (50, 60, 3), dtype=np.uint8)
    spec = dataclasses.replace(yolo_spec(32, 32), scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), resize="stretch")
    crop = preprocessing.resize_and_crop(image, spec).astype(np.float64)
    expected = ((crop / 255 - np.array(spec.mean)) / np.array(spec.std)).transpose(2, 0, 1)
    np.testing.assert_allclose(preprocessing.preprocess_batch([image], spec)[0], expected, atol=1e-5)
    with pytest.raises(model_config.ConfigError, match="scale must be a positive number"):
        dataclasses.replace(spec, scale=0.0)


@pytest.mark.parametrize("mode", ["stretch", "letterbox", "yolo_letterbox", "yolo_stretch"])
def test_non_square_inputs_for_every_whole_image_mode(mode):
    image = np.zeros((300, 200, 3), dtype=np.uint8)
    spec = dataclasses.replace(yolo_spec(144, 256), resize=mode)
    assert preprocessing.preprocess_batch([image, image[:100]], spec).shape == (2, 3, 144, 256)
    nhwc = dataclasses.replace(spec, layout="NHWC")
    assert nhwc.output_shape == (144, 256, 3)


def test_a_non_square_center_crop():
    spec = preprocessing.PreprocessSpec(224, 160, 256, "bilinear", (0.0,) * 3, (1.0,) * 3)
    image = np.random.default_rng(6).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    crop = preprocessing.resize_and_crop(image, spec)
    resized = cv2.resize(image, (341, 256), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(crop, resized[16:240, 90:250])


def _through(transform: np.ndarray, x: float, y: float) -> tuple[float, float]:
    return float(x * transform[0] + transform[2]), float(y * transform[1] + transform[3])


def test_tensor_transforms_map_the_photo_onto_the_model_input():
    sizes = np.array([[480, 640], [200, 100]], np.int32)
    yolo = preprocessing.tensor_transforms(sizes, yolo_spec(320, 320))
    # 640 x 480 -> 320 x 240, 40 rows of padding on top: corner (0, 0) -> (0, 40), (640, 480) -> (320, 280)
    assert _through(yolo[0], 0, 0) == (0.0, 40.0) and _through(yolo[0], 640, 480) == pytest.approx((320.0, 280.0))
    mediapipe = preprocessing.tensor_transforms(sizes, dataclasses.replace(yolo_spec(128, 128), resize="letterbox"))
    # MediaPipe's region is the image padded to a square, centred: 640 x 640 with 80 rows above
    assert _through(mediapipe[0], 0, 0) == pytest.approx((0.0, 16.0)) and _through(mediapipe[0], 640, 480) == pytest.approx((128.0, 112.0))
    stretch = preprocessing.tensor_transforms(sizes, dataclasses.replace(yolo_spec(144, 256), resize="stretch"))
    assert _through(stretch[1], 100, 200) == pytest.approx((256.0, 144.0))
    crop = preprocessing.tensor_transforms(sizes[:1], preprocessing.PreprocessSpec(224, 224, 256, "bilinear", (0.0,) * 3, (1.0,) * 3))
    # 640 x 480 -> 341 x 256, crop origin (58, 16): the photo's centre maps to the crop's centre
    assert _through(crop[0], 320, 240) == pytest.approx((112.5, 112.0), abs=0.5)


def test_the_transform_output_is_found_by_role():
    config = model_config.load_config(layout.pipeline("face_detector").model_dir("preprocess"))
    outputs = preprocessing.PreprocessOutputs.from_config(config)
    assert (outputs.pixels, outputs.image_size, outputs.transform) == ("PIXELS", "IMAGE_SIZE", "IMAGE_TRANSFORM")
    classifier = preprocessing.PreprocessOutputs.from_config(
        model_config.load_config(layout.pipeline("image_classifier").model_dir("preprocess"))
    )
    assert (classifier.image_size, classifier.transform) == (None, None)
