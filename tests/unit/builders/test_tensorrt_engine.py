"""The TensorRT plan steps (`build-engine`, `verify-plan`).

Pure logic (profile, version handling, provenance comparison, CLI errors) runs
everywhere. The `gpu` tests build real plans; they skip unless `tensorrt`
imports and `nvidia-smi` sees a GPU (the builder image on a GPU host:
`docker compose -f docker/compose.yaml run --rm builder python -m pytest -m gpu`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from builders import BuildError, cli
from builders import provenance as provenance_records
from builders import tensorrt_engine as te
from tests.support.tensorrt import TINY_CONFIG, core_config, run_cli, tiny_pipeline
from vision_serving import layout, model_config

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFIER = layout.pipeline("image_classifier")
# The repository has several pipelines: every step that reads one is told which.
PIPELINE_ARGS = ["--pipeline", CLASSIFIER.name]
H100 = te.GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
L4 = te.GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")


def provenance(trt: str = "10.13.3.9", cc: str = "9.0") -> dict:
    return {"tensorrt": {"version": trt}, "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": cc}}


# --------------------------------------------------------------------------- pure logic


def test_profile_from_the_real_core_config():
    core = te.load_core_config(CLASSIFIER)
    assert core.name == CLASSIFIER.model_name("core")
    (profile,) = te.optimization_profile(core)
    dims = tuple(core.input[0].dims)
    assert profile.name == core.input[0].name
    assert profile.min == (1, *dims) and profile.max == (core.max_batch_size, *dims) and profile.opt == profile.max
    (profile,) = te.optimization_profile(core, opt_batch=8)
    assert profile.opt == (8, *dims)


@pytest.mark.parametrize("opt", [0, 5, 100])
def test_profile_rejects_an_opt_batch_outside_the_range(opt):
    with pytest.raises(model_config.ConfigError, match=r"outside 1\.\.4"):
        te.optimization_profile(core_config(), opt_batch=opt)


def test_profile_without_batching_and_with_variable_dims():
    (profile,) = te.optimization_profile(core_config(TINY_CONFIG.replace("max_batch_size: 4", "max_batch_size: 0")))
    assert profile.min == profile.opt == profile.max == (3, 8, 8)
    with pytest.raises(model_config.ConfigError, match="variable dims"):
        te.optimization_profile(core_config(TINY_CONFIG.replace("dims: [ 3, 8, 8 ]", "dims: [ 3, -1, -1 ]")))


def test_dynamic_dims_take_their_input_s_profiles_one_plan_profile_each(tmp_path):
    """The text reader: the detector's photo, wide and tall ranges from its preprocess, the recognizer's one fixed width
    per bucket from its task; batch 1..max added, tuned for each profile's own batch unless --opt-batch says."""
    from vision_serving.tasks.text_reading.task import RECOGNIZER_OPT_BATCH

    text_reader = layout.pipeline("text_reader")
    assert te.engine_roles(text_reader) == ["core", "classifier", "recognizer"]
    detector = te.load_core_config(text_reader)
    profiles = te.optimization_profiles(detector, None, te.model_profiles(text_reader, "core"))
    assert [(p[0].min, p[0].opt, p[0].max) for p in profiles] == [
        ((1, 3, 736, 736), (1, 3, 736, 736), (8, 3, 1984, 1984)),
        ((1, 3, 736, 2016), (1, 3, 736, 2944), (8, 3, 736, 4096)),
        ((1, 3, 2016, 736), (1, 3, 2944, 736), (8, 3, 4096, 736)),
    ]
    recognizer = te.load_core_config(text_reader, "recognizer")
    ranges = te.model_profiles(text_reader, "recognizer")
    profiles = te.optimization_profiles(recognizer, None, ranges)
    assert [p[0].max for p in profiles] == [(16, 3, 48, w) for w in (320, 480, 640, 960, 1280, 1920)]
    assert all(p[0].min == (1, 3, 48, p[0].max[-1]) and p[0].opt[0] == RECOGNIZER_OPT_BATCH for p in profiles)
    assert all(p[0].opt[0] == 2 for p in te.optimization_profiles(recognizer, 2, ranges))  # --opt-batch
    classifier = te.load_core_config(text_reader, "classifier")
    assert te.model_profiles(text_reader, "classifier") == ()
    assert len(te.optimization_profiles(classifier)) == 1  # fixed dims: the one batch profile
    with pytest.raises(model_config.ConfigError, match="are dynamic; the plan needs the profiles of its one input"):
        te.optimization_profiles(detector)
    with pytest.raises(model_config.ConfigError, match="does not fit input dims"):
        te.optimization_profiles(recognizer, None, te.model_profiles(text_reader, "core"))
    with pytest.raises(model_config.ConfigError, match="its input dims are fixed"):
        te.optimization_profiles(classifier, None, ranges)
    with pytest.raises(model_config.ConfigError, match=r"opt batch 17 is outside 1\.\.16"):
        te.optimization_profiles(recognizer, 17, ranges)
    assert te.default_plan(text_reader, "recognizer") == text_reader.stage_dir("recognizer") / "1" / te.PLAN_FILENAME
    # A stage's plan is built from its own ladder's choice; without a record, from its FP32 export.
    shutil.copytree(text_reader.repository, tmp_path / "text_reader", ignore=shutil.ignore_patterns("*.onnx", "*.json"))
    copy = layout.Pipeline.at(tmp_path / "text_reader")
    assert te.default_onnx(copy, "recognizer") == copy.stage_onnx("recognizer")
    fp16 = copy.stage_onnx("recognizer").with_name(layout.FP16_ONNX)
    fp16.write_bytes(b"fp16 recognizer")
    record = {"precision": "fp16", "onnx": fp16.name, "onnx_sha256": te.sha256_file(fp16)}
    (fp16.parent / layout.SERVED_PRECISION).write_text(json.dumps(record))
    assert te.default_onnx(copy, "recognizer") == fp16


