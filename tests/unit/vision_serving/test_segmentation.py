"""vision_serving.segmentation: probabilities -> full-size PNG masks, coverage, IoU."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving import segmentation


def test_upsample_before_threshold_gives_smooth_edges_at_full_size():
    probabilities = np.zeros((4, 4, 1), dtype=np.float32)
    probabilities[:, 2:] = 1.0
    full = segmentation.upsample(probabilities, 40, 80)
    assert full.shape == (40, 80)
    assert full.min() == 0.0 and full.max() == 1.0
    # Upsampled first, the 0 -> 1 step is a ramp (one source pixel wide) whose 0.5 crossing is the
    # edge: thresholded, the mask's edge falls exactly halfway, at column 40 of 80.
    ramp = np.count_nonzero((full[0] > 0.01) & (full[0] < 0.99))
    assert 10 < ramp <= 20
    mask, coverage = segmentation.mask_from_probabilities(full, segmentation.MaskSpec())
    assert mask[0, 39] == 0 and mask[0, 40] == 255 and coverage == 0.5


def test_threshold_and_probability_modes():
    probabilities = np.array([[0.2, 0.5], [0.7, 1.0]], dtype=np.float32)
    mask, coverage = segmentation.mask_from_probabilities(probabilities, segmentation.MaskSpec("threshold", 0.5))
    assert mask.tolist() == [[0, 255], [255, 255]] and coverage == 0.75
    mask, coverage = segmentation.mask_from_probabilities(probabilities, segmentation.MaskSpec("probability", 0.6))
    assert mask.tolist() == [[51, 128], [178, 255]] and coverage == 0.5


def test_masks_are_pngs_at_each_images_own_size():
    probabilities = np.random.default_rng(0).random((2, 8, 8, 1)).astype(np.float32)
    masks = segmentation.masks(probabilities, np.array([[30, 50], [7, 3]], dtype=np.int32), segmentation.MaskSpec())
    decoded = [segmentation.decode_png(m.png) for m in masks]
    assert [d.shape for d in decoded] == [(30, 50), (7, 3)]
    assert masks[0].png.startswith(b"\x89PNG")
    for mask, image in zip(masks, decoded):
        assert mask.coverage == pytest.approx((image == 255).mean())


@pytest.mark.parametrize(
    ("spec", "message"),
    [(("blur", 0.5), "mask mode"), (("threshold", 0.0), "threshold"), (("threshold", 1.5), "threshold")],
)
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        segmentation.MaskSpec(*spec)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one probability map"):
        segmentation.upsample(np.zeros((2, 4, 4, 1), dtype=np.float32), 4, 4)
    with pytest.raises(ValueError, match="positive"):
        segmentation.upsample(np.zeros((4, 4), dtype=np.float32), 0, 4)
    with pytest.raises(ValueError, match="image sizes"):
        segmentation.masks(np.zeros((2, 4, 4), dtype=np.float32), np.zeros((1, 2), dtype=np.int32), segmentation.MaskSpec())
    with pytest.raises(ValueError, match="8-bit single-channel"):
        segmentation.decode_png(b"not a png")


def test_iou_and_mean_iou():
    a = np.zeros((4, 4), dtype=np.uint8)
    b = np.zeros((4, 4), dtype=np.uint8)
    assert segmentation.iou(a, b) == 1.0  # both empty
    a[:2] = 255
    b[:1] = 255
    assert segmentation.iou(a, b) == pytest.approx(0.5)
    # Mean of the person IoU (0.5) and the background IoU (8/12).
    assert segmentation.mean_iou([a], [b]) == pytest.approx((0.5 + 8 / 12) / 2)
    with pytest.raises(ValueError, match="shapes differ"):
        segmentation.iou(a, np.zeros((2, 2)))
