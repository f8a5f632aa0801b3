"""Loading an ONNX file and exporting an onnx-graphsurgeon graph without losing the model's header.

``gs.export_onnx`` builds a new ``ModelProto``: ir_version, producer, domain, model_version,
doc_string and ``metadata_props`` (where ``fix`` records its passes and the batch range) are
lost. :func:`export_with_metadata` is the one place that restores them.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_graphsurgeon as gs

from builders import BuildError


def load_onnx(path: Path) -> onnx.ModelProto:
    """Load an ONNX file; a missing or unreadable file is a user error (``BuildError``, exit 2)."""
    if not path.is_file():
        raise BuildError(f"{path}: no such file")
    try:
        return onnx.load(str(path))
    except Exception as error:
        raise BuildError(f"{path}: not an ONNX model ({type(error).__name__})") from None


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes``, or the model unchanged when inference fails."""
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception:
        return model


def export_with_metadata(graph: gs.Graph, source: onnx.ModelProto, reinfer: bool = False, do_type_check: bool = True) -> onnx.ModelProto:
    """``gs.export_onnx(graph)`` with ``source``'s header and metadata_props.

    With ``reinfer`` the exported value_info is dropped and shapes are inferred from scratch
    (what ``fix`` does between passes, so every pass sees fresh shapes).
    """
    exported = gs.export_onnx(graph, do_type_check=do_type_check)
    exported.ir_version = source.ir_version
    exported.producer_name = source.producer_name
    exported.producer_version = source.producer_version
    exported.domain = source.domain
    exported.model_version = source.model_version
    exported.doc_string = source.doc_string
    del exported.metadata_props[:]
    exported.metadata_props.extend(source.metadata_props)
    if reinfer:
        del exported.graph.value_info[:]
        return infer_shapes(exported)
    return exported
