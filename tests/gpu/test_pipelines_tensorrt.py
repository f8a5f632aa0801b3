"""Every pipeline served from a TensorRT plan answers, on its plan, as the FP32 pipeline on CPU within its gate.

The face detector, the person segmenter and the image classifier, and a pipeline of every YOLO head and export the
family takes (detect: static, ``dynamic=True``, ``nms=True`` and ``dynamic=True, nms=True``; pose, segment, obb and
classify: static and dynamic), each at the precision its ladder chose: ``build-engine`` builds the plan from the
ONNX ``select-precision`` recorded, the plan runs as the pipeline's core (:class:`tests.support.tensorrt_core.PlanCore`),
and every other step is the served code in process. Its answers on the ladder's held-out images (the same seeded
augmentations ``select-precision`` judged the ONNX on; for the YOLO models, scenes of their own classes they never saw,
named in the recipe as docs/models.md has users name theirs, and others to calibrate on) are compared with the FP32
core on onnxruntime by the task's gate and the recipe's thresholds: what the ladder judged on the CPU,
judged again on the GPU's own FP16/INT8 kernels. (The text reader has its own test against a served GPU:
``tests/gpu/test_text_reader_tensorrt.py``.)

Run in the builder image on a GPU host (TensorRT, cuda-python and the CPU steps are there):

    docker compose --env-file versions.env -f docker/compose.yaml run --rm --entrypoint /opt/nvidia/nvidia_entrypoint.sh builder python \\
        -m pytest -m gpu tests/gpu/test_pipelines_tensorrt.py -s

Skipped where ``tensorrt`` does not import or ``nvidia-smi`` fails. The YOLO cases train the tests' models on first use
(``tests/support/yolo*.py``: minutes on the CPU, cached in ``.build/test-yolo``); every case runs ``builders all`` on
its pipeline with the INT8 calibration cut to ``CALIBRATION_SAMPLES``, as the integration tier's laddered repository.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from builders import build_all, loaded, precision, scaffold
from builders.tensorrt import build, discovery, models
from tests.support.pipelines import CALIBRATION_SAMPLES
from vision_serving import layout
from vision_serving.served import ServedPipeline

SHIPPED = ("face_detector", "person_segmenter", "image_classifier")
SCENES = 12


def _scenes(task: str, seed: int) -> Callable[[Path], dict[str, bytes]]:
    """Images of the tests' YOLO models' own classes, never trained on: name -> file bytes."""
    from tests.support import yolo, yolo_classify, yolo_obb, yolo_pose, yolo_segment

    def detect(folder: Path) -> dict[str, bytes]:
        return yolo.write_new_scenes(
            folder, SCENES, seed, "detect", lambda rng, height, width, background: yolo.scene(rng, height, width, background)[0]
        )

    return {
        "detect": detect,
        "pose": lambda folder: yolo_pose.write_scenes(folder, SCENES, seed),
        "obb": lambda folder: yolo_obb.write_scenes(folder, SCENES, seed),
        "segment": lambda folder: yolo_segment.write_scenes(SCENES, seed),
        "classify": lambda folder: yolo_classify.write_photos(SCENES, seed),
    }[task]


def _trained(task: str) -> Path:
    from tests.support import yolo, yolo_classify, yolo_obb, yolo_pose, yolo_segment

    modules = {"detect": yolo, "pose": yolo_pose, "segment": yolo_segment, "obb": yolo_obb, "classify": yolo_classify}
    return modules[task].trained(log=lambda _: None)


# (task, export file) of every YOLO export the family takes (tests/support/ultralytics_yolo.py's exports).
YOLO_EXPORTS = [
    ("detect", "yolo.onnx"),
    ("detect", "dynamic.onnx"),
    ("detect", "end2end.onnx"),  # nms=True
    ("detect", "dynamic_nms.onnx"),  # dynamic=True, nms=True, batch=4
    *((task, f"{kind}.onnx") for task in ("pose", "segment", "obb", "classify") for kind in ("static", "dynamic")),
]


@pytest.fixture(scope="module")
def trt():
    trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed (use the builder image docker/builder.Dockerfile)")
    if shutil.which("nvidia-smi") is None or subprocess.run(discovery.NVIDIA_SMI_QUERY, capture_output=True, check=False).returncode:
        pytest.skip("no NVIDIA GPU (nvidia-smi failed)")
    return trt


def laddered(repository: Path, images: dict[str, Path] | None = None) -> loaded.LoadedPipeline:
    """``builders all`` on the one pipeline of ``repository``, its INT8 calibration cut to CALIBRATION_SAMPLES;
    ``images``: the recipe's ``calibration_dir`` and ``evaluation_dir`` (a detector of other classes than the package
    photos hold, as docs/models.md has users name their images)."""
    (pipeline,) = layout.pipelines(repository)
    text = re.sub(r"(?m)^samples = \d+$", f"samples = {CALIBRATION_SAMPLES}", pipeline.recipe.read_text())
    folders = "".join(f'{key} = "{folder}"\n' for key, folder in (images or {}).items())
    pipeline.recipe.write_text(text.replace("[quantize]\n", f"[quantize]\n{folders}", 1))
    assert build_all.run_all([pipeline]) == 0
    return loaded.load(pipeline.repository)


def scene_folders(task: str, root: Path) -> dict[str, Path]:
    """Scenes of the model's own classes to calibrate on and, others, to hold out (never the same: other seeds)."""
    folders = {}
    for key, seed in (("calibration_dir", 3), ("evaluation_dir", 5)):
        folder = root / key
        folder.mkdir(parents=True)
        for name, data in _scenes(task, seed)(root / "written" / key).items():
            (folder / name).write_bytes(data)
        folders[key] = folder
    return folders


