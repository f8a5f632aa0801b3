"""The YOLO export facts (builders/families/yolo_exports.py): each head's export fits its own outputs and no other's
of its task, the class count settles what the shape alone cannot, and the metadata gives a pose head its keypoints."""

from __future__ import annotations

import pytest

from builders.families import yolo_exports
from builders.families.yolo_exports import EXPORTS
from vision_serving.tasks.detection_heads import registry


def test_every_export_is_a_registered_head_and_states_its_facts():
    assert set(EXPORTS) <= set(registry.HEADS) and "mediapipe_ssd" not in EXPORTS
    assert yolo_exports.heads("detect") == ["yolo", "yolo_v5", "end2end", "rtdetr"]
    assert yolo_exports.tasks() == ["detect", "obb", "pose", "segment"]
    assert [yolo_exports.heads(task) for task in ("pose", "obb", "segment")] == [
        ["yolo_pose", "end2end_pose"],
        ["yolo_obb", "end2end_obb"],
        ["yolo_segment", "end2end_segment"],
    ]
    for name, export in EXPORTS.items():
        assert export.layout.startswith("[") and export.exports, name
    assert [name for name, export in EXPORTS.items() if export.nms_in_model] == [
        "end2end",
        "end2end_segment",
        "end2end_pose",
        "end2end_obb",
        "rtdetr",
    ]
    assert [name for name, export in EXPORTS.items() if export.ultralytics_head] == ["rtdetr"]
    assert yolo_exports.formats("obb") == (
        "yolo_obb [N, 4+C+1, A] (YOLOv8, 11, 26 obb), end2end_obb [N, K, 7] (YOLO26 obb NMS-free, or nms=True)"
    )


@pytest.mark.parametrize("size", [(640, 640), (320, 480)])
def test_each_head_fits_its_own_outputs_and_no_other_of_its_task(size):
    expected = {
        "yolo": [(84, 8400)],
        "yolo_v5": [(25200, 85)],
        "end2end": [(300, 6)],
        "yolo_pose": [(56, 8400)],
        "yolo_segment": [(37, 8400), (32, 160, 160)],
        "yolo_obb": [(6, 8400)],
        "end2end_segment": [(300, 38), (32, 160, 160)],
        "end2end_pose": [(300, 57)],
        "end2end_obb": [(300, 7)],
        "rtdetr": [(300, 6)],
    }
    for name, export in EXPORTS.items():
        classes = 80 if export.task == "detect" else 1
        shapes = export.example_shapes(classes, *size)
        if size == (640, 640):
            assert shapes == expected[name]
        # The family tells end-to-end rows from raw heads by the metadata (end2end, nms; RT-DETR's by its head module):
        # among each kind, the shape decides.
        kind = (export.nms_in_model, export.ultralytics_head)
        alike = [
            other for other in yolo_exports.heads(export.task) if (EXPORTS[other].nms_in_model, EXPORTS[other].ultralytics_head) == kind
        ]
        assert [other for other in alike if EXPORTS[other].fits(shapes, classes)] == [name]
        assert not export.fits([(*shapes[0], 1)], classes) and not export.fits([shapes[0], shapes[0]], classes)


def test_without_a_class_count_the_shape_alone_decides():
    assert EXPORTS["yolo"].fits([(84, 8400)], None) and not EXPORTS["yolo"].fits([(8400, 84)], None)
    assert EXPORTS["yolo_v5"].fits([(8400, 85)], None) and not EXPORTS["yolo_v5"].fits([(85, 8400)], None)
    # [K, 6] with no names: end2end or a one-class YOLOv5 (the family asks for --head); RT-DETR's only where its metadata says.
    assert [name for name in yolo_exports.heads("detect") if EXPORTS[name].fits([(300, 6)], None)] == ["yolo_v5", "end2end", "rtdetr"]
    assert not EXPORTS["yolo_pose"].fits([(56, 8400)], None)  # a pose export's metadata names its classes


def test_the_oriented_box_export_has_one_angle_row():
    obb = EXPORTS["yolo_obb"]
    assert obb.fits([(7, 336)], 2) and not obb.fits([(7, 336)], 3) and obb.fits([(7, 336)], None)
    assert not obb.fits([(336, 7)], None) and not obb.fits([(5, 336)], None) and not obb.fits([(7, 336), (7, 336)], 2)
    assert obb.example_shapes(15, 1024, 1024) == [(20, 21504)]  # DOTA's 15 classes at 1024


def test_the_segment_export_is_predictions_then_prototypes():
    segment = EXPORTS["yolo_segment"]
    assert segment.fits([(4 + 3 + 32, 336), (32, 32, 32)], 3)
    assert not segment.fits([(4 + 3 + 32, 336), (32, 32, 32)], 4)
    assert not segment.fits([(32, 32, 32), (4 + 3 + 32, 336)], 3)  # the prototypes second
    assert not segment.fits([(4 + 3 + 32, 336)], 3)


def test_a_pose_export_metadata_gives_the_keypoints():
    pose = EXPORTS["yolo_pose"]
    names = "{0: ['nose', 'left, eye', 'tail']}"
    assert pose.parameters({"kpt_shape": "[3, 3]", "kpt_names": names}) == (
        ("keypoint_shape", "3,3"),
        ("keypoint_names", "nose,left  eye,tail"),
    )
    assert pose.parameters({"kpt_shape": "[3, 2]", "kpt_names": "['nose']"}) == (("keypoint_shape", "3,2"),)  # names of another count
    for metadata in ({}, {"kpt_shape": "17"}, {"kpt_shape": "[17, 3"}):
        with pytest.raises(ValueError, match="a pose model's metadata must give kpt_shape"):
            pose.parameters(metadata)
    assert EXPORTS["yolo"].parameters({"kpt_shape": "[17, 3]"}) == ()
    assert dict(pose.example_parameters) == {"keypoint_shape": "17,3"}


def test_the_end_to_end_rows_of_each_task():
    """Six columns (box, score, class) then the task's: mask coefficients as many as the prototypes, whole keypoints, one
    angle; the class count never matters (the rows do not carry one score per class)."""
    segment, pose, obb = EXPORTS["end2end_segment"], EXPORTS["end2end_pose"], EXPORTS["end2end_obb"]
    assert segment.fits([(300, 38), (32, 32, 32)], 3) and segment.fits([(300, 38), (32, 32, 32)], None)
    assert not segment.fits([(300, 37), (32, 32, 32)], 3) and not segment.fits([(300, 38)], 3)
    assert pose.fits([(300, 6 + 17 * 3)], 1) and pose.fits([(100, 6 + 5 * 2)], None) and not pose.fits([(300, 6)], 1)
    assert obb.fits([(300, 7)], 15) and not obb.fits([(300, 6)], 15) and not obb.fits([(7, 300)], 15)
    assert pose.parameters({"kpt_shape": "[5, 3]"}) == (("keypoint_shape", "5,3"),)


def test_an_rt_detr_export_gives_its_input_size_from_imgsz():
    rtdetr = EXPORTS["rtdetr"]
    assert rtdetr.parameters({"imgsz": "[640, 480]"}) == (("input_size", "640,480"),)
    assert rtdetr.parameters({"imgsz": "320"}) == (("input_size", "320,320"),)
    assert (rtdetr.resize, rtdetr.clip_to_image) == ("yolo_stretch", False)
    with pytest.raises(ValueError, match="an RT-DETR model's metadata must give imgsz"):
        rtdetr.parameters({})
