"""``fix`` passes on tiny graphs (onnxruntime before/after), the custom-op rewrite against a
reference, the verification harness, the CLI, and the real legacy EfficientNet-Lite0 export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from builders import (
    BuildError,
    batch_profile,
    cli,
    fix_onnx,
    graph_fixes,
    graph_passes,
    trt_compat,
)
from tests.support.onnx_graphs import const, model, op_types, rng_array, run, value
from vision_serving import layout

CLASSIFIER = layout.pipeline("image_classifier")

INT64 = TensorProto.INT64
QUIET = fix_onnx.FixOptions()


def fix(built: onnx.ModelProto, names: list[str], options: fix_onnx.FixOptions = QUIET) -> fix_onnx.FixResult:
    """``fix_model`` (which itself compares onnxruntime before/after each rewriting pass)."""
    return fix_onnx.fix_model(built, names, options, log=lambda _: None)


def attribute(node: onnx.NodeProto, name: str) -> object:
    found = [a for a in node.attribute if a.name == name]
    assert found, f"{node.op_type} has no attribute {name}"
    value = helper.get_attribute_value(found[0])
    return (
        list(value) if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))) else value
    )


def assert_same_outputs(before: onnx.ModelProto, after: onnx.ModelProto, *feeds: np.ndarray, atol: float = 1e-5) -> None:
    """An independent before/after comparison on onnxruntime."""
    expected, actual = run(before, *feeds), run(after, *feeds)
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


# --------------------------------------------------------------------------- TF-"SAME" padding


def tf_same_constant_chain_model() -> onnx.ModelProto:
    """What the legacy exporter emits for F.pad(x, [0, 1, 0, 1]) before a stride-2 3x3 Conv."""
    nodes = [
        helper.make_node("ConstantOfShape", ["four"], ["zeros"], value=helper.make_tensor("v", INT64, [1], [0])),
        helper.make_node("Concat", ["torch_pads", "zeros"], ["cat"], axis=0),
        helper.make_node("Reshape", ["cat", "pairs"], ["pairs2"]),
        helper.make_node("Slice", ["pairs2", "start", "end", "axis0", "step"], ["reversed"]),
        helper.make_node("Transpose", ["reversed"], ["transposed"], perm=[1, 0]),
        helper.make_node("Reshape", ["transposed", "flat"], ["onnx_pads"]),
        helper.make_node("Cast", ["onnx_pads"], ["pads"], to=INT64),
        helper.make_node("Pad", ["x", "pads", "zero"], ["padded"], mode="constant"),
        helper.make_node("Conv", ["padded", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0]),
    ]
    initializers = [
        const("four", [4], np.int64),
        const("torch_pads", [0, 1, 0, 1], np.int64),
        const("pairs", [-1, 2], np.int64),
        const("start", [-1], np.int64),
        const("end", [-(2**62)], np.int64),
        const("axis0", [0], np.int64),
        const("step", [-1], np.int64),
        const("flat", [-1], np.int64),
        const("zero", 0.0, np.float32),
        const("w", rng_array(4, 3, 3, 3, seed=1)),
        const("b", rng_array(4, seed=2)),
    ]
    return model(nodes, [value("x", ["n", 3, 8, 8])], [value("y", ["n", 4, 4, 4])], initializers)


def tf_same_shape_model() -> onnx.ModelProto:
    """TF-"SAME" pads computed from Shape(x) at run time: foldable, since only the batch dim is dynamic.

    For H = W = 7, stride 2, kernel 3: total = (ceil(7/2) - 1) * 2 + 3 - 7 = 2, i.e. 1 before and 1 after.
    """
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["height"], axis=0),
        helper.make_node("Sub", ["nine", "height"], ["total"]),
        helper.make_node("Div", ["total", "two"], ["before"]),
        helper.make_node("Sub", ["total", "before"], ["after"]),
        helper.make_node("Unsqueeze", ["before", "axes"], ["before1"]),
        helper.make_node("Unsqueeze", ["after", "axes"], ["after1"]),
        helper.make_node("Concat", ["two_zeros", "before1", "before1", "two_zeros", "after1", "after1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    initializers = [
        const("two", 2, np.int64),
        const("nine", 9, np.int64),
        const("axes", [0], np.int64),
        const("two_zeros", [0, 0], np.int64),
        const("w", rng_array(2, 3, 3, 3, seed=3)),
    ]
    return model(nodes, [value("x", ["n", 3, 7, 7])], [value("y", ["n", 2, 4, 4])], initializers)


@pytest.mark.parametrize("build, pads", [(tf_same_constant_chain_model, [0, 0, 1, 1]), (tf_same_shape_model, [1, 1, 1, 1])])
def test_fold_then_fuse_turns_tf_same_padding_into_static_conv_pads(build, pads) -> None:
    before = build()
    result = fix(before, ["fold_constants_and_cleanup", "fuse_pad_into_conv"])

    assert op_types(result.model) == ["Conv"]
    conv = result.model.graph.node[0]
    assert attribute(conv, "pads") == pads
    assert [p.rewrites > 0 for p in result.passes] == [True, True]
    assert all(p.max_abs_diff is not None and p.max_abs_diff <= 1e-5 for p in result.passes)
    x = rng_array(2, *[d.dim_value for d in before.graph.input[0].type.tensor_type.shape.dim[1:]])
    assert_same_outputs(before, result.model, x)


@pytest.mark.parametrize(
    "pad_attrs, pad_value, second_consumer",
    [
        ({"mode": "constant"}, 1.0, False),  # padding with 1, not 0
        ({"mode": "reflect"}, 0.0, False),  # not zero padding
        ({"mode": "constant"}, 0.0, True),  # the padded tensor also feeds a Relu
    ],
)
def test_fuse_pad_into_conv_leaves_other_pads(pad_attrs, pad_value, second_consumer) -> None:
    nodes = [
        helper.make_node("Pad", ["x", "pads", "value"], ["padded"], **pad_attrs),
        helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3]),
    ]
    outputs = [value("y", None)]
    if second_consumer:
        nodes.append(helper.make_node("Relu", ["padded"], ["z"]))
        outputs.append(value("z", None))
    initializers = [
        const("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        const("value", pad_value, np.float32),
        const("w", rng_array(2, 3, 3, 3)),
    ]
    before = model(nodes, [value("x", [1, 3, 6, 6])], outputs, initializers)

    result = fix(before, ["fuse_pad_into_conv"])

    assert result.passes[0].rewrites == 0
    assert "Pad" in op_types(result.model)


def test_fuse_pad_into_conv_adds_to_existing_conv_pads_and_skips_channel_padding() -> None:
    initializers = [const("w", rng_array(2, 3, 3, 3))]
    spatial = model(
        [
            helper.make_node("Pad", ["x", "pads"], ["padded"]),
            helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 0, 1]),
        ],
        [value("x", [1, 3, 6, 6])],
        [value("y", None)],
        [*initializers, const("pads", [0, 0, 2, 1, 0, 0, 0, 3], np.int64)],
    )
    fused = fix(spatial, ["fuse_pad_into_conv"]).model
    conv = fused.graph.node[0]
    assert op_types(fused) == ["Conv"]
    assert attribute(conv, "pads") == [3, 1, 0, 4]

    channel = model(
        [helper.make_node("Pad", ["x", "pads"], ["padded"]), helper.make_node("Relu", ["padded"], ["y"])],
        [value("x", [1, 3, 6, 6])],
        [value("y", None)],
        [const("pads", [0, 1, 0, 0, 0, 0, 0, 0], np.int64)],
    )
    assert fix(channel, ["fuse_pad_into_conv"]).passes[0].rewrites == 0


# --------------------------------------------------------------------------- batch_reshape_placeholder


def flatten_model(other_input: bool = False) -> onnx.ModelProto:
    """``x.view(x.size(0), -1)`` as the legacy exporter writes it (or with the size of another input)."""
    source = "other" if other_input else "x"
    nodes = [
        helper.make_node("Shape", [source], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inputs = [value("x", ["batch", 4, 2, 2])] + ([value("other", ["m", 3])] if other_input else [])
    initializers = [const("zero", 0, np.int64), const("axes", [0], np.int64), const("minus_one", [-1], np.int64)]
    return model(nodes, inputs, [value("y", ["batch", 16])], initializers)


def test_batch_reshape_placeholder_replaces_the_shape_subgraph() -> None:
    before = flatten_model()
    result = fix(before, ["batch_reshape_placeholder"])

    assert op_types(result.model) == ["Reshape"]
    target = onnx.numpy_helper.to_array(result.model.graph.initializer[0])
    assert target.tolist() == [0, -1]
    assert_same_outputs(before, result.model, rng_array(3, 4, 2, 2))


def test_batch_reshape_placeholder_needs_the_same_dim() -> None:
    result = fix(flatten_model(other_input=True), ["batch_reshape_placeholder"], fix_onnx.FixOptions(input_dims=((4, 2, 2), (3,))))
    assert result.passes[0].rewrites == 0
    assert "Shape" in op_types(result.model)


# --------------------------------------------------------------------------- remove_noops


def test_remove_noops_removes_every_kind() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Dropout", ["a", "ratio"], ["b"]),
        helper.make_node("Cast", ["b"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["c", "same_shape"], ["d"]),
        helper.make_node("Pad", ["d", "zero_pads"], ["e"]),
        helper.make_node("Transpose", ["e"], ["f"], perm=[0, 1, 2]),
        helper.make_node("Concat", ["f"], ["g"], axis=0),
        helper.make_node("Relu", ["g"], ["h"]),
        helper.make_node("Identity", ["h"], ["y"]),  # a no-op that writes the graph output
    ]
    initializers = [const("ratio", 0.5, np.float32), const("same_shape", [0, 3, 5], np.int64), const("zero_pads", [0] * 6, np.int64)]
    before = model(nodes, [value("x", ["n", 3, 5])], [value("y", ["n", 3, 5])], initializers)

    result = fix(before, ["remove_noops"])

    assert op_types(result.model) == ["Relu"]
    assert result.passes[0].rewrites == 8
    assert result.model.graph.output[0].name == "y"  # the output keeps its name
    assert_same_outputs(before, result.model, rng_array(2, 3, 5))


@pytest.mark.parametrize(
    "node, initializers",
    [
        (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16), []),  # changes the type
        (helper.make_node("Reshape", ["x", "s"], ["y"]), [const("s", [0, 15], np.int64)]),  # changes the shape
        (helper.make_node("Pad", ["x", "p"], ["y"]), [const("p", [0, 0, 1, 0, 0, 0], np.int64)]),  # pads something
        (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1]), []),
        (helper.make_node("Dropout", ["x", "r", "t"], ["y"]), [const("r", 0.0, np.float32), const("t", True, np.bool_)]),
    ],
)
def test_remove_noops_keeps_nodes_that_compute(node, initializers) -> None:
    before = model(
        [node],
        [value("x", ["n", 3, 5])],
        [value("y", None, TensorProto.FLOAT16 if node.op_type == "Cast" else TensorProto.FLOAT)],
        initializers,
    )
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(before))
    assert graph_fixes.noop_reason(graph.nodes[0], graph) is None
    assert graph_fixes.remove_noops(graph) == 0


def test_remove_noops_keeps_an_identity_from_input_to_output() -> None:
    before = model([helper.make_node("Identity", ["x"], ["y"])], [value("x", [2])], [value("y", [2])])
    result = fix(before, ["remove_noops"])
    assert op_types(result.model) == ["Identity"]


# --------------------------------------------------------------------------- einsum_to_matmul


EINSUMS = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("bij,jkl->bikl", [(2, 3, 4), (4, 5, 6)]),  # two free labels on the right: Reshape
    ("bi,bj->bij", [(2, 3), (2, 4)]),  # outer product: nothing contracted
    ("bid,bjd->bji", [(2, 3, 4), (2, 5, 4)]),  # output transposed
    ("ij->ji", [(3, 4)]),  # one operand: a Transpose
]


@pytest.mark.parametrize("equation, shapes", EINSUMS)
def test_einsum_to_matmul(equation: str, shapes: list[tuple[int, ...]]) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    before = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [value(name, list(shape)) for name, shape in zip(names, shapes)],
        [value("y", None)],
        opset=17,
    )
    feeds = [rng_array(*shape, seed=i) for i, shape in enumerate(shapes)]

    result = fix(before, ["einsum_to_matmul"], fix_onnx.FixOptions())

    assert "Einsum" not in op_types(result.model)
    assert set(op_types(result.model)) <= {"MatMul", "Transpose", "Reshape"}
    assert_same_outputs(before, result.model, *feeds)
    np.testing.assert_allclose(run(result.model, *feeds)[0], np.einsum(equation, *feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "equation, shapes, reason",
    [
        ("ii->i", [(3, 3)], "diagonal"),
        ("ij->i", [(3, 4)], "ReduceSum"),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "3 operands"),
        ("bij,bjk->bk", [(2, 3, 4), (2, 4, 5)], "summed within one operand"),
    ],
)
def test_einsum_left_alone_when_not_a_matmul(equation: str, shapes: list[tuple[int, ...]], reason: str) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    before = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [value(name, list(shape)) for name, shape in zip(names, shapes)],
        [value("y", None)],
    )
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(before))
    plan = graph_fixes.einsum_plan(graph.nodes[0])
    assert isinstance(plan, str) and reason in plan
    assert graph_fixes.einsum_to_matmul(graph) == 0


# --------------------------------------------------------------------------- custom_op_rewrites


def transpose_conv_bias_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: tuple[int, int], padding: str) -> np.ndarray:
    """MediaPipe Convolution2DTransposeBias (TFLite transposed conv, NHWC, OHWI weights) in plain numpy."""
    n, height, width, _ = x.shape
    c_out, k_h, k_w, _ = w.shape
    s_h, s_w = stride
    if padding == "SAME":
        out_h, out_w = height * s_h, width * s_w
    else:
        out_h, out_w = (height - 1) * s_h + k_h, (width - 1) * s_w + k_w
    full = np.zeros((n, (height - 1) * s_h + k_h, (width - 1) * s_w + k_w, c_out), dtype=np.float64)
    for iy in range(height):
        for ix in range(width):
            for ky in range(k_h):
                for kx in range(k_w):
                    full[:, iy * s_h + ky, ix * s_w + kx, :] += x[:, iy, ix, :] @ w[:, ky, kx, :].T
    top = max((height - 1) * s_h + k_h - out_h, 0) // 2
    left = max((width - 1) * s_w + k_w - out_w, 0) // 2
    return (full[:, top : top + out_h, left : left + out_w, :] + bias).astype(np.float32)


def mediapipe_model(kernel: int, stride: int, padding: object) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    weights = rng_array(3, kernel, kernel, 4, seed=5)
    bias = rng_array(3, seed=6)
    node = helper.make_node(
        "Convolution2DTransposeBias", ["x", "w", "b"], ["y"], domain="mediapipe", padding=padding, stride_h=stride, stride_w=stride
    )
    built = model([node], [value("x", [1, 5, 6, 4])], [value("y", None)], [const("w", weights), const("b", bias)], domains=["mediapipe"])
    return built, weights, bias


@pytest.mark.parametrize(
    "kernel, stride, padding",
    [(4, 2, "SAME"), (3, 2, "SAME"), (3, 1, "SAME"), (2, 2, "VALID"), (3, 2, 1), (3, 2, 2)],  # 1/2: TfLitePadding SAME/VALID
)
def test_convolution_2d_transpose_bias_becomes_conv_transpose(kernel: int, stride: int, padding: object) -> None:
    before, weights, bias = mediapipe_model(kernel, stride, padding)
    x = rng_array(1, 5, 6, 4, seed=7)

    result = fix(before, ["custom_op_rewrites"])

    assert op_types(result.model) == ["Transpose", "ConvTranspose", "Transpose"]
    assert [entry.domain for entry in result.model.opset_import] == [""]
    # onnxruntime cannot run the original alone: it is compared with the op run by its reference
    # implementation (builders/passes/reference_ops.py, onnxruntime-extensions).
    assert result.unverified == []
    (rewrite,) = result.passes
    assert rewrite.name == "custom_op_rewrites" and rewrite.rewrites == 1
    assert rewrite.max_abs_diff is not None and rewrite.max_abs_diff <= 1e-4
    mode = padding if isinstance(padding, str) else ("SAME" if padding == 1 else "VALID")
    expected = transpose_conv_bias_reference(x, weights, bias, (stride, stride), mode)
    actual = run(result.model, x)[0]
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-4)


def test_custom_op_rewrites_leaves_unknown_ops_and_refuses_runtime_weights() -> None:
    unknown = model(
        [helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft")],
        [value("x", [1, 3, 4, 4])],
        [value("y", None)],
        domains=["com.microsoft"],
    )
    graph = gs.import_onnx(unknown)
    assert graph_fixes.custom_op_rewrites(graph) == 0

    runtime_weights = model(
        [helper.make_node("Convolution2DTransposeBias", ["x", "w", "b"], ["y"], domain="mediapipe", padding="SAME")],
        [value("x", [1, 5, 6, 4]), value("w", [3, 2, 2, 4]), value("b", [3])],
        [value("y", None)],
        domains=["mediapipe"],
    )
    # A known custom op it cannot rewrite is an error, not a silent leftover TensorRT would reject.
    with pytest.raises(graph_fixes.PassError, match="weights must be a constant OHWI tensor"):
        graph_fixes.custom_op_rewrites(gs.import_onnx(runtime_weights))


def test_custom_op_rewrite_clears_the_check_error() -> None:
    before, _, _ = mediapipe_model(4, 2, "SAME")
    assert [f.code for f in trt_compat.check_model(before).findings if f.severity == "error"] == ["custom-domain-op"]
    after = fix(before, ["custom_op_rewrites"]).model
    assert not trt_compat.check_model(after).blocking


# --------------------------------------------------------------------------- config-bound passes


def relu_model(shape: list[int | str], output_name: str = "y", intermediate: str = "t") -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], [intermediate]), helper.make_node("Neg", [intermediate], [output_name])]
    return model(nodes, [value("x", shape)], [value(output_name, shape)])


def test_stable_io_names_renames_to_the_config() -> None:
    before = relu_model(["n", 3, 4, 4], intermediate="logits")  # a tensor already called "logits"
    options = fix_onnx.FixOptions(input_names=("images",), output_names=("logits",))

    result = fix(before, ["stable_io_names"], options)

    assert [v.name for v in result.model.graph.input] == ["images"]
    assert [v.name for v in result.model.graph.output] == ["logits"]
    assert result.passes[0].rewrites == 2
    assert_same_outputs(before, result.model, rng_array(2, 3, 4, 4))


def test_stable_io_names_refuses_a_model_with_other_io() -> None:
    options = fix_onnx.FixOptions(input_names=("images", "mask"), output_names=("logits",))
    with pytest.raises(BuildError, match="has 1 inputs, the core config 2"):
        fix(relu_model(["n", 3]), ["stable_io_names"], options)


def test_batch_dimension_makes_the_batch_symbolic_and_records_the_range() -> None:
    before = relu_model([1, 3, "h", "w"])
    options = fix_onnx.FixOptions(input_dims=((3, 4, 4),), output_dims=((3, 4, 4),), max_batch=8, opt_batch=4)

    result = fix(before, ["batch_dimension"], options)  # compared at batch 2 with per-sample runs of the batch-1 model

    dims = [d.dim_param or d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 4, 4]
    out_dims = [d.dim_param or d.dim_value for d in result.model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["batch", 3, 4, 4]
    profile = batch_profile.read_profile(result.model)
    assert (profile.min, profile.opt, profile.max) == (1, 4, 8)
    assert profile.inputs["x"] == {"min": [1, 3, 4, 4], "opt": [4, 3, 4, 4], "max": [8, 3, 4, 4]}
    assert result.passes[0].max_abs_diff == 0.0
    assert not trt_compat.check_model(result.model).findings


def test_batch_dimension_refuses_dims_that_contradict_the_config() -> None:
    options = fix_onnx.FixOptions(input_dims=((3, 4, 4),), output_dims=((3, 4, 4),), max_batch=8)
    with pytest.raises(BuildError, match="dim 2 is 5, the config says 4"):
        fix(relu_model(["n", 3, 5, 4]), ["batch_dimension"], options)


# --------------------------------------------------------------------------- the harness


def test_a_pass_that_changes_outputs_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def relu_to_sigmoid(graph: gs.Graph) -> int:
        for node in graph.nodes:
            if node.op == "Relu":
                node.op = "Sigmoid"
                return 1
        return 0

    monkeypatch.setitem(graph_passes.PASSES, "relu_to_sigmoid", relu_to_sigmoid)
    with pytest.raises(fix_onnx.FixVerificationError, match="relu_to_sigmoid changed the model's outputs"):
        fix(relu_model(["n", 3]), ["relu_to_sigmoid"])


def test_fix_keeps_qdq_pairs() -> None:
    """Folding must not fold DequantizeLinear(int8 weights) back into float weights."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["y"], kernel_shape=[1, 1]),
    ]
    initializers = [
        const("s", 0.05, np.float32),
        const("zp", 0, np.int8),
        const("wq", np.arange(-6, 6, dtype=np.int8).reshape(4, 3, 1, 1)),
        const("ws", [0.1, 0.2, 0.3, 0.4], np.float32),
        const("wzp", [0, 0, 0, 0], np.int8),
    ]
    before = model(nodes, [value("x", [1, 3, 4, 4])], [value("y", None)], initializers, opset=19, ir_version=9)
    result = fix(before, ["fold_constants_and_cleanup", "remove_noops", "fuse_pad_into_conv"])
    assert sorted(op_types(result.model)) == sorted(op_types(before))