def test_the_cpu_variant_is_not_taken_for_the_plan(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    assert te.load_core_config(pipeline).name == "tiny_core"
    config = pipeline.core_dir / "config.pbtxt"
    config.write_text(TINY_CONFIG.replace('platform: "tensorrt_plan"', 'backend: "python"'))
    with pytest.raises(model_config.ConfigError, match=re.escape("tiny_core/config.pbtxt: platform is 'python', expected 'tensorrt_plan'")):
        te.load_core_config(pipeline)


def test_default_paths_are_the_pipelines(tmp_path):
    assert te.default_plan(CLASSIFIER) == CLASSIFIER.plan == CLASSIFIER.core_version_dir / te.PLAN_FILENAME
    pipeline = tiny_pipeline(tmp_path)
    # Before the precision ladder ran: the INT8 Q/DQ model.
    assert te.default_onnx(pipeline) == pipeline.onnx("int8") == pipeline.core_version_dir / te.QDQ_ONNX_FILENAME


def test_default_onnx_is_the_precision_the_ladder_chose(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    fp16 = pipeline.onnx("fp16")
    fp16.write_bytes(b"fp16 model")
    record = {"precision": "fp16", "onnx": fp16.name, "onnx_sha256": te.sha256_file(fp16)}
    pipeline.served_precision.write_text(json.dumps(record))
    assert te.default_onnx(pipeline) == fp16
    fp16.write_bytes(b"changed since the ladder measured it")
    assert te.default_onnx(pipeline) == pipeline.onnx("int8")


def test_release_cache_key_and_versions():
    assert te.release("10.13.3.9") == "10.13.3" and te.release("11.4.1") == "11.4.1"
    assert te.cache_key("11.4.1.2", "12.0") == "trt11.4.1-sm120"
    # Without hardware compatibility a plan is the GPU model's: so is its cache entry.
    assert te.cache_key("10.8.0.43", "9.0", te.GPU_MODEL_ONLY, "NVIDIA H100 80GB HBM3") == "trt10.8.0-sm90-nvidia-h100-80gb-hbm3"
    assert te.cache_key("10.16.0.1", "9.0", te.SAME_COMPUTE_CAPABILITY, "NVIDIA H100 80GB HBM3") == "trt10.16.0-sm90"
    # Each model version (another ONNX: another inputs hash) is its own cache entry.
    first, second = (te.cache_entry(Path("/c"), "trt11.4.1-sm120", "p", h) for h in ("ab" * 32, "cd" * 32))
    assert first == Path("/c/trt11.4.1-sm120/p/abababababababab") and first != second
    assert te.major_minor("10.8.0.43") == (10, 8)
    with pytest.raises(BuildError):
        te.release("10.x")


def fake_trt(version: str, strongly_typed: bool = True) -> types.SimpleNamespace:
    members = {"STRONGLY_TYPED": 1} if strongly_typed else {}
    if version.startswith("10."):
        members["EXPLICIT_BATCH"] = 0
    return types.SimpleNamespace(__version__=version, NetworkDefinitionCreationFlag=types.SimpleNamespace(**members))


def test_hardware_compatibility_where_the_bindings_have_it():
    class Config:
        hardware_compatibility_level = "NONE"

    levels = types.SimpleNamespace(NONE="NONE", AMPERE_PLUS="AMPERE_PLUS", SAME_COMPUTE_CAPABILITY="SAME_COMPUTE_CAPABILITY")
    new = types.SimpleNamespace(HardwareCompatibilityLevel=levels)  # TensorRT 10.9+ and 11
    old = types.SimpleNamespace(HardwareCompatibilityLevel=types.SimpleNamespace(NONE="NONE", AMPERE_PLUS="AMPERE_PLUS"))
    assert te.hardware_compatibility(new) == te.SAME_COMPUTE_CAPABILITY
    assert te.hardware_compatibility(old) == te.hardware_compatibility(types.SimpleNamespace()) == te.GPU_MODEL_ONLY
    config = Config()
    te.set_hardware_compatibility(new, config, te.SAME_COMPUTE_CAPABILITY)
    assert config.hardware_compatibility_level == "SAME_COMPUTE_CAPABILITY"
    config = Config()
    te.set_hardware_compatibility(old, config, te.GPU_MODEL_ONLY)
    assert config.hardware_compatibility_level == "NONE"  # TensorRT's default, untouched


def test_network_flags_for_tensorrt_10_and_11():
    assert te.network_creation_flags(fake_trt("10.13.3.9")) == (1 << 1, ["STRONGLY_TYPED"])
    # 11: always strongly typed; STRONGLY_TYPED is deprecated and ignored, EXPLICIT_BATCH is gone.
    assert te.network_creation_flags(fake_trt("11.4.1.2")) == (0, [])
    assert te.network_creation_flags(fake_trt("12.0.0.1", strongly_typed=False)) == (0, [])
    with pytest.raises(BuildError, match="too old"):
        te.network_creation_flags(fake_trt("10.7.0.23"))
    with pytest.raises(BuildError, match=r"no NetworkDefinitionCreationFlag\.STRONGLY_TYPED"):
        te.network_creation_flags(fake_trt("10.9.0.1", strongly_typed=False))


def test_parser_errors_are_listed_one_per_line():
    class Error:
        def __init__(self, node, name, op, desc):
            self._node, self._name, self._op, self._desc = node, name, op, desc

        def code(self):
            return "UNSUPPORTED_NODE"

        def desc(self):
            return self._desc

        def node(self):
            return self._node

        def node_name(self):
            return self._name

        def node_operator(self):
            return self._op

    errors = [Error(3, "/head/NMS", "EfficientNMS_TRT", "plugin not found"), Error(-1, "", "", "invalid graph")]
    parser = types.SimpleNamespace(num_errors=2, get_error=lambda i: errors[i])
    assert te.parser_errors(parser) == [
        "[UNSUPPORTED_NODE] node /head/NMS op EfficientNMS_TRT: plugin not found",
        "[UNSUPPORTED_NODE] invalid graph",
    ]


def test_parse_nvidia_smi():
    gpus = te.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 580.65.06\nNVIDIA H100 80GB HBM3, 9.0, 580.65.06\n")
    assert [g.compute_capability for g in gpus] == ["9.0", "9.0"] and gpus[0].driver_version == "580.65.06"
    assert te.single_compute_capability(gpus) == "9.0"
    with pytest.raises(BuildError, match="different compute capabilities"):
        te.single_compute_capability([H100, L4])
    with pytest.raises(BuildError, match="unexpected nvidia-smi output"):
        te.parse_nvidia_smi("No devices were found")


def test_tensorrt_version_from_library_file_names(tmp_path):
    """As TensorRT ships it: libnvinfer.so -> libnvinfer.so.11 -> libnvinfer.so.11.1.0, the symlinks sorting first."""
    (tmp_path / "libnvinfer.so.11.1.0").touch()
    (tmp_path / "libnvinfer.so.11").symlink_to("libnvinfer.so.11.1.0")
    (tmp_path / "libnvinfer.so").symlink_to("libnvinfer.so.11")
    (tmp_path / "libnvinfer_plugin.so.11.2.0").touch()
    assert sorted(p.name for p in tmp_path.glob("libnvinfer.so.*"))[0] == "libnvinfer.so.11"
    assert te.tensorrt_version_from_libraries([tmp_path]) == "11.1.0"
    assert te.tensorrt_version_from_libraries([tmp_path / "missing"]) is None
    names = ["/usr/lib/x86_64-linux-gnu/libnvinfer.so.10", "/usr/lib/x86_64-linux-gnu/libnvinfer.so.10.13.3.9"]
    assert te.tensorrt_version_from_names(names) == "10.13.3"
    assert te.tensorrt_version_from_names(["libnvinfer.so.10", "libnvinfer.so"]) is None


def test_provenance_that_matches():
    assert te.compare_provenance(provenance(), "10.13.3.1", [H100, H100]) == []  # only the build number differs


def test_provenance_with_another_tensorrt_release():
    (problem,) = te.compare_provenance(provenance(), "10.14.1.48", [H100])
    assert "TensorRT 10.13.3" in problem and "10.14.1" in problem and "major.minor.patch must match" in problem


def test_provenance_for_another_gpu_architecture():
    problems = te.compare_provenance(provenance(cc="8.9"), "10.13.3.9", [H100, L4])
    assert problems == [
        "plan built for compute capability 8.9 (NVIDIA H100 80GB HBM3), GPU 0 is 9.0 (NVIDIA H100 80GB HBM3)",
        "plan built on NVIDIA H100 80GB HBM3 without hardware compatibility (only that GPU model), GPU 1 is NVIDIA L4",
    ]
    assert te.compare_provenance(provenance(), "10.13.3.9", []) == ["no NVIDIA GPU visible"]
    assert te.compare_provenance({}, "10.13.3.9", [H100]) == ["the provenance has no TensorRT version or compute capability"]


def test_a_plan_without_hardware_compatibility_serves_its_gpu_model_only():
    """sm_90 is H100 SXM, H100 PCIe, H200 and GH200: TensorRT's default level promises only the GPU that built it."""
    pcie = te.GpuFacts("NVIDIA H100 PCIe", "9.0", "580.65.06")
    h200 = te.GpuFacts("NVIDIA H200", "9.0", "580.65.06")
    older = provenance()  # a record without the field: built at TensorRT's default
    assert te.compare_provenance(older, "10.13.3.9", [H100]) == []
    (problem,) = te.compare_provenance(older, "10.13.3.9", [pcie])
    assert problem == (
        "plan built on NVIDIA H100 80GB HBM3 without hardware compatibility (only that GPU model), GPU 0 is NVIDIA H100 PCIe"
    )
    portable = provenance()
    portable["gpu"]["hardware_compatibility"] = te.SAME_COMPUTE_CAPABILITY
    assert te.compare_provenance(portable, "10.13.3.9", [pcie, h200]) == []
    assert te.compare_provenance(portable, "10.13.3.9", [L4])[0].startswith("plan built for compute capability 9.0")


def test_engine_io_comparison():
    expected = te.expected_engine_io(core_config())
    assert expected == {"images": ("INPUT", "FP32", (-1, 3, 8, 8)), "logits": ("OUTPUT", "FP32", (-1, 10))}
    actual = dict(expected, logits=("OUTPUT", "FP16", (-1, 10)), extra=("OUTPUT", "FP32", (-1,)))
    assert te.compare_engine_io(expected, actual) == [
        "the plan's output 'extra' is not in the core config",
        "'logits': config says ('OUTPUT', 'FP32', (-1, 10)), plan has ('OUTPUT', 'FP16', (-1, 10))",
    ]


def test_calibration_hash_is_read_from_the_onnx_provenance(tmp_path):
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"")
    assert te.onnx_provenance(onnx_path) == {"file": None, "calibration_hash": None}
    digest = "ab" * 32
    record = provenance_records.Provenance.for_bytes("quantize", "cd" * 32, onnx_path, b"", input_hashes={"calibration": digest})
    record.write(provenance_records.path_for(onnx_path))
    assert te.onnx_provenance(onnx_path) == {"file": "model_int8_qdq.onnx.json", "input_hash": "cd" * 32, "calibration_hash": digest}


def write_plan(directory: Path, record: dict, payload: bytes = b"plan") -> Path:
    plan = directory / "model.plan"
    plan.write_bytes(payload)
    record = dict(record, output={"file": plan.name, "sha256": te.sha256_file(plan)})
    (directory / "model.plan.json").write_text(json.dumps(record))
    return plan


def test_verify_plan_outcomes(tmp_path):
    plan = write_plan(tmp_path, provenance())
    assert te.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100], log=lambda _: None)
    with pytest.raises(te.VerificationError) as mismatch:
        te.verify_plan(plan, CLASSIFIER, tensorrt_version="11.4.1", gpus=[L4])
    assert mismatch.value.exit_code == 1 and "\n" not in str(mismatch.value)
    assert "TensorRT 10.13.3" in str(mismatch.value) and "compute capability 9.0" in str(mismatch.value)
    plan.write_bytes(b"another plan")
    with pytest.raises(te.VerificationError, match="sha256 differs"):
        te.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100])
    (tmp_path / "model.plan.json").unlink()
    with pytest.raises(te.VerificationError, match="missing or unreadable provenance"):
        te.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100])


