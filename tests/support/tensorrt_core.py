"""A TensorRT plan as a pipeline's core (``vision_serving.core_model.Core``), for the GPU tests: its answers then go
through the served pre- and postprocessing in process, as the CPU cores' do.

TensorRT 10/11's runtime (``Runtime.deserialize_cuda_engine``, ``IExecutionContext.set_input_shape``,
``set_tensor_address``, ``execute_async_v3``) and cuda-python's runtime API for device memory; imported when a plan is
loaded (the builder image has both: requirements/builder.txt). A plan whose output shape depends on the data (-1 once
the inputs' shapes are set) would need an output allocator: it is refused in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def cudart() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime  # older cuda-python
    return runtime


def _check(result: Any) -> Any:
    error, *values = result if isinstance(result, tuple) else (result,)
    assert int(error) == 0, error
    return values[0] if len(values) == 1 else values


class PlanCore:
    """Runs a serialized plan on batches: feeds by input name -> the outputs, in ``output_names`` order."""

    def __init__(self, plan: Path) -> None:
        import tensorrt as trt

        self.trt, self.cuda = trt, cudart()
        self.onnx_path = plan
        self.engine = trt.Runtime(trt.Logger(trt.Logger.ERROR)).deserialize_cuda_engine(plan.read_bytes())
        assert self.engine is not None, f"{plan}: TensorRT could not deserialize it"
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {name: self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT for name in names}
        self.input_names = [name for name in names if is_input[name]]
        self.output_names = [name for name in names if not is_input[name]]

    def _dtype(self, name: str) -> np.dtype:
        return np.dtype(self.trt.nptype(self.engine.get_tensor_dtype(name)))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        hosts = {name: np.ascontiguousarray(feeds[name], dtype=self._dtype(name)) for name in self.input_names}
        for name, array in hosts.items():
            assert self.context.set_input_shape(name, array.shape), (name, array.shape)
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            assert all(d >= 0 for d in shape), f"{name}: a data-dependent output shape {shape}: this runner allocates no output"
            hosts[name] = np.empty(shape, self._dtype(name))
        pointers = {}
        try:
            for name, array in hosts.items():
                pointers[name] = _check(self.cuda.cudaMalloc(max(array.nbytes, 1)))
                if name in self.input_names:
                    kind = self.cuda.cudaMemcpyKind.cudaMemcpyHostToDevice
                    _check(self.cuda.cudaMemcpy(pointers[name], array.ctypes.data, array.nbytes, kind))
                assert self.context.set_tensor_address(name, pointers[name]), name
            assert self.context.execute_async_v3(0)
            _check(self.cuda.cudaDeviceSynchronize())
            for name in self.output_names:
                kind = self.cuda.cudaMemcpyKind.cudaMemcpyDeviceToHost
                _check(self.cuda.cudaMemcpy(hosts[name].ctypes.data, pointers[name], hosts[name].nbytes, kind))
        finally:
            for pointer in pointers.values():
                self.cuda.cudaFree(pointer)
        return [hosts[name] for name in self.output_names]
