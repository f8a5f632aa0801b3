"""TensorRT's ONNX operator support, as data for ``python -m builders check``.

Source: onnx/onnx-tensorrt ``docs/operators.md`` as released with TensorRT
10.15 GA (2026-02; header "TensorRT 10.15 supports operators in the inclusive
range of opset 9 to opset 24"), cross-read with the 10.x ONNX parser
(``onnxOpImporters.cpp``: Pad, Einsum, NonMaxSuppression importers). To
update: compare the new ``docs/operators.md`` table with ``OPERATORS`` below
(op -> supported types) and ``UNSUPPORTED``; restrictions that need a look at
a node's attributes or inputs live as code in :mod:`builders.trt_compat`.

Types use the table's spelling: FP32, FP16, BF16, FP8, FP4, INT4, INT8,
INT32, INT64, UINT8, BOOL. INT8/INT4/FP8/FP4 are "quantized types": only
reachable through Q/DQ from a higher-precision float. UINT8 is only allowed
as a network input or output. DOUBLE is cast down to FP32.
"""

from __future__ import annotations

from builders import qdq_rules

TENSORRT_VERSION = "10.15"
SOURCE = (
    "onnx/onnx-tensorrt docs/operators.md, TensorRT 10.15 GA release "
    "(opset 9-24), with the 10.x ONNX parser's Pad/Einsum/NonMaxSuppression importers"
)
MIN_OPSET = 9
MAX_OPSET = 24

_F = "FP32 FP16 BF16"
_FI = "FP32 FP16 BF16 INT32 INT64"
_FIB = "FP32 FP16 BF16 INT32 INT64 BOOL"

# Supported ops -> the data types the table lists for them.
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

# Listed with "N" (no importer): a model using them needs a rewrite or a plugin.
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
# Network input/output types (UINT8 only at the boundary; INT64 works in 10.x but see trt_compat).
IO_TYPES = frozenset({"FP32", "FP16", "BF16", "INT32", "INT64", "UINT8", "BOOL"})
