"""Pillow's filters in the served preprocessing (``interpolation: pil_bilinear``): torchvision's ``Resize`` and
``CenterCrop`` on a PIL image, as Ultralytics' classify predictor runs them (its parity with the predictor itself:
tests/onnx/builders/test_families_yolo_classify.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from vision_serving import model_config, preprocessing

SPEC = preprocessing.PreprocessSpec(
    height=64,
    width=64,
    resize_shorter_side=64,
    interpolation="pil_bilinear",
    mean=(0.0, 0.0, 0.0),
    std=(255.0, 255.0, 255.0),
    pixel_dtype="uint8",
    decode_oversampling=0,
)


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients under noise: every resize moves its pixels."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def torchvision_resize_center_crop(image: np.ndarray, shorter: int, height: int, width: int) -> np.ndarray:
    """``T.Resize(shorter)`` + ``T.CenterCrop((height, width))`` on a PIL image, as torchvision computes them: the
    shorter side to ``shorter``, the longer ``int(shorter * long / short)`` (unchanged when already that size), Pillow's
    bilinear; the crop's origin ``int(round((size - crop) / 2.0))`` (Python's round)."""
    h, w = image.shape[:2]
    new_w, new_h = (shorter, int(shorter * h / w)) if w <= h else (int(shorter * w / h), shorter)
    pil = Image.fromarray(image)
    if (new_w, new_h) != (w, h):
        pil = pil.resize((new_w, new_h), Image.BILINEAR)
    top, left = round((new_h - height) / 2.0), round((new_w - width) / 2.0)
    return np.asarray(pil)[top : top + height, left : left + width]


@pytest.mark.parametrize("size", [(300, 451), (451, 300), (97, 64), (64, 64), (40, 50), (1000, 1000), (130, 257)])
@pytest.mark.parametrize("shorter", [64, 73])
def test_pil_bilinear_center_crop_is_torchvision_resize_and_center_crop(size, shorter):
    spec = dataclasses.replace(SPEC, resize_shorter_side=shorter)
    image = photo(*size)
    expected = torchvision_resize_center_crop(image, shorter, spec.height, spec.width)
    np.testing.assert_array_equal(preprocessing.resize_and_crop(image, spec), expected)
    out = np.zeros((spec.height, spec.width, 3), np.uint8)
    assert preprocessing.resize_and_crop(image, spec, out=out) is out
    np.testing.assert_array_equal(out, expected)


def test_an_elongated_photo_resamples_only_the_crop():
    """Past MAX_RESIZE_AREA_RATIO, Pillow resamples the crop's region alone (its box): the same filter on the same
    points as the whole resize, up to the float rounding of the box's corners."""
    image = photo(40, 1000, seed=1)  # 64 x 1600 resized: 25 crops' area
    expected = torchvision_resize_center_crop(image, 64, 64, 64)
    got = preprocessing.resize_and_crop(image, SPEC)
    difference = np.abs(got.astype(int) - expected)
    assert difference.max() <= 1 and np.mean(difference == 0) > 0.99


def test_pil_bilinear_is_antialiased_where_opencv_bilinear_aliases():
    """A 1-pixel checkerboard shrunk 3x: Pillow's filter widens with the scale (grey), OpenCV's bilinear samples it."""
    checkerboard = (np.indices((192, 192)).sum(axis=0) % 2 * 255).astype(np.uint8)
    image = np.repeat(checkerboard[..., None], 3, axis=2)
    pil = preprocessing.resize_and_crop(image, SPEC)
    opencv = preprocessing.resize_and_crop(image, dataclasses.replace(SPEC, interpolation="bilinear"))
    assert np.abs(pil.astype(int) - 127).max() <= 2
    assert np.abs(opencv.astype(int) - 127).max() > 100


def test_pil_stretch_is_the_whole_photo_resized():
    """``T.Resize((H, W))`` (a non-square model): the whole photo onto the tensor; its transform is the stretch's."""
    spec = dataclasses.replace(SPEC, resize="stretch", height=48, width=80, resize_shorter_side=0)
    image = photo(300, 451)
    expected = np.asarray(Image.fromarray(image).resize((80, 48), Image.BILINEAR))
    np.testing.assert_array_equal(preprocessing.resize_and_crop(image, spec), expected)
    transforms = preprocessing.tensor_transforms(np.array([[300, 451]]), spec)
    np.testing.assert_allclose(transforms, [[80 / 451, 48 / 300, 0, 0]], rtol=1e-6)


def test_a_batch_hands_over_the_pillow_pixels():
    images = [photo(300, 451), photo(120, 90, seed=2)]
    batch = preprocessing.preprocess_batch(images, SPEC)
    assert batch.dtype == np.uint8 and batch.shape == (2, 3, 64, 64)
    np.testing.assert_array_equal(batch[1], torchvision_resize_center_crop(images[1], 64, 64, 64).transpose(2, 0, 1))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"resize": "letterbox"}, "interpolation 'pil_bilinear' (Pillow's) applies to resize center_crop or stretch, not 'letterbox'"),
        ({"resize": "yolo_letterbox"}, "applies to resize center_crop or stretch, not 'yolo_letterbox'"),
        ({"resize_reducing_gap": 2.0}, "resize_reducing_gap does not apply to interpolation 'pil_bilinear'"),
        ({"interpolation": "pil_lanczos"}, "interpolation 'pil_lanczos' is not one of ['bicubic', 'bilinear', 'nearest', 'pil_bilinear']"),
    ],
)
def test_pillow_filters_are_refused_where_they_do_not_apply(change, message):
    with pytest.raises(model_config.ConfigError) as raised:
        dataclasses.replace(SPEC, **change)
    assert message in str(raised.value)
