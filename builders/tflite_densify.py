"""A ``.tflite`` whose constant tensors are stored sparse, rewritten with every one of them stored dense.

TFLite can store a constant tensor sparse (``Tensor.sparsity``: ``traversal_order``, ``block_map``
and one ``dim_metadata`` per traversed dimension, each DENSE with a ``dense_size`` or SPARSE_CSR with
``array_segments``/``array_indices``, an Int32Vector, Uint16Vector or Uint8Vector) and densify it at
run time with a ``DENSIFY`` operator; MediaPipe's full-range face detector stores its 1x1 convolution
weights that way (float16, then ``DEQUANTIZE``). tf2onnx reads the stored values as if they were dense
and fails (``cannot reshape array of size 77 into shape (8,1,1,32)``). This pass:

1. densifies every sparse constant tensor in place (:func:`densify`: TFLite's ``FormatConverter``,
   ``tensorflow/lite/kernels/internal/utils/sparsity_format_converter.cc``), its sparsity dropped;
2. removes every ``DENSIFY`` operator: what read its output reads the densified constant instead
   (its output tensor goes, and so does the ``DENSIFY`` operator code once no operator uses it);
3. checks the result with TFLite's own interpreter (:func:`verify`): each ``DENSIFY`` output of the
   sparse model, as TFLite computes it, equals the densified constant bit for bit, and the two
   models' outputs agree within :data:`MAX_ABS_DIFF` on seeded random inputs.

STANDALONE: runs as a script inside the ``tflite-convert`` build environment (TensorFlow is there,
with the flatbuffer schema's object API, ``tensorflow.lite.python.schema_py_generated``, and the
interpreter), like tf2onnx (:func:`builders.tflite.densify`)::

    python builders/tflite_densify.py SOURCE.tflite OUTPUT.tflite --report REPORT.json

At module level it imports only numpy and the standard library (the index math and the rewiring are
plain Python, tested in ``.venv``); TensorFlow is imported inside the functions that read, write and
run models. A model it cannot densify, or a check that fails, is one line in the report's ``error``
(and on stderr), exit status 2 (cannot) or 1 (a check failed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# tensorflow/lite/schema/schema.fbs
DENSE, SPARSE_CSR = 0, 1  # DimensionType
DIMENSION_FORMATS = {DENSE: "DENSE", SPARSE_CSR: "SPARSE_CSR"}
# SparseIndexVector: the union type of array_segments / array_indices.
INDEX_VECTORS = {1: ("Int32Vector", np.dtype("<i4")), 2: ("Uint16Vector", np.dtype("<u2")), 3: ("Uint8Vector", np.dtype("u1"))}
BUILTIN_DENSIFY = 124  # BuiltinOperator.DENSIFY
# TensorType -> (name, little-endian numpy dtype): the fixed-width types whose values the index math moves.
TENSOR_TYPES: dict[int, tuple[str, np.dtype[Any]]] = {
    0: ("FLOAT32", np.dtype("<f4")),
    1: ("FLOAT16", np.dtype("<f2")),
    2: ("INT32", np.dtype("<i4")),
    3: ("UINT8", np.dtype("u1")),
    4: ("INT64", np.dtype("<i8")),
    6: ("BOOL", np.dtype("?")),
    7: ("INT16", np.dtype("<i2")),
    9: ("INT8", np.dtype("i1")),
    10: ("FLOAT64", np.dtype("<f8")),
    12: ("UINT64", np.dtype("<u8")),
    15: ("UINT32", np.dtype("<u4")),
    16: ("UINT16", np.dtype("<u2")),
}
_OTHER_TYPES = {5: "STRING", 8: "COMPLEX64", 11: "COMPLEX128", 13: "RESOURCE", 14: "VARIANT", 17: "INT4", 18: "BFLOAT16"}
# The densified model's outputs against the sparse model's, on the interpreter (the same weights: 0 expected).
MAX_ABS_DIFF = 1e-5
VERIFY_SEED = 0
FILE_IDENTIFIER = b"TFL3"


class DensifyError(Exception):
    """The model holds something this pass cannot densify; the message (one line) says what and what is supported."""

    exit_code = 2


class VerificationFailed(DensifyError):
    """The densified model does not compute what the sparse one does."""

    exit_code = 1


@dataclass(frozen=True)
class DimMetadata:
    """One ``DimensionMetadata`` (a traversed dimension): DENSE with ``dense_size``, or SPARSE_CSR with its
    ``segments`` (``array_segments``) and ``indices`` (``array_indices``)."""

    format: int
    dense_size: int = 0
    segments: np.ndarray | None = None
    indices: np.ndarray | None = None


@dataclass(frozen=True)
class Densified:
    """What :func:`densify_model` did to one tensor."""

    subgraph: int
    tensor: int
    name: str
    type: str
    shape: tuple[int, ...]
    buffer: int  # the buffer the dense values were written to
    stored: int  # values in the sparse buffer
    formats: tuple[str, ...]  # per traversed dimension
    block_map: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "subgraph": self.subgraph,
            "tensor": self.tensor,
            "name": self.name,
            "type": self.type,
            "shape": list(self.shape),
            "stored_values": self.stored,
            "dense_values": int(np.prod(self.shape, dtype=np.int64)),
            "formats": list(self.formats),
            "block_map": list(self.block_map),
        }


# --------------------------------------------------------------------------- the index math


def _supported_formats() -> str:
    return ", ".join(DIMENSION_FORMATS.values())


def block_sizes(
    shape: Sequence[int],
    traversal_order: Sequence[int],
    block_map: Sequence[int],
    dim_metadata: Sequence[DimMetadata],
    name: str = "tensor",
) -> list[int]:
    """The size of each block dimension, read as ``FormatConverter::InitSparseToDenseConverter`` reads it.

    Block dimension ``b`` (traversed after the ``rank`` original dimensions) blocks original dimension
    ``block_map[b]``; TFLite takes its size from ``dim_metadata[traversal_order[rank + b]].dense_size``.
    That is the block level's own ``dense_size`` whenever the block dimensions are traversed in order (or
    two of them swapped); any other order is refused, as are sparse blocks (TFLite's converter supports
    dense blocks only) and a block size that does not divide its dimension.
    """
    rank, total = len(shape), len(traversal_order)
    if total != rank + len(block_map) or len(dim_metadata) != total:
        raise DensifyError(
            f"{name}: traversal_order {list(traversal_order)} and {len(dim_metadata)} dim_metadata do not fit "
            f"shape {list(shape)} and block_map {list(block_map)}"
        )
    if sorted(block_map) != list(block_map) or len(set(block_map)) != len(block_map) or any(not 0 <= d < rank for d in block_map):
        raise DensifyError(
            f"{name}: block_map {list(block_map)} is not increasing original dimensions (rank {rank}); "
            "supported: one block per blocked dimension, in order"
        )
    sizes = []
    for block, blocked in enumerate(block_map):
        level = traversal_order[rank + block]  # TFLite's reading: an expanded dimension's number used as a level
        own_level = list(traversal_order).index(rank + block)
        read, own = dim_metadata[level], dim_metadata[own_level]
        if own.format != DENSE:
            raise DensifyError(
                f"{name}: block dimension {block} is {DIMENSION_FORMATS.get(own.format, own.format)}; supported: DENSE blocks (as TFLite's FormatConverter)"
            )
        if read.format != DENSE or read.dense_size != own.dense_size:
            raise DensifyError(
                f"{name}: traversal_order {list(traversal_order)} traverses the block dimensions in an order TFLite's FormatConverter reads "
                "other block sizes for; supported: block dimensions in order (or two of them swapped)"
            )
        size = own.dense_size
        if size <= 0 or shape[blocked] % size:
            raise DensifyError(f"{name}: block size {size} does not divide dimension {blocked} of shape {list(shape)}")
        sizes.append(size)
    return sizes


def _check_traversal(
    shape: Sequence[int], traversal_order: Sequence[int], block_map: Sequence[int], dim_metadata: Sequence[DimMetadata], name: str
) -> None:
    rank, total = len(shape), len(traversal_order)
    if total != rank + len(block_map):
        raise DensifyError(
            f"{name}: traversal_order {list(traversal_order)} has {total} dimensions; "
            f"shape {list(shape)} and block_map {list(block_map)} make {rank + len(block_map)}"
        )
    if sorted(traversal_order[:rank]) != list(range(rank)) or sorted(traversal_order[rank:]) != list(range(rank, total)):
        raise DensifyError(
            f"{name}: traversal_order {list(traversal_order)} is not the {rank} original dimensions then the {total - rank} block dimensions; "
            "supported: original dimensions first (as TFLite's FormatConverter)"
        )
    if len(dim_metadata) != total:
        raise DensifyError(f"{name}: {len(dim_metadata)} dim_metadata for {total} traversed dimensions")
    for level, meta in enumerate(dim_metadata):
        if meta.format not in DIMENSION_FORMATS:
            raise DensifyError(f"{name}: dimension {level} (traversal order) has format {meta.format}; supported: {_supported_formats()}")
        if meta.format == DENSE and meta.dense_size < 0:
            raise DensifyError(f"{name}: dimension {level} is DENSE with dense_size {meta.dense_size}")
        if meta.format == SPARSE_CSR and (meta.segments is None or meta.indices is None):
            missing = "array_segments" if meta.segments is None else "array_indices"
            raise DensifyError(f"{name}: dimension {level} is SPARSE_CSR without {missing}")
        if meta.format == SPARSE_CSR and meta.segments is not None and meta.segments.size and int(meta.segments.min()) < 0:
            raise DensifyError(f"{name}: dimension {level} has negative array_segments")


def densify(
    values: np.ndarray,
    shape: Sequence[int],
    traversal_order: Sequence[int],
    block_map: Sequence[int],
    dim_metadata: Sequence[DimMetadata],
    name: str = "tensor",
) -> np.ndarray:
    """The dense array of ``shape`` that TFLite's ``FormatConverter::SparseToDense`` makes of the stored ``values``.

    ``FormatConverter::Populate`` walks the traversed dimensions depth first: a DENSE level ``l`` visits
    ``0 .. dense_size - 1`` (the position below it ``prev * dense_size + i``); a SPARSE_CSR level visits the
    entries ``i`` in ``array_segments[prev] .. array_segments[prev + 1]`` (where ``prev + 1 <
    len(array_segments)`` and ``i < len(array_indices)``), its coordinate ``array_indices[i]`` and the position
    below it ``i``. Each complete coordinate takes the next stored value; the original index of dimension
    ``traversal_order[l]`` is level ``l``'s coordinate, then each block level ``l`` (block ``b =
    traversal_order[l] - rank``) refines dimension ``block_map[b]`` to ``index * block_size[b] + coordinate``.
    Here the walk goes level by level over all branches at once (numpy), in the same order. Everything else is
    zero. Stricter than TFLite, which trusts the file: the number of coordinates must equal the number of stored
    values, and every index must fall inside the shape, once.
    """
    shape = [int(d) for d in shape]
    traversal_order = [int(d) for d in traversal_order]
    block_map = [int(d) for d in block_map]
    rank, total = len(shape), len(traversal_order)
    _check_traversal(shape, traversal_order, block_map, dim_metadata, name)
    sizes = block_sizes(shape, traversal_order, block_map, dim_metadata, name)
    values = np.asarray(values).reshape(-1)
    elements = int(np.prod(shape, dtype=np.int64))

    position = np.zeros(1, dtype=np.int64)  # per branch: the position one level up (prev_idx)
    coordinates = np.zeros((1, 0), dtype=np.int64)  # per branch: its coordinate at each level so far
    for meta in dim_metadata:
        if meta.format == DENSE:
            size = int(meta.dense_size)
            if len(position) * size > max(elements, values.size):
                raise DensifyError(f"{name}: its sparsity metadata addresses more values than shape {shape} holds ({elements})")
            step = np.arange(size, dtype=np.int64)
            parent = np.repeat(np.arange(len(position)), size)
            child = np.tile(step, len(position))
            position = position[parent] * size + child
            coordinate = child
        else:
            assert meta.segments is not None and meta.indices is not None  # _check_traversal
            segments = meta.segments.astype(np.int64)
            indices = meta.indices.astype(np.int64)
            inside = position + 1 < len(segments)
            begin = np.where(inside, segments[np.minimum(position, len(segments) - 1)], 0)
            end = np.where(inside, segments[np.minimum(position + 1, len(segments) - 1)], 0)
            end = np.minimum(end, len(indices))
            counts = np.maximum(end - begin, 0)
            parent = np.repeat(np.arange(len(position)), counts)
            first = np.cumsum(counts) - counts
            entry = begin[parent] + (np.arange(int(counts.sum()), dtype=np.int64) - first[parent])
            position = entry
            coordinate = indices[entry]
        coordinates = np.concatenate([coordinates[parent], coordinate[:, None]], axis=1)

    if len(position) != values.size:
        raise DensifyError(f"{name}: its sparsity metadata addresses {len(position)} values, its buffer holds {values.size}")
    original = np.zeros((len(position), rank), dtype=np.int64)
    for level in range(rank):
        original[:, traversal_order[level]] = coordinates[:, level]
    for level in range(rank, total):
        block = traversal_order[level] - rank
        dim = block_map[block]
        original[:, dim] = original[:, dim] * sizes[block] + coordinates[:, level]
    outside = (original < 0) | (original >= np.asarray(shape, dtype=np.int64))
    if outside.any():
        row = int(np.argmax(outside.any(axis=1)))
        raise DensifyError(f"{name}: stored value {row} lands at index {original[row].tolist()}, outside shape {shape}")
    flat = np.ravel_multi_index(tuple(original.T), shape) if rank else np.zeros(len(position), dtype=np.int64)
    if len(np.unique(flat)) != len(flat):
        raise DensifyError(f"{name}: its sparsity metadata addresses some elements more than once")
    dense = np.zeros(elements, dtype=values.dtype)
    dense[flat] = values
    return dense.reshape(shape)


# --------------------------------------------------------------------------- the model (object API)


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in np.asarray(values).reshape(-1)]


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _type_name(code: int) -> str:
    return TENSOR_TYPES[code][0] if code in TENSOR_TYPES else _OTHER_TYPES.get(code, str(code))


def _index_vector(kind: int, vector: Any, what: str, where: str) -> np.ndarray | None:
    if kind == 0 or vector is None:
        return None
    if kind not in INDEX_VECTORS:
        supported = ", ".join(name for name, _ in INDEX_VECTORS.values())
        raise DensifyError(f"{where}: {what} is a SparseIndexVector of type {kind}; supported: {supported}")
    return np.asarray(_ints(vector.values), dtype=np.int64)


def dim_metadata_of(sparsity: Any, where: str) -> list[DimMetadata]:
    """The object API's ``dimMetadata`` as :class:`DimMetadata` (the index vectors as int64 arrays)."""
    found = []
    for level, meta in enumerate(sparsity.dimMetadata or []):
        at = f"{where}: dimension {level}"
        found.append(
            DimMetadata(
                int(meta.format),
                int(meta.denseSize),
                _index_vector(int(meta.arraySegmentsType), meta.arraySegments, "array_segments", at),
                _index_vector(int(meta.arrayIndicesType), meta.arrayIndices, "array_indices", at),
            )
        )
    return found


