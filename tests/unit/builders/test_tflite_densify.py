"""The densify pass's index math (TFLite's FormatConverter, sparse to dense) and its rewiring of a model, in plain numpy.

The vectors of ``FormatConverterTest`` (tensorflow/lite/kernels/internal/utils/sparsity_format_converter_test.cc),
written per traversed dimension as a ``.tflite`` stores them, then random tensors through an encoder written here
from the format's definition (a SPARSE_CSR level keeps the entries with a nonzero below them). That TFLite's own
DENSIFY agrees on a real model is checked by the pass itself, on the interpreter (tests/onnx/builders/test_tflite_densify.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from builders.tflite_densify import DENSE, SPARSE_CSR, DensifyError, DimMetadata, densify, densify_model

VALUES_3X4 = np.array([6, 0, 9, 8, 0, 0, 0, 0, 5, 0, 0, 7]).reshape(3, 4)
VALUES_4X4 = np.array([1, 0, 2, 3, 0, 4, 0, 0, 0, 0, 5, 0, 0, 0, 0, 6]).reshape(4, 4)


def d(size: int) -> DimMetadata:
    return DimMetadata(DENSE, size)


def s(segments: list[int], indices: list[int]) -> DimMetadata:
    return DimMetadata(SPARSE_CSR, 0, np.array(segments), np.array(indices))


# name -> (stored values, shape, traversal_order, block_map, dim_metadata per level, expected dense)
CASES = {
    "D0D1": ([6, 0, 9, 8, 0, 0, 0, 0, 5, 0, 0, 7], [3, 4], [0, 1], [], [d(3), d(4)], VALUES_3X4),
    "S0D1": ([6, 0, 9, 8, 5, 0, 0, 7], [3, 4], [0, 1], [], [s([0, 2], [0, 2]), d(4)], VALUES_3X4),
    "D0S1": ([6, 9, 8, 5, 7], [3, 4], [0, 1], [], [d(3), s([0, 3, 3, 5], [0, 2, 3, 0, 3])], VALUES_3X4),
    "S0S1": ([6, 9, 8, 5, 7], [3, 4], [0, 1], [], [s([0, 2], [0, 2]), s([0, 3, 5], [0, 2, 3, 0, 3])], VALUES_3X4),
    "D1D0": ([6, 0, 5, 0, 0, 0, 9, 0, 0, 8, 0, 7], [3, 4], [1, 0], [], [d(4), d(3)], VALUES_3X4),
    "S1D0": ([6, 0, 5, 9, 0, 0, 8, 0, 7], [3, 4], [1, 0], [], [s([0, 3], [0, 2, 3]), d(3)], VALUES_3X4),
    "D1S0": ([6, 5, 9, 8, 7], [3, 4], [1, 0], [], [d(4), s([0, 2, 2, 3, 5], [0, 2, 0, 0, 2])], VALUES_3X4),
    "S1S0": ([6, 5, 9, 8, 7], [3, 4], [1, 0], [], [s([0, 3], [0, 2, 3]), s([0, 2, 3, 5], [0, 2, 0, 0, 2])], VALUES_3X4),
    "3D S0D1S2": (
        [6, 9, 8, 5, 7],
        [3, 2, 2],
        [0, 1, 2],
        [],
        [s([0, 2], [0, 2]), d(2), s([0, 1, 3, 4, 5], [0, 0, 1, 0, 1])],
        VALUES_3X4.reshape(3, 2, 2),
    ),
    "3D D0D1S2": (
        [6, 9, 8, 5, 7],
        [3, 2, 2],
        [0, 1, 2],
        [],
        [d(3), d(2), s([0, 1, 3, 3, 3, 4, 5], [0, 0, 1, 0, 1])],
        VALUES_3X4.reshape(3, 2, 2),
    ),
    "3D S0S1S2": (
        [1, 7, 5, 2, 4, 8, 3, 9],
        [3, 4, 2],
        [0, 1, 2],
        [],
        [s([0, 2], [0, 2]), s([0, 2, 5], [0, 2, 0, 2, 3]), s([0, 2, 3, 4, 6, 8], [0, 1, 1, 1, 0, 1, 0, 1])],
        np.array([1, 7, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 4, 8, 3, 9]).reshape(3, 4, 2),
    ),
    "3D S0S2S1": (
        [1, 7, 5, 2, 4, 8, 3, 9],
        [3, 2, 4],
        [0, 2, 1],
        [],
        [s([0, 2], [0, 2]), s([0, 2, 5], [0, 2, 0, 2, 3]), s([0, 2, 3, 4, 6, 8], [0, 1, 1, 1, 0, 1, 0, 1])],
        np.array([1, 0, 0, 0, 7, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2, 0, 8, 9]).reshape(3, 2, 4),
    ),
    "block D0D1": ([1, 0, 0, 4, 2, 3, 0, 0, 0, 0, 0, 0, 5, 0, 0, 6], [4, 4], [0, 1, 2, 3], [0, 1], [d(2), d(2), d(2), d(2)], VALUES_4X4),
    "BCSR 1-D block": (
        [1, 0, 2, 3, 0, 4, 5, 0, 0, 6],
        [4, 4],
        [0, 1, 2],
        [1],
        [d(4), s([0, 2, 3, 4, 5], [0, 1, 0, 1, 1]), d(2)],
        VALUES_4X4,
    ),
    "BCSR 2-D block": (
        [1, 0, 0, 4, 2, 3, 0, 0, 5, 0, 0, 6],
        [4, 4],
        [0, 1, 2, 3],
        [0, 1],
        [d(2), s([0, 2, 3], [0, 1, 1]), d(2), d(2)],
        VALUES_4X4,
    ),
    "BCSC": ([1, 0, 0, 4, 2, 0, 3, 0, 5, 0, 0, 6], [4, 4], [1, 0, 3, 2], [0, 1], [d(2), s([0, 1, 3], [0, 0, 1]), d(2), d(2)], VALUES_4X4),
    "BCSR last block empty": (
        [1, 0, 0, 4, 2, 3, 0, 0],
        [4, 4],
        [0, 1, 2, 3],
        [0, 1],
        [d(2), s([0, 2, 2], [0, 1]), d(2), d(2)],
        np.array([1, 0, 2, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).reshape(4, 4),
    ),
    "BCSR column-major block": (
        [1, 1, 0, 0, 2, 2, 3, 3, 0, 0, 4, 4, 5, 0, 0, 0],
        [4, 8],
        [0, 1, 3, 2],
        [0, 1],
        [d(2), s([0, 3, 4], [0, 1, 2, 1]), d(2), d(2)],
        np.array([1, 0, 2, 3, 0, 4, 0, 0, 1, 0, 2, 3, 0, 4, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).reshape(4, 8),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_tflite_format_converter_vectors(case):
    stored, shape, traversal_order, block_map, metadata, expected = CASES[case]
    dense = densify(np.array(stored, dtype=np.int32), shape, traversal_order, block_map, metadata)
    assert dense.dtype == np.int32 and dense.shape == tuple(shape)
    np.testing.assert_array_equal(dense, expected)


def test_full_range_detector_layout_float16_with_uint8_indices():
    """The full-range face detector's 1x1 convolutions: [out, 1, 1, in], DENSE x3 then SPARSE_CSR over the inputs
    (its indices a Uint8Vector), float16 values."""
    rng = np.random.default_rng(1)
    weights = rng.normal(size=(8, 1, 1, 32)).astype(np.float16) * (rng.random((8, 1, 1, 32)) < 0.3)
    rows = weights.reshape(8, 32)
    segments = np.concatenate([[0], np.cumsum((rows != 0).sum(axis=1))]).astype(np.uint8)
    indices = np.concatenate([np.flatnonzero(row) for row in rows]).astype(np.uint8)
    metadata = [d(8), d(1), d(1), DimMetadata(SPARSE_CSR, 0, segments, indices)]
    dense = densify(rows[rows != 0], [8, 1, 1, 32], [0, 1, 2, 3], [], metadata)
    assert dense.dtype == np.float16
    np.testing.assert_array_equal(dense, weights)


def encode(dense: np.ndarray, traversal_order: list[int], formats: list[int], block_map: list[int], blocks: list[int]):
    """``dense`` stored sparse: the stored values and the dim_metadata per traversed dimension (the format's definition)."""
    rank = dense.ndim
    blocked = [n // blocks[block_map.index(i)] if i in block_map else n for i, n in enumerate(dense.shape)]
    split = []  # reshape each blocked dimension into (blocks, block size), then move the block sizes last
    for i, n in enumerate(blocked):
        split += [n, blocks[block_map.index(i)]] if i in block_map else [n]
    original_axes, block_axes, axis = [], [], 0
    for i in range(rank):
        original_axes.append(axis)
        if i in block_map:
            block_axes.append(axis + 1)
        axis += 2 if i in block_map else 1
    expanded = dense.reshape(split).transpose(original_axes + block_axes)
    ordered = expanded.transpose(traversal_order)
    nodes = [()]
    metadata = []
    for level, size in enumerate(ordered.shape):
        if formats[level] == DENSE:
            nodes = [(*node, i) for node in nodes for i in range(size)]
            metadata.append(DimMetadata(DENSE, size))
            continue
        segments, indices, kept = [0], [], []
        for node in nodes:
            for i in range(size):
                if np.any(ordered[(*node, i)] != 0):
                    indices.append(i)
                    kept.append((*node, i))
            segments.append(len(indices))
        nodes = kept
        metadata.append(DimMetadata(SPARSE_CSR, 0, np.array(segments), np.array(indices)))
    return np.array([ordered[node] for node in nodes], dtype=dense.dtype), metadata


@pytest.mark.parametrize("seed", range(40))
def test_random_tensors_round_trip(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    block_map = sorted(rng.choice(rank, size=int(rng.integers(0, min(rank, 2) + 1)), replace=False).tolist())
    blocks = [int(rng.choice([1, 2, 4])) for _ in block_map]
    shape = [
        int(rng.integers(1, 4)) * (blocks[block_map.index(i)] if i in block_map else 1) + (0 if i in block_map else int(rng.integers(0, 3)))
        for i in range(rank)
    ]
    traversal_order = rng.permutation(rank).tolist() + list(range(rank, rank + len(block_map)))
    if len(block_map) == 2 and rng.random() < 0.5:  # a column-major block, as TFLite's BCSC
        traversal_order[-2:] = traversal_order[-1:-3:-1]
    formats = [int(rng.choice([DENSE, SPARSE_CSR])) for _ in range(rank)] + [DENSE] * len(block_map)
    dtype = rng.choice([np.float16, np.float32, np.int8])
    dense = (rng.normal(size=shape) * 50).astype(dtype) * (rng.random(shape) < 0.3)
    stored, metadata = encode(dense, traversal_order, formats, block_map, blocks)
    np.testing.assert_array_equal(densify(stored, shape, traversal_order, block_map, metadata), dense)


ERRORS = {
    "an unknown format": (
        [1, 2],
        [2],
        [0],
        [],
        [DimMetadata(2, 2)],
        r"^w \(FLOAT16, \[2\]\): dimension 0 \(traversal order\) has format 2; supported: DENSE, SPARSE_CSR$",
    ),
    "too few stored values": ([1, 2], [3], [0], [], [d(3)], "its sparsity metadata addresses 3 values, its buffer holds 2"),
    "too many stored values": ([1, 2, 3], [2, 2], [0, 1], [], [d(2), s([0, 1, 2], [0, 1])], "addresses 2 values, its buffer holds 3"),
    "an index outside the shape": ([1], [2], [0], [], [s([0, 1], [5])], r"lands at index \[5\], outside shape \[2\]"),
    "an element twice": ([1, 2], [3], [0], [], [s([0, 2], [1, 1])], "addresses some elements more than once"),
    "a sparse block": (
        [1, 2],
        [2, 2],
        [0, 1, 2],
        [1],
        [d(2), d(1), s([0, 1, 2], [0, 1])],
        "block dimension 0 is SPARSE_CSR; supported: DENSE blocks",
    ),
    "block dimensions first": ([1], [2], [1, 0], [0], [d(1), d(2)], "supported: original dimensions first"),
    "a block that does not divide": ([1, 2, 3], [3], [0, 1], [0], [d(1), d(2)], "block size 2 does not divide dimension 0"),
    "an order of three blocks TFLite misreads": (
        np.zeros(64),
        [2, 4, 8],
        [0, 1, 2, 4, 5, 3],
        [0, 1, 2],
        [d(1), d(1), d(1), d(4), d(8), d(2)],
        "supported: block dimensions in order",
    ),
    "too large a dense size": ([1], [2], [0], [], [d(1 << 40)], r"addresses more values than shape \[2\] holds"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_what_it_cannot_densify_is_one_line(case):
    stored, shape, traversal_order, block_map, metadata, message = ERRORS[case]
    with pytest.raises(DensifyError, match=message) as error:
        densify(np.asarray(stored, dtype=np.float16), shape, traversal_order, block_map, metadata, name=f"w (FLOAT16, {shape})")
    assert "\n" not in str(error.value)


# --------------------------------------------------------------------------- the model: the object API's attributes

CONV_2D, DEQUANTIZE, DENSIFY = 3, 6, 124
FLOAT32, FLOAT16 = 0, 1


def tensor(name: str, shape: list[int], type_: int, buffer: int = 0, sparsity=None) -> SimpleNamespace:
    return SimpleNamespace(name=name.encode(), shape=np.array(shape), type=type_, buffer=buffer, sparsity=sparsity, externalBuffer=0)


def op(code: int, inputs: list[int], outputs: list[int]) -> SimpleNamespace:
    return SimpleNamespace(opcodeIndex=code, inputs=np.array(inputs), outputs=np.array(outputs), intermediates=None)


def buffer(data: bytes = b"") -> SimpleNamespace:
    return SimpleNamespace(data=np.frombuffer(data, np.uint8) if data else None, offset=0, size=0)


def csr_sparsity(segments: list[int], indices: list[int]) -> SimpleNamespace:
    """[2, 3] weights, rows dense, columns SPARSE_CSR (Uint8Vector indices)."""
    return SimpleNamespace(
        traversalOrder=np.array([0, 1]),
        blockMap=None,
        dimMetadata=[
            SimpleNamespace(format=DENSE, denseSize=2, arraySegmentsType=0, arraySegments=None, arrayIndicesType=0, arrayIndices=None),
            SimpleNamespace(
                format=SPARSE_CSR,
                denseSize=0,
                arraySegmentsType=3,
                arraySegments=SimpleNamespace(values=np.array(segments, np.uint8)),
                arrayIndicesType=3,
                arrayIndices=SimpleNamespace(values=np.array(indices, np.uint8)),
            ),
        ],
    )


def detector_like_model() -> SimpleNamespace:
    """input -> CONV_2D(input, DEQUANTIZE(DENSIFY(sparse float16 weights))) -> output, with a signature."""
    weights = np.array([1.5, -2.0, 4.0], np.float16)  # [[1.5, 0, -2], [0, 4, 0]]
    tensors = [
        tensor("input", [1, 3], FLOAT32),
        tensor("w_sparse", [2, 3], FLOAT16, 1, csr_sparsity([0, 2, 3], [0, 2, 1])),
        tensor("w_densified", [2, 3], FLOAT16),
        tensor("w_float", [2, 3], FLOAT32),
        tensor("output", [1, 2], FLOAT32),
    ]
    codes = [SimpleNamespace(builtinCode=code, deprecatedBuiltinCode=min(code, 127)) for code in (CONV_2D, DENSIFY, DEQUANTIZE)]
    subgraph = SimpleNamespace(
        tensors=tensors, inputs=np.array([0]), outputs=np.array([4]), operators=[op(1, [1], [2]), op(2, [2], [3]), op(0, [0, 3], [4])]
    )
    signature = SimpleNamespace(
        subgraphIndex=0, inputs=[SimpleNamespace(name="input", tensorIndex=0)], outputs=[SimpleNamespace(name="output", tensorIndex=4)]
    )
    return SimpleNamespace(
        operatorCodes=codes, subgraphs=[subgraph], buffers=[buffer(), buffer(weights.tobytes())], signatureDefs=[signature]
    )


def test_the_model_holds_the_dense_constant_and_no_densify():
    model = detector_like_model()
    densified, removed = densify_model(model)
    assert removed == 1 and [(t.name, t.type, t.shape, t.stored, t.formats) for t in densified] == [
        ("w_sparse", "FLOAT16", (2, 3), 3, ("DENSE", "SPARSE_CSR"))
    ]
    (subgraph,) = model.subgraphs
    assert [t.name for t in subgraph.tensors] == [b"input", b"w_sparse", b"w_float", b"output"]  # the DENSIFY output is gone
    constant = subgraph.tensors[1]
    assert constant.sparsity is None and constant.buffer == 1
    np.testing.assert_array_equal(np.frombuffer(model.buffers[1].data.tobytes(), np.float16).reshape(2, 3), [[1.5, 0, -2], [0, 4, 0]])
    assert [c.builtinCode for c in model.operatorCodes] == [CONV_2D, DEQUANTIZE]  # DENSIFY's code went, the others renumbered
    assert [(o.opcodeIndex, list(o.inputs), list(o.outputs)) for o in subgraph.operators] == [(1, [1], [2]), (0, [0, 2], [3])]
    assert list(subgraph.inputs) == [0] and list(subgraph.outputs) == [3]
    assert [e.tensorIndex for e in model.signatureDefs[0].outputs] == [3]


def test_a_shared_buffer_is_not_overwritten():
    model = detector_like_model()
    model.subgraphs[0].tensors.append(tensor("shares_the_bytes", [3], FLOAT16, 1))  # a dense tensor on the same buffer
    stored = model.buffers[1].data.tobytes()
    densify_model(model)
    assert model.buffers[1].data.tobytes() == stored
    assert model.subgraphs[0].tensors[1].buffer == 2 and len(model.buffers) == 3


def test_a_densify_of_a_tensor_computed_at_run_time_is_refused():
    model = detector_like_model()
    subgraph = model.subgraphs[0]
    subgraph.operators[0].inputs = np.array([0])  # DENSIFY(input)
    subgraph.tensors[0].shape = np.array([2, 3])
    subgraph.tensors[0].type = FLOAT16
    with pytest.raises(
        DensifyError, match=r"^DENSIFY operator 0 reads 'input', which is not a constant; supported: DENSIFY of a sparse constant$"
    ):
        densify_model(model)


def test_an_unsupported_type_and_index_vector_name_the_tensor():
    model = detector_like_model()
    model.subgraphs[0].tensors[1].type = 17  # INT4
    with pytest.raises(
        DensifyError, match=r"^sparse tensor 'w_sparse' \(INT4, shape \[2, 3\]\): type INT4 is not supported; supported: FLOAT32, FLOAT16, "
    ):
        densify_model(model)
    model = detector_like_model()
    model.subgraphs[0].tensors[1].sparsity.dimMetadata[1].arrayIndicesType = 7
    with pytest.raises(
        DensifyError,
        match=r"'w_sparse' .*: dimension 1: array_indices is a SparseIndexVector of type 7; supported: Int32Vector, Uint16Vector, Uint8Vector$",
    ):
        densify_model(model)


def test_buffers_outside_the_flatbuffer_are_refused():
    model = detector_like_model()
    model.buffers[1].offset = 4096
    with pytest.raises(DensifyError, match="buffer 1 is stored outside the flatbuffer"):
        densify_model(model)
