"""BLS requests ask for their outputs in CPU memory (vision_serving.triton_models.bls), and the text reader's
postprocess builds every request to its second stages that way; with a stand-in for the Python backend's
``triton_python_backend_utils`` (the real one exists only inside the stub)."""

from __future__ import annotations

import asyncio
import types
from typing import Any, NamedTuple

import numpy as np

from vision_serving.triton_models import bls

CPU, GPU = "TRITONSERVER_MEMORY_CPU", "TRITONSERVER_MEMORY_GPU"  # stand-ins of the stub's enum values


class PreferredMemory(NamedTuple):
    preferred_memory_type: str
    preferred_device_id: int = 0


class Tensor(NamedTuple):
    name: str
    array: np.ndarray

    def as_numpy(self) -> np.ndarray:
        return self.array


class Response(NamedTuple):
    outputs: list[Tensor]

    def has_error(self) -> bool:
        return False


class Stub:
    """What the code under test reaches of ``triton_python_backend_utils``; records each request's keywords and
    answers it like a model that returns its input times two, in the memory the request asked for."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def module(self) -> types.ModuleType:
        module = types.ModuleType("triton_python_backend_utils")
        stub = self

        class InferenceRequest:
            def __init__(self, **keywords: Any) -> None:  # the stub's constructor takes keywords only here
                self.keywords = keywords
                stub.requests.append(keywords)

            async def async_exec(self) -> Response:
                (tensor,) = self.keywords["inputs"]
                memory = self.keywords.get("preferred_memory")
                if memory is None or memory.preferred_memory_type != CPU:  # what a TensorRT stage's caller would get
                    raise RuntimeError("Tensor is stored in GPU and cannot be converted to NumPy.")
                names = self.keywords["requested_output_names"]
                return Response([Tensor(name, tensor.array * (2 + index)) for index, name in enumerate(names)])

        def get_output_tensor_by_name(response: Response, name: str) -> Tensor | None:
            return next((t for t in response.outputs if t.name == name), None)

        module.InferenceRequest = InferenceRequest  # type: ignore[attr-defined]
        module.PreferredMemory = PreferredMemory  # type: ignore[attr-defined]
        module.TRITONSERVER_MEMORY_CPU = CPU  # type: ignore[attr-defined]
        module.TRITONSERVER_MEMORY_GPU = GPU  # type: ignore[attr-defined]
        module.Tensor = Tensor  # type: ignore[attr-defined]
        module.get_output_tensor_by_name = get_output_tensor_by_name  # type: ignore[attr-defined]
        return module


def test_a_bls_request_asks_for_cpu_memory():
    stub = Stub()
    pb_utils = stub.module()
    tensor = Tensor("images", np.zeros((2, 3), np.float32))
    request = bls.cpu_request(pb_utils, "text_reader_core_recognizer", (tensor,), ("indices", "scores"))
    assert request.keywords == {
        "model_name": "text_reader_core_recognizer",
        "inputs": [tensor],
        "requested_output_names": ["indices", "scores"],
        "preferred_memory": PreferredMemory(CPU, 0),
    }


def test_the_text_readers_second_stages_answer_in_cpu_memory():
    """Each chunk the postprocess sends to the classifier or the recognizer is a request for CPU memory, and its
    answer is read as numpy (a request without it is answered as a GPU stage would be: refused)."""
    stub = Stub()
    recognizer = bls.StageModel(stub.module(), "text_reader_core_recognizer", "images", ("indices", "scores"))
    batch = np.arange(2 * 3 * 48 * 320, dtype=np.float64).reshape(2, 3, 48, 320)
    indices, scores = asyncio.run(recognizer(batch))  # the outputs named, in their order
    np.testing.assert_array_equal(indices, batch.astype(np.float32) * 2)
    np.testing.assert_array_equal(scores, batch.astype(np.float32) * 3)
    (request,) = stub.requests
    assert request["model_name"] == "text_reader_core_recognizer" and request["requested_output_names"] == ["indices", "scores"]
    assert request["preferred_memory"] == PreferredMemory(CPU, 0)
    (tensor,) = request["inputs"]
    assert tensor.name == "images" and tensor.array.dtype == np.float32 and tensor.array.flags.c_contiguous
