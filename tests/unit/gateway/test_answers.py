"""Each task's answer from its outputs by role, valid against the schema generated for the same pipeline: the shipped
pipelines, and detection pipelines with every head's extra answers (keypoints with scores, instance masks as PNG and
COCO RLE, oriented boxes); a task without a module gets the generic answer."""

from __future__ import annotations

import base64
import dataclasses

import cv2
import jsonschema
import numpy as np
import pytest

from gateway import answers, openapi
from gateway.answers import masks
from gateway.catalog import Option
from gateway.service import form_of
from tests.unit.gateway.local import shipped
from vision_serving.tasks import depth, semantic_segmentation

PIPELINES = shipped()


def png(mask: np.ndarray) -> bytes:
    return cv2.imencode(".png", mask.astype(np.uint8) * 255)[1].tobytes()


def validate(pipeline, fields):
    jsonschema.Draft202012Validator(openapi.answer_schema(pipeline)).validate(
        {"pipeline": pipeline.name, "model_version": "1", "task": pipeline.task, **fields}
    )


def test_classification():
    pipeline = PIPELINES["image_classifier"]
    outputs = {
        "labels": np.array([b"tabby", b"lynx"], dtype=object),
        "scores": np.array([0.7, 0.2], np.float32),
        "class_ids": np.array([281, 287], np.int32),
    }
    fields = answers.answer_for("classification").shape(pipeline, outputs, {})
    assert fields == {
        "classes": [
            {"label": "tabby", "score": pytest.approx(0.7), "class_id": 281},
            {"label": "lynx", "score": pytest.approx(0.2), "class_id": 287},
        ]
    }
    validate(pipeline, fields)
    assert form_of(pipeline).options["top_k"]["maximum"] == 1000


def test_segmentation_as_png_and_as_rle():
    pipeline = PIPELINES["person_segmenter"]
    mask = np.zeros((30, 40), bool)
    mask[5:20, 10:35] = True
    outputs = {"mask": np.array([png(mask)], dtype=object), "coverage": np.array([mask.mean()], np.float32)}
    shaper = answers.answer_for("segmentation")
    as_png = shaper.shape(pipeline, outputs, {"mask_format": "png"})
    as_rle = shaper.shape(pipeline, outputs, {"mask_format": "rle"})
    for fields in (as_png, as_rle):
        validate(pipeline, fields)
        assert (fields["mask"]["width"], fields["mask"]["height"]) == (40, 30)
    assert base64.b64decode(as_png["mask"]["png"]) == png(mask)
    assert np.array_equal(masks.decode_rle(as_rle["mask"]["rle"]).astype(bool), mask)


def test_face_detections_with_keypoints():
    pipeline = PIPELINES["face_detector"]
    outputs = {
        "boxes": np.array([[10, 20, 50, 60], [0, 0, 0, 0]], np.float32),
        "scores": np.array([0.9, 0], np.float32),
        "class_ids": np.array([0, 0], np.int32),
        "labels": np.array([b"face", b""], dtype=object),
        "count": np.array([1], np.int32),
        "keypoints": np.arange(24, dtype=np.float32).reshape(2, 6, 2),
    }
    fields = answers.answer_for("detection").shape(pipeline, outputs, {})
    assert fields["detections"] == [
        {"label": "face", "class_id": 0, "score": 0.9, "box": [10, 20, 50, 60], "keypoints": [[2 * i, 2 * i + 1] for i in range(6)]}
    ]
    validate(pipeline, fields)


def with_outputs(pipeline, extra: dict[str, tuple[int, ...]]):
    """A detection pipeline whose ensemble has the outputs of ``extra`` too (role -> dims), as a head's would."""
    return dataclasses.replace(
        pipeline,
        outputs={**pipeline.outputs, **{role: role.upper() for role in extra}},
        output_dims={**pipeline.output_dims, **extra},
    )


def test_detections_with_scored_keypoints_masks_and_oriented_boxes():
    pipeline = with_outputs(
        PIPELINES["face_detector"], {"masks": (-1,), "mask_boxes": (-1, 4), "rotated_boxes": (-1, 5), "corners": (-1, 4, 2)}
    )
    pipeline = dataclasses.replace(pipeline, output_dims={**pipeline.output_dims, "keypoints": (-1, 6, 3)})
    assert form_of(pipeline).choices["mask_format"]["enum"] == ["png", "rle"]
    instance = np.zeros((8, 6), bool)
    instance[2:6, 1:4] = True
    outputs = {
        "boxes": np.array([[10, 20, 16, 28], [1, 1, 2, 2]], np.float32),
        "scores": np.array([0.9, 0.6], np.float32),
        "class_ids": np.array([3, 1], np.int32),
        "labels": np.array([b"car", b"dot"], dtype=object),
        "count": np.array([2], np.int32),
        "keypoints": np.ones((2, 6, 3), np.float32),
        "masks": np.array([png(instance), b""], dtype=object),
        "mask_boxes": np.array([[10, 20, 16, 28], [0, 0, 0, 0]], np.int32),
        "rotated_boxes": np.array([[13, 24, 6, 8, 0.5], [1.5, 1.5, 1, 1, 0]], np.float32),
        "corners": np.ones((2, 4, 2), np.float32),
    }
    shaper = answers.answer_for("detection")
    for mask_format in ("png", "rle"):
        fields = shaper.shape(pipeline, outputs, {"mask_format": mask_format})
        validate(pipeline, fields)
        first, second = fields["detections"]
        assert first["mask"]["box"] == [10, 20, 16, 28] and second["mask"] is None
        assert first["rotated_box"]["angle"] == 0.5 and len(first["rotated_box"]["corners"]) == 4
        assert first["keypoints"][0] == [1, 1, 1]
    assert np.array_equal(masks.decode_rle(fields["detections"][0]["mask"]["rle"]).astype(bool), instance)


