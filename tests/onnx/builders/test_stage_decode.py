"""A second stage's decoding in its graph (builders.stage_decode): greedy CTC as ArgMax and ReduceMax, checked exact."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from builders import CheckFailed, stage_decode
from vision_serving.tasks.text_reading import recognition


def softmax_model(classes: int = 7, opset: int = 17) -> onnx.ModelProto:
    """[N, T, C] logits in, their softmax out: a stand-in recognizer's one output."""
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["logits"], ["probabilities"], axis=2)],
        "recognizer",
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "steps", classes])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", "steps", classes])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model: onnx.ModelProto, batch: np.ndarray) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"logits": batch})


@pytest.mark.parametrize("opset", [11, 17, 18])  # ReduceMax's axes: an attribute, then an input from opset 18
def test_greedy_ctc_gives_each_step_s_best_class_and_its_probability(opset):
    model = softmax_model(opset=opset)
    decoded = stage_decode.apply(model, "greedy_ctc", ["indices", "scores"])
    assert [output.name for output in decoded.graph.output] == ["indices", "scores"]
    logits = np.random.default_rng(0).normal(size=(3, 11, 7)).astype(np.float32)
    logits[0, 0, 2] = logits[0, 0, 5] = 9.0  # a tie: the first of equals, as numpy's argmax
    indices, scores = run(decoded, logits)
    (probabilities,) = run(model, logits)
    expected_indices, expected_scores = recognition.greedy_steps(probabilities)
    assert indices.dtype == np.int32 and np.array_equal(indices, expected_indices) and indices[0, 0] == 2
    assert np.array_equal(scores, expected_scores)
    assert stage_decode.verify(model, decoded, [logits, logits[:1, :4]], run) == 3 * 11 + 4


def test_a_decoding_that_differs_from_the_probabilities_is_refused():
    model = softmax_model()
    wrong = stage_decode.apply(model, "greedy_ctc", ["indices", "scores"])
    wrong.graph.node[-3].attribute[0].i = 1  # ArgMax over the steps instead of the classes
    with pytest.raises(CheckFailed, match="best classes differ"):
        stage_decode.verify(model, wrong, [np.random.default_rng(1).normal(size=(2, 7, 7)).astype(np.float32)], run)


def test_models_and_configs_greedy_ctc_cannot_decode_are_one_line_errors():
    with pytest.raises(CheckFailed, match="names \\['indices'\\]"):
        stage_decode.apply(softmax_model(), "greedy_ctc", ["indices"])
    with pytest.raises(CheckFailed, match="unknown decode 'beam'"):
        stage_decode.apply(softmax_model(), "beam", ["indices", "scores"])
    two = softmax_model()
    two.graph.output.append(helper.make_tensor_value_info("logits_copy", TensorProto.FLOAT, ["batch", "steps", 7]))
    with pytest.raises(CheckFailed, match="one output"):
        stage_decode.apply(two, "greedy_ctc", ["indices", "scores"])
