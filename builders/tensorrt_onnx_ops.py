"""TensorRT's ONNX support, as data for ``python -m builders check``, from the parser's own source.

What the ONNX parser accepts is read from onnx-tensorrt's importers, ``onnxOpImporters.cpp`` and the helpers of
``importerUtils.cpp``, at the parser TensorRT 10.8-GA and 10.10-GA ship (onnx-tensorrt ``118ed0a`` and ``3b9c961``,
read from a git mirror, nothing run):

- ``OPERATORS``: every op with an importer (``DEFINE_BUILTIN_OP_IMPORTER``): the same 177 in both releases, the
  parser's own ``TRT_*`` ops aside, and nothing removed since (TensorRT's ``CHANGELOG.md`` up to v11.1 lists the
  parser's additions, ``LATER_OPERATORS``, and no removal);
- ``PARSER_ACCEPTS`` and ``PARSER_REJECTS``: the types an importer checks its input against (an explicit list, or
  ``checkNotInvalidType``), where it checks on every path. ``NonZero`` lists BOOL (``INonZeroLayer`` takes kBOOL,
  ``NvInfer.h`` at v10.8.0 and v11.1); ``Clip`` on INT32/INT64 is built as elementwise max and min (which take
  INT32/INT64, the same header). Neither needs a rewrite.
- For the types of an op whose importer checks none, the layer it builds decides: ``OPERATORS`` holds the types
  onnx-tensorrt's ``docs/operators.md`` lists for it (TensorRT 10.15 GA), the only statement of those.

The onnx-tensorrt commits TensorRT 11.0 and 11.1 pin (``5ab48c5``, ``7c51a63``) were not in the mirrors this was
read from: for 11.x the table rests on TensorRT's changelog (parser additions only) and its headers, and a model
is confirmed by a build there. Plugins come from ``plugin/README.md`` and ``plugin/efficientNMSPlugin/README.md``
at v11.1: ``EfficientNMS_TRT`` still ships, deprecated since 10.12; ``EfficientNMS_ONNX_TRT`` is listed, deprecated, in 10.16's README, removed in 11.0.

Types use the table's spelling: FP32, FP16, BF16, FP8, FP4, INT4, INT8, INT32, INT64, UINT8, BOOL.
INT8/INT4/FP8/FP4 are "quantized types": only reachable through Q/DQ from a higher-precision float. UINT8 is
only allowed as a network input or output. DOUBLE is cast down to FP32. To update: read the new release's
``onnxOpImporters.cpp`` for the ops and checks below; restrictions that need a look at a node's attributes or
inputs live as code in :mod:`builders.trt_compat`.
"""

from __future__ import annotations

from builders import qdq_rules

RULES = "onnx-tensorrt importers of TensorRT 10.8-10.10"
SOURCE = (
    "onnx-tensorrt onnxOpImporters.cpp and importerUtils.cpp at TensorRT 10.8-GA (118ed0a) and 10.10-GA (3b9c961): ops and "
    "the types their importers check; docs/operators.md (10.15 GA) for the types of the layers no importer checks; "
    "TensorRT CHANGELOG.md and plugin/ at v11.1"
)
# The opsets onnx-tensorrt's docs/operators.md documents (9-22 for 10.8-10.10, 9-24 for 10.15): the parser itself
# refuses none (ModelImporter.cpp warns below 7), but an op's meaning at a later opset may not be what it imports.
MIN_OPSET = 9
MAX_OPSET = 24

_F = "FP32 FP16 BF16"
_FI = "FP32 FP16 BF16 INT32 INT64"
_FIB = "FP32 FP16 BF16 INT32 INT64 BOOL"

