"""The normalization in the core's graph, when the preprocess hands uint8 pixels.

A preprocess config whose pixel output is ``TYPE_UINT8`` hands the core the resized pixels in the
model's layout and channel order; the core's ONNX then starts with what
:func:`vision_serving.preprocessing.normalize_batch` would have computed: ``Cast`` to float32,
``Sub`` the mean, ``Div`` by the std (per channel, ``mean / scale`` and ``std / scale`` from the
same config: :func:`vision_serving.preprocessing.normalization_constants`). The same float32
operations in the same order: onnxruntime gives bit-identical answers, and on a GPU a quarter of
the bytes cross shared memory and PCIe (150 KB instead of 602 KB per 224x224 image) while the GPU
does the arithmetic. :func:`fold` rewrites a float-input model; :func:`check_fold` compares it with
the float model on the same pixels before anything is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from builders import CheckFailed, Log
from vision_serving.preprocessing import PixelNormalization

ATOL = 1e-5


def needed(model: Any, normalization: PixelNormalization | None) -> bool:
    """The preprocess hands uint8 (``normalization``: what its core must compute) and the model's (one) image input is
    still float32."""
    import onnx

    return normalization is not None and model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def fold(model: Any, normalization: PixelNormalization) -> Any:
    """A copy of ``model`` whose first input takes uint8 pixels and normalizes them first."""
    import onnx
    from onnx import helper, numpy_helper

    folded = onnx.ModelProto.FromString(model.SerializeToString())
    graph = folded.graph
    image = graph.input[0]
    name = image.name
    normalized = f"{name}_normalized"
    for node in graph.node:
        node.input[:] = [normalized if item == name else item for item in node.input]
    for output in graph.output:
        if output.name == name:
            raise CheckFailed(f"input '{name}' is also a graph output: cannot normalize it in the graph")
    mean, std = normalization.constants()
    graph.initializer.extend([numpy_helper.from_array(mean, f"{name}_mean"), numpy_helper.from_array(std, f"{name}_std")])
    nodes = [
        helper.make_node("Cast", [name], [f"{name}_float"], to=onnx.TensorProto.FLOAT, name=f"{name}_to_float"),
        helper.make_node("Sub", [f"{name}_float", f"{name}_mean"], [f"{name}_centred"], name=f"{name}_minus_mean"),
        helper.make_node("Div", [f"{name}_centred", f"{name}_std"], [normalized], name=f"{name}_over_std"),
    ]
    for node in reversed(nodes):
        graph.node.insert(0, node)
    image.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    onnx.checker.check_model(folded)
    return folded


def check_fold(float_model: Any, folded: Any, pixels: np.ndarray, normalization: PixelNormalization, log: Log) -> float:
    """The folded model on uint8 ``pixels`` against the float model on their normalization: max |Δ|."""
    import tempfile
    from pathlib import Path

    from vision_serving.onnx_core import create_session

    outputs = []
    with tempfile.TemporaryDirectory() as scratch:
        for index, (model, feed) in enumerate(((float_model, normalization.apply(pixels)), (folded, pixels))):
            path = Path(scratch) / f"{index}.onnx"
            path.write_bytes(model.SerializeToString())
            session = create_session(path, "disable_all")
            image = session.get_inputs()[0]
            outputs.append([session.run(None, {image.name: batch}) for batch in _batches(feed, image.shape[0])])
    worst = max(
        float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
        for float_batch, folded_batch in zip(*outputs)
        for a, b in zip(float_batch, folded_batch)
    )
    log(f"normalization in the graph (uint8 pixels in): {len(pixels)} real photos, max |Δ| {worst:.1e}")
    if worst > ATOL:
        raise CheckFailed(f"the graph's normalization differs from the preprocessing's by {worst:.2e} > {ATOL:g}; nothing written")
    return worst


def _batches(images: np.ndarray, batch: object) -> list[np.ndarray]:
    """``images`` cut to the model's fixed batch size (a model exported with batch 1 takes one at a time)."""
    if not isinstance(batch, int) or batch < 1:
        return [images]
    return [images[start : start + batch] for start in range(0, len(images) - batch + 1, batch)] or [images[:batch]]
