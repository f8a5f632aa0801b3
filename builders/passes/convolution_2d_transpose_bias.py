"""MediaPipe's ``Convolution2DTransposeBias`` -> Transpose, ``ConvTranspose`` (with bias), Transpose.

The op (``mediapipe/util/tflite/operations/transpose_conv_bias.cc``) is a TFLite
transposed convolution whose bias is an input: ``x`` [N, H, W, C_in] (NHWC),
``weights`` [C_out, kH, kW, C_in] (OHWI, constant), ``bias`` [C_out] (constant).
Its stride and padding live in the TFLite operator's custom options (a raw
``TfLiteTransposeConvParams``). Converters disagree on what survives: tf2onnx
1.17 emits ``TFL_Convolution2DTransposeBias`` in the default domain with *no*
attributes; other tools emit ``Convolution2DTransposeBias`` (e.g. domain
``mediapipe``) with ``padding``/``stride_h``/``stride_w`` attributes.

Method: attributes when the node has them (checked against the shapes when
those are known); otherwise stride and padding are **derived from the tensor
shapes**. Per spatial axis, with input size ``i``, output size ``o`` and kernel
``k``: SAME holds when ``o == i*s`` (``s = o / i``), VALID when
``o == (i-1)*s + k``. Both axes must agree on one padding. When SAME and VALID
both hold (``k == s``) the rewrite is identical either way (no padding). Why
shapes and not the ``.tflite`` file: the pass then works on any converter's
output on its own, and the custom options stay an *independent* record that
:func:`check_against_tflite` compares the derivation with during the build.
Missing shapes, non-constant weights or an output size that fits neither rule
(or fits two different rewrites) raise :class:`ValueError` naming the node.

Shapes are taken from the graph's tensors; missing ones are filled by ONNX
shape inference on a copy, and an output shape still unknown (inference stops
at the custom op) is read back through shape-preserving unary ops downstream
(tf2onnx's selfie model: ``segment --Sigmoid--> activation_10``, a graph output
of known shape).

Before::

    x --Convolution2DTransposeBias(weights, bias)--> y

After::

    x --Transpose(0,3,1,2)--> ConvTranspose(W=weights.transpose(3,0,1,2), B=bias,
          strides, pads=[t,l,b,r] [, output_padding])--> Transpose(0,2,3,1)--> y

SAME pads: total ``k - s`` per axis, ``total // 2`` before and the rest after
(TFLite's ``ComputePaddingHeightWidth`` for the transposed conv); when
``k < s`` the uncovered tail (bias only) is ONNX's ``output_padding``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from builders.passes.graph import Names, constant_values

if TYPE_CHECKING:
    from builders.tflite import TransposeConvParams

OP_TYPES = ("Convolution2DTransposeBias", "TFL_Convolution2DTransposeBias")
_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
# Ops whose (first) output has exactly the shape of their first input.
SHAPE_PRESERVING_UNARY = frozenset(
    {
        "Abs", "Cast", "Ceil", "Clip", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
        "Identity", "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
        "Sign", "Softplus", "Softsign", "Sqrt", "Tanh",
    }
)  # fmt: skip


@dataclass(frozen=True)
class TransposeConvConfig:
    """What the rewrite needs: TFLite's view (padding, strides) and ONNX ``ConvTranspose``'s."""

    padding: str  # "SAME" | "VALID"
    stride_h: int
    stride_w: int
    pads: tuple[int, int, int, int]  # ONNX order: top, left, bottom, right
    output_padding: tuple[int, int]


def is_convolution_2d_transpose_bias(node: gs.Node) -> bool:
    return node.op in OP_TYPES


def _node_label(node: gs.Node) -> str:
    return f"{node.op} node {node.name or '(unnamed)'!r} (output {node.outputs[0].name if node.outputs else '?'!r})"


def _static_shape(shape: Any) -> list[int] | None:
    if shape is None:
        return None
    dims = list(shape)
    if not all(isinstance(dim, (int, np.integer)) and int(dim) >= 0 for dim in dims):
        return None
    return [int(dim) for dim in dims]


def _padding_value(value: object) -> str | None:
    """TfLitePadding as an attribute: "SAME"/"VALID" (str or bytes) or 1/2 (the C enum)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value.upper() in ("SAME", "VALID"):
        return value.upper()
    if isinstance(value, (int, np.integer)) and int(value) in (1, 2):
        return "SAME" if int(value) == 1 else "VALID"
    return None


