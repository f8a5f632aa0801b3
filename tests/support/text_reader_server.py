"""A model repository serving the two-stage text reader on tritonserver, for the BLS fan-out's integration test.

Until ``model_repository/text_reader`` exists (the generic builders and checks know one core per pipeline
today), this writes its models into a folder of the test's: the ensemble (preprocess -> detector ->
postprocess), the detector, direction classifier and recognizer as CPU cores (the wheel's ONNX files
on onnxruntime in the Python backend, their tensors renamed to the configs' names) and the postprocess
reaching the classifier and the recognizer by BLS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs

from builders import rapidocr_models
from builders.passes.batch import stable_io_names
from devtools.triton_server import LocalTritonServer

NAME = "text_reader"
MAX_BATCH = 8
CROP_BATCH = 16  # the classifier's and the recognizer's max_batch_size, and the postprocess's chunks


@dataclass(frozen=True)
class Core:
    role: str
    input_dims: str
    output_name: str
    output_dims: str
    max_batch: int


CORES = {
    "detector": Core("detector", "[ 3, -1, -1 ]", "probability", "[ 1, -1, -1 ]", MAX_BATCH),
    "classifier": Core("classifier", "[ 3, 48, 192 ]", "directions", "[ 2 ]", CROP_BATCH),
    "recognizer": Core("recognizer", "[ 3, 48, -1 ]", "probabilities", f"[ -1, {rapidocr_models.CLASSES} ]", CROP_BATCH),
}

LIMITS = """
  { key: "max_image_bytes", value: { string_value: "20971520" } },
  { key: "max_image_pixels", value: { string_value: "50000000" } },
  { key: "accepted_formats", value: { string_value: "jpeg,png,webp" } },
  { key: "max_image_side", value: { string_value: "32766" } },
  { key: "max_jpeg_scans", value: { string_value: "64" } }"""


def _tensor(name: str, datatype: str, dims: str) -> str:
    return f'  {{ name: "{name}" data_type: {datatype} dims: {dims} }}'


def _tensors(*tensors: str) -> str:
    return ",\n".join(tensors)


def _model(folder: Path, config: str, entry: str) -> None:
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(f"from vision_serving.triton_models.{entry} import TritonPythonModel  # noqa: F401\n")


def _core(root: Path, core: Core) -> None:
    folder = root / f"{NAME}_{core.role}"
    config = f"""name: "{folder.name}"
backend: "python"
max_batch_size: {core.max_batch}
input [
{_tensor("images", "TYPE_FP32", core.input_dims)}
]
output [
{_tensor(core.output_name, "TYPE_FP32", core.output_dims)}
]
parameters [
  {{ key: "runtime", value: {{ string_value: "onnxruntime" }} }},
  {{ key: "onnx_file", value: {{ string_value: "model.onnx" }} }},
  {{ key: "graph_optimization", value: {{ string_value: "all" }} }},
  {{ key: "intra_op_threads", value: {{ string_value: "1" }} }}
]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
    _model(folder, config, "core")
    graph = gs.import_onnx(onnx.load(str(rapidocr_models.model_file(core.role))))
    stable_io_names(graph, ["images"], [core.output_name])
    onnx.save(gs.export_onnx(graph), str(folder / "1" / "model.onnx"))