def _buffer_bytes(buffer: Any) -> bytes:
    data = buffer.data
    if data is None:
        return b""
    return np.asarray(data, dtype=np.uint8).tobytes()


def _is_constant(model: Any, tensor: Any) -> bool:
    buffers = model.buffers or []
    if not 0 < int(tensor.buffer) < len(buffers):
        return False
    data = buffers[int(tensor.buffer)].data
    return data is not None and len(data) > 0


def _check_storage(model: Any) -> None:
    """Buffers outside the flatbuffer (models over 2 GB) are not rewritten here."""
    for index, buffer in enumerate(model.buffers or []):
        if int(getattr(buffer, "offset", 0) or 0) > 1:
            raise DensifyError(
                f"buffer {index} is stored outside the flatbuffer (offset/size); supported: buffers inside it (models under 2 GB)"
            )
    for subgraph in model.subgraphs or []:
        for tensor in subgraph.tensors or []:
            if int(getattr(tensor, "externalBuffer", 0) or 0):
                raise DensifyError(f"tensor '{_name(tensor)}' uses an external buffer; supported: buffers inside the flatbuffer")


def densify_model(model: Any) -> tuple[list[Densified], int]:
    """Rewrite ``model`` (the schema's object API, ``ModelT``, or anything with its attributes) in place:
    every sparse constant tensor dense, every ``DENSIFY`` operator gone. Returns the densified tensors and the
    number of operators removed."""
    _check_storage(model)
    buffers = model.buffers or []
    users: dict[int, int] = {}
    for subgraph in model.subgraphs or []:
        for tensor in subgraph.tensors or []:
            users[int(tensor.buffer)] = users.get(int(tensor.buffer), 0) + 1
    densified: list[Densified] = []
    for sg_index, subgraph in enumerate(model.subgraphs or []):
        for t_index, tensor in enumerate(subgraph.tensors or []):
            if tensor.sparsity is None:
                continue
            name = _name(tensor)
            shape = tuple(_ints(tensor.shape))
            code = int(tensor.type)
            at = f"sparse tensor '{name}' ({_type_name(code)}, shape {list(shape)})"
            if code not in TENSOR_TYPES:
                supported = ", ".join(type_name for type_name, _ in TENSOR_TYPES.values())
                raise DensifyError(f"{at}: type {_type_name(code)} is not supported; supported: {supported}")
            if not _is_constant(model, tensor):
                raise DensifyError(f"{at} has no constant data; supported: sparse constants (TFLite densifies nothing else)")
            sparsity = tensor.sparsity
            metadata = dim_metadata_of(sparsity, at)
            stored = np.frombuffer(_buffer_bytes(buffers[int(tensor.buffer)]), dtype=TENSOR_TYPES[code][1])
            traversal_order, block_map = _ints(sparsity.traversalOrder), _ints(sparsity.blockMap)
            dense = densify(stored, shape, traversal_order, block_map, metadata, at)
            data = np.frombuffer(np.ascontiguousarray(dense, dtype=TENSOR_TYPES[code][1]).tobytes(), dtype=np.uint8).copy()
            if users.get(int(tensor.buffer), 0) > 1:  # shared with another tensor: this one gets a buffer of its own
                users[int(tensor.buffer)] -= 1
                buffers.append(type(buffers[int(tensor.buffer)])())
                tensor.buffer = len(buffers) - 1
            buffers[int(tensor.buffer)].data = data
            tensor.sparsity = None
            formats = tuple(DIMENSION_FORMATS[m.format] for m in metadata)
            densified.append(
                Densified(sg_index, t_index, name, _type_name(code), shape, int(tensor.buffer), int(stored.size), formats, tuple(block_map))
            )
    model.buffers = buffers
    removed = _remove_densify_ops(model)
    return densified, removed