def test_depth_as_png_with_its_scale_and_float32_when_asked():
    roles = {"depth_png": (1,), "depth_scale": (1,), "depth_range": (2,), "depth_float32": (1,)}
    pipeline = dataclasses.replace(
        PIPELINES["person_segmenter"],
        task="depth",
        outputs={role: role.upper() for role in roles},
        output_dims=roles,
        options={"float_depth": Option("float_depth", "FLOAT_DEPTH", "BOOL")},
    )
    assert form_of(pipeline).options["float_depth"] == {
        "type": "boolean",
        "default": False,
        "description": "also answer the float32 depth map",
    }
    values = np.array([[1.5, 2.0, 2.5], [3.0, 3.5, 9.0]], np.float32)
    outputs = {
        "depth_png": np.array([depth.encode_png(depth.png_values(values, 1000))], dtype=object),
        "depth_scale": np.array([1000], np.float32),
        "depth_range": np.array([1.5, 9.0], np.float32),
        "depth_float32": np.array([b""], dtype=object),
    }
    shaper = answers.answer_for("depth")
    fields = shaper.shape(pipeline, outputs, {})
    validate(pipeline, fields)
    assert {key: fields["depth"][key] for key in ("width", "height", "scale", "range")} == {
        "width": 3, "height": 2, "scale": 1000.0, "range": [1.5, 9.0]
    }  # fmt: skip
    assert "float32" not in fields["depth"]
    np.testing.assert_allclose(depth.decode_png(base64.b64decode(fields["depth"]["png"]), 1000), values)
    outputs["depth_float32"] = np.array([values.astype("<f4").tobytes()], dtype=object)
    fields = shaper.shape(pipeline, outputs, {})
    validate(pipeline, fields)
    assert np.array_equal(depth.decode_float32(base64.b64decode(fields["depth"]["float32"]), 2, 3), values)


def test_semantic_segmentation_class_map_and_classes():
    roles = {"class_map": (1,), "class_ids": (-1,), "labels": (-1,), "shares": (-1,), "count": (1,)}
    pipeline = dataclasses.replace(
        PIPELINES["person_segmenter"], task="semantic_segmentation", outputs={role: role.upper() for role in roles}, output_dims=roles
    )
    classes = np.array([[0, 0, 2], [0, 1, 1]], np.uint8)
    outputs = {
        "class_map": np.array([semantic_segmentation.encode_png(classes)], dtype=object),
        "class_ids": np.array([0, 1, 2, -1], np.int32),
        "labels": np.array([b"floor", b"wall", b"sky", b""], dtype=object),
        "shares": np.array([0.5, 1 / 3, 1 / 6, 0], np.float32),
        "count": np.array([3], np.int32),
    }
    fields = answers.answer_for("semantic_segmentation").shape(pipeline, outputs, {})
    validate(pipeline, fields)
    assert [item["label"] for item in fields["classes"]] == ["floor", "wall", "sky"]
    assert fields["classes"][1] == {"class_id": 1, "label": "wall", "share": pytest.approx(1 / 3, abs=1e-6)}
    assert (fields["class_map"]["width"], fields["class_map"]["height"]) == (3, 2)
    assert np.array_equal(semantic_segmentation.decode_png(base64.b64decode(fields["class_map"]["png"])), classes)


def test_a_task_without_a_module_gets_every_output_by_role():
    pipeline = dataclasses.replace(PIPELINES["image_classifier"], task="optical_flow")
    shaper = answers.answer_for("optical_flow")
    assert shaper is answers.GENERIC and answers.answer_for("not a name") is answers.GENERIC
    outputs = {
        "labels": np.array([b"a", b"\xff"], dtype=object),
        "scores": np.array([np.nan, 1], np.float32),
        "class_ids": np.array([1, 2], np.int32),
    }
    assert shaper.shape(pipeline, outputs, {}) == {
        "outputs": {"labels": ["a", {"base64": "/w=="}], "scores": [0.0, 1.0], "class_ids": [1, 2]}
    }


@pytest.mark.parametrize(
    ("mask", "counts"),
    [
        ([[0, 1], [1, 1]], [1, 3]),
        ([[1, 1], [1, 1]], [0, 4]),
        ([[0, 0], [0, 0]], [4]),
        ([[1, 0, 1], [0, 1, 0]], [0, 1, 2, 2, 1]),
    ],
)
def test_coco_run_lengths_are_column_major_from_the_background(mask, counts):
    assert masks.run_lengths(np.array(mask)) == counts
    assert masks.rle_counts(masks.rle_string(counts)) == counts


def test_coco_compressed_strings_round_trip_with_large_and_falling_counts():
    rng = np.random.default_rng(3)
    for _ in range(50):
        counts = rng.integers(0, 70000, size=rng.integers(1, 40)).tolist()
        assert masks.rle_counts(masks.rle_string(counts)) == counts
    assert masks.rle_string([1, 3]) == "13"  # as pycocotools writes [[0, 1], [1, 1]]
