"""Where everything lives: the one module that spells repository paths and model names.

A **pipeline** is one folder under ``model_repository/``: a Triton model
repository of its own (``tritonserver --model-repository`` takes it, once per
pipeline) holding

- ``pipeline.toml``: the build recipe (read by ``builders``, ignored by Triton,
  which only loads sub-folders);
- ``<name>/``: the ensemble clients call;
- ``<name>_preprocess/``, ``<name>_core/``, ``<name>_postprocess/``: its three
  composing models;
- ``<name>_core_<role>/`` for each second stage of a two-stage pipeline: a core the
  postprocess calls (by BLS), built from the recipe's ``[stages.<role>]``.

Built artifacts (ONNX files, labels, plans, provenance records) are written
into the core's and postprocess's folders, never committed; scratch work,
reports and caches go under ``.build/``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPOSITORY_ROOT / "model_repository"
BUILD_DIR = REPOSITORY_ROOT / ".build"
REQUIREMENTS_DIR = REPOSITORY_ROOT / "requirements"  # <set>.in (edited) -> <set>.txt (locked: python -m devtools.lock)
RECIPE_FILENAME = "pipeline.toml"
# The alert rules (a Prometheus Operator PrometheusRule) and the runbooks their runbook_url annotations point into.
PROMETHEUS_RULE = REPOSITORY_ROOT / "k8s" / "prometheusrule.yaml"
RUNBOOKS = REPOSITORY_ROOT / "docs" / "runbooks.md"

# The composing models' roles, in ensemble order; a model is named <pipeline>_<role>.
ROLES = ("preprocess", "core", "postprocess")
MODEL_VERSION = 1

# Core artifacts, relative to the core's version folder: one file per precision.
FP32_ONNX = "model.onnx"
FP16_ONNX = "model_fp16.onnx"
INT8_ONNX = "model_int8_qdq.onnx"
PLAN = "model.plan"
# Which precision the pipeline serves, written by the precision ladder (builders evaluate).
SERVED_PRECISION = "served_precision.json"
# The drift monitors' reference sample, per core model version (builders drift-reference).
DRIFT_REFERENCE = "drift_reference.json"
PROVENANCE_SUFFIX = ".json"  # <artifact>.json beside every built artifact
PRECISION_ONNX = {"fp32": FP32_ONNX, "fp16": FP16_ONNX, "int8": INT8_ONNX}


class LayoutError(ValueError):
    """A pipeline or model is missing from the repository."""


@dataclass(frozen=True)
class Pipeline:
    """One pipeline's folder and the names of its models."""

    name: str
    repository: Path  # the pipeline's own Triton model repository: model_repository/<name>

    @classmethod
    def at(cls, repository: Path | str) -> Pipeline:
        """The pipeline whose folder (its own model repository) is ``repository``."""
        path = Path(repository)
        return cls(path.name, path)

    @property
    def recipe(self) -> Path:
        return self.repository / RECIPE_FILENAME

    def model_name(self, role: str) -> str:
        if role not in ROLES:
            raise LayoutError(f"unknown model role {role!r}; expected one of {ROLES}")
        return f"{self.name}_{role}"

    def model_dir(self, role: str) -> Path:
        return self.repository / self.model_name(role)

    def stage_name(self, role: str) -> str:
        """A second-stage model's name, ``<name>_core_<role>``: a core the postprocess calls, built from the recipe's
        ``[stages.<role>]``. Metrics tell the ensemble's steps from ensembles by these names
        (``.+_(preprocess|core|core_.+|postprocess)``: k8s/prometheusrule.yaml)."""
        if role in ROLES:
            raise LayoutError(f"{role!r} is one of the ensemble's roles {ROLES}, not a second stage")
        return f"{self.name}_core_{role}"

    def stage_dir(self, role: str) -> Path:
        return self.repository / self.stage_name(role)

    def stage_onnx(self, role: str) -> Path:
        return self.stage_dir(role) / str(MODEL_VERSION) / FP32_ONNX

    @property
    def ensemble_dir(self) -> Path:
        return self.repository / self.name

    @property
    def core_dir(self) -> Path:
        return self.model_dir("core")

    @property
    def core_version_dir(self) -> Path:
        return self.core_dir / str(MODEL_VERSION)

    def core_file(self, filename: str) -> Path:
        return self.core_version_dir / filename

    def onnx(self, precision: str = "fp32") -> Path:
        try:
            return self.core_file(PRECISION_ONNX[precision])
        except KeyError:
            raise LayoutError(f"unknown precision {precision!r}; expected one of {sorted(PRECISION_ONNX)}") from None

    @property
    def plan(self) -> Path:
        return self.core_file(PLAN)

    @property
    def served_precision(self) -> Path:
        return self.core_file(SERVED_PRECISION)

    def served_onnx(self) -> Path | None:
        """The ONNX the precision ladder chose, if it ran and the file is still the one it measured."""
        return served_onnx(self.core_version_dir)

    @property
    def drift_reference(self) -> Path:
        return drift_reference_path(self.core_version_dir)

    @property
    def build_dir(self) -> Path:
        """Scratch space of this pipeline's builds: calibration sets, converted sources, reports."""
        return BUILD_DIR / "pipelines" / self.name

    @property
    def reports_dir(self) -> Path:
        return BUILD_DIR / "reports" / self.name


def provenance_path(artifact: Path) -> Path:
    """The provenance record written beside a built artifact."""
    return artifact.with_name(artifact.name + PROVENANCE_SUFFIX)


def drift_reference_path(version_dir: Path, filename: str = DRIFT_REFERENCE) -> Path:
    """The drift reference of the core model version in ``version_dir`` (the models' ``drift_reference`` parameter names the file)."""
    return version_dir / filename


def pipelines(repository: Path = MODEL_REPOSITORY) -> list[Pipeline]:
    """Every pipeline in the repository (a folder with a recipe), sorted by name."""
    if not repository.is_dir():
        raise LayoutError(f"{repository}: no such model repository")
    return [Pipeline(path.name, path) for path in sorted(repository.iterdir()) if (path / RECIPE_FILENAME).is_file()]


def pipeline(name: str, repository: Path = MODEL_REPOSITORY) -> Pipeline:
    found = {item.name: item for item in pipelines(repository)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise LayoutError(f"no pipeline {name!r} in {repository} (pipelines: {known})")
    return found[name]


def model_repositories(repository: Path = MODEL_REPOSITORY) -> list[Path]:
    """The folders to pass to ``tritonserver --model-repository``, one per pipeline."""
    return [item.repository for item in pipelines(repository)]


def read_served_precision(version_dir: Path) -> dict[str, Any] | None:
    """The precision ladder's record (``served_precision.json``) in a core's version folder; None if the ladder has not run."""
    path = version_dir / SERVED_PRECISION
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or not isinstance(record.get("onnx"), str):
        raise LayoutError(f"{path}: not a precision record (no 'onnx' file name)")
    return record


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def served_onnx(version_dir: Path) -> Path | None:
    """The ONNX the precision ladder chose, if it ran and the file is still the one it measured.

    Shared by the builders (``build-engine`` builds it) and the CPU cores (``precision: "served"``).
    """
    record = read_served_precision(version_dir)
    if record is None:
        return None
    path = version_dir / record["onnx"]
    return path if path.is_file() and file_sha256(path) == record.get("onnx_sha256") else None