# Ops with an importer (10.8-10.10, then LATER_OPERATORS) -> the types docs/operators.md lists for them.
OPERATORS: dict[str, frozenset[str]] = {
    name: frozenset(types.split())
    for name, types in {
        "Abs": _FI,
        "Acos": _F,
        "Acosh": _F,
        "Add": _FI,
        "And": "BOOL",
        "ArgMax": _FI,
        "ArgMin": _FI,
        "Asin": _F,
        "Asinh": _F,
        "Atan": _F,
        "Atanh": _F,
        "Attention": "FP32 FP16 BF16 INT8 FP8",
        "AveragePool": _F,
        "BatchNormalization": _F,
        "BlackmanWindow": "FP32 FP16",
        "Cast": "FP32 FP16 BF16 INT32 INT64 UINT8 BOOL",
        "CastLike": "FP32 FP16 BF16 INT32 INT64 UINT8 BOOL",
        "Ceil": _F,
        "Celu": _F,
        "Clip": _F,
        "Concat": _FIB,
        "Constant": "FP32 FP16 BF16 FP8 FP4 INT4 INT32 INT64 BOOL",
        "ConstantOfShape": "FP32 FP16 BF16 FP8 FP4 INT4 INT32 INT64 BOOL",
        "Conv": _F,
        "ConvTranspose": _F,
        "Cos": _F,
        "Cosh": _F,
        "CumSum": _F,
        "DeformConv": "FP32 FP16",
        "DepthToSpace": _FI,
        "DequantizeLinear": "INT8 FP8 FP4 INT4",
        "Div": _FI,
        "Dropout": _F,
        "Einsum": _F,
        "Elu": _F,
        "Equal": _FI,
        "Erf": _F,
        "Exp": _F,
        "Expand": _FIB,
        "EyeLike": _FIB,
        "Flatten": _FIB,
        "Floor": _F,
        "Gather": _FIB,
        "GatherElements": _FIB,
        "GatherND": _FIB,
        "Gelu": "FP32 FP16 BF16 INT8 INT32 INT64",
        "Gemm": _F,
        "GlobalAveragePool": _F,
        "GlobalLpPool": _F,
        "GlobalMaxPool": _F,
        "Greater": _FI,
        "GreaterOrEqual": _FI,
        "GridSample": "FP32 FP16",
        "GroupNormalization": _F,
        "GRU": _F,
        "HammingWindow": "FP32 FP16",
        "HannWindow": "FP32 FP16",
        "HardSigmoid": _F,
        "HardSwish": _F,
        "Hardmax": _F,
        "Identity": _FIB,
        "If": _FIB,
        "ImageScaler": _F,
        "InstanceNormalization": _F,
        "IsInf": _F,
        "IsNaN": _FI,
        "LayerNormalization": _F,
        "LeakyRelu": _F,
        "Less": _FI,
        "LessOrEqual": _FI,
        "Log": _F,
        "LogSoftmax": _F,
        "Loop": _FIB,
        "LRN": _F,
        "LSTM": _F,
        "LpNormalization": _F,
        "LpPool": _F,
        "MatMul": _F,
        "Max": _FI,
        "MaxPool": _F,
        "Mean": "FP32 FP16 BF16 FP8 INT32 INT64",
        "MeanVarianceNormalization": _F,
        "Min": _FI,
        "Mish": "FP32 FP16",
        "Mod": _FI,
        "Mul": _FI,
        "Neg": _FI,
        "NonMaxSuppression": "FP32 FP16",
        "NonZero": "FP32 FP16",
        "Not": "BOOL",
        "OneHot": _FIB,
        "Or": "BOOL",
        "Pad": _FI,
        "ParametricSoftplus": _F,
        "Pow": _FI,
        "PRelu": _F,
        "QuantizeLinear": _F,
        "RandomNormal": _F,
        "RandomNormalLike": _F,
        "RandomUniform": _F,
        "RandomUniformLike": _F,
        "Range": _FI,
        "Reciprocal": _F,
        "ReduceL1": _FI,
        "ReduceL2": _FI,
        "ReduceLogSum": _FI,
        "ReduceLogSumExp": _FI,
        "ReduceMax": _FI,
        "ReduceMean": _FI,
        "ReduceMin": _FI,
        "ReduceProd": _FI,
        "ReduceSum": _FI,
        "ReduceSumSquare": _FI,
        "Relu": _FI,
        "Reshape": _FIB,
        "Resize": _F,
        "ReverseSequence": _FIB,
        "RMSNormalization": _F,
        "RNN": _F,
        "RoiAlign": "FP32 FP16",
        "RotaryEmbedding": _F,
        "Round": _F,
        "STFT": "FP32",
        "ScaledTanh": _F,
        "Scan": _F,
        "Scatter": _FI,
        "ScatterElements": _FI,
        "ScatterND": _FI,
        "Selu": _F,
        "Shape": _FIB,
        "Shrink": _FI,
        "Sigmoid": _F,
        "Sign": _FI,
        "Sin": _F,
        "Sinh": _F,
        "Size": _FIB,
        "Slice": _FIB,
        "Softmax": _F,
        "Softplus": _F,
        "Softsign": _F,
        "SpaceToDepth": _FI,
        "Split": _FIB,
        "Sqrt": _F,
        "Squeeze": _FIB,
        "Sub": _FI,
        "Sum": _FI,
        "Tan": _F,
        "Tanh": _F,
        "TensorScatter": "FP32 FP16 BF16 INT32",
        "ThresholdedRelu": _F,
        "Tile": _FIB,
        "TopK": _FI,
        "Transpose": _FIB,
        "Trilu": _FIB,
        "Unsqueeze": _FIB,
        "Upsample": _F,
        "Where": _FIB,
        "Xor": "BOOL",
    }.items()
}

