"""The ``yolo_segment`` head on hand-made tensors: its interpolation is torch's (and OpenCV's) bilinear, its geometry
Ultralytics' ``process_mask_native``, each kept box carries its own mask coefficients, and the masks come back as
PNGs of the pixels their boxes keep, in the photo's pixels, through the postprocess ``new-pipeline`` writes.
(Parity with Ultralytics' predictor on a trained model: tests/onnx/builders/test_yolo_segment.py.)"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from builders.families import yolo as yolo_family
from vision_serving import model_config
from vision_serving.tasks import detection
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads.base import NmsSettings, TensorDetections
from vision_serving.tasks.detection_heads.yolo_segment import PhotoMasks, YoloSegmentHead, crop_box, interpolation, native_crop
from vision_serving.tasks.segmentation import decode_png

LABELS = ("disc", "square")


def settings(images: int) -> NmsSettings:
    return NmsSettings(np.full(images, 0.25, np.float32), np.full(images, 0.7, np.float32), 300)


def block_protos(size: int = 8, low: int = 2, high: int = 6) -> np.ndarray:
    """One prototype ``[1, size, size]``: +1 on the block ``[low, high)`` of rows and columns, -1 elsewhere."""
    protos = -np.ones((1, size, size), np.float32)
    protos[0, low:high, low:high] = 1
    return protos


def test_interpolation_is_torch_and_opencv_bilinear():
    """Half-pixel centres, clamped at the edges: 2 -> 4 reads 0, 0.25, 0.75 and 1 (in source pixels)."""
    np.testing.assert_allclose(interpolation(2, 4), np.array([[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]]))
    np.testing.assert_allclose(interpolation(4, 2), [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    rng = np.random.default_rng(0)
    for source, target in [(8, 32), (29, 77), (32, 13), (5, 5), (40, 41)]:
        values = rng.normal(size=(source, 3))
        expected = cv2.resize(values.T.copy(), (target, 3), interpolation=cv2.INTER_LINEAR).T
        np.testing.assert_allclose(interpolation(source, target) @ values, expected, atol=1e-6)
    assert np.allclose(interpolation(7, 19).sum(axis=1), 1)


@pytest.mark.parametrize(
    "protos, photo, expected",
    [
        ((32, 32), (32, 32), (1, (0, 32, 0, 32))),  # the photo is the prototypes' size: kept as they are
        ((32, 32), (128, 128), (1, (0, 32, 0, 32))),  # no padding: no upsampling
        ((32, 32), (480, 640), (1, (4, 28, 0, 32))),  # 4 rows of padding each side: whole prototype rows
        ((32, 32), (100, 150), (4, (21, 106, 0, 128))),  # 43 padded rows: upsampled 4 times, 21 cut above
        ((40, 32), (333, 101), (4, (0, 160, 39, 88))),
        ((16, 16), (63, 64), (4, (0, 63, 0, 64))),  # one padded row (at the bottom)
    ],
)
def test_the_geometry_is_ultralytics_process_mask_native(protos, photo, expected):
    assert native_crop(*protos, *photo) == expected


def test_a_box_keeps_the_pixels_from_its_start_to_before_its_end():
    assert crop_box([10.0, 5.2, 20.5, 9.0], 30, 40) == (10, 6, 21, 9)
    assert crop_box([-3.0, -0.5, 45.0, 31.0], 30, 40) == (0, 0, 40, 30)  # within the photo
    assert crop_box([12.0, 4.0, 12.0, 4.5], 30, 40) == (12, 4, 12, 5)  # no column: an empty crop


def test_a_block_prototype_gives_its_block_in_the_photo():
    """8x8 prototypes of a 32x32 input: the +1 block of prototype rows and columns 2..5 crosses 0 half-way to its
    neighbours, which a 4 times bilinear upsampling puts between pixels 7 and 8, and 23 and 24; at its corners three
    neighbours of -1 outweigh it (-0.22)."""
    photo = PhotoMasks(block_protos(), 32, 32)
    whole = photo.mask(np.array([1.0], np.float32), (0, 0, 32, 32))
    expected = np.zeros((32, 32), bool)
    expected[8:24, 8:24] = True
    expected[[8, 8, 23, 23], [8, 23, 8, 23]] = False
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(photo.mask(np.array([1.0], np.float32), (11, 0, 32, 20)), expected[0:20, 11:32])
    np.testing.assert_array_equal(photo.mask(np.array([-2.0], np.float32), (0, 0, 32, 32)), ~expected)
    # A landscape 16x32 photo letterboxed into the 32x32 input: prototype rows 2..5 are the photo, all inside the block.
    wide = PhotoMasks(block_protos(), 16, 32).mask(np.array([1.0], np.float32), (0, 0, 32, 16))
    assert wide.shape == (16, 32) and wide[:, 8:24].all() and not wide[:, :8].any() and not wide[:, 24:].any()


def raw_outputs() -> dict[str, np.ndarray]:
    """One image of 2 classes and 2 prototypes (8x8 for a 32x32 input) and 6 anchors: anchor 1 (score 0.9, class 0,
    the block prototype) and anchor 4 (0.8, class 1, the prototype of ones); anchor 2 (0.6, class 0) on anchor 1,
    suppressed; the others below 0.25."""
    raw = np.zeros((1, 4 + 2 + 2, 6), np.float32)
    raw[0, :4, 1] = [16, 16, 24, 24]
    raw[0, :4, 2] = [16.5, 16, 24, 24]
    raw[0, :4, 4] = [6, 18, 8, 8]
    raw[0, 4, [1, 2]] = [0.9, 0.6]
    raw[0, 5, 4] = 0.8
    raw[0, 6:, 1] = [1.0, 0.0]  # the block
    raw[0, 6:, 2] = [0.5, 0.5]
    raw[0, 6:, 4] = [0.0, 1.0]  # everywhere
    protos = np.concatenate([block_protos(), np.ones((1, 8, 8), np.float32)])[None]
    return {"predictions": raw, "protos": protos}


def test_each_kept_box_carries_its_own_coefficients():
    found = YoloSegmentHead({}).detect(raw_outputs(), settings(1))
    assert found.counts.tolist() == [2] and found.class_ids[0].tolist() == [0, 1]
    assert found.scores[0].tolist() == pytest.approx([0.9, 0.8])
    np.testing.assert_array_equal(found.extras["coefficients"][0], [[1, 0], [0, 1]])


def test_the_masks_come_back_in_the_photo_cropped_to_their_boxes():
    head = YoloSegmentHead({})
    raw = raw_outputs()
    found = head.detect(raw, settings(1))
    # Two images: the second has no detection (its rows are b"" and zeros).
    boxes, scores, class_ids, counts = (
        np.concatenate([v, np.zeros_like(v)]) for v in (found.boxes, found.scores, found.class_ids, found.counts)
    )
    two = TensorDetections(boxes, scores, class_ids, counts, extras={"coefficients": np.concatenate([found.extras["coefficients"]] * 2)})
    sizes = np.array([[32, 32], [32, 32]], np.float64)
    batch = {key: np.concatenate([value] * 2) for key, value in raw.items()}
    extras = head.extras_to_photo(two, batch, np.zeros((2, 4)), sizes, boxes.astype(np.float64))
    assert set(extras) == {"masks", "mask_boxes"}
    assert extras["mask_boxes"].dtype == np.int32 and extras["mask_boxes"][0].tolist() == [[4, 4, 28, 28], [2, 14, 10, 22]]
    first, second = (decode_png(extras["masks"][0, index]) for index in range(2))
    block = np.zeros((24, 24), np.uint8)
    block[4:20, 4:20] = 255  # the photo's pixels 8..23, in the box from 4, but the corners
    block[[4, 4, 19, 19], [4, 19, 4, 19]] = 0
    np.testing.assert_array_equal(first, block)
    assert second.shape == (8, 8) and (second == 255).all()
    assert extras["masks"][1].tolist() == [b"", b""] and not extras["mask_boxes"][1].any()


def postprocessor(folder: Path) -> detection.DetectionPostprocessor:
    """The postprocess ``new-pipeline --from yolo`` writes for a two-output segment export of a 32x32 input."""
    model = yolo_family.YoloModel(
        input_name="images",
        height=32,
        width=32,
        output_names=("output0", "output1"),
        output_shapes=((1, 8, 6), (1, 2, 8, 8)),
        head="yolo_segment",
        names=LABELS,
        static_batch=False,
        ultralytics=True,
        task="segment",
    )
    assert model.core_roles() == ["predictions", "protos"]
    files = yolo_family.files("shapes", model, "shapes.onnx", "0" * 64, ["stable_io_names"], 4)
    (folder / yolo_family.LABELS_FILE).write_text(files[f"shapes_postprocess/{yolo_family.LABELS_FILE}"])
    config = model_config.parse_config_text(files["shapes_postprocess/config.pbtxt"])
    assert [item.name for item in config.input][:2] == ["PREDICTIONS", "PROTOS"]
    assert [item.name for item in config.output][-2:] == ["MASKS", "MASK_BOXES"]
    ensemble = model_config.parse_config_text(files["shapes/config.pbtxt"])
    assert [item.name for item in ensemble.output] == [item.name for item in config.output]
    return detection.DetectionPostprocessor(config, folder)


def test_the_postprocess_new_pipeline_writes_answers_masks(tmp_path):
    """A 16x64 photo letterboxed into the 32x32 input (scale 0.5, 12 rows of padding above): the boxes (clipped to
    the photo) and the masks in its pixels, each mask the PNG of its box's pixels."""
    post = postprocessor(tmp_path)
    assert post.settings.head.check(32, 32) == [] and "a quarter of a 32x32 input" in post.settings.head.check(64, 64)[0]
    raw = raw_outputs()
    named = {"PREDICTIONS": raw["predictions"], "PROTOS": raw["protos"]}
    named |= {"IMAGE_SIZE": np.array([[16, 64]], np.int32), "IMAGE_TRANSFORM": np.array([[0.5, 0.5, 0.0, 12.0]], np.float32)}
    outputs = post.run(post.parse(named)).outputs()
    assert outputs["COUNT"].tolist() == [[2]] and outputs["LABELS"].tolist() == [[b"disc", b"square"]]
    np.testing.assert_allclose(outputs["BOXES"][0], [[8, 0, 56, 16], [4, 4, 20, 16]])
    assert outputs["MASK_BOXES"].dtype == np.int32 and outputs["MASK_BOXES"].tolist() == [[[8, 0, 56, 16], [4, 4, 20, 16]]]
    first, second = (decode_png(png) for png in outputs["MASKS"][0])
    # The block: prototype rows 3 and 4 are the photo's (the letterbox's content), inside it; its columns 2..5 cross 0
    # half-way to their neighbours, 8 photo pixels each: between pixels 15 and 16, and 47 and 48.
    block = np.zeros((16, 48), np.uint8)
    block[:, 8:40] = 255
    np.testing.assert_array_equal(first, block)
    assert second.shape == (12, 16) and (second == 255).all()


def test_the_head_reads_two_outputs_and_answers_masks():
    assert [role.role for role in YoloSegmentHead({}).input_roles()] == ["predictions", "protos"]
    assert [role.role for role in detection.answer_roles(YoloSegmentHead({}))][-2:] == ["masks", "mask_boxes"]


def test_the_gate_compares_matched_masks_by_iou():
    from vision_serving.tasks.segmentation import encode_png

    head = registry.head_class("yolo_segment")({})
    square = np.full((10, 10), 255, np.uint8)
    reference = {
        "masks": np.array([encode_png(square, binary=True), b""], dtype=object),
        "mask_boxes": np.array([[0, 0, 10, 10], [0, 0, 0, 0]]),
    }
    shifted = {"masks": np.array([encode_png(square, binary=True)], dtype=object), "mask_boxes": np.array([[5, 0, 15, 10]])}
    assert head.gate_similarities(reference, reference, 0, 0) == {"matched_mask_iou": 1.0}
    assert head.gate_similarities(reference, shifted, 0, 0)["matched_mask_iou"] == pytest.approx(50 / 150)
    assert head.gate_similarities(reference, reference, 1, 1) == {"matched_mask_iou": 1.0}  # two empty masks agree
    assert registry.head_class("yolo_segment").gate_defaults == {"min_matched_mask_iou": 0.9}