def test_cli_says_tensorrt_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"not used")
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--output", str(tmp_path / "model.plan")], capsys)
    assert code == 2
    assert err.strip() == "error: TensorRT is not installed (use the builder image docker/builder.Dockerfile)"
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(te, "LIBRARY_DIRS", ())
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan)], capsys)
    assert code == 2 and "TensorRT is not installed" in err


def test_cli_verify_plan_mismatch_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(te, "query_gpus", lambda: [L4])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: ") and "compute capability 9.0" in err
    monkeypatch.setattr(te, "query_gpus", lambda: [H100])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 0 and "OK for TensorRT 10.13.3" in err


def test_every_pipeline_is_verified_and_every_failure_named(tmp_path, monkeypatch, capsys):
    """verify-plan over a repository: one failing pipeline does not hide another; the pod then fails as a whole
    (the first failure's exit code, one line naming each), since a pod serving some of them would pass readiness."""
    from tests.support.tensorrt import tiny_pipeline

    root = tmp_path / "model_repository"
    good, stale, _ = (tiny_pipeline(root, name) for name in ("good", "stale", "missing"))  # missing: no plan
    write_plan(good.core_version_dir, provenance())
    write_plan(stale.core_version_dir, provenance(trt="10.8.0.43"))
    monkeypatch.setattr(te, "query_gpus", lambda: [H100])
    code, err = run_cli(["verify-plan", "--model-repository", str(root), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 2, err  # missing (a user error, 2) comes first; stale alone would be 1
    *per_pipeline, summary = err.strip().splitlines()
    assert summary.startswith("error: 2 of 3 pipelines cannot be served (missing, stale), so this pod serves none: missing: ")
    assert "stale: " in summary and "TensorRT 10.8.0" in summary
    assert [line.split(": ")[1] for line in per_pipeline[1:]] == ["missing", "stale"] and "good_core/1/model.plan: OK" in per_pipeline[0]
    code, err = run_cli(["verify-plan", "--model-repository", str(root), "--pipeline", "good", "--tensorrt-version", "10.13.3"], capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build-engine", "--opt-batch", "0"], "must be a positive integer"),
        (["build-engine", "--workspace-mib", "-1"], "must be a positive integer"),
        (["build-engine", "--opt-batch", "x"], "invalid"),
    ],
)
def test_cli_argument_validation(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cli_opt_batch_above_max_batch_size_is_a_user_error(tmp_path, capsys):
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"not used")
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--opt-batch", "1000"], capsys)
    assert code == 2 and "outside 1..32" in err


def test_module_entry_point_runs_with_only_the_serving_requirements(tmp_path):
    """The server image's init container: `python3 -m builders.tensorrt_engine verify-plan` without onnx/torch/cv2."""
    blocked = "import sys, runpy; [sys.modules.__setitem__(m, None) for m in ('onnx', 'onnx_graphsurgeon', 'torch', 'cv2', 'tensorrt')]; "
    run = "sys.argv = ['x', 'verify-plan', '--pipeline', 'image_classifier', '--plan', sys.argv[1]]; runpy.run_module('builders.tensorrt_engine', run_name='__main__')"
    completed = subprocess.run(
        [sys.executable, "-c", blocked + run, str(tmp_path / "model.plan")],
        capture_output=True,
        text=True,
        cwd=REPOSITORY_ROOT,
        check=False,
    )
    assert completed.returncode == 2 and completed.stderr.strip().endswith("no such plan (run python -m builders build-engine)"), (
        completed.stderr
    )


def test_cli_needs_the_pipeline_when_the_repository_has_several(tmp_path, capsys):
    assert len(layout.pipelines()) > 1
    code, err = run_cli(["verify-plan", "--plan", str(tmp_path / "model.plan")], capsys)
    assert code == 2 and err.startswith("error: choose a pipeline with --pipeline NAME") and err.count("\n") == 1
    # A model repository holding one pipeline needs no --pipeline.
    pipeline = tiny_pipeline(tmp_path / "model_repository")
    code, err = run_cli(["verify-plan", "--model-repository", str(pipeline.repository.parent)], capsys)
    assert code == 2 and err.strip() == f"error: {pipeline.plan}: no such plan (run python -m builders build-engine)"


def test_cli_missing_onnx(tmp_path, capsys):
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(tmp_path / "missing.onnx")], capsys)
    assert code == 2 and "no such ONNX file" in err