def _densify_codes(model: Any) -> set[int]:
    return {
        index
        for index, code in enumerate(model.operatorCodes or [])
        if max(int(code.builtinCode or 0), int(getattr(code, "deprecatedBuiltinCode", 0) or 0)) == BUILTIN_DENSIFY
    }


def _remove_densify_ops(model: Any) -> int:
    codes = _densify_codes(model)
    removed = 0
    for sg_index, subgraph in enumerate(model.subgraphs or []):
        tensors = subgraph.tensors or []
        replace: dict[int, int] = {}
        kept = []
        for op_index, operator in enumerate(subgraph.operators or []):
            if int(operator.opcodeIndex) not in codes:
                kept.append(operator)
                continue
            inputs, outputs = _ints(operator.inputs), _ints(operator.outputs)
            if len(inputs) != 1 or len(outputs) != 1:
                raise DensifyError(
                    f"DENSIFY operator {op_index} has {len(inputs)} inputs and {len(outputs)} outputs; supported: one of each"
                )
            source, target = tensors[inputs[0]], tensors[outputs[0]]
            if not _is_constant(model, source) or source.sparsity is not None:
                raise DensifyError(
                    f"DENSIFY operator {op_index} reads '{_name(source)}', which is not a constant; supported: DENSIFY of a sparse constant"
                )
            if _ints(source.shape) != _ints(target.shape) or int(source.type) != int(target.type):
                raise DensifyError(
                    f"DENSIFY operator {op_index} turns '{_name(source)}' ({_type_name(int(source.type))} {_ints(source.shape)}) into "
                    f"'{_name(target)}' ({_type_name(int(target.type))} {_ints(target.shape)}); supported: the same type and shape"
                )
            replace[outputs[0]] = inputs[0]
            removed += 1
        if not replace:
            continue
        subgraph.operators = kept
        _rewire(model, sg_index, replace)
        _drop_tensors(model, sg_index, set(replace))
    _drop_unused_codes(model, codes)
    return removed


