"""The sparse-tensor formats of TFLite and the index math that densifies one tensor (TFLite's ``FormatConverter``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


# One function, as TFLite's FormatConverter::SparseToDense is one loop over the traversal: its steps, kept in its order,
# are checked against it line by line (the module docstring names the source).
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
