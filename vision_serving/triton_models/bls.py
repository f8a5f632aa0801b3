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

CPU_DEVICE_ID = 0


def cpu_request(pb_utils: Any, model_name: str, inputs: Sequence[Any], requested_output_names: Sequence[str]) -> Any:
    """A ``pb_utils.InferenceRequest`` to ``model_name`` whose output tensors come back in CPU memory."""
    return pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=list(inputs),
        requested_output_names=list(requested_output_names),
        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, CPU_DEVICE_ID),
    )