def _signatures(model: Any, sg_index: int) -> list[Any]:
    return [s for s in (getattr(model, "signatureDefs", None) or []) if int(s.subgraphIndex) == sg_index]


def _rewire(model: Any, sg_index: int, replace: dict[int, int]) -> None:
    """Every reference to a ``DENSIFY`` output now names the densified constant."""
    subgraph = model.subgraphs[sg_index]
    for operator in subgraph.operators or []:
        operator.inputs = [replace.get(i, i) for i in _ints(operator.inputs)]
    subgraph.outputs = [replace.get(i, i) for i in _ints(subgraph.outputs)]
    for signature in _signatures(model, sg_index):
        for entry in [*(signature.inputs or []), *(signature.outputs or [])]:
            entry.tensorIndex = replace.get(int(entry.tensorIndex), int(entry.tensorIndex))


def _drop_tensors(model: Any, sg_index: int, candidates: set[int]) -> None:
    """Remove the ``candidates`` (the removed operators' outputs) that nothing references any more; renumber the rest."""
    subgraph = model.subgraphs[sg_index]
    referenced: set[int] = set(_ints(subgraph.inputs)) | set(_ints(subgraph.outputs))
    for operator in subgraph.operators or []:
        referenced |= set(_ints(operator.inputs)) | set(_ints(operator.outputs)) | set(_ints(getattr(operator, "intermediates", None)))
    for signature in _signatures(model, sg_index):
        referenced |= {int(entry.tensorIndex) for entry in [*(signature.inputs or []), *(signature.outputs or [])]}
    gone = candidates - referenced
    if not gone:
        return
    renumber: dict[int, int] = {}
    kept: list[Any] = []
    for index, tensor in enumerate(subgraph.tensors or []):
        if index not in gone:
            renumber[index] = len(kept)
            kept.append(tensor)
    subgraph.tensors = kept

    def moved(indices: Any) -> list[int]:
        return [renumber[i] if i >= 0 else i for i in _ints(indices)]

    for operator in subgraph.operators or []:
        operator.inputs, operator.outputs = moved(operator.inputs), moved(operator.outputs)
        if getattr(operator, "intermediates", None) is not None:
            operator.intermediates = moved(operator.intermediates)
    subgraph.inputs, subgraph.outputs = moved(subgraph.inputs), moved(subgraph.outputs)
    for signature in _signatures(model, sg_index):
        for entry in [*(signature.inputs or []), *(signature.outputs or [])]:
            entry.tensorIndex = renumber[int(entry.tensorIndex)]


