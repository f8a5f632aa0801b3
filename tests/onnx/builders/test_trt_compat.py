"""``check``: every rule with a model that triggers it and one that does not; report and CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builders import batch_profile, cli, trt_compat
from tests.support.onnx_graphs import const, model, rng_array, value
from vision_serving import layout, model_config

CLASSIFIER = layout.pipeline("image_classifier")

INT64, INT8, UINT8, INT32 = TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32


def one(
    op: str,
    inputs: list[str],
    attrs: dict | None = None,
    shape: list | None = None,
    initializers: list | None = None,
    opset: int = 17,
    domain: str = "",
    outputs: int = 1,
    in_type: int = TensorProto.FLOAT,
    extra_inputs: list | None = None,
) -> onnx.ModelProto:
    """A one-node model: input x (``shape``), the node, its outputs as graph outputs."""
    names = ["y"] + [f"y{i}" for i in range(1, outputs)]
    node = helper.make_node(op, inputs, names, domain=domain or None, **(attrs or {}))
    graph_inputs = [value("x", shape or [1, 3, 8, 8], in_type), *list(extra_inputs or [])]
    return model([node], graph_inputs, [value(n, None) for n in names], initializers or [], opset=opset, domains=[domain] if domain else [])


def findings(built: onnx.ModelProto, max_batch: int | None = None) -> list[tuple[str, str]]:
    return [(f.severity, f.code) for f in trt_compat.check_model(built, max_batch=max_batch).findings]


def finding(built: onnx.ModelProto, code: str, max_batch: int | None = None) -> trt_compat.Finding:
    found = [f for f in trt_compat.check_model(built, max_batch=max_batch).findings if f.code == code]
    assert len(found) >= 1, code
    return found[0]


def clean() -> onnx.ModelProto:
    return one("Relu", ["x"])


def test_a_plain_model_has_no_findings() -> None:
    assert findings(clean()) == []


# --------------------------------------------------------------------------- rule table: (positive, negative)


def resize(mode: str = "linear", coordinate: str = "half_pixel", antialias: int = 0) -> onnx.ModelProto:
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinate}
    if antialias:
        attrs["antialias"] = 1
    return one("Resize", ["x", "", "scales"], attrs, initializers=[const("scales", [1, 1, 2, 2], np.float32)], opset=18)


def qdq(
    zero_point: object = 0, zp_type: object = np.int8, scale_size: int = 1, axis: int = 1, implicit: bool = False, scale_input: bool = False
) -> onnx.ModelProto:
    scale = const("scale", np.full(scale_size, 0.05, np.float32) if scale_size > 1 else np.float32(0.05))
    zp = const("zp", np.full(scale_size, zero_point, zp_type) if scale_size > 1 else np.array(zero_point, zp_type))
    q_inputs = ["x", "scale"] if implicit else ["x", "scale", "zp"]
    nodes = [helper.make_node("QuantizeLinear", q_inputs, ["q"], axis=axis)]
    outputs = [value("q", None)]
    initializers = [zp] if not implicit else []
    inputs = [value("x", [1, 3, 8, 8])]
    if scale_input:
        inputs.append(value("scale", []))
    else:
        initializers.append(scale)
    return model(nodes, inputs, outputs, initializers, opset=19, ir_version=9)


def dequantize(weights_type: object, scale_size: int = 1) -> onnx.ModelProto:
    weights = const("w", np.ones((3, 3, 1, 1), weights_type))
    scale = const("scale", np.full(scale_size, 0.1, np.float32) if scale_size > 1 else np.float32(0.1))
    node = helper.make_node("DequantizeLinear", ["w", "scale"], ["y"], axis=0)
    return model([node], [], [value("y", None)], [weights, scale], opset=19, ir_version=9)


def quantized_weight() -> onnx.ModelProto:
    """ModelOpt's weight pattern: float W -> QuantizeLinear (per channel) -> DequantizeLinear -> Conv."""
    nodes = [
        helper.make_node("QuantizeLinear", ["w", "scale", "zp"], ["wq"], axis=0),
        helper.make_node("DequantizeLinear", ["wq", "scale", "zp"], ["wdq"], axis=0),
        helper.make_node("Conv", ["x", "wdq"], ["y"], kernel_shape=[1, 1]),
    ]
    initializers = [const("w", rng_array(3, 3, 1, 1)), const("scale", np.full(3, 0.05, np.float32)), const("zp", np.zeros(3, np.int8))]
    return model(nodes, [value("x", [1, 3, 8, 8])], [value("y", None)], initializers, opset=19, ir_version=9)


