"""The plan steps' command line: python -m builders build-engine / verify-plan, python -m builders.tensorrt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builders import cli
from builders.artifacts import sha256_file
from builders.tensorrt import discovery, interface
from tests.support.tensorrt import run_cli, tiny_pipeline
from tests.support.tensorrt_standin import StandIn, write_network
from vision_serving import layout

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFIER = layout.pipeline("image_classifier")
# The repository has several pipelines: every step that reads one is told which.
PIPELINE_ARGS = ["--pipeline", CLASSIFIER.name]
H100 = discovery.GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
L4 = discovery.GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")


def provenance(trt: str = "10.13.3.9") -> dict:
    return {"tensorrt": {"version": trt}, "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}}


def write_plan(directory: Path, record: dict) -> Path:
    plan = directory / "model.plan"
    plan.write_bytes(b"plan")
    (directory / "model.plan.json").write_text(json.dumps(dict(record, output={"file": plan.name, "sha256": sha256_file(plan)})))
    return plan


def test_build_engine_then_verify_plan_on_the_stand_in(tmp_path, monkeypatch, capsys):
    """The whole command path: every pipeline of a repository built (no --pipeline), then verified."""
    monkeypatch.setitem(sys.modules, "onnx", None)
    monkeypatch.setattr(interface, "import_tensorrt", lambda: StandIn("11.1.0.4"))
    monkeypatch.setattr(discovery, "query_gpus", lambda: [H100])
    root = tmp_path / "model_repository"
    for name in ("first", "second"):
        write_network(tiny_pipeline(root, name).onnx("int8"), {"images": [-1, 3, 8, 8]}, ["logits"])
    where = ["--model-repository", str(root)]
    code, err = run_cli(["build-engine", *where, "--cache-dir", str(tmp_path / "cache"), "--timing-cache", str(tmp_path / "t")], capsys)
    assert code == 0, err
    assert err.count("build-engine: wrote ") == 2
    code, err = run_cli(["verify-plan", *where, "--tensorrt-version", "11.1.0"], capsys)
    assert code == 0 and err.count("verify-plan: ") == 2 and "OK for TensorRT 11.1.0 (--tensorrt-version)" in err, err


def test_cli_says_tensorrt_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` raise ImportError
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"not used")
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(onnx_path), "--output", str(tmp_path / "model.plan")], capsys)
    assert code == 2
    assert err.strip() == "error: TensorRT is not installed (use the builder image docker/builder.Dockerfile)"
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(discovery, "LIBRARY_DIRS", ())
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan)], capsys)
    assert code == 2 and "TensorRT is not installed" in err


def test_cli_verify_plan_mismatch_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    plan = write_plan(tmp_path, provenance())
    monkeypatch.setattr(discovery, "query_gpus", lambda: [L4])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: ") and "compute capability 9.0" in err
    monkeypatch.setattr(discovery, "query_gpus", lambda: [H100])
    code, err = run_cli(["verify-plan", *PIPELINE_ARGS, "--plan", str(plan), "--tensorrt-version", "10.13.3"], capsys)
    assert code == 0 and "OK for TensorRT 10.13.3" in err


def test_every_pipeline_is_verified_and_every_failure_named(tmp_path, monkeypatch, capsys):
    """verify-plan over a repository: one failing pipeline does not hide another; the pod then fails as a whole
    (the first failure's exit code, one line naming each), since a pod serving some of them would pass readiness."""
    root = tmp_path / "model_repository"
    good, stale, _ = (tiny_pipeline(root, name) for name in ("good", "stale", "missing"))  # missing: no plan
    write_plan(good.core_version_dir, provenance())
    write_plan(stale.core_version_dir, provenance(trt="10.8.0.43"))
    monkeypatch.setattr(discovery, "query_gpus", lambda: [H100])
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


def test_cli_missing_onnx(tmp_path, capsys):
    code, err = run_cli(["build-engine", *PIPELINE_ARGS, "--onnx", str(tmp_path / "missing.onnx")], capsys)
    assert code == 2 and "no such ONNX file" in err


def test_cli_needs_the_pipeline_when_the_repository_has_several(tmp_path, capsys):
    assert len(layout.pipelines()) > 1
    code, err = run_cli(["verify-plan", "--plan", str(tmp_path / "model.plan")], capsys)
    assert code == 2 and err.startswith("error: choose a pipeline with --pipeline NAME") and err.count("\n") == 1
    # A model repository holding one pipeline needs no --pipeline.
    pipeline = tiny_pipeline(tmp_path / "model_repository")
    code, err = run_cli(["verify-plan", "--model-repository", str(pipeline.repository.parent)], capsys)
    assert code == 2 and err.strip() == f"error: {pipeline.plan}: no such plan (run python -m builders build-engine)"


def test_module_entry_point_runs_with_only_the_serving_requirements(tmp_path):
    """The server image's init container: `python3 -m builders verify-plan` without onnx/torch/cv2."""
    blocked = "import sys, runpy; [sys.modules.__setitem__(m, None) for m in ('onnx', 'onnx_graphsurgeon', 'torch', 'cv2', 'tensorrt')]; "
    run = "sys.argv = ['x', 'verify-plan', '--pipeline', 'image_classifier', '--plan', sys.argv[1]]; runpy.run_module('builders', run_name='__main__')"
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


def test_same_tensorrt_reads_the_server_library_and_fails_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "libnvinfer.so.10.13.3").touch()
    monkeypatch.setattr(discovery, "LIBRARY_DIRS", (str(tmp_path),))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert cli.main(["same-tensorrt", "--builder-version", "10.13.3.9"]) == 0
    assert "TensorRT 10.13.3 in both" in capsys.readouterr().err
    assert cli.main(["same-tensorrt", "--builder-version", "10.14.1.48"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: the builder image has TensorRT 10.14.1, the server image 10.13.3")
    monkeypatch.setattr(discovery, "LIBRARY_DIRS", (str(tmp_path / "none"),))
    assert cli.main(["same-tensorrt", "--builder-version", "10.14.1"]) == 2
    assert f"no libnvinfer.so.X.Y.Z in {tmp_path / 'none'}" in capsys.readouterr().err
    assert cli.main(["same-tensorrt", "--builder-version", "10.14.1", "--server-version", "10.14.1.2"]) == 0


def test_same_tensorrt_reads_the_versioned_name_among_the_server_images_libraries(capsys):
    """docker/check-tensorrt.sh passes every libnvinfer.so.* name of the server image, symlinks first."""
    listing = ["/usr/lib/x86_64-linux-gnu/libnvinfer.so.11", "/usr/lib/x86_64-linux-gnu/libnvinfer.so.11.1.0"]
    arguments = [argument for name in listing for argument in ("--server-library", name)]
    assert cli.main(["same-tensorrt", "--builder-version", "11.1.0.4", *arguments]) == 0
    assert "TensorRT 11.1.0 in both" in capsys.readouterr().err
    assert cli.main(["same-tensorrt", "--builder-version", "11.2.0.1", *arguments]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "set TRITON_RELEASE in versions.env" in line
    assert cli.main(["same-tensorrt", "--builder-version", "11.1.0.4", "--server-library", listing[0]]) == 2
    assert "no libnvinfer.so.X.Y.Z in the server image's libnvinfer files" in capsys.readouterr().err


def test_the_package_type_checks_strictly():
    """TensorRT has no stubs: the builder interface's Protocols type every use of it; mypy --strict on the package."""
    pytest.importorskip("mypy", reason="mypy is not installed")
    command = [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--follow-imports=silent"]
    command += ["--cache-dir", str(REPOSITORY_ROOT / ".build" / "mypy"), "builders/tensorrt"]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPOSITORY_ROOT, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout
