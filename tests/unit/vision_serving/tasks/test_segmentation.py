"""The segmentation task: probabilities -> full-size PNG masks, coverage, IoU; any model input shape (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.tasks import segmentation


def config(height: int = 8, width: int = 8, mode: str = "threshold") -> model_config.ModelConfig:
    return model_config.parse_config_text(
        f"""name: "seg_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "PROBABILITIES" data_type: TYPE_FP32 dims: [ {height}, {width}, 1 ] }}, {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "MASK" data_type: TYPE_STRING dims: [ 1 ] }}, {{ name: "COVERAGE" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters [ {{ key: "task", value: {{ string_value: "segmentation" }} }}, {{ key: "mask_mode", value: {{ string_value: "{mode}" }} }},
             {{ key: "threshold", value: {{ string_value: "0.5" }} }} ]"""
    )


def post(height: int = 8, width: int = 8, mode: str = "threshold") -> segmentation.SegmentationPostprocessor:
    return segmentation.SegmentationPostprocessor(config(height, width, mode))


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
    mask, coverage = segmentation.full_size_mask(probabilities, 40, 80, segmentation.MaskSpec())
    assert mask[0, 39] == 0 and mask[0, 40] == 255 and coverage == 0.5


def test_threshold_and_probability_modes():
    probabilities = np.array([[0.2, 0.5], [0.7, 1.0]], dtype=np.float32)
    mask, coverage = segmentation.full_size_mask(probabilities, 2, 2, segmentation.MaskSpec("threshold", 0.5))
    assert mask.tolist() == [[0, 255], [255, 255]] and coverage == 0.75
    mask, coverage = segmentation.full_size_mask(probabilities, 2, 2, segmentation.MaskSpec("probability", 0.6))
    assert mask.tolist() == [[51, 128], [178, 255]] and coverage == 0.5


@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.7])
def test_threshold_mask_is_the_clipped_upsampled_map_thresholded(threshold):
    """The threshold mode skips the clip: the same pixels as clipping, then comparing, at any size."""
    probabilities = np.random.default_rng(1).normal(0.5, 0.4, (16, 16)).astype(np.float32)  # values outside [0, 1] too
    for height, width in ((16, 16), (97, 61), (300, 200)):
        mask, coverage = segmentation.full_size_mask(probabilities, height, width, segmentation.MaskSpec("threshold", threshold))
        expected = segmentation.upsample(probabilities, height, width) >= np.float32(threshold)
        assert np.array_equal(mask > 0, expected) and set(np.unique(mask).tolist()) <= {0, 255}
        assert coverage == pytest.approx(expected.mean())


def _png_bit_depth(data: bytes) -> int:
    assert data[12:16] == b"IHDR"
    return data[24]


def test_threshold_masks_are_1_bit_pngs_and_probability_masks_8_bit():
    probabilities = np.random.default_rng(2).random((8, 8, 1)).astype(np.float32)
    sizes = np.array([[120, 90]], np.int32)
    for mode, depth in (("threshold", 1), ("probability", 8)):
        processor = post(mode=mode)
        answer = processor.run(processor.parse({"PROBABILITIES": probabilities[None], "IMAGE_SIZE": sizes})).outputs()
        data = bytes(answer["MASK"][0, 0])
        assert _png_bit_depth(data) == depth
        expected, _ = segmentation.full_size_mask(probabilities, 120, 90, processor.spec)
        assert np.array_equal(segmentation.decode_png(data), expected)


@pytest.mark.parametrize(("height", "width"), [(8, 8), (9, 16)])  # square, and the landscape model's 144x256 shape
def test_masks_are_pngs_at_each_images_own_size(height, width):
    processor = post(height, width)
    probabilities = np.random.default_rng(0).random((2, height, width, 1)).astype(np.float32)
    result = processor.run(processor.parse({"PROBABILITIES": probabilities, "IMAGE_SIZE": np.array([[30, 50], [7, 3]], np.int32)}))
    first, second = result.split([1, 1])
    decoded = [segmentation.decode_png(bytes(answer["MASK"][0, 0])) for answer in (first, second)]
    assert [d.shape for d in decoded] == [(30, 50), (7, 3)] and bytes(first["MASK"][0, 0]).startswith(b"\x89PNG")
    for answer, image in zip((first, second), decoded):
        assert answer["COVERAGE"][0, 0] == pytest.approx((image == 255).mean())
    features = result.features()
    assert features.numeric["coverage"].tolist() == pytest.approx([first["COVERAGE"][0, 0], second["COVERAGE"][0, 0]])
    assert 0 <= features.numeric["confidence"].min() <= features.numeric["confidence"].max() <= 1


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
        post().run({"probabilities": np.zeros((2, 8, 8, 1), np.float32), "image_size": np.zeros((1, 2), np.int32)})
    with pytest.raises(ValueError, match="single-channel PNG mask"):
        segmentation.decode_png(b"not a png")


def test_iou_and_mean_iou():
    a = np.zeros((4, 4), dtype=np.uint8)
    b = np.zeros((4, 4), dtype=np.uint8)
    assert segmentation.iou(a, b) == 1.0  # both empty
    a[:2] = 255
    b[:1] = 255
    assert segmentation.iou(a, b) == pytest.approx(0.5)
    # Mean of the foreground IoU (0.5) and the background IoU (8/12).
    assert segmentation.mean_iou([a], [b]) == pytest.approx((0.5 + 8 / 12) / 2)
    with pytest.raises(ValueError, match="shapes differ"):
        segmentation.iou(a, np.zeros((2, 2)))


def test_gate_on_the_served_masks_and_on_a_served_response():
    processor = post()
    rng = np.random.default_rng(1)
    probabilities = rng.random((3, 8, 8, 1)).astype(np.float32)
    sizes = np.array([[16, 16], [20, 10], [8, 8]], np.int32)
    reference = processor.run({"probabilities": probabilities, "image_size": sizes})
    limits = segmentation.TASK.gate_defaults
    assert segmentation.TASK.gate(reference, reference, limits)["metrics"]["mean_iou"] == 1.0
    flipped = processor.run({"probabilities": 1 - probabilities, "image_size": sizes})
    assert not segmentation.TASK.gate(reference, flipped, limits)["checks"]["mean_iou"]["pass"]
    outputs = reference.outputs()
    response = segmentation.TASK.response_result(processor, {"mask": outputs["MASK"], "coverage": outputs["COVERAGE"]})
    assert segmentation.TASK.gate(reference, response, limits)["metrics"]["mean_iou"] == 1.0


def test_dataset_pairs_and_their_iou(tmp_path):
    import cv2

    (tmp_path / "a.png").write_bytes(b"x")
    mask = np.zeros((16, 16), np.uint8)
    mask[:, 8:] = 255
    cv2.imwrite(str(tmp_path / "a.mask.png"), mask)
    samples = segmentation.TASK.dataset(tmp_path, post())
    assert [s.path.name for s in samples] == ["a.png"] and samples[0].target.sum() == 128
    probabilities = np.zeros((1, 8, 8, 1), np.float32)
    probabilities[:, :, 4:] = 1.0
    result = post().run({"probabilities": probabilities, "image_size": np.array([[16, 16]], np.int32)})
    metrics = segmentation.TASK.dataset_metrics([(result, samples)])
    assert metrics["mean_iou"] > 0.8 and metrics["foreground_iou"] > 0.8
    (tmp_path / "b.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"no mask b\.mask\.png beside it"):
        segmentation.TASK.dataset(tmp_path, post())


@pytest.mark.parametrize("mode", ["threshold", "probability"])
def test_a_one_pixel_photo_gets_a_one_pixel_mask(mode):
    """A 1x1 photo is accepted (docs/pipelines.md): its mask is one pixel (OpenCV's compare cannot take it)."""
    for value, expected in ((0.7, 255 if mode == "threshold" else 178), (0.2, 0 if mode == "threshold" else 51)):
        mask, coverage = segmentation.full_size_mask(np.full((4, 4), value, np.float32), 1, 1, segmentation.MaskSpec(mode, 0.5))
        assert mask.tolist() == [[expected]] and mask.dtype == np.uint8 and coverage == (1.0 if value > 0.5 else 0.0)
