"""benchmarks.detection's synthetic raw outputs: every YOLO-export head's carry exactly the candidates asked for, in its
export's shapes, and decode through the head to no more kept detections than candidates."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import detection
from builders.families.yolo_exports import EXPORTS
from vision_serving.tasks.detection_heads import registry
from vision_serving.tasks.detection_heads.base import NmsSettings


@pytest.mark.parametrize("candidates", [0, 1, 10, 40])
def test_synthetic_outputs_carry_exactly_the_candidates(candidates):
    for name, export in EXPORTS.items():
        shapes = export.example_shapes(80, 320, 320)
        outputs = detection.synthetic_outputs(name, shapes, 80, 3, candidates, (320, 320), np.random.default_rng(candidates))
        assert [item.shape[1:] for item in outputs] == shapes and all(item.shape[0] == 3 and item.dtype == np.float32 for item in outputs)
        assert all(item.flags.c_contiguous for item in outputs), name  # as Triton hands them over: the layout sets the cost
        head = registry.head_class(name).from_parameters(dict(export.example_parameters))
        settings = NmsSettings(np.full(3, 0.25, np.float32), np.full(3, 0.7, np.float32), 300)
        found = head.detect({role.role: output for role, output in zip(head.input_roles(), outputs)}, settings)
        # NMS may merge overlapping candidates, never invent one; the model's own NMS keeps them all.
        assert all(0 < count <= candidates if candidates else count == 0 for count in found.counts), name
        if export.nms_in_model:
            assert list(found.counts) == [candidates] * 3
        assert (found.scores[found.scores > 0] > 0.25).all()


def test_a_head_with_no_synthetic_outputs_is_named():
    with pytest.raises(ValueError, match="no synthetic outputs of head 'mediapipe_ssd'"):
        detection.synthetic_outputs("mediapipe_ssd", [(896, 16), (896, 1)], 1, 1, 0, (128, 128), np.random.default_rng(0))


def test_the_benchmark_measures_every_export():
    assert list(detection.heads()) == list(EXPORTS)
    assert detection.heads()["yolo_pose"] == [(4 + 80 + 17 * 3, 8400)]