# The parser's additions after 10.10, from TensorRT's CHANGELOG.md (v10.14 to v11.0): an op -> the first release with it.
LATER_OPERATORS: dict[str, str] = {
    "Attention": "10.14",
    "RotaryEmbedding": "10.15",
    "RMSNormalization": "10.15",
    "TensorScatter": "10.15",
    "Swish": "11.0",
}

# Input 0's types an importer accepts, checked on every path: any other is a parser error. (InstanceNormalization's
# FP32/FP16 check is its plugin path's only; the native path, the default since 10.0, has none.)
PARSER_ACCEPTS: dict[str, frozenset[str]] = {
    name: frozenset(types.split())
    for name, types in {
        "NonZero": "FP32 FP16 BF16 INT32 INT64 INT8 BOOL",
        "Clip": "FP32 FP16 BF16 INT32 INT64",  # integers: elementwise max and min; floats: the clip activation
        "Mish": "FP32 FP16",
        "HardSwish": "FP32 FP16 INT8",
        "Shrink": "FP32 FP16 INT8 INT32 INT64",
        "DeformConv": "FP32 FP16",
        "GlobalLpPool": "FP32 FP16",
        "LpPool": "FP32 FP16",
        "LpNormalization": "FP32 FP16",
        "MeanVarianceNormalization": "FP32 FP16 BF16",
    }.items()
}
_ACTIVATIONS = ("Elu", "Gelu", "HardSigmoid", "LeakyRelu", "ParametricSoftplus", "Relu", "ScaledTanh", "Selu", "Sigmoid")
_UINT8_REFUSED = (
    *("ArgMax", "ArgMin", "Concat", "Einsum", "Expand", "EyeLike", "Gather", "GatherElements", "GatherND", "Mod"),
    *("OneHot", "Pad", "ReverseSequence", "ScatterElements", "ScatterND", "Slice", "Split", "Tile", "TopK", "Trilu"),
)
# Input 0's types an importer refuses (checkNotInvalidType; activationHelper for the activations).
PARSER_REJECTS: dict[str, frozenset[str]] = {
    **{name: frozenset({"INT32", "BOOL", "UINT8"}) for name in (*_ACTIVATIONS, "Softplus", "Softsign", "Tanh", "ThresholdedRelu")},
    **{name: frozenset({"UINT8"}) for name in _UINT8_REFUSED},
    **{name: frozenset({"BOOL", "UINT8"}) for name in ("DepthToSpace", "SpaceToDepth", "GridSample", "Resize", "Upsample")},
    **{name: frozenset({"INT32", "INT64"}) for name in ("Gemm", "MatMul", "PRelu")},
    "Hardmax": frozenset({"INT64", "INT32", "INT8", "UINT8", "BOOL"}),
}
# Mod: with fmod=0 the importer takes INT32/INT64 only (trt_compat reads the attribute).
MOD_INTEGER_TYPES = frozenset({"INT32", "INT64"})
# TensorRT plugins a model may name (the plugin library must be loaded at build time), and what their README says.
PLUGIN_NOTES = {
    "EfficientNMS_TRT": "deprecated since TensorRT 10.12 and still shipped in 11.1; INMSLayer (ONNX NonMaxSuppression) replaces it",
    "EfficientNMS_ONNX_TRT": "deprecated in TensorRT 10 and removed in 11.0: use ONNX NonMaxSuppression (INMSLayer)",
}