def test_registry_has_every_pass() -> None:
    assert set(fix_onnx.DEFAULT_PASSES) == set(fix_onnx.known_pass_names())
    for name, function in graph_passes.PASSES.items():
        assert function.__doc__ and "Before" in function.__doc__ and "After" in function.__doc__, name


# --------------------------------------------------------------------------- CLI


def write(built: onnx.ModelProto, path: Path) -> Path:
    onnx.save(built, str(path))
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


def test_cli_fix_writes_the_fixed_model(tmp_path: Path) -> None:
    source = write(tf_same_constant_chain_model(), tmp_path / "in.onnx")
    target = tmp_path / "out.onnx"
    passes = "fold_constants_and_cleanup,fuse_pad_into_conv,remove_noops"
    code = cli.main(["fix", "--pipeline", CLASSIFIER.name, str(source), str(target), "--passes", passes])
    assert code == 0
    assert op_types(onnx.load(str(target))) == ["Conv"]


def test_cli_fix_error_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fix_cli = ["fix", "--pipeline", CLASSIFIER.name]
    assert cli.main([*fix_cli, str(tmp_path / "missing.onnx"), str(tmp_path / "out.onnx")]) == 2
    assert "no such file" in one_error_line(capsys)

    source = write(relu_model(["n", 3]), tmp_path / "in.onnx")
    assert cli.main([*fix_cli, str(source), str(tmp_path / "out.onnx"), "--passes", "no_such_pass"]) == 2
    assert "unknown pass(es) no_such_pass" in one_error_line(capsys)

    # Several pipelines in the repository: the config to read is ambiguous without --pipeline.
    assert cli.main(["fix", str(source), str(tmp_path / "out.onnx"), "--passes", "remove_noops"]) == 2
    assert "choose a pipeline with --pipeline NAME" in one_error_line(capsys)
    assert cli.main(["fix", "--pipeline", "no_such_pipeline", str(source), str(tmp_path / "out.onnx")]) == 2
    assert "no pipeline 'no_such_pipeline'" in one_error_line(capsys)

    monkeypatch.setitem(graph_passes.PASSES, "negate", lambda graph: (setattr(graph.nodes[1], "op", "Relu"), 1)[1])
    assert cli.main([*fix_cli, str(source), str(tmp_path / "out.onnx"), "--passes", "negate"]) == 1
    assert "changed the model's outputs" in one_error_line(capsys)
    assert not (tmp_path / "out.onnx").exists()


