"""Reference implementations of custom ops, to check graph rewrites against.

* :func:`transpose_conv_bias` is MediaPipe's ``Convolution2DTransposeBias``
  (``mediapipe/util/tflite/operations/transpose_conv_bias.cc``) in numpy: an
  NHWC transposed convolution (TFLite ``TransposeConv`` semantics) plus bias.
* :func:`run_unfixed_with_reference` runs a model that still contains the
  custom op on onnxruntime, with the op registered as a Python op through
  ``onnxruntime-extensions`` (PyOp, domain ``ai.onnx.contrib``). It is the
  "before" of the rewrite, computed without the rewrite's own math.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

if TYPE_CHECKING:
    from builders.tflite import TransposeConvParams

PYOP_DOMAIN = "ai.onnx.contrib"
PYOP_TYPE = "Convolution2DTransposeBias"
CUSTOM_OP_TYPES = ("Convolution2DTransposeBias", "TFL_Convolution2DTransposeBias")
_registered = False


def transpose_conv_bias(
    x: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray | None,
    stride_h: int,
    stride_w: int,
    padding: str,
) -> np.ndarray:
    """``x`` [N, H, W, C_in], ``weights`` [C_out, kH, kW, C_in] (OHWI), ``bias`` [C_out] -> [N, H', W', C_out].

    SAME: H' = H*s; VALID: H' = (H-1)*s + kH. Input pixel (y, x) scatters
    ``weights[:, fy, fx, :] @ x`` to output (y*s - pad_top + fy, x*s - pad_left + fx);
    SAME's pad_top is ``max(kH - s, 0) // 2`` (TFLite's ComputePaddingHeightWidth).
    Accumulates in float64, returns ``x``'s dtype.
    """
    padding = padding.upper()
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be SAME or VALID, not {padding!r}")
    batch, height, width, channels = x.shape
    out_channels, kernel_h, kernel_w, weight_channels = weights.shape
    if channels != weight_channels:
        raise ValueError(f"input has {channels} channels, weights (OHWI) expect {weight_channels}")
    if padding == "SAME":
        out_h, out_w = height * stride_h, width * stride_w
        pad_top, pad_left = max(kernel_h - stride_h, 0) // 2, max(kernel_w - stride_w, 0) // 2
    else:
        out_h, out_w = (height - 1) * stride_h + kernel_h, (width - 1) * stride_w + kernel_w
        pad_top = pad_left = 0
    full_h = max((height - 1) * stride_h + kernel_h, pad_top + out_h)
    full_w = max((width - 1) * stride_w + kernel_w, pad_left + out_w)
    full = np.zeros((batch, full_h, full_w, out_channels), dtype=np.float64)
    x64, w64 = x.astype(np.float64), weights.astype(np.float64)
    for fy in range(kernel_h):
        for fx in range(kernel_w):
            contribution = np.einsum("nhwc,oc->nhwo", x64, w64[:, fy, fx, :])
            full[:, fy : fy + (height - 1) * stride_h + 1 : stride_h, fx : fx + (width - 1) * stride_w + 1 : stride_w, :] += contribution
    out = full[:, pad_top : pad_top + out_h, pad_left : pad_left + out_w, :]
    if bias is not None:
        out = out + bias.astype(np.float64).reshape(1, 1, 1, -1)
    return out.astype(x.dtype)


def _register_pyop() -> None:
    """Register the PyOp once per process (onnxruntime-extensions keeps a global registry)."""
    global _registered
    if _registered:
        return
    from onnxruntime_extensions import PyCustomOpDef, onnx_op  # type: ignore[import-untyped]

    @onnx_op(  # type: ignore[misc]
        op_type=PYOP_TYPE,
        inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
        outputs=[PyCustomOpDef.dt_float],
        attrs={
            "padding": PyCustomOpDef.dt_string,
            "stride_h": PyCustomOpDef.dt_int64,
            "stride_w": PyCustomOpDef.dt_int64,
        },
    )
    def _convolution_2d_transpose_bias(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, **attrs: Any) -> np.ndarray:
        return transpose_conv_bias(
            np.asarray(x, dtype=np.float32),
            np.asarray(weights, dtype=np.float32),
            np.asarray(bias, dtype=np.float32),
            int(attrs["stride_h"]),
            int(attrs["stride_w"]),
            str(attrs["padding"]),
        )

    _registered = True


def _attribute(node: onnx.NodeProto, name: str) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            value = onnx.helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return None


def _node_params(model: onnx.ModelProto, params: Sequence[TransposeConvParams] | None) -> dict[str, tuple[str, int, int]]:
    """(padding, stride_h, stride_w) per custom node output: attributes, else ``params``, else derived from shapes."""
    nodes = [node for node in model.graph.node if node.op_type in CUSTOM_OP_TYPES]
    result: dict[str, tuple[str, int, int]] = {}
    by_name = {param.output: param for param in params or ()}
    missing: list[onnx.NodeProto] = []
    for index, node in enumerate(nodes):
        padding, stride_h, stride_w = (
            _attribute(node, "padding"),
            _attribute(node, "stride_h"),
            _attribute(node, "stride_w"),
        )
        if padding is not None or stride_h is not None or stride_w is not None:
            if isinstance(padding, int):
                padding = {1: "SAME", 2: "VALID"}.get(padding, str(padding))
            result[node.output[0]] = (str(padding or "SAME").upper(), int(stride_h or 1), int(stride_w or 1))
        elif node.output[0] in by_name:
            param = by_name[node.output[0]]
            result[node.output[0]] = (param.padding, param.stride_h, param.stride_w)
        elif params is not None and not any(node_.output[0] in by_name for node_ in nodes) and index < len(params):
            param = params[index]
            result[node.output[0]] = (param.padding, param.stride_h, param.stride_w)
        else:
            missing.append(node)
    if missing:
        import onnx_graphsurgeon as gs

        from builders.passes.convolution_2d_transpose_bias import planned_configs

        derived = planned_configs(gs.import_onnx(model))
        for node in missing:
            config = derived[node.output[0]]
            result[node.output[0]] = (config.padding, config.stride_h, config.stride_w)
    return result


def with_pyop_domain(model: onnx.ModelProto, params: Sequence[TransposeConvParams] | None = None) -> onnx.ModelProto:
    """A copy whose custom nodes are ``ai.onnx.contrib.Convolution2DTransposeBias`` with explicit attributes.

    Stride and padding come from the node's attributes, else from ``params``
    (the ``.tflite`` custom options, matched by output name, else by order), else
    are derived from shapes as the graph pass does.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    attributes = _node_params(copy, params)
    for node in copy.graph.node:
        if node.op_type not in CUSTOM_OP_TYPES:
            continue
        padding, stride_h, stride_w = attributes[node.output[0]]
        node.op_type, node.domain = PYOP_TYPE, PYOP_DOMAIN
        del node.attribute[:]
        node.attribute.extend(
            [
                onnx.helper.make_attribute("padding", padding),
                onnx.helper.make_attribute("stride_h", int(stride_h)),
                onnx.helper.make_attribute("stride_w", int(stride_w)),
            ]
        )
    if not any(entry.domain == PYOP_DOMAIN for entry in copy.opset_import):
        copy.opset_import.append(onnx.helper.make_opsetid(PYOP_DOMAIN, 1))
    return copy


def run_unfixed_with_reference(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    params: Sequence[TransposeConvParams] | None = None,
) -> list[np.ndarray]:
    """Run the graph *with* its ``Convolution2DTransposeBias`` nodes on onnxruntime (CPU), the op as a numpy PyOp.

    See :func:`with_pyop_domain` for where stride and padding come from.
    Needs ``onnxruntime-extensions``.
    """
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    _register_pyop()
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(with_pyop_domain(model, params).SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(output) for output in session.run(None, dict(feeds))]