def _drop_unused_codes(model: Any, codes: set[int]) -> None:
    """The ``DENSIFY`` operator codes no operator uses any more go; the others are renumbered."""
    used = {int(op.opcodeIndex) for subgraph in model.subgraphs or [] for op in subgraph.operators or []}
    gone = codes - used
    if not gone:
        return
    renumber: dict[int, int] = {}
    kept: list[Any] = []
    for index, code in enumerate(model.operatorCodes or []):
        if index not in gone:
            renumber[index] = len(kept)
            kept.append(code)
    model.operatorCodes = kept
    for subgraph in model.subgraphs or []:
        for operator in subgraph.operators or []:
            operator.opcodeIndex = renumber[int(operator.opcodeIndex)]


# --------------------------------------------------------------------------- files and the interpreter (TensorFlow)


def _schema() -> Any:
    """TensorFlow's generated flatbuffer schema (object API), loaded from its file: it needs only ``flatbuffers``, and
    importing it through the ``tensorflow`` package would import all of TensorFlow first (about 15 s)."""
    import importlib.util

    found = importlib.util.find_spec("tensorflow")
    for folder in (found.submodule_search_locations or []) if found is not None else []:
        path = Path(folder) / "lite" / "python" / "schema_py_generated.py"
        spec = importlib.util.spec_from_file_location("tflite_schema_py_generated", path) if path.is_file() else None
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    from tensorflow.lite.python import schema_py_generated  # type: ignore[import-not-found]  # the tflite-convert env only

    return schema_py_generated


