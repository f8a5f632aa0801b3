"""Detection postprocess model: raw SSD outputs + original sizes -> boxes, scores, keypoints, count.

The decoding, weighted NMS and projection to pixels are
:func:`vision_serving.detection.detect`, with MediaPipe's calculator options
read from the config's parameters (:class:`~vision_serving.detection.DetectorSpec`);
tensors are found by role (:class:`~vision_serving.detection.DetectorTensors`).
Every image of every request in Triton's batch is postprocessed as one array;
each request's response is then padded to its own largest face count (K), so
a request's outputs never depend on its neighbours.
"""

from __future__ import annotations

import itertools

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import detection, drift, model_config
from .base import BatchedModel
from .drift_metrics import DriftMetrics


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.spec = detection.DetectorSpec.from_config(config)
        self.tensors = detection.DetectorTensors.from_config(config, self.spec)
        self.anchors = detection.ssd_anchors(self.spec.decode.anchors)
        self.drift = DriftMetrics(pb_utils, args, config, counts_nonfinite=True)

    def finalize(self):
        self.drift.close()

    def _input(self, request, name):
        return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

    def _parse(self, request):
        raw_boxes = self._input(request, self.tensors.raw_boxes)
        raw_scores = self._input(request, self.tensors.raw_scores)
        self.drift.check_finite(raw_boxes, self.tensors.raw_boxes)
        self.drift.check_finite(raw_scores, self.tensors.raw_scores)
        sizes = self._input(request, self.tensors.image_size)
        threshold = None
        if self.tensors.score_threshold is not None:
            tensor = pb_utils.get_input_tensor_by_name(request, self.tensors.score_threshold)
            threshold = None if tensor is None else tensor.as_numpy()
        thresholds = detection.parse_score_threshold(
            threshold, len(raw_boxes), self.spec.decode.min_score_thresh, self.tensors.score_threshold or "score threshold"
        )
        return raw_boxes, raw_scores, sizes, thresholds

    def _compute(self, parsed):
        counts = [len(item[0]) for item in parsed]
        found = detection.detect(
            np.concatenate([item[0] for item in parsed]),
            np.concatenate([item[1] for item in parsed]),
            np.concatenate([item[2] for item in parsed]),
            self.spec,
            np.concatenate([item[3] for item in parsed]),
            self.anchors,
        )
        self.drift.observe(lambda: drift.detection_features(found.scores, found.counts))
        starts = np.cumsum([0, *counts])
        return [found.take(int(start), int(stop)) for start, stop in itertools.pairwise(starts)]

    def _respond(self, found):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(self.tensors.boxes, found.boxes),
                pb_utils.Tensor(self.tensors.scores, found.scores),
                pb_utils.Tensor(self.tensors.keypoints, found.keypoints),
                pb_utils.Tensor(self.tensors.count, found.counts.astype(np.int32).reshape(-1, 1)),
            ]
        )