# Listed with "N" (no importer) in docs/operators.md, and without an importer in the parser: a rewrite or a plugin.
UNSUPPORTED: frozenset[str] = frozenset(
    [
        "AffineGrid",
        "Bernoulli",
        "BitShift",
        "BitwiseAnd",
        "BitwiseNot",
        "BitwiseOr",
        "BitwiseXor",
        "Col2Im",
        "CenterCropPad",
        "Compress",
        "ConcatFromSequence",
        "ConvInteger",
        "DFT",
        "Det",
        "DynamicQuantizeLinear",
        "ImageDecoder",
        "MatMulInteger",
        "MaxRoiPool",
        "MaxUnpool",
        "MelWeightMatrix",
        "Multinomial",
        "NegativeLogLikelihoodLoss",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
        "QLinearConv",
        "QLinearMatMul",
        "RegexFullMatch",
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceLength",
        "SequenceMap",
        "SoftmaxCrossEntropyLoss",
        "SplitToSequence",
        "StringConcat",
        "StringNormalizer",
        "StringSplit",
        "TfIdfVectorizer",
        "Unique",
    ]
)

# Inputs the table (or the parser) requires to be build-time constants: op -> {input index: name}.
CONSTANT_INPUTS: dict[str, dict[int, str]] = {
    **{
        op: {1: "axes"}
        for op in (
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
            "Squeeze",
            "Unsqueeze",
        )
    },
    "CumSum": {1: "axis"},
    "OneHot": {1: "depth"},
    "Dropout": {2: "training_mode"},
    "STFT": {1: "frame_step", 2: "window"},
    "QuantizeLinear": {1: "y_scale", 2: "y_zero_point"},
    "DequantizeLinear": {1: "x_scale", 2: "x_zero_point"},
}

# Which tensor's type the table's "Supported Types" describe, where it is not input 0.
TYPED_INPUT: dict[str, int] = {"Where": 1}
TYPED_OUTPUT: frozenset[str] = frozenset(
    {"Constant", "ConstantOfShape", "RandomNormal", "RandomUniform", "Range", "HannWindow", "HammingWindow", "BlackmanWindow"}
)

RESIZE_MODES = frozenset({"nearest", "linear"})
RESIZE_COORDINATE_MODES = frozenset({"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"})
RESIZE_NEAREST_MODES = frozenset({"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"})
PAD_MODES = frozenset({"constant", "reflect", "edge", "wrap"})  # the 10.x Pad importer's modes
TOPK_MAX_K = 3840
# Q/DQ integer types TensorRT builds (its quantized types); uint8 Q/DQ is not among them.
QDQ_TYPES = qdq_rules.TENSORRT_QDQ_TYPES  # one copy: builders/qdq_rules.py
# Network input/output types (UINT8 only at the boundary; INT64 works from 10.0, but see trt_compat).
IO_TYPES = frozenset({"FP32", "FP16", "BF16", "INT32", "INT64", "UINT8", "BOOL"})
