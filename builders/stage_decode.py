"""A second stage's decoding moved into its graph (recipe ``[stages.<role>] decode``), so only what the
postprocess reads crosses a process boundary.

``greedy_ctc``: a CTC recognizer's one output, the probability of every class at every step
(``[N, T, C]``: 18,710 classes for PP-OCRv6, 3 MB per crop at width 320, 18 MB at 1920), becomes two:
each step's most probable class (``ArgMax`` over the classes, first of equals as numpy's ``argmax``,
cast to INT32: ``[N, T]``) and its probability (``ReduceMax``: ``[N, T]``), named as the stage's config
names its outputs (in that order). Greedy CTC decoding (:func:`vision_serving.tasks.text_reading.recognition.ctc_decode`)
needs nothing else: the texts and scores are the ones the probabilities give. On TensorRT ``ArgMax`` is
a top-1 ``TopK`` and ``ReduceMax`` a reduction; both run where the recognizer runs.

:func:`apply` appends the nodes; :func:`verify` runs the model before and after on the same inputs and
requires the new outputs to equal numpy's ``argmax`` and ``max`` of the old one exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from builders import CheckFailed

DECODES = ("greedy_ctc",)
# The one output of a model whose decoding is still to come (what the recipe's passes name it).
UNDECODED_OUTPUT = "probabilities"


def apply(model: onnx.ModelProto, decode: str, output_names: Sequence[str]) -> onnx.ModelProto:
    """``model`` with ``decode`` appended to its graph, its outputs named ``output_names``."""
    if decode not in DECODES:
        raise CheckFailed(f"unknown decode {decode!r}; known: {', '.join(DECODES)}")
    return greedy_ctc(model, output_names)


def greedy_ctc(model: onnx.ModelProto, output_names: Sequence[str]) -> onnx.ModelProto:
    """The per-step class probabilities ``[N, T, C]`` -> (best class INT32 ``[N, T]``, its probability ``[N, T]``)."""
    if len(model.graph.output) != 1:
        raise CheckFailed(f"greedy_ctc needs a model with one output (the class probabilities), this one has {len(model.graph.output)}")
    if len(output_names) != 2:
        raise CheckFailed(f"greedy_ctc gives two outputs (the best class and its probability); the config names {list(output_names)}")
    (probabilities,) = model.graph.output
    shape = probabilities.type.tensor_type.shape.dim
    if len(shape) != 3 or probabilities.type.tensor_type.elem_type != TensorProto.FLOAT:
        raise CheckFailed(f"greedy_ctc needs an FP32 output [N, T, C]; {probabilities.name} is not one")
    decoded = onnx.ModelProto()
    decoded.CopyFrom(model)
    graph = decoded.graph
    indices_name, scores_name = output_names
    best = f"{probabilities.name}/argmax"
    graph.node.extend(
        [
            helper.make_node("ArgMax", [probabilities.name], [best], name="greedy_ctc/argmax", axis=2, keepdims=0),
            helper.make_node("Cast", [best], [indices_name], name="greedy_ctc/cast", to=TensorProto.INT32),
            helper.make_node("ReduceMax", [probabilities.name], [scores_name], name="greedy_ctc/max", axes=[2], keepdims=0),
        ]
    )
    steps = [shape[0], shape[1]]
    del graph.output[:]
    for name, element in ((indices_name, TensorProto.INT32), (scores_name, TensorProto.FLOAT)):
        value = helper.make_tensor_value_info(name, element, None)
        for dim in steps:
            value.type.tensor_type.shape.dim.add().CopyFrom(dim)
        graph.output.append(value)
    if _opset(decoded) >= 18:  # ReduceMax takes its axes as an input from opset 18
        node = graph.node[-1]
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("keepdims", 0))
        axes = f"{scores_name}/axes"
        graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [2]))
        node.input.append(axes)
    onnx.checker.check_model(decoded)
    return decoded


def _opset(model: onnx.ModelProto) -> int:
    return max((item.version for item in model.opset_import if item.domain in ("", "ai.onnx")), default=0)


Runner = Callable[[onnx.ModelProto, np.ndarray], list[np.ndarray]]


def verify(before: onnx.ModelProto, after: onnx.ModelProto, batches: Sequence[np.ndarray], run: Runner) -> int:
    """The decoded model's outputs equal numpy's ``argmax`` and ``max`` of the model's probabilities on each
    batch (``run``: a model and a batch -> its outputs); returns the steps compared. ``CheckFailed`` otherwise."""
    compared = 0
    for batch in batches:
        (probabilities,) = run(before, batch)
        indices, scores = run(after, batch)
        if not (np.array_equal(indices, probabilities.argmax(axis=2)) and indices.dtype == np.int32):
            raise CheckFailed("greedy_ctc: the graph's best classes differ from numpy's argmax of the probabilities")
        if not np.array_equal(scores, probabilities.max(axis=2)):
            raise CheckFailed("greedy_ctc: the graph's best probabilities differ from numpy's max of the probabilities")
        compared += indices.size
    return compared