def on_the_plan(pipeline: loaded.LoadedPipeline, trt, folder: Path) -> tuple[ServedPipeline, dict]:
    """The served pipeline with its core on the plan build-engine builds here from the ladder's ONNX."""
    from tests.support.tensorrt_core import PlanCore

    onnx = models.default_onnx(pipeline.layout)
    settings = build.BuildSettings(pipeline.layout, onnx, folder / "model.plan", cache_dir=folder / "plan-cache")
    result = build.build_engine(settings, trt=trt)
    core_config = models.load_core_config(pipeline.layout)
    return ServedPipeline(pipeline.configs, PlanCore(result.plan), core_config), result.provenance


def assert_within_the_gate(pipeline: loaded.LoadedPipeline, served: ServedPipeline) -> None:
    """The plan's answers against the FP32 CPU core's on the ladder's held-out images, by the task's gate."""
    reference = pipeline.served()
    held_out = precision.HeldOut(pipeline, reference)
    report = pipeline.task.gate(
        reference.postprocess(reference.with_core(held_out.tensors)),
        served.postprocess(served.with_core(held_out.tensors)),
        pipeline.recipe.gate,
    )
    print(f"\n{pipeline.name} on TensorRT vs CPU FP32, {len(held_out.samples)} held-out images: {report['checks']}")
    failed = {name: check for name, check in report["checks"].items() if not check["pass"]}
    assert not failed, (pipeline.name, failed)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_pipeline_on_its_plan_answers_within_its_gate(trt, name, tmp_path):
    """The face detector and the segmenter serve FP16, the classifier INT8 (benchmarks/results/served_precision.json)."""
    from devtools.loadgen import copy_repository

    copy_repository(layout.pipeline(name).repository, tmp_path / "model_repository" / name)
    pipeline = laddered(tmp_path / "model_repository")
    served, record = on_the_plan(pipeline, trt, tmp_path)
    chosen = layout.read_served_precision(pipeline.layout.core_version_dir)
    assert chosen is not None and record["onnx"]["file"] == chosen["onnx"]
    assert not {"INT8", "FP16"} & set(record["builder"]["builder_flags"])  # strongly typed: the ONNX's types decide
    assert_within_the_gate(pipeline, served)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(("task", "export"), YOLO_EXPORTS, ids=[f"{task}-{export.removesuffix('.onnx')}" for task, export in YOLO_EXPORTS])
def test_every_yolo_head_and_export_on_its_plan_answers_within_its_gate(trt, task, export, tmp_path):
    """new-pipeline --from yolo, builders all, build-engine; the nms=True exports' data-dependent NMS inside the plan."""
    repository = tmp_path / "model_repository"
    scaffold.new_pipeline("yolo_case", "yolo", repository, log=lambda _: None, model=_trained(task) / export)
    pipeline = laddered(repository, scene_folders(task, tmp_path / "images"))
    served, _ = on_the_plan(pipeline, trt, tmp_path)
    assert_within_the_gate(pipeline, served)
