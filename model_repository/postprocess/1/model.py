"""Triton adapter for postprocessing; the logic lives in vision_serving.postprocessing."""

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from vision_serving import model_config, postprocessing


class TritonPythonModel:
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        logits = model_config.tensor(config, "LOGITS")
        self.num_classes = int(logits.dims[-1])
        self.default_k = postprocessing.validate_k(model_config.int_parameter(config, "top_k"), self.num_classes)
        model_dir = Path(args["model_repository"])
        self.labels = postprocessing.load_labels(model_dir / model_config.parameter(config, "labels_file"), self.num_classes)

    def execute(self, requests):
        logits, ks, counts, errors = [], [], [], []
        for request in requests:
            request_logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            top_k = pb_utils.get_input_tensor_by_name(request, "TOP_K")
            try:
                k = self.default_k
                if top_k is not None:
                    values = np.unique(top_k.as_numpy())
                    if len(values) != 1:
                        raise ValueError(f"TOP_K must be one value per request, got {values.tolist()}")
                    k = postprocessing.validate_k(int(values[0]), self.num_classes)
            except ValueError as error:
                errors.append(pb_utils.TritonError(str(error), pb_utils.TritonError.INVALID_ARG))
                counts.append(0)
                continue
            errors.append(None)
            counts.append(len(request_logits))
            logits.append(request_logits)
            ks.extend([k] * len(request_logits))
        results = postprocessing.top_k(np.concatenate(logits), ks, self.labels) if logits else []
        responses, start = [], 0
        for count, error in zip(counts, errors):
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            rows = results[start : start + count]
            start += count
            outputs = [
                pb_utils.Tensor("LABELS", np.stack([row.labels for row in rows])),
                pb_utils.Tensor("SCORES", np.stack([row.scores for row in rows])),
                pb_utils.Tensor("CLASS_IDS", np.stack([row.class_ids for row in rows])),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
