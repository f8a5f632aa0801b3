"""builders.engine_memory: a plan's GPU memory estimated from the ONNX's shapes (the capacity planner's figures), on
graphs whose tensors' lifetimes are counted here by hand, and on the text reader's built models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import BuildError, engine_memory
from vision_serving import engine_profiles, layout


def skip_graph(path: Path, dtype: int = TensorProto.FLOAT) -> Path:
    """images [N, 3, H, W] -> A = Conv 3->8 -> B = Relu(A) -> C = Conv 8->4 (B) -> E = Conv 8->4 (A) -> Y = C + E ->
    out = Reshape(Y, Shape(Y)): A lives until E is made, so B, C and A are alive together (8 + 8 + 4 channels)."""
    numpy_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=shape).astype(numpy_type), name)
        for name, shape in (("w1", (8, 3, 3, 3)), ("w2", (4, 8, 3, 3)), ("w3", (4, 8, 1, 1)))
    ]
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["A"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["A"], ["B"]),
        helper.make_node("Conv", ["B", "w2"], ["C"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["A", "w3"], ["E"]),
        helper.make_node("Add", ["C", "E"], ["Y"]),
        helper.make_node("Shape", ["Y"], ["shape"]),
        helper.make_node("Reshape", ["Y", "shape"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "skip",
        [helper.make_tensor_value_info("images", dtype, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("out", dtype, ["n", 4, "h", "w"])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("dtype", "size"), [(TensorProto.FLOAT, 4), (TensorProto.FLOAT16, 2)])
def test_activations_are_the_peak_of_live_intermediate_tensors(tmp_path, dtype, size):
    path = skip_graph(tmp_path / "skip.onnx", dtype)
    found = engine_memory.estimate(path, {"images": (2, 3, 10, 12)})
    unit = 2 * 10 * 12 * size  # one channel of the batch
    assert found.activations == (8 + 8 + 4) * unit  # A, B and C alive when Conv 8->4 (B) runs
    assert found.largest.shape == (2, 8, 10, 12) and found.largest.nbytes == 8 * unit
    assert [(t.name, t.shape, t.nbytes) for t in found.inputs] == [("images", (2, 3, 10, 12), 3 * unit)]
    assert [(t.name, t.shape, t.nbytes) for t in found.outputs] == [("out", (2, 4, 10, 12), 4 * unit)]
    bigger = engine_memory.estimate(path, {"images": (4, 3, 20, 12)})
    assert bigger.activations == 4 * found.activations  # twice the batch, twice the height
    assert engine_memory.weights_bytes(path) == (8 * 3 * 9 + 4 * 8 * 9 + 4 * 8) * size


def test_a_shape_that_cannot_be_inferred_is_named(tmp_path):
    path = skip_graph(tmp_path / "skip.onnx")
    with pytest.raises(BuildError, match="input 'images' has 4 dims, the shape given is"):
        engine_memory.estimate(path, {"images": (2, 3, 10)})


def test_an_instance_reserves_one_context_per_profile_by_its_strategy():
    def profile(name: str, activations: int, io: int) -> engine_memory.ProfileMemory:
        return engine_memory.ProfileMemory(name, (16, 3, 48, 320), activations, io, 2 * io, engine_memory.TensorBytes("t", (1,), 1))

    profiles = (profile("a", 100, 10), profile("b", 300, 30), profile("c", 200, 5))
    static = engine_memory.ModelMemory("m", "model.onnx", "fp16", 50, profiles, "STATIC", 2)
    assert static.contexts == 3 * 300 and static.io_buffers == 30 + 60
    assert static.per_instance == 50 + 900 + 90 and static.total == 2 * 1040
    changing = engine_memory.ModelMemory("m", "model.onnx", "fp16", 50, profiles, engine_profiles.ON_PROFILE_CHANGE, 2)
    assert changing.contexts == 600 and changing.with_instances(3).total == 3 * (50 + 600 + 90)
    assert engine_memory.ModelMemory.from_dict(changing.to_dict()) == changing


def test_the_text_reader_s_plans_at_their_profiles_maxima():
    """The built text reader (skipped when not exported): the detector's photo profile at 8 x 1984 x 1984 holds its
    largest tensors at half resolution, 48 channels; the recognizer's outputs grow with the width (one step per 8 px)."""
    text_reader = layout.pipeline("text_reader")
    if not (text_reader.core_version_dir / layout.FP32_ONNX).is_file():
        pytest.skip("text_reader not exported (python -m builders export --pipeline text_reader)")
    detector = engine_memory.model_memory(text_reader, "core")
    assert [p.name for p in detector.profiles] == ["photo", "wide", "tall"]
    photo = detector.profiles[0]
    assert photo.max_shape == (8, 3, 1984, 1984) and photo.largest.shape == (8, 48, 992, 992)
    assert photo.input_bytes == 8 * 3 * 1984 * 1984 and photo.output_bytes == 8 * 1984 * 1984 * 4  # uint8 pixels in, an FP32 map out
    assert detector.strategy == engine_profiles.ON_PROFILE_CHANGE and detector.contexts == sum(p.activations for p in detector.profiles)
    recognizer = engine_memory.model_memory(text_reader, "recognizer")
    # Greedy CTC in the graph: each step's best class (INT32) and its probability (FP32), not 18710 probabilities.
    assert [p.output_bytes for p in recognizer.profiles] == [16 * (w // 8) * (4 + 4) for w in (320, 480, 640, 960, 1280, 1920)]


def selection_graph(path: Path, max_per_class: int | None) -> Path:
    """An ``nms=True`` export's selection, small: scores [1, 1, A] -> mask (> 0.25) -> NonZero [1, K] -> the boxes and
    scores of the K candidates (Gather) -> NonMaxSuppression [S, 3] (S <= K x min(max_per_class, K)): both shapes
    depend on the scores, so each is counted at its upper bound (K = A; S = classes x min(max_per_class, K))."""
    nodes = [
        helper.make_node("Reshape", ["scores", "flat"], ["flat_scores"]),
        helper.make_node("Greater", ["flat_scores", "threshold"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["picked"]),
        helper.make_node("Squeeze", ["picked", "zero"], ["indices"]),
        helper.make_node("Gather", ["boxes", "indices"], ["candidates"], axis=1),
        helper.make_node("Gather", ["scores", "indices"], ["candidate_scores"], axis=2),
        helper.make_node("NonMaxSuppression", ["candidates", "candidate_scores", *(["limit"] if max_per_class else [])], ["selected"]),
        helper.make_node("Cast", ["selected"], ["out"], to=TensorProto.FLOAT),
    ]
    initializers = [
        numpy_helper.from_array(np.array([-1], np.int64), "flat"),
        numpy_helper.from_array(np.array(0.25, np.float32), "threshold"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
    ]
    if max_per_class:
        initializers.append(numpy_helper.from_array(np.array([max_per_class], np.int64), "limit"))
    graph = helper.make_graph(
        nodes,
        "selection",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "a", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, "a"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["s", 3])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("max_per_class", "selected"), [(5, 5), (None, 0), (1000, 40)])
def test_data_dependent_shapes_are_counted_at_their_upper_bound(tmp_path, max_per_class, selected):
    """NonZero at its input's size, NonMaxSuppression at classes x min(max_output_boxes_per_class, boxes) (ONNX's default
    bound is 0): every export with NMS inside gets a figure, and says which tensors were bounded."""
    path = selection_graph(tmp_path / "selection.onnx", max_per_class)
    found = engine_memory.estimate(path, {"boxes": (1, 40, 4), "scores": (1, 1, 40)})
    assert found.upper_bounds == ("picked", "selected")
    assert [(t.name, t.shape) for t in found.outputs] == [("out", (selected, 3))]
    assert found.activations >= 40 * 4 * 4 + 40 * 4 + selected * 3 * 8  # alive as NMS runs: its boxes, scores, selection