def test_module_type_checks_strictly():
    """TensorRT has no stubs: its objects are `Any`; everything else in the module is typed."""
    pytest.importorskip("mypy", reason="mypy is not installed")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(REPOSITORY_ROOT / ".build" / "mypy"),
            "builders/tensorrt_engine.py",
        ],
        capture_output=True,
        text=True,
        cwd=REPOSITORY_ROOT,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout


# --------------------------------------------------------------------------- the images' TensorRT


def test_the_builder_and_server_images_need_the_same_tensorrt_release():
    assert te.release_mismatch("10.13.3.9", "10.13.3") is None  # the build number may differ
    problem = te.release_mismatch("11.1.0.4", "11.0.2")  # a tritonserver tag on the previous month's base
    assert problem is not None and problem.startswith("the builder image has TensorRT 11.1.0, the server image 11.0.2")


def test_same_tensorrt_reads_the_server_library_and_fails_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "libnvinfer.so.10.13.3").touch()
    monkeypatch.setattr(te, "LIBRARY_DIRS", (str(tmp_path),))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert te.main(["same-tensorrt", "--builder-version", "10.13.3.9"]) == 0
    assert "TensorRT 10.13.3 in both" in capsys.readouterr().err
    assert te.main(["same-tensorrt", "--builder-version", "10.14.1.48"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: the builder image has TensorRT 10.14.1, the server image 10.13.3")
    monkeypatch.setattr(te, "LIBRARY_DIRS", (str(tmp_path / "none"),))
    assert te.main(["same-tensorrt", "--builder-version", "10.14.1"]) == 2
    assert f"no libnvinfer.so.X.Y.Z in {tmp_path / 'none'}" in capsys.readouterr().err


def test_same_tensorrt_reads_the_versioned_name_among_the_server_images_libraries(capsys):
    """docker/check-tensorrt.sh passes every libnvinfer.so.* name of the server image, symlinks first."""
    listing = ["/usr/lib/x86_64-linux-gnu/libnvinfer.so.11", "/usr/lib/x86_64-linux-gnu/libnvinfer.so.11.1.0"]
    arguments = [argument for name in listing for argument in ("--server-library", name)]
    assert te.main(["same-tensorrt", "--builder-version", "11.1.0.4", *arguments]) == 0
    assert "TensorRT 11.1.0 in both" in capsys.readouterr().err
    assert te.main(["same-tensorrt", "--builder-version", "11.2.0.1", *arguments]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "set TRITON_RELEASE in versions.env" in line
    assert te.main(["same-tensorrt", "--builder-version", "11.1.0.4", "--server-library", listing[0]]) == 2
    assert "no libnvinfer.so.X.Y.Z in the server image's libnvinfer files" in capsys.readouterr().err


class FakeEngine:
    """What deserialize_and_compare reads of a TensorRT 10/11 ICudaEngine (the bindings' names): a plan of the
    text recognizer built with ``profiles`` (batch-first min/opt/max), each reserving ``mib`` MiB of activations."""

    def __init__(self, profiles: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]], mib: list[int]) -> None:
        self.profiles, self.mib = profiles, mib
        self.tensors = {
            "images": ("INPUT", "FLOAT", (-1, 3, 48, -1)),
            "indices": ("OUTPUT", "INT32", (-1, -1)),
            "scores": ("OUTPUT", "FLOAT", (-1, -1)),
        }
        self.num_io_tensors = len(self.tensors)
        self.num_optimization_profiles = len(profiles)

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> str:
        return self.tensors[name][0]

    def get_tensor_dtype(self, name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(name=self.tensors[name][1])

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][2]

    def get_tensor_profile_shape(self, name: str, index: int) -> tuple[tuple[int, ...], ...]:
        assert name == "images"
        return self.profiles[index]

    def get_device_memory_size_for_profile_v2(self, index: int) -> int:
        return self.mib[index] << 20


def fake_runtime(engine: FakeEngine) -> types.SimpleNamespace:
    class Runtime:
        def __init__(self, logger: object) -> None:
            pass

        def deserialize_cuda_engine(self, data: bytes) -> FakeEngine:
            return engine

    class Logger:
        ERROR = "ERROR"

        def __init__(self, level: str) -> None:
            pass

    return types.SimpleNamespace(Logger=Logger, Runtime=Runtime, TensorIOMode=types.SimpleNamespace(INPUT="INPUT"))


def test_a_deserialized_plan_s_profiles_are_the_ones_its_input_s_code_gives(tmp_path, monkeypatch):
    """verify-plan --deserialize refuses a plan built for other shapes than the code now sends (a plan built
    before the widths changed), and logs what each profile's context reserves, as TensorRT reports it."""
    text_reader = layout.pipeline("text_reader")
    recognizer = te.load_core_config(text_reader, "recognizer")
    expected = te.optimization_profiles(recognizer, None, te.model_profiles(text_reader, "recognizer"))
    built = [(p[0].min, p[0].opt, p[0].max) for p in expected]
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"plan")
    logged: list[str] = []
    monkeypatch.setattr(te, "import_tensorrt", lambda: fake_runtime(FakeEngine(built, [20, 30, 40, 60, 80, 120])))
    assert te.deserialize_and_compare(plan, recognizer, expected, logged.append) == []
    assert logged == [
        f"{plan}: activation memory per profile (TensorRT): 0: 20.0 MiB, 1: 30.0 MiB, 2: 40.0 MiB, 3: 60.0 MiB, 4: 80.0 MiB, 5: 120.0 MiB"
    ]
    older = [*built[:5], ((1, 3, 48, 2560), (16, 3, 48, 2560), (16, 3, 48, 2560))]
    monkeypatch.setattr(te, "import_tensorrt", lambda: fake_runtime(FakeEngine(older, [1] * 6)))
    (problem,) = te.deserialize_and_compare(plan, recognizer, expected, logged.append)
    assert (
        problem
        == "'images': the plan's profile 5 is [1, 3, 48, 2560]..[16, 3, 48, 2560], the code gives [1, 3, 48, 1920]..[16, 3, 48, 1920]"
    )
    monkeypatch.setattr(te, "import_tensorrt", lambda: fake_runtime(FakeEngine(built[:1], [1])))
    assert te.deserialize_and_compare(plan, recognizer, expected, logged.append) == [
        "the plan has 1 optimization profile(s), its input's code gives 6"
    ]
