"""The anchor-free base (vision_serving/tasks/detection_heads/anchor_free.py): each head's extra rows set its class
count and where its classes end, a tensor too small for them is refused naming what the head reads, and the
candidates carry their rows through NMS."""

from __future__ import annotations

import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.model_config import ConfigError
from vision_serving.tasks.detection_heads import base, registry
from vision_serving.tasks.detection_heads.anchor_free import AnchorFreeHead, best_class_candidates
from vision_serving.tasks.detection_heads.base import NmsSettings

PARAMETERS = {"yolo_pose": {"keypoint_shape": "2,3"}}


def config(*inputs: tuple[str, tuple[int, ...]]) -> model_config.ModelConfig:
    tensors = ", ".join(f'{{ name: "{name}" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }}' for name, dims in inputs)
    return model_config.parse_config_text(f'name: "shapes_postprocess" backend: "python" input [ {tensors} ]')


def head(name: str) -> AnchorFreeHead:
    made = registry.head_class(name).from_parameters(PARAMETERS.get(name, {}))
    assert isinstance(made, AnchorFreeHead)
    return made


@pytest.mark.parametrize(
    ("name", "extra", "reads"),
    [
        ("yolo", 0, r"\[4 \+ classes, anchors\] predictions; the input is \[4, 50\]"),
        ("yolo_obb", 1, r"\[4 \+ classes \+ 1, anchors\] predictions; the input is \[5, 50\]"),
        ("yolo_pose", 6, r"\[4 \+ classes \+ 2 x 3, anchors\] predictions; the input is \[10, 50\]"),
        (
            "yolo_segment",
            2,
            r"\[4 \+ classes \+ M, anchors\] predictions and \[M, H/4, W/4\] prototypes; the inputs are \[6, 50\] and \[2, 8, 8\]",
        ),
    ],
)
def test_the_extra_rows_set_the_classes_and_the_smallest_tensor(name, extra, reads):
    protos = [("PROTOS", (2, 8, 8))] if name == "yolo_segment" else []
    names = {"predictions": "PREDICTIONS", "protos": "PROTOS"}
    bound = head(name)
    bound.bind(config(("PREDICTIONS", (4 + 3 + extra, 50)), *protos), names)
    assert bound.num_classes == 3
    with pytest.raises(ConfigError, match=f"model 'shapes_postprocess': head {name} reads {reads}"):
        head(name).bind(config(("PREDICTIONS", (4 + extra, 50)), *protos), names)


def test_empty_prototypes_are_refused():
    with pytest.raises(ConfigError, match=r"the inputs are \[39, 50\] and \[32, 0, 8\]"):
        head("yolo_segment").bind(
            config(("PREDICTIONS", (39, 50)), ("PROTOS", (32, 0, 8))), {"predictions": "PREDICTIONS", "protos": "PROTOS"}
        )


def test_the_candidates_are_the_anchors_whose_best_class_passes_their_image_threshold():
    predictions = np.zeros((2, 4 + 2 + 1, 3), np.float32)
    predictions[0, 4:6, 0] = [0.2, 0.6]  # image 0: anchor 0, class 1
    predictions[0, 4:6, 2] = [0.3, 0.1]  # image 0: anchor 2 (below image 0's 0.4)
    predictions[1, 4:6, 1] = [0.5, 0.1]  # image 1: anchor 1, class 0 (above image 1's 0.25)
    predictions[:, 6, :] = 0.9  # the extra row is not a class
    settings = NmsSettings(np.array([0.4, 0.25], np.float32), np.full(2, 0.7, np.float32), 300)
    images, anchors, scores, class_ids = best_class_candidates(predictions, 6, settings)
    assert images.tolist() == [0, 1] and anchors.tolist() == [0, 1] and class_ids.tolist() == [1, 0]
    assert scores.tolist() == pytest.approx([0.6, 0.5])


def test_past_max_nms_only_each_image_best_candidates_are_suppressed(monkeypatch):
    """Ultralytics' cap (MAX_NMS, 30000) here 3: of one image's 5 apart boxes the 3 best stay, best first (which of
    two tied at the cap is left out is the partition's choice, as torch.topk's is); the other image's 2 are all kept."""
    monkeypatch.setattr(base, "MAX_NMS", 3)
    boxes = np.array([[10 * i, 0, 10 * i + 5, 5] for i in range(7)], np.float32)
    scores = np.array([0.5, 0.9, 0.5, 0.3, 0.7, 0.4, 0.6], np.float32)
    images = np.array([0, 0, 0, 0, 0, 1, 1])
    found = base.hard_nms(
        2, images, boxes, scores, np.zeros(7, np.int32), NmsSettings(np.zeros(2, np.float32), np.full(2, 0.5, np.float32), 300)
    )
    assert found.counts.tolist() == [3, 2]
    np.testing.assert_allclose(found.scores, [[0.9, 0.7, 0.5], [0.6, 0.4, 0.0]])
    assert found.boxes[0, 2, 0] in (0, 20)  # one of the two 0.5s
