"""The semantic segmentation task: a letterboxed class map -> the photo's size as Ultralytics cuts and resizes it, the
classes with their shares, the gate and the dataset metrics (no server)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.tasks import registry, semantic_segmentation

NAMES = ("floor", "wall", "sky")


def config(dims: str = "8, 12") -> model_config.ModelConfig:
    return model_config.parse_config_text(
        f"""name: "s_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "CLASSES" data_type: TYPE_UINT8 dims: [ {dims} ] }}, {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "CLASS_MAP" data_type: TYPE_STRING dims: [ 1 ] }}, {{ name: "CLASS_IDS" data_type: TYPE_INT32 dims: [ -1 ] }},
         {{ name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] }}, {{ name: "SHARES" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters [ {{ key: "task", value: {{ string_value: "semantic_segmentation" }} }}, {{ key: "labels_file", value: {{ string_value: "labels.txt" }} }} ]"""
    )


@pytest.fixture
def post(tmp_path) -> semantic_segmentation.SemanticPostprocessor:
    (tmp_path / "labels.txt").write_text("\n".join(NAMES) + "\n")
    return semantic_segmentation.TASK.postprocessor(config(), tmp_path)


def scale_masks_rule(source: np.ndarray, height: int, width: int) -> np.ndarray:
    """Ultralytics' scale_masks (ratio_pad None, padding True) and torch's nearest interpolate, written out in Python."""
    im1_h, im1_w = source.shape
    if (im1_h, im1_w) == (height, width):
        return source
    gain = min(im1_h / height, im1_w / width)
    pad_w, pad_h = (im1_w - max(round(width * gain), 1)) / 2, (im1_h - max(round(height * gain), 1)) / 2
    top, left = round(pad_h - 0.1), round(pad_w - 0.1)
    cut = source[top : top + max(round(height * gain), 1), left : left + max(round(width * gain), 1)]
    scale_y, scale_x = np.float32(cut.shape[0]) / np.float32(height), np.float32(cut.shape[1]) / np.float32(width)
    rows = [min(math.floor(np.float32(i) * scale_y), cut.shape[0] - 1) for i in range(height)]
    columns = [min(math.floor(np.float32(j) * scale_x), cut.shape[1] - 1) for j in range(width)]
    return cut[np.ix_(rows, columns)]


def test_the_task_is_registered():
    assert registry.task("semantic_segmentation") is semantic_segmentation.TASK


@pytest.mark.parametrize("size", [(8, 12), (30, 40), (7, 31), (100, 13), (1, 1), (3, 5), (45, 67)])
def test_full_size_cuts_the_padding_and_picks_the_nearest_as_ultralytics(size):
    source = np.random.default_rng(sum(size)).integers(0, 4, (8, 12)).astype(np.uint8)
    got = semantic_segmentation.full_size(source[None], *size)
    assert got.shape == size and got.dtype == np.uint8
    assert np.array_equal(got, scale_masks_rule(source, *size))


def test_the_letterbox_content_of_a_wide_and_a_tall_photo():
    assert semantic_segmentation.content(128, 128, 100, 200) == (32, 96, 0, 128)  # a wide photo: padded above and below
    assert semantic_segmentation.content(128, 192, 300, 100) == (0, 128, 74, 117)  # a tall one: padded left and right


def test_shares_list_the_classes_present_largest_first():
    classes = np.array([[2, 2, 2], [0, 1, 1]], np.uint8)
    ids, shares = semantic_segmentation.shares(classes)
    assert ids.tolist() == [2, 1, 0] and shares.tolist() == pytest.approx([0.5, 1 / 3, 1 / 6])


def test_outputs_pad_each_photos_classes_to_the_longest(post):
    maps = np.zeros((2, 8, 12), np.uint8)
    maps[0, :, 6:] = 1
    maps[0, 0, 0] = 2
    outputs = post.run(post.parse({"CLASSES": maps, "IMAGE_SIZE": np.array([[8, 12], [16, 24]], np.int32)})).outputs()
    assert outputs["COUNT"].reshape(-1).tolist() == [3, 1]
    assert outputs["CLASS_IDS"].tolist() == [[1, 0, 2], [0, -1, -1]]  # 48, 47 and 1 of the first photo's 96 pixels
    assert outputs["LABELS"].tolist() == [[b"wall", b"floor", b"sky"], [b"floor", b"", b""]]
    assert outputs["SHARES"][1].tolist() == [1.0, 0.0, 0.0]
    assert semantic_segmentation.decode_png(bytes(outputs["CLASS_MAP"][1, 0])).shape == (16, 24)


def test_an_id_past_the_labels_is_named_by_its_number(post):
    outputs = post.run(post.parse({"CLASSES": np.full((1, 8, 12), 7, np.uint8), "IMAGE_SIZE": np.array([[8, 12]], np.int32)})).outputs()
    assert outputs["LABELS"].tolist() == [[b"7"]]


def test_gate_passes_the_same_maps_and_fails_shifted_ones(post):
    maps = np.random.default_rng(1).integers(0, 3, (2, 8, 12)).astype(np.uint8)
    sizes = np.array([[16, 24], [8, 12]], np.int32)
    reference = semantic_segmentation.SemanticResult(post, maps, sizes)
    same = semantic_segmentation.TASK.gate(
        reference, semantic_segmentation.SemanticResult(post, maps.copy(), sizes), semantic_segmentation.TASK.gate_defaults
    )
    assert same["metrics"]["pixel_agreement"] == 1.0 and all(check["pass"] for check in same["checks"].values())
    moved = semantic_segmentation.SemanticResult(post, np.roll(maps, 1, axis=2), sizes)
    worse = semantic_segmentation.TASK.gate(reference, moved, semantic_segmentation.TASK.gate_defaults)
    assert not worse["checks"]["pixel_agreement"]["pass"] and not worse["checks"]["mean_iou"]["pass"]


def test_a_served_answer_reads_back_as_its_maps(post):
    maps = np.random.default_rng(2).integers(0, 3, (2, 8, 12)).astype(np.uint8)
    served = semantic_segmentation.SemanticResult(post, maps, np.array([[9, 7], [20, 30]], np.int32))
    outputs = served.outputs()
    by_role = {role: outputs[name] for role, name in post.outputs.items() if name is not None}
    read = semantic_segmentation.TASK.response_result(post, by_role)
    assert all(np.array_equal(a, b) for a, b in zip(read.maps(), served.maps()))


def test_dataset_metrics_skip_the_ignore_label(post, tmp_path):
    truth = np.array([[0, 1], [1, 255]], np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((2, 2, 3), np.uint8))
    cv2.imwrite(str(tmp_path / f"a{semantic_segmentation.CLASSES_SUFFIX}"), truth)
    samples = semantic_segmentation.TASK.dataset(tmp_path, post)
    guess = semantic_segmentation.SemanticResult(post, None, np.array([[2, 2]]), maps=[np.array([[0, 1], [0, 2]], np.uint8)])
    metrics = semantic_segmentation.TASK.dataset_metrics([(guess, samples)])
    assert metrics["pixel_accuracy"] == pytest.approx(2 / 3)
    assert metrics["mean_iou"] == pytest.approx((1 / 2 + 1 / 2) / 2)  # class 0: 1 of 2; class 1: 1 of 2
    cv2.imwrite(str(tmp_path / "b.jpg"), np.zeros((2, 2, 3), np.uint8))
    with pytest.raises(ValueError, match=r"b\.jpg: no class map b\.classes\.png beside it"):
        semantic_segmentation.TASK.dataset(tmp_path, post)


def test_drift_features(post):
    maps = np.zeros((1, 8, 12), np.uint8)
    maps[0, :2] = 1
    features = semantic_segmentation.SemanticResult(post, maps, np.array([[8, 12]])).features()
    assert features.numeric["class_count"].tolist() == [2.0] and features.numeric["dominant_share"].tolist() == [0.75]
    assert features.categorical["dominant_class"] == ["floor"]


def test_config_problems_are_named(tmp_path):
    (tmp_path / "labels.txt").write_text("a\nb\n")
    with pytest.raises(model_config.ConfigError, match="not one map per image"):
        semantic_segmentation.SemanticPostprocessor(config("2, 8, 12"), tmp_path)
    with pytest.raises(FileNotFoundError, match="label file"):
        semantic_segmentation.SemanticPostprocessor(config(), tmp_path / "missing")
