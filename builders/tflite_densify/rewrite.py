"""The rewrite of a model (TFLite's flatbuffer object API): every sparse constant densified in place, every
``DENSIFY`` operator removed and what read it rewired."""

from __future__ import annotations

from typing import Any

import numpy as np

from .sparsity import (
    _OTHER_TYPES,
    BUILTIN_DENSIFY,
    DIMENSION_FORMATS,
    INDEX_VECTORS,
    TENSOR_TYPES,
    Densified,
    DensifyError,
    DimMetadata,
    densify,
)

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
