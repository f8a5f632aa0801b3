"""Triton adapter for preprocessing; the logic lives in vision_serving.preprocessing."""

import triton_python_backend_utils as pb_utils

from vision_serving import model_config, preprocessing
from vision_serving.image_codec import ImageError


class TritonPythonModel:
    def initialize(self, args):
        config = model_config.config_from_triton_json(args["model_config"])
        self.spec = preprocessing.PreprocessSpec.from_config(config)
        preprocessing.set_threads(model_config.int_parameter(config, "opencv_threads", 0))
        self.limits = preprocessing.limits_from_config(config)
        self.input_name = model_config.only_tensor(config, "input").name
        self.output_name = model_config.only_tensor(config, "output").name

    def execute(self, requests):
        # Decode every image of every request, then preprocess all of them as one batch.
        images, counts, errors = [], [], []
        for request in requests:
            payloads = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            try:
                decoded = preprocessing.decode_payloads(payloads, self.limits)
            except ImageError as error:
                errors.append(pb_utils.TritonError(str(error), pb_utils.TritonError.INVALID_ARG))
                counts.append(0)
                continue
            except Exception as error:  # an unexpected decoder failure fails only its own request
                errors.append(pb_utils.TritonError(f"cannot decode image: {error}", pb_utils.TritonError.INTERNAL))
                counts.append(0)
                continue
            errors.append(None)
            counts.append(len(decoded))
            images.extend(decoded)
        batch = preprocessing.preprocess_batch(images, self.spec)
        responses, start = [], 0
        for count, error in zip(counts, errors):
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            pixels = pb_utils.Tensor(self.output_name, batch[start : start + count])
            responses.append(pb_utils.InferenceResponse(output_tensors=[pixels]))
            start += count
        return responses
