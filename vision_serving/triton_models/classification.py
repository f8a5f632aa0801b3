"""Classification postprocess model: logits -> top-k labels, scores and class ids.

Tensors are found in the config by role: the required FP32 input holds the
logits, the optional INT32 input a per-request k; the BYTES, FP32 and INT32
outputs receive labels, scores and class ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .. import classification, drift, model_config
from .base import BatchedModel
from .drift_metrics import DriftMetrics


class TritonPythonModel(BatchedModel):
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        roles = model_config.tensors_by_role(config)
        self.logits_name, self.top_k_name = roles.required_input("FP32"), roles.optional_input("INT32")
        self.labels_name, self.scores_name, self.ids_name = (
            roles.output("BYTES"),
            roles.output("FP32"),
            roles.output("INT32"),
        )
        self.num_classes = int(model_config.tensor(config, self.logits_name).dims[-1])
        self.default_k = classification.validate_k(model_config.int_parameter(config, "top_k"), self.num_classes)
        labels_path = Path(args["model_repository"]) / model_config.parameter(config, "labels_file")
        self.labels = classification.load_labels(labels_path, self.num_classes)
        self.drift = DriftMetrics(pb_utils, args, config, counts_nonfinite=True)

    def finalize(self):
        self.drift.close()

    def _parse(self, request):
        logits = pb_utils.get_input_tensor_by_name(request, self.logits_name).as_numpy()
        self.drift.check_finite(logits, self.logits_name)
        k = self.default_k
        top_k = pb_utils.get_input_tensor_by_name(request, self.top_k_name) if self.top_k_name else None
        if top_k is not None:
            values = np.unique(top_k.as_numpy())
            if len(values) != 1:
                raise ValueError(f"TOP_K must be one value per request, got {values.tolist()}")
            k = classification.validate_k(int(values[0]), self.num_classes)
        return logits, k

    def _compute(self, parsed):
        logits = np.concatenate([item[0] for item in parsed])
        ks = [k for item_logits, k in parsed for _ in range(len(item_logits))]
        rows = classification.top_k(logits, ks, self.labels)
        self.drift.observe(lambda: drift.classification_features(logits))
        results, start = [], 0
        for item_logits, _ in parsed:
            results.append(rows[start : start + len(item_logits)])
            start += len(item_logits)
        return results

    def _respond(self, rows):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(self.labels_name, np.stack([row.labels for row in rows])),
                pb_utils.Tensor(self.scores_name, np.stack([row.scores for row in rows])),
                pb_utils.Tensor(self.ids_name, np.stack([row.class_ids for row in rows])),
            ]
        )