def write_repository(root: Path) -> Path:
    """The text reader's six models under ``root`` (a model repository); returns ``root``."""
    for core in CORES.values():
        _core(root, core)
    detection = [
        _tensor("DET_INPUT", "TYPE_FP32", "[ 3, -1, -1 ]"),
        _tensor("DET_IMAGE", "TYPE_UINT8", "[ -1, -1, 3 ]"),
        _tensor("DET_TRANSFORM", "TYPE_FP32", "[ 5 ]"),
    ]
    _model(
        root / f"{NAME}_preprocess",
        f"""name: "{NAME}_preprocess"
backend: "python"
max_batch_size: {MAX_BATCH}
input [
{_tensor("IMAGE", "TYPE_STRING", "[ 1 ]")}
]
output [
{_tensors(*detection)}
]
parameters [{LIMITS}
]
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
""",
        "text_preprocess",
    )
    outputs = [
        _tensor("TEXTS", "TYPE_STRING", "[ -1 ]"),
        _tensor("SCORES", "TYPE_FP32", "[ -1 ]"),
        _tensor("BOXES", "TYPE_FP32", "[ -1, 4, 2 ]"),
        _tensor("BOX_SCORES", "TYPE_FP32", "[ -1 ]"),
        _tensor("COUNT", "TYPE_INT32", "[ 1 ]"),
    ]
    classifier, recognizer = CORES["classifier"], CORES["recognizer"]
    postprocess = root / f"{NAME}_postprocess"
    _model(
        postprocess,
        f"""name: "{NAME}_postprocess"
backend: "python"
max_batch_size: {MAX_BATCH}
input [
{_tensor("PROBABILITY", "TYPE_FP32", "[ 1, -1, -1 ]")},
{_tensors(*detection[1:])}
]
output [
{_tensors(*outputs)}
]
parameters [
  {{ key: "classifier_model", value: {{ string_value: "{NAME}_classifier" }} }},
  {{ key: "classifier_input", value: {{ string_value: "images" }} }},
  {{ key: "classifier_output", value: {{ string_value: "{classifier.output_name}" }} }},
  {{ key: "classifier_max_batch", value: {{ string_value: "{classifier.max_batch}" }} }},
  {{ key: "recognizer_model", value: {{ string_value: "{NAME}_recognizer" }} }},
  {{ key: "recognizer_input", value: {{ string_value: "images" }} }},
  {{ key: "recognizer_output", value: {{ string_value: "{recognizer.output_name}" }} }},
  {{ key: "recognizer_max_batch", value: {{ string_value: "{recognizer.max_batch}" }} }},
  {{ key: "characters", value: {{ string_value: "characters.json" }} }}
]
dynamic_batching {{ }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
""",
        "text_postprocess",
    )
    characters = rapidocr_models.model_characters(rapidocr_models.model_file("recognizer"))
    (postprocess / "characters.json").write_text(json.dumps(characters, ensure_ascii=False))
    steps = [
        ("preprocess", {"IMAGE": "IMAGE"}, {"DET_INPUT": "det_input", "DET_IMAGE": "det_image", "DET_TRANSFORM": "det_transform"}),
        ("detector", {"images": "det_input"}, {"probability": "probability"}),
        (
            "postprocess",
            {"PROBABILITY": "probability", "DET_IMAGE": "det_image", "DET_TRANSFORM": "det_transform"},
            {name: name for name in ("TEXTS", "SCORES", "BOXES", "BOX_SCORES", "COUNT")},
        ),
    ]
    scheduling = ",\n".join(
        f'    {{ model_name: "{NAME}_{role}" model_version: -1\n'
        + "".join(f'      input_map {{ key: "{key}" value: "{value}" }}\n' for key, value in inputs.items())
        + "".join(f'      output_map {{ key: "{key}" value: "{value}" }}\n' for key, value in outs.items())
        + "    }"
        for role, inputs, outs in steps
    )
    ensemble = root / NAME
    (ensemble / "1").mkdir(parents=True, exist_ok=True)
    (ensemble / "config.pbtxt").write_text(
        f"""name: "{NAME}"
platform: "ensemble"
max_batch_size: {MAX_BATCH}
input [
{_tensor("IMAGE", "TYPE_STRING", "[ 1 ]")}
]
output [
{_tensors(*outputs)}
]
ensemble_scheduling {{
  step [
{scheduling}
  ]
}}
"""
    )
    return root


class RepositoryServer(LocalTritonServer):
    """tritonserver on a plain model repository (no pipeline folders, nothing sized)."""

    def sized_repositories(self) -> list[Path]:
        return [self.model_repository]