def config_for(padding: str, size_in: Sequence[int], kernel: Sequence[int], strides: Sequence[int]) -> TransposeConvConfig:
    """The ONNX pads and output_padding for TFLite's ``padding`` and strides (H, W)."""
    pads_before, pads_after, output_padding = [], [], []
    for size, k, s in zip(size_in, kernel, strides):
        if padding == "SAME":
            total = k - s  # full size (i-1)*s+k minus the SAME output size i*s
            if total >= 0:
                pads_before.append(total // 2)
                pads_after.append(total - total // 2)
                output_padding.append(0)
            else:
                pads_before.append(0)
                pads_after.append(0)
                output_padding.append(-total)
        else:
            pads_before.append(0)
            pads_after.append(0)
            output_padding.append(0)
        del size
    return TransposeConvConfig(
        padding,
        int(strides[0]),
        int(strides[1]),
        (pads_before[0], pads_before[1], pads_after[0], pads_after[1]),
        (output_padding[0], output_padding[1]),
    )


def expected_output_hw(padding: str, size_in: Sequence[int], kernel: Sequence[int], strides: Sequence[int]) -> list[int]:
    if padding == "SAME":
        return [i * s for i, s in zip(size_in, strides)]
    return [(i - 1) * s + k for i, k, s in zip(size_in, kernel, strides)]


def derive_config(size_in: Sequence[int], size_out: Sequence[int], kernel: Sequence[int]) -> list[TransposeConvConfig]:
    """Every distinct rewrite that maps input (H, W) to output (H, W) with this kernel (empty: none; >1: ambiguous).

    Configurations that compute the same thing count once: SAME and VALID with
    ``k == s`` (no padding either way) give one entry, reported as SAME.
    """
    candidates: dict[tuple[Any, ...], TransposeConvConfig] = {}
    for padding in ("SAME", "VALID"):
        strides: list[int] = []
        for i, o, k in zip(size_in, size_out, kernel):
            if i < 1 or o < 1:
                break
            if padding == "SAME":
                if o % i:
                    break
                strides.append(o // i)
            elif i == 1:
                if o != k:
                    break
                strides.append(1)  # one input row: the stride changes nothing
            else:
                if o < k or (o - k) % (i - 1):
                    break
                strides.append((o - k) // (i - 1))
        if len(strides) != 2 or min(strides) < 1:
            continue
        config = config_for(padding, size_in, kernel, strides)
        # One input element along an axis: its stride does not matter unless output_padding depends on it.
        key_strides = tuple(1 if i == 1 and pad == 0 else s for i, s, pad in zip(size_in, strides, config.output_padding))
        key = (key_strides, config.pads, config.output_padding)
        candidates.setdefault(key, config)
    return list(candidates.values())


def _shape_table(graph: gs.Graph) -> dict[str, list[int]]:
    """Static shapes by tensor name: the graph's own, then ONNX shape inference on a copy."""
    shapes: dict[str, list[int]] = {}
    for name, tensor in graph.tensors().items():
        shape = _static_shape(tensor.shape)
        if shape is not None:
            shapes[name] = shape
    try:
        model = gs.export_onnx(graph.copy(), do_type_check=False)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference is best effort; missing shapes are reported by the caller
        return shapes
    graph_proto = inferred.graph
    for value in [*graph_proto.value_info, *graph_proto.input, *graph_proto.output]:
        if value.name in shapes or not value.type.HasField("tensor_type"):
            continue
        if not value.type.tensor_type.HasField("shape"):
            continue
        dims = value.type.tensor_type.shape.dim
        if all(dim.HasField("dim_value") for dim in dims):
            shapes[value.name] = [int(dim.dim_value) for dim in dims]
    return shapes


def _output_shape(tensor: gs.Tensor, shapes: Mapping[str, list[int]], graph_outputs: set[str]) -> list[int] | None:
    """The tensor's shape, or one read back through a chain of shape-preserving unary consumers."""
    seen: set[str] = set()
    frontier = [tensor]
    while frontier:
        current = frontier.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        if current.name in shapes:
            return shapes[current.name]
        for consumer in current.outputs:
            if consumer.op in SHAPE_PRESERVING_UNARY and consumer.inputs and consumer.inputs[0] is current:
                frontier.extend(consumer.outputs[:1])
    del graph_outputs
    return None


def _attributes_config(node: gs.Node, kernel: Sequence[int], size_in: list[int] | None) -> TransposeConvConfig | None:
    attrs = node.attrs
    if not any(key in attrs for key in ("padding", "stride_h", "stride_w")):
        return None
    padding = _padding_value(attrs.get("padding", "SAME"))
    if padding is None:
        raise ValueError(f"{_node_label(node)}: padding attribute {attrs.get('padding')!r} is not SAME/VALID/1/2")
    strides = [int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))]
    if min(strides) < 1:
        raise ValueError(f"{_node_label(node)}: strides {strides} must be >= 1")
    return config_for(padding, size_in or [1, 1], kernel, strides)


def _plan(
    node: gs.Node, shapes: Mapping[str, list[int]], graph_outputs: set[str]
) -> tuple[np.ndarray, np.ndarray | None, TransposeConvConfig]:
    label = _node_label(node)
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"{label}: expected inputs (x, weights[, bias]) and one output")
    weights = constant_values(node.inputs[1])
    if weights is None or weights.ndim != 4:
        raise ValueError(f"{label}: weights must be a constant OHWI tensor (fold constants first)")
    bias: np.ndarray | None = None
    if len(node.inputs) == 3 and node.inputs[2].name:
        bias = constant_values(node.inputs[2])
        if bias is None or bias.size != weights.shape[0]:
            raise ValueError(f"{label}: bias must be a constant with {weights.shape[0]} values")
    kernel = [int(weights.shape[1]), int(weights.shape[2])]
    x_shape = shapes.get(node.inputs[0].name)
    y_shape = _output_shape(node.outputs[0], shapes, graph_outputs)
    size_in = x_shape[1:3] if x_shape is not None and len(x_shape) == 4 else None
    size_out = y_shape[1:3] if y_shape is not None and len(y_shape) == 4 else None
    if x_shape is not None and len(x_shape) == 4 and x_shape[3] != weights.shape[3]:
        raise ValueError(f"{label}: input has {x_shape[3]} channels, weights expect {weights.shape[3]} (OHWI)")

    from_attributes = _attributes_config(node, kernel, size_in)
    if from_attributes is not None:
        if size_in is not None and size_out is not None:
            expected = expected_output_hw(from_attributes.padding, size_in, kernel,
                                          [from_attributes.stride_h, from_attributes.stride_w])  # fmt: skip
            if expected != size_out:
                raise ValueError(
                    f"{label}: attributes ({from_attributes.padding}, strides {from_attributes.stride_h}x"
                    f"{from_attributes.stride_w}) give output H,W {expected}, the graph says {size_out}"
                )
        return weights, bias, from_attributes
    if size_in is None or size_out is None:
        raise ValueError(
            f"{label}: no stride/padding attributes and the {'input' if size_in is None else 'output'} shape "
            f"is unknown (input {x_shape}, output {y_shape}); cannot derive stride and padding"
        )
    configs = derive_config(size_in, size_out, kernel)
    if not configs:
        raise ValueError(
            f"{label}: output H,W {size_out} fits neither SAME (in*s) nor VALID ((in-1)*s+k) for input H,W {size_in} and kernel {kernel}"
        )
    if len(configs) > 1:
        raise ValueError(f"{label}: input H,W {size_in} -> output {size_out} with kernel {kernel} is ambiguous: {configs}")
    return weights, bias, configs[0]


def planned_configs(graph: gs.Graph) -> dict[str, TransposeConvConfig]:
    """What the pass would use for each matching node, keyed by the node's output tensor name."""
    shapes = _shape_table(graph)
    outputs = {tensor.name for tensor in graph.outputs}
    return {node.outputs[0].name: _plan(node, shapes, outputs)[2] for node in graph.nodes if is_convolution_2d_transpose_bias(node)}


def convolution_2d_transpose_bias(graph: gs.Graph) -> int:
    """Rewrite every ``[TFL_]Convolution2DTransposeBias`` node (any domain) into standard ONNX ops.

    Returns the number of rewritten nodes. Raises :class:`ValueError` (naming
    the node) when one cannot be rewritten; the graph is then unchanged.
    """
    targets = [node for node in graph.nodes if is_convolution_2d_transpose_bias(node)]
    if not targets:
        return 0
    shapes = _shape_table(graph)
    graph_outputs = {tensor.name for tensor in graph.outputs}
    plans = [(node, *_plan(node, shapes, graph_outputs)) for node in targets]  # all checked before any edit
    names = Names(graph)
    for node, weights, bias, config in plans:
        base = node.name or "convolution_2d_transpose_bias"
        data, result = node.inputs[0], node.outputs[0]
        node.inputs.clear()
        node.outputs.clear()
        nchw = gs.Variable(names(f"{base}/nchw"), dtype=data.dtype)
        graph.nodes.append(gs.Node("Transpose", names(f"{base}/to_nchw"), {"perm": [0, 3, 1, 2]}, [data], [nchw]))
        inputs: list[gs.Tensor] = [
            nchw,
            gs.Constant(names(f"{base}/W"), np.ascontiguousarray(weights.transpose(3, 0, 1, 2))),
        ]
        if bias is not None:
            inputs.append(gs.Constant(names(f"{base}/B"), np.ascontiguousarray(bias.reshape(-1).astype(weights.dtype))))
        attrs: dict[str, Any] = {
            "kernel_shape": [int(weights.shape[1]), int(weights.shape[2])],
            "strides": [config.stride_h, config.stride_w],
            "pads": list(config.pads),
        }
        if any(config.output_padding):
            attrs["output_padding"] = list(config.output_padding)
        deconv = gs.Variable(names(f"{base}/deconv"), dtype=data.dtype)
        graph.nodes.append(gs.Node("ConvTranspose", names(f"{base}/ConvTranspose"), attrs, inputs, [deconv]))
        graph.nodes.append(gs.Node("Transpose", names(f"{base}/to_nhwc"), {"perm": [0, 2, 3, 1]}, [deconv], [result]))
    graph.cleanup().toposort()
    used = {node.domain or "" for node in graph.nodes}
    if graph.import_domains:
        graph.import_domains = [entry for entry in graph.import_domains if entry.domain in _STANDARD_DOMAINS or entry.domain in used]
    return len(plans)


def check_against_tflite(graph: gs.Graph, params: Sequence[TransposeConvParams]) -> list[str]:
    """Disagreements between what the pass derives and the ``.tflite`` custom options (empty: they agree).

    Nodes are matched to the options by output tensor name (tf2onnx keeps the
    TFLite tensor names); when no name matches, by order. Run it on the graph
    *before* :func:`convolution_2d_transpose_bias`.
    """
    try:
        derived = planned_configs(graph)
    except ValueError as error:
        return [str(error)]
    problems: list[str] = []
    if len(derived) != len(params):
        problems.append(f"{len(derived)} Convolution2DTransposeBias nodes in the graph, {len(params)} in the TFLite model")
    by_name = {param.output: param for param in params}
    matched_by_name = any(name in by_name for name in derived)
    pairs = (
        [(name, config, by_name.get(name)) for name, config in derived.items()]
        if matched_by_name
        else [(name, config, param) for (name, config), param in zip(derived.items(), params)]
    )
    for name, config, param in pairs:
        if param is None:
            problems.append(f"{name}: no TFLite operator writes this tensor")
            continue
        if (config.stride_h, config.stride_w) != (param.stride_h, param.stride_w):
            problems.append(f"{name}: strides {config.stride_h}x{config.stride_w} derived, {param.stride_h}x{param.stride_w} in TFLite")
        if config.padding != param.padding:
            # k == s: SAME and VALID are the same rewrite; only a real difference counts.
            other = config_for(param.padding, [2, 2], _kernel_of(graph, name), [param.stride_h, param.stride_w])
            if (other.pads, other.output_padding) != (config.pads, config.output_padding):
                problems.append(f"{name}: padding {config.padding} derived, {param.padding} in TFLite")
    return problems


def _kernel_of(graph: gs.Graph, output_name: str) -> list[int]:
    for node in graph.nodes:
        if is_convolution_2d_transpose_bias(node) and node.outputs and node.outputs[0].name == output_name:
            weights = constant_values(node.inputs[1])
            if weights is not None and weights.ndim == 4:
                return [int(weights.shape[1]), int(weights.shape[2])]
    return [1, 1]
