"""Requests from a Python model to other models of the server (Business Logic Scripting), outputs in CPU memory.

Without ``preferred_memory`` the Python backend hands a BLS response's output tensors over in the memory the
called model produced them in: on a GPU node a TensorRT model's outputs arrive in GPU memory, and
``Tensor.as_numpy()`` refuses them ("Tensor is stored in GPU and cannot be converted to NumPy"). Every
request built here asks for CPU memory (device 0: the id is ignored for CPU memory), so the same Python code
reads the answers of a TensorRT plan on a GPU and of an ONNX model on CPU.

``pb_utils`` (``triton_python_backend_utils``) is an argument, so this module imports nothing of the stub and
is unit-tested with a stand-in. ``PreferredMemory`` and ``TRITONSERVER_MEMORY_CPU`` exist in every Python
backend since 23.04, including the 2.51 server the tests run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

CPU_DEVICE_ID = 0


def cpu_request(pb_utils: Any, model_name: str, inputs: Sequence[Any], requested_output_names: Sequence[str]) -> Any:
    """A ``pb_utils.InferenceRequest`` to ``model_name`` whose output tensors come back in CPU memory."""
    return pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=list(inputs),
        requested_output_names=list(requested_output_names),
        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, CPU_DEVICE_ID),
    )


class StageModel:
    """A second stage reached by BLS (:meth:`vision_serving.tasks.base.Postprocessor.use_stages`): a batch in, the
    outputs the postprocess reads out, in its order. A failed request raises (the batch it served fails with it)."""

    def __init__(self, pb_utils: Any, name: str, input_name: str, output_names: Sequence[str], dtype: type = np.float32) -> None:
        self.pb_utils, self.name, self.input_name, self.output_names = pb_utils, name, input_name, tuple(output_names)
        self.dtype = dtype  # the model's input datatype (the text reader's stages take FP32 crops; a tiled core its pixels)

    async def __call__(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        pb_utils = self.pb_utils
        request = cpu_request(
            pb_utils, self.name, [pb_utils.Tensor(self.input_name, np.ascontiguousarray(batch, dtype=self.dtype))], self.output_names
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{self.name}: {response.error().message()}")
        return tuple(pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in self.output_names)