def pad_into(consumer: str, pads_node: Callable[[], list] | None = None, value_: float = 0.0) -> onnx.ModelProto:
    """x -> Pad(pads) -> Conv or Relu; pads constant, folded from two constants, or from Shape(x)."""
    nodes = []
    initializers = [const("value", value_, np.float32), const("w", rng_array(2, 3, 3, 3))]
    if pads_node is None:
        initializers.append(const("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    else:
        nodes += pads_node()
        initializers += [
            const("half_a", [0, 0, 1, 0, 0, 0, 1, 0], np.int64),
            const("half_b", [0, 0, 0, 1, 0, 0, 0, 1], np.int64),
            const("zero", 0, np.int64),
            const("axes", [0], np.int64),
            const("seven", [0] * 7, np.int64),
        ]
    nodes.append(helper.make_node("Pad", ["x", "pads", "value"], ["padded"]))
    nodes.append(
        helper.make_node("Conv", ["padded", "w"], ["y"], kernel_shape=[3, 3])
        if consumer == "Conv"
        else helper.make_node("Relu", ["padded"], ["y"])
    )
    return model(nodes, [value("x", ["n", 3, 8, 8])], [value("y", None)], initializers)


def folded_pads() -> list:
    return [helper.make_node("Add", ["half_a", "half_b"], ["pads"])]


def batch_dependent_pads() -> list:  # pads[-1] = batch size: depends on a runtime shape
    return [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["seven", "n1"], ["pads"], axis=0),
    ]


def reduce_sum(axes: str) -> onnx.ModelProto:
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"])]
    inputs = [value("x", [1, 3, 8, 8])]
    initializers = []
    if axes == "constant":
        initializers.append(const("axes", [1], np.int64))
    elif axes == "folded":
        nodes.insert(0, helper.make_node("Add", ["a", "b"], ["axes"]))
        initializers += [const("a", [0], np.int64), const("b", [1], np.int64)]
    else:
        inputs.append(value("axes", [1], INT64))
    return model(nodes, inputs, [value("y", None)], initializers, opset=18)


def reshape(target: str) -> onnx.ModelProto:
    """Reshape to a constant, a folded constant, or the batch-copying ``x.view(x.size(0), -1)`` pattern."""
    nodes: list = []
    initializers = [const("zero", 0, np.int64), const("axes", [0], np.int64), const("minus_one", [-1], np.int64)]
    inputs = [value("x", ["n", 3, 4, 4])]
    if target == "constant":
        initializers.append(const("shape", [0, -1], np.int64))
    elif target == "folded":
        nodes.append(helper.make_node("Add", ["s1", "s2"], ["shape"]))
        initializers += [const("s1", [0, -2], np.int64), const("s2", [0, 1], np.int64)]
    else:
        source = "x" if target == "batch" else "other"
        if target == "other":
            inputs.append(value("other", ["m", 2]))
        nodes += [
            helper.make_node("Shape", [source], ["shp"]),
            helper.make_node("Gather", ["shp", "zero"], ["d0"], axis=0),
            helper.make_node("Unsqueeze", ["d0", "axes"], ["d01"]),
            helper.make_node("Concat", ["d01", "minus_one"], ["shape"], axis=0),
        ]
    nodes.append(helper.make_node("Reshape", ["x", "shape"], ["y"]))
    return model(nodes, inputs, [value("y", None)], initializers)


def with_profile(built: onnx.ModelProto, text: str | None = None) -> onnx.ModelProto:
    if text is None:
        batch_profile.write_profile(built, batch_profile.make_profile(8))
    else:
        batch_profile.set_metadata(built, batch_profile.METADATA_KEY, text)
    return built


def einsum(equation: str, shapes: list[list[int]]) -> onnx.ModelProto:
    names = [f"in{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    return model([node], [value(n, s) for n, s in zip(names, shapes)], [value("y", None)])


def nms(boxes_rank: int = 3) -> onnx.ModelProto:
    boxes = value("boxes", [1, 10, 4] if boxes_rank == 3 else [10, 4])
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out"], ["y"])
    return model([node], [boxes, value("scores", [1, 2, 10])], [value("y", None, INT64)], [const("max_out", [5], np.int64)])


def lstm(layout: int) -> onnx.ModelProto:
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=3, layout=layout)
    return model([node], [value("x", [2, 1, 4])], [value("y", None)], [const("W", rng_array(1, 12, 4)), const("R", rng_array(1, 12, 3))])


RULES: list = [
    # (id, positive model, negative model, severity, code, max_batch)
    ("opset", lambda: one("Relu", ["x"], opset=8), clean, "warning", "opset-range", None),
    ("unsupported-op", lambda: one("Det", ["x"], shape=[1, 3, 3]), clean, "error", "unsupported-op", None),
    ("unknown-op", lambda: one("NoSuchOp", ["x"]), clean, "error", "unsupported-op", None),
    ("custom-domain", lambda: one("FusedConv", ["x"], domain="com.microsoft"), clean, "error", "custom-domain-op", None),
    ("int8-dtype", lambda: one("Relu", ["x"], in_type=INT8), clean, "error", "unsupported-dtype", None),
    ("double-dtype", lambda: one("Relu", ["x"], in_type=TensorProto.DOUBLE), clean, "warning", "double-dtype", None),
    ("resize-cubic", lambda: resize("cubic"), resize, "warning", "unsupported-attribute", None),
    ("resize-crop", lambda: resize(coordinate="tf_crop_and_resize"), resize, "error", "unsupported-attribute", None),
    ("resize-antialias", lambda: resize(antialias=1), resize, "error", "unsupported-attribute", None),
    (
        "pad-mode",
        lambda: one("Pad", ["x", "p"], {"mode": "symmetric"}, initializers=[const("p", [0] * 8, np.int64)]),
        lambda: one("Pad", ["x", "p"], {"mode": "edge"}, initializers=[const("p", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)]),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "pool-dilations",
        lambda: one("MaxPool", ["x"], {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        lambda: one("MaxPool", ["x"], {"kernel_shape": [2, 2]}),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "pool-indices",
        lambda: one("MaxPool", ["x"], {"kernel_shape": [2, 2]}, outputs=2),
        lambda: one("MaxPool", ["x"], {"kernel_shape": [2, 2]}),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "topk-unsorted",
        lambda: one("TopK", ["x", "k"], {"sorted": 0}, initializers=[const("k", [3], np.int64)], outputs=2),
        lambda: one("TopK", ["x", "k"], initializers=[const("k", [3], np.int64)], outputs=2),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "topk-large-k",
        lambda: one("TopK", ["x", "k"], shape=[1, 5000], initializers=[const("k", [4000], np.int64)], outputs=2),
        lambda: one("TopK", ["x", "k"], shape=[1, 5000], initializers=[const("k", [100], np.int64)], outputs=2),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "scatternd",
        lambda: one(
            "ScatterND",
            ["x", "i", "u"],
            {"reduction": "add"},
            shape=[4],
            opset=18,
            initializers=[const("i", [[1]], np.int64), const("u", [1.0], np.float32)],
        ),
        lambda: one(
            "ScatterND", ["x", "i", "u"], shape=[4], opset=18, initializers=[const("i", [[1]], np.int64), const("u", [1.0], np.float32)]
        ),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "dropout-training",
        lambda: one("Dropout", ["x", "r", "t"], initializers=[const("r", 0.5, np.float32), const("t", True, np.bool_)]),
        lambda: one("Dropout", ["x", "r"], initializers=[const("r", 0.5, np.float32)]),
        "error",
        "unsupported-attribute",
        None,
    ),
    ("lstm-layout", lambda: lstm(1), lambda: lstm(0), "error", "unsupported-attribute", None),
    (
        "constant-string",
        lambda: model([helper.make_node("Constant", [], ["y"], value_string="s")], [], [value("y", None, TensorProto.STRING)]),
        lambda: model([helper.make_node("Constant", [], ["y"], value_float=1.0)], [], [value("y", None)]),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "layernorm-outputs",
        lambda: one("LayerNormalization", ["x", "s"], initializers=[const("s", np.ones(8, np.float32))], outputs=2),
        lambda: one("LayerNormalization", ["x", "s"], initializers=[const("s", np.ones(8, np.float32))]),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "gridsample-rank",
        lambda: one("GridSample", ["x", "g"], shape=[1, 3, 4, 4, 4], opset=20, extra_inputs=[value("g", [1, 2, 2, 2, 3])]),
        lambda: one("GridSample", ["x", "g"], opset=16, extra_inputs=[value("g", [1, 2, 2, 2])]),
        "error",
        "unsupported-attribute",
        None,
    ),
    (
        "eyelike-dynamic",
        lambda: one("EyeLike", ["x"], shape=["n", 3]),
        lambda: one("EyeLike", ["x"], shape=[3, 3]),
        "error",
        "unsupported-attribute",
        1,
    ),
    ("nms-rank", lambda: nms(2), nms, "error", "unsupported-attribute", None),
    ("nms", nms, clean, "info", "nms", None),
    (
        "einsum-uppercase",
        lambda: einsum("IJ,JK->IK", [[2, 3], [3, 4]]),
        lambda: einsum("ij,jk->ik", [[2, 3], [3, 4]]),
        "error",
        "unsupported-attribute",
        None,
    ),
    ("einsum-matmul", lambda: einsum("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]), clean, "info", "einsum", None),
    (
        "einsum-ellipsis",
        lambda: einsum("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]]),
        lambda: einsum("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
        "warning",
        "einsum",
        None,
    ),
    ("qdq-asymmetric", lambda: qdq(zero_point=3), qdq, "error", "qdq-asymmetric", None),
    ("qdq-uint8", lambda: qdq(zp_type=np.uint8), qdq, "error", "qdq-uint8", None),
    ("qdq-implicit", lambda: qdq(implicit=True), qdq, "warning", "qdq-implicit-uint8", None),
    ("qdq-int32-bias", lambda: dequantize(np.int32), lambda: dequantize(np.int8), "error", "qdq-dtype", None),
    ("qdq-scale-runtime", lambda: qdq(scale_input=True), qdq, "error", "dynamic-parameter", None),
    (
        "qdq-per-channel-activation",
        lambda: qdq(scale_size=3),
        lambda: dequantize(np.int8, scale_size=3),
        "warning",
        "qdq-per-channel-activation",
        None,
    ),
    ("qdq-per-channel-weight-pair", lambda: qdq(scale_size=3), quantized_weight, "warning", "qdq-per-channel-activation", None),
    ("int64-io", lambda: one("Cast", ["x"], {"to": TensorProto.FLOAT}, in_type=INT64), clean, "warning", "int64-io", None),
    ("io-dtype", lambda: one("Cast", ["x"], {"to": TensorProto.FLOAT}, in_type=INT8), clean, "error", "io-dtype", None),
    ("dynamic-dim", lambda: one("Relu", ["x"], shape=[1, 3, "h", 8]), clean, "warning", "dynamic-dim", None),
    (
        "batch-undeclared",
        lambda: one("Relu", ["x"], shape=["n", 3]),
        lambda: with_profile(one("Relu", ["x"], shape=["n", 3])),
        "info",
        "batch-range-undeclared",
        None,
    ),
    ("static-batch", lambda: one("Relu", ["x"], shape=[1, 3]), lambda: one("Relu", ["x"], shape=["n", 3]), "warning", "static-batch", 8),
    (
        "batch-pinned-reshape",
        lambda: one("Reshape", ["x", "s"], shape=["n", 4, 1, 1], initializers=[const("s", np.array([1, 1, 1, 4], dtype=np.int64))]),
        lambda: one("Reshape", ["x", "s"], shape=["n", 4, 1, 1], initializers=[const("s", np.array([0, 1, 1, 4], dtype=np.int64))]),
        "warning",
        "batch-pinned-reshape",
        None,
    ),
    (
        "batch-mismatch",
        lambda: with_profile(one("Relu", ["x"], shape=["n", 3])),
        lambda: one("Relu", ["x"], shape=["n", 3]),
        "warning",
        "batch-range-mismatch",
        32,
    ),
    (
        "batch-profile",
        lambda: with_profile(one("Relu", ["x"], shape=["n", 3]), "{not json"),
        lambda: with_profile(one("Relu", ["x"], shape=["n", 3])),
        "error",
        "batch-profile",
        None,
    ),
    ("runtime-pads-folds", lambda: pad_into("Conv", folded_pads), lambda: pad_into("Conv"), "warning", "runtime-pads", 8),
    ("runtime-pads-batch", lambda: pad_into("Relu", batch_dependent_pads), lambda: pad_into("Relu"), "warning", "runtime-pads", 8),
    ("pad-before-conv", lambda: pad_into("Conv"), lambda: pad_into("Conv", value_=1.0), "info", "pad-before-conv", 8),
    ("foldable-parameter", lambda: reduce_sum("folded"), lambda: reduce_sum("constant"), "warning", "foldable-parameter", None),
    ("dynamic-parameter", lambda: reduce_sum("input"), lambda: reduce_sum("constant"), "error", "dynamic-parameter", None),
    ("foldable-subgraph", lambda: reshape("folded"), lambda: reshape("constant"), "info", "foldable-subgraph", 8),
    ("runtime-shape", lambda: reshape("batch"), lambda: reshape("other"), "info", "runtime-shape", 8),
    (
        "noop",
        lambda: model(
            [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], [value("x", [1, 3])], [value("y", None)]
        ),
        clean,
        "info",
        "noop-node",
        None,
    ),
]


@pytest.mark.parametrize("positive, negative, severity, code, max_batch", [pytest.param(*case[1:], id=case[0]) for case in RULES])
def test_rule(
    positive: Callable[[], onnx.ModelProto], negative: Callable[[], onnx.ModelProto], severity: str, code: str, max_batch: int | None
) -> None:
    assert (severity, code) in findings(positive(), max_batch), f"{code} not reported"
    assert (severity, code) not in findings(negative(), max_batch), f"{code} reported on the negative case"


def test_findings_name_the_fix_that_repairs_them() -> None:
    assert finding(pad_into("Conv", folded_pads), "runtime-pads", 8).fix == ("fold_constants_and_cleanup", "fuse_pad_into_conv")
    assert finding(pad_into("Relu", batch_dependent_pads), "runtime-pads", 8).fix == ()  # nothing can make it static
    assert finding(reshape("batch"), "runtime-shape", 8).fix[-1] == "batch_reshape_placeholder"
    assert finding(einsum("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]]), "einsum").fix == ("einsum_to_matmul",)
    assert finding(einsum("ii->i", [[3, 3]]), "einsum").fix == ()
    mediapipe = one(
        "Convolution2DTransposeBias",
        ["x", "w", "b"],
        domain="mediapipe",
        shape=[1, 4, 4, 3],
        initializers=[const("w", rng_array(2, 2, 2, 3)), const("b", rng_array(2))],
    )
    assert finding(mediapipe, "custom-domain-op").fix == ("custom_op_rewrites",)
    assert finding(one("FusedConv", ["x"], domain="com.microsoft"), "custom-domain-op").fix == ()
    assert "deprecated since TensorRT 10.12 and still shipped in 11.1" in finding(one("EfficientNMS_TRT", ["x"]), "unsupported-op").message
    # Still listed (deprecated) in 10.16's plugin README: gone in 11.0, not before.
    assert "removed in 11.0" in finding(one("EfficientNMS_ONNX_TRT", ["x"]), "unsupported-op").message
    assert "QDQ format" in finding(one("QLinearConv", ["x"]), "unsupported-op").message


def test_the_types_are_the_parser_importers_not_the_operators_table() -> None:
    """onnx-tensorrt's importers (10.8-10.10): NonZero lists BOOL and an integer Clip becomes max/min, so neither is
    reported; Relu's activation refuses INT32 though the operators table lists it; HardSwish's check has no BF16;
    Mod with fmod=0 takes integers only; an op the parser only gained later is a warning for the older releases."""
    bool_mask = one("NonZero", ["x"], in_type=TensorProto.BOOL, shape=[6])
    assert findings(bool_mask) == []
    clip = one("Clip", ["x", "low"], in_type=INT64, shape=[4], initializers=[const("low", 0, np.int64)])
    assert findings(clip) == [("warning", "int64-io")]  # the INT64 at the boundary, not the Clip
    assert "importer refuses INT32" in finding(one("Relu", ["x"], in_type=INT32), "unsupported-dtype").message
    assert "importer refuses BF16" in finding(one("HardSwish", ["x"], in_type=TensorProto.BFLOAT16), "unsupported-dtype").message
    integers = [value("y_in", [1, 3, 8, 8])]
    assert finding(one("Mod", ["x", "y_in"], extra_inputs=integers), "unsupported-dtype").message.startswith("Mod with fmod=0 on FP32")
    assert findings(one("Mod", ["x", "y_in"], attrs={"fmod": 1}, extra_inputs=integers)) == []
    assert ("warning", "later-op") in findings(
        one("RMSNormalization", ["x", "scale"], shape=[1, 4], initializers=[const("scale", rng_array(4))], opset=23)
    )


def test_report_orders_by_severity_and_summarizes() -> None:
    built = model(
        [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Det", ["a"], ["y"])],
        [value("x", ["n", 3, 3], INT64)],
        [value("y", None)],
    )
    report = trt_compat.check_model(built, name="m.onnx")
    severities = [f.severity for f in report.findings]
    assert severities == sorted(severities, key=trt_compat.SEVERITIES.index)
    assert report.blocking and report.counts["error"] >= 1
    text = report.format_text()
    assert text.splitlines()[0].startswith("m.onnx: opset 17")
    assert text.splitlines()[-1].endswith("blocks a TensorRT build")
    record = report.to_dict()
    assert record["blocking"] is True and {"severity", "code", "node", "op", "message", "fix"} <= set(record["findings"][0])


# --------------------------------------------------------------------------- CLI


def test_cli_check_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.onnx"
    onnx.save(clean(), str(good))
    # An explicit model needs no --pipeline, although the repository has several.
    assert len(layout.pipelines()) > 1
    assert cli.main(["check", str(good)]) == 0
    assert "nothing blocks a TensorRT build" in capsys.readouterr().out
    assert cli.main(["check", "--pipeline", CLASSIFIER.name, str(good)]) == 0
    assert "nothing blocks a TensorRT build" in capsys.readouterr().out

    bad = tmp_path / "bad.onnx"
    onnx.save(one("Det", ["x"], shape=[1, 3, 3]), str(bad))
    assert cli.main(["check", str(bad), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["blocking"] and record["findings"][0]["code"] == "unsupported-op"


@pytest.mark.parametrize("content", [None, b"not an onnx file"])
def test_cli_check_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None) -> None:
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    assert cli.main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and str(path) in lines[0]
    assert captured.out == ""


def test_cli_check_without_a_model_needs_the_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    """The default model is a pipeline's core: with several pipelines, which one must be said."""
    assert cli.main(["check"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().startswith("error: choose a pipeline with --pipeline NAME") and captured.out == ""


def test_check_after_fix_on_the_default_model(tmp_path: Path) -> None:
    """The served export passes check; after fix it has no findings at all (the batch range is recorded)."""
    from builders import fix_onnx
    from builders.passes import registry

    source = CLASSIFIER.onnx("fp32")
    if not source.is_file():
        pytest.skip(f"{source} is not built (python -m builders export --pipeline {CLASSIFIER.name})")
    assert not trt_compat.check_file(source).blocking
    options = fix_onnx.options_for_core(model_config.load_config(CLASSIFIER.core_dir), None, None, 1e-4, 1e-4)
    fixed = fix_onnx.fix_file(source, tmp_path / "fixed.onnx", registry.DEFAULT_PASSES, options, log=lambda _: None)
    assert trt_compat.check_model(fixed.model).findings == []