def test_fix_in_place_leaves_an_unchanged_model_alone(tmp_path: Path) -> None:
    path = write(relu_model(["n", 3]), tmp_path / "model.onnx")
    before = path.read_bytes()
    fix_onnx.fix_file(path, path, ["remove_noops"], QUIET, log=lambda _: None)
    assert path.read_bytes() == before  # nothing rewritten: not even the metadata
    fix_onnx.fix_file(path, path, ["remove_noops"], QUIET, log=lambda _: None, force=True)
    assert path.read_bytes() != before and "builders.fix" in {p.key for p in onnx.load(str(path)).metadata_props}


def test_cli_check_and_fix_default_to_the_core_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A model repository holding one pipeline: a copy of the classifier's recipe and core config.
    copy = layout.Pipeline.at(tmp_path / "model_repository" / CLASSIFIER.name)
    copy.core_version_dir.mkdir(parents=True)
    copy.recipe.write_text(CLASSIFIER.recipe.read_text())
    (copy.core_dir / "config.pbtxt").write_text((CLASSIFIER.core_dir / "config.pbtxt").read_text())
    write(tf_same_constant_chain_model(), copy.onnx("fp32"))
    root = ["--model-repository", str(copy.repository.parent)]  # its only pipeline: no --pipeline needed
    assert cli.main(["check", *root]) == 0
    assert "runtime-pads" in capsys.readouterr().out
    passes = "fold_constants_and_cleanup,fuse_pad_into_conv"
    assert cli.main(["fix", *root, "--passes", passes]) == 0
    assert op_types(onnx.load(str(copy.onnx("fp32")))) == ["Conv"]