def read_model(data: bytes) -> Any:
    schema = _schema()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))


def write_model(model: Any) -> bytes:
    import flatbuffers  # type: ignore[import-untyped]

    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def sparse_tensor_count(model: Any) -> int:
    return sum(tensor.sparsity is not None for subgraph in model.subgraphs or [] for tensor in subgraph.tensors or [])


def _interpreter(content: bytes, reference: bool = False) -> Any:
    from tensorflow.lite.python import interpreter as tflite_interpreter  # type: ignore[import-not-found]

    options: dict[str, Any] = {"model_content": content}
    if reference:  # TFLite's own kernels (no XNNPACK delegate), every tensor kept readable after invoke
        options["experimental_op_resolver_type"] = tflite_interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        options["experimental_preserve_all_tensors"] = True
    runner = tflite_interpreter.Interpreter(**options)
    runner.allocate_tensors()
    return runner


def random_inputs(details: list[dict[str, Any]], count: int, seed: int = VERIFY_SEED) -> list[list[np.ndarray]]:
    """``count`` seeded input sets: floats uniform in [-1, 1], then [0, 1], then normal (an image normalized either
    way, and wider); integers uniform over their type's range (at most 0..255)."""
    rng = np.random.default_rng(seed)
    sets = []
    for index in range(count):
        arrays = []
        for detail in details:
            shape = [int(d) if d > 0 else 1 for d in detail.get("shape_signature", detail["shape"])]
            dtype = np.dtype(detail["dtype"])
            array: np.ndarray
            if np.issubdtype(dtype, np.floating):
                kind = index % 3
                array = rng.uniform(-1, 1, shape) if kind == 0 else rng.uniform(0, 1, shape) if kind == 1 else rng.normal(0, 1, shape)
            elif dtype == np.bool_:
                array = rng.integers(0, 2, shape)
            else:
                info = np.iinfo(dtype)
                array = rng.integers(max(int(info.min), 0), min(int(info.max), 255) + 1, shape)
            arrays.append(np.asarray(array, dtype=dtype))
        sets.append(arrays)
    return sets