# --------------------------------------------------------------------------- the real case


@pytest.fixture(scope="module")
def legacy_model() -> onnx.ModelProto:
    from builders.legacy_export import export_legacy_onnx

    return export_legacy_onnx()


@pytest.fixture(scope="module")
def photo_batch() -> np.ndarray:
    from builders import photos
    from vision_serving import image_codec, model_config, preprocessing

    config = model_config.load_config(CLASSIFIER.model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(config)
    limits = preprocessing.limits_from_config(config)
    names = list(photos.registry())[:8]
    return preprocessing.preprocess_batch([image_codec.decode_rgb(photos.photo_bytes(n), limits) for n in names], spec)


def test_legacy_export_check_then_fix(legacy_model: onnx.ModelProto, photo_batch: np.ndarray) -> None:
    raw = trt_compat.check_model(legacy_model)
    codes = [f.code for f in raw.findings]
    assert codes.count("runtime-pads") == 17  # one per TF-"SAME" padded conv
    assert all(f.severity == "warning" and "fuse_pad_into_conv" in f.fix for f in raw.findings if f.code == "runtime-pads")
    assert "runtime-shape" in codes and "batch-range-undeclared" in codes
    assert not raw.blocking

    options = fix_onnx.options_for_repository(CLASSIFIER.repository, None, None, 1e-4, 1e-4)
    result = fix(legacy_model, list(fix_onnx.DEFAULT_PASSES), options)
    fixed = result.model

    ops = set(op_types(fixed))
    assert not ops & {"Shape", "ConstantOfShape", "Pad", "Gather", "Slice", "Cast", "Concat"}
    for node in fixed.graph.node:
        if node.op_type == "Conv":
            assert len(attribute(node, "pads")) == 4 and all(isinstance(p, int) for p in attribute(node, "pads"))
    assert [v.name for v in fixed.graph.input] == ["images"] and [v.name for v in fixed.graph.output] == ["logits"]
    assert batch_profile.read_profile(fixed).max == 32
    assert trt_compat.check_model(fixed).findings == []

    expected = run(legacy_model, photo_batch)[0]
    actual = run(fixed, photo_batch)[0]
    assert float(np.abs(actual - expected).max()) <= 1e-4
    assert (actual.argmax(axis=1) == expected.argmax(axis=1)).all()