def _run(runner: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    resized = False
    for detail, array in zip(runner.get_input_details(), inputs):
        if list(detail["shape"]) != list(array.shape):
            runner.resize_tensor_input(detail["index"], array.shape)
            resized = True
    if resized:
        runner.allocate_tensors()
    for detail, array in zip(runner.get_input_details(), inputs):
        runner.set_tensor(detail["index"], array)
    runner.invoke()
    return [np.array(runner.get_tensor(detail["index"])) for detail in runner.get_output_details()]


def verify(sparse: bytes, dense: bytes, densified: list[Densified], dense_model: Any, runs: int = 3) -> dict[str, Any]:
    """The densified model against the sparse one on TFLite's interpreter.

    1. TFLite's reference kernels run the sparse model once: each ``DENSIFY`` output (TFLite's own
       ``FormatConverter``) must equal the constant this pass wrote, bit for bit;
    2. both models, on the default interpreter (XNNPACK, as MediaPipe runs them), on ``runs`` seeded random
       inputs: every output within :data:`MAX_ABS_DIFF`.
    """
    sparse_model = read_model(sparse)
    reference = _interpreter(sparse, reference=True)
    _run(reference, random_inputs(reference.get_input_details(), 1)[0])
    by_tensor = {d.tensor: d for d in densified if d.subgraph == 0}
    codes = _densify_codes(sparse_model)
    compared = 0
    for operator in sparse_model.subgraphs[0].operators or []:  # the interpreter runs subgraph 0
        if int(operator.opcodeIndex) not in codes:
            continue
        record = by_tensor.get(int(operator.inputs[0]))
        if record is None:
            continue
        computed = np.asarray(reference.get_tensor(int(operator.outputs[0])))
        written = np.frombuffer(_buffer_bytes(dense_model.buffers[record.buffer]), dtype=computed.dtype)
        if computed.tobytes() != written.tobytes():
            differ = int(np.count_nonzero(computed.reshape(-1) != written.reshape(-1))) if computed.size == written.size else computed.size
            raise VerificationFailed(f"'{record.name}': {differ} of {computed.size} values differ from TFLite's DENSIFY output")
        compared += 1
    worst = 0.0
    per_output: list[float] = []
    sparse_runner, dense_runner = _interpreter(sparse), _interpreter(dense)
    for inputs in random_inputs(sparse_runner.get_input_details(), runs, VERIFY_SEED + 1):
        expected, actual = _run(sparse_runner, inputs), _run(dense_runner, inputs)
        if len(expected) != len(actual):
            raise VerificationFailed(f"the densified model has {len(actual)} outputs, the sparse one {len(expected)}")
        diffs = [float(np.max(np.abs(e.astype(np.float64) - a.astype(np.float64)), initial=0.0)) for e, a in zip(expected, actual)]
        per_output = [max(x, y) for x, y in zip(per_output, diffs)] if per_output else diffs
        worst = max(worst, *diffs)
    if not worst <= MAX_ABS_DIFF:
        raise VerificationFailed(
            f"the densified model's outputs differ from the sparse model's by up to {worst:.3g} (> {MAX_ABS_DIFF:g}) on random inputs"
        )
    return {
        "densify_outputs_equal": compared,
        "random_inputs": runs,
        "max_abs_diff": worst,
        "max_abs_diff_per_output": per_output,
        "max_allowed": MAX_ABS_DIFF,
    }


def densify_file(source: Path, output: Path, runs: int = 3) -> dict[str, Any]:
    """``source`` -> ``output`` with every sparse constant dense and every ``DENSIFY`` gone, verified; the report."""
    started = time.perf_counter()
    data = source.read_bytes()
    model = read_model(data)
    if not sparse_tensor_count(model):
        raise DensifyError("it has no sparse tensors")
    densified, removed = densify_model(model)
    dense = write_model(model)
    check = read_model(dense)  # what was written reads back: no sparse tensor, no DENSIFY
    if sparse_tensor_count(check) or any(
        int(op.opcodeIndex) in _densify_codes(check) for sg in check.subgraphs for op in sg.operators or []
    ):
        raise VerificationFailed("the rewritten model still holds sparse tensors or DENSIFY operators")
    verification = verify(data, dense, densified, check, runs)
    temporary = output.with_name(f".{output.name}.tmp")
    temporary.write_bytes(dense)
    temporary.replace(output)
    return {
        "source": source.name,
        "output": output.name,
        "tensors": [d.as_dict() for d in densified],
        "densify_ops_removed": removed,
        "bytes": {"source": len(data), "output": len(dense)},
        "verification": verification,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--report", type=Path, required=True, help="JSON: what was densified and the checks' numbers, or the error")
    parser.add_argument("--runs", type=int, default=3, help="random input sets the outputs are compared on (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        report = densify_file(args.source, args.output, args.runs)
        status = 0
    except DensifyError as error:
        report, status = {"error": str(error), "check_failed": isinstance(error, VerificationFailed)}, error.exit_code
        print(f"tflite_densify: {args.source.name}: {error}", file=sys.stderr)
    except Exception as error:  # a model this pass misreads: one line for the build, the traceback on stderr
        traceback.print_exc()
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        report, status = {"error": f"{type(error).__name__} while rewriting it: {first}", "check_failed": False}, 2
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    return status


if __name__ == "__main__":
    # Run as a script: its folder (builders/, which holds a tflite.py) must not shadow the packages it imports.
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    sys.exit(main())
