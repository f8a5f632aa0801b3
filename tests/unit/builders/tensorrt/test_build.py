"""build-engine's steps on the TensorRT stand-in (tests/support/tensorrt_standin.py): every branch of the build.

The stand-in answers as the bindings of the release it is given do (10.x or 11.x); its "ONNX" files describe the
network the parser would make. What the real TensorRT computes is tested in tests/gpu.
"""

from __future__ import annotations

import json
import sys

import pytest

from builders import BuildError, provenance
from builders.artifacts import sha256_file
from builders.tensorrt import build, interface, models
from builders.tensorrt.discovery import GpuFacts
from tests.support.tensorrt import tiny_pipeline
from tests.support.tensorrt_standin import StandIn, write_network
from vision_serving import layout

H100 = GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
H100_PCIE = GpuFacts("NVIDIA H100 PCIe", "9.0", "580.65.06", "13.0")
L4 = GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")
TINY_IO = ({"images": [-1, 3, 8, 8]}, ["logits"])


@pytest.fixture(autouse=True)
def no_onnx(monkeypatch):
    """As in the server image (and the unit tier): onnx does not import, so the plan records no Q/DQ count."""
    monkeypatch.setitem(sys.modules, "onnx", None)


@pytest.fixture
def pipeline(tmp_path):
    return tiny_pipeline(tmp_path / "model_repository")


def settings(pipeline, onnx=None, **options) -> build.BuildSettings:
    onnx = onnx or write_network(pipeline.onnx("int8"), *TINY_IO)
    options.setdefault("timing_cache", pipeline.repository / "timing.cache")
    return build.BuildSettings(pipeline=pipeline, onnx=onnx, output=pipeline.plan, **options)


def read_record(plan) -> dict:
    return json.loads(models.provenance_path(plan).read_text())


def the_onnx(pipeline, precision: str):
    """The ladder's three rungs: INT8 Q/DQ (its provenance names the calibration set), FP16 and FP32 (none)."""
    path = write_network(pipeline.onnx(precision), *TINY_IO)
    if precision != "fp32":
        hashes = {"calibration": "ca" * 32} if precision == "int8" else {"onnx": "ab" * 32}
        made = provenance.Provenance.for_bytes(precision, "cd" * 32, path, path.read_bytes(), input_hashes=hashes)
        made.write(provenance.path_for(path))
    return path


@pytest.mark.parametrize("version, network_flags", [("10.13.3.9", ["STRONGLY_TYPED"]), ("11.1.0.4", [])])
@pytest.mark.parametrize("precision", ["int8", "fp16", "fp32"])
def test_every_rung_builds_a_strongly_typed_plan_without_a_precision_flag(pipeline, precision, version, network_flags):
    trt, logged = StandIn(version), []
    onnx = the_onnx(pipeline, precision)
    result = build.build_engine(settings(pipeline, onnx, opt_batch=2), logged.append, trt, [H100, H100])
    assert result.status == "built" and result.plan == pipeline.plan
    plan = json.loads(pipeline.plan.read_bytes())
    assert plan["network_flags"] == (1 << 1 if network_flags else 0)
    assert plan["profiles"] == [{"images": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}]
    record = read_record(pipeline.plan)
    assert record["output"]["sha256"] == sha256_file(pipeline.plan)
    builder = record["builder"]
    assert builder["strongly_typed"] and builder["network_flags"] == network_flags and builder["builder_flags"] == ["TF32"]
    assert builder["workspace_bytes"] == build.DEFAULT_WORKSPACE_MIB << 20
    (config,) = trt.configs
    assert config.pools == {trt.MemoryPoolType.WORKSPACE: build.DEFAULT_WORKSPACE_MIB << 20}
    assert record["tensorrt"] == {"version": version, "release": version.rsplit(".", 1)[0], "must_match": "major.minor.patch"}
    assert record["gpu"]["hardware_compatibility"] == interface.SAME_COMPUTE_CAPABILITY and record["gpu"]["visible_gpus"] == 2
    assert record["cache_key"] == f"trt{version.rsplit('.', 1)[0]}-sm90"
    assert record["onnx"] == {"file": onnx.name, "qdq_nodes": None, "provenance": None if precision == "fp32" else f"{onnx.name}.json"}
    assert record["input_hashes"]["calibration"] == ("ca" * 32 if precision == "int8" else None)
    assert record["profile"] == {"images": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}}
    assert logged[0].startswith(f"building trt{version.rsplit('.', 1)[0]}-sm90 from {onnx} (1 input(s), 1 profile(s), opt batch 2)")


def test_a_model_with_dynamic_dims_gets_one_plan_profile_per_range(tmp_path):
    """The text recognizer: one profile per width bucket, each tuned for its own batch."""
    text_reader = layout.pipeline("text_reader")
    config = models.load_core_config(text_reader, "recognizer")
    onnx = write_network(tmp_path / "model.onnx", {config.input[0].name: [-1, 3, 48, -1]}, [t.name for t in config.output])
    trt = StandIn("11.1.0.4")
    request = build.BuildSettings(text_reader, onnx, tmp_path / "model.plan", role="recognizer", timing_cache=tmp_path / "t.cache")
    build.build_engine(request, lambda _: None, trt, [H100])
    (built,) = trt.configs
    assert [profile.shapes[config.input[0].name][2] for profile in built.profiles] == [
        [16, 3, 48, width] for width in (320, 480, 640, 960, 1280, 1920)
    ]
    assert isinstance(read_record(tmp_path / "model.plan")["profile"], list)


def test_a_static_batch_export_is_built_at_its_own_shape(pipeline):
    """An ONNX whose batch is fixed at the config's max_batch_size (an nms=True export's unrolled NMS): its profile is its
    one shape (a profile of other shapes on a static input is an error in TensorRT); a batch past it is refused."""
    trt = StandIn("11.1.0.4")
    onnx = write_network(pipeline.onnx("fp32"), {"images": [4, 3, 8, 8]}, ["logits"])
    assert build.build_engine(settings(pipeline, onnx), lambda _: None, trt, [H100]).status == "built"
    (config,) = trt.configs
    assert [profile.shapes for profile in config.profiles] == [{"images": ([4, 3, 8, 8], [4, 3, 8, 8], [4, 3, 8, 8])}]
    too_large = write_network(pipeline.onnx("fp16"), {"images": [8, 3, 8, 8]}, ["logits"])
    with pytest.raises(BuildError, match=r"input 'images' has shape \[8, 3, 8, 8\], the profile is \[1, 3, 8, 8\]..\[4, 3, 8, 8\]"):
        build.build_engine(settings(pipeline, too_large), lambda _: None, StandIn("11.1.0.4"), [H100])


def test_a_current_plan_is_not_rebuilt_and_the_cache_builds_once(pipeline, tmp_path):
    trt, logged = StandIn(), []
    onnx = write_network(pipeline.onnx("int8"), *TINY_IO)
    assert build.build_engine(settings(pipeline, onnx), logged.append, trt, [H100]).status == "built"
    assert build.build_engine(settings(pipeline, onnx), logged.append, trt, [H100]).status == "up-to-date"
    assert logged[-1].endswith("is up to date (use --force to rebuild)") and trt.builds == 1
    assert build.build_engine(settings(pipeline, onnx, force=True), logged.append, trt, [H100]).status == "built" and trt.builds == 2

    cache = tmp_path / "plan-cache"
    first = build.build_engine(settings(pipeline, onnx, cache_dir=cache), logged.append, trt, [H100])
    entry = models.cache_entry(cache, "trt10.13.3-sm90", pipeline.name, first.provenance["input_hash"])
    assert first.status == "built" and (entry / models.PLAN_FILENAME).read_bytes() == pipeline.plan.read_bytes()
    pipeline.plan.unlink()  # a new pod: an empty model folder, a shared cache
    again = build.build_engine(settings(pipeline, onnx, cache_dir=cache), logged.append, trt, [H100])
    assert again.status == "from-cache" and trt.builds == 3 and pipeline.plan.is_file()
    assert "cached plan" in logged[-1] and read_record(pipeline.plan) == read_record(entry / models.PLAN_FILENAME)
    onnx.write_text(onnx.read_text() + " ")  # the same network, another file: another model version
    assert build.build_engine(settings(pipeline, onnx, cache_dir=cache), logged.append, trt, [H100]).status == "built"
    assert len(list((cache / "trt10.13.3-sm90" / pipeline.name).iterdir())) == 2  # one entry per model version


def test_a_cache_entry_is_published_as_one_pair(pipeline, tmp_path):
    """Two pods building one cache entry: each writes its plan and record into a folder of its own and renames it into
    place, so the entry always holds one build's pair (a plan beside another build's record would fail verify-plan's
    sha256 and restart the pod). The second build replaces the first whole; no staging folder is left."""
    cache = tmp_path / "plan-cache"
    onnx = write_network(pipeline.onnx("int8"), *TINY_IO)
    first = build.build_engine(settings(pipeline, onnx, cache_dir=cache), lambda _: None, StandIn(), [H100])
    entry = models.cache_entry(cache, "trt10.13.3-sm90", pipeline.name, first.provenance["input_hash"])
    other = tmp_path / "other"
    other.mkdir()
    (other / models.PLAN_FILENAME).write_bytes(b"another pod's plan of the same inputs")
    record = provenance.Provenance.for_bytes("build-engine", first.provenance["input_hash"], other / models.PLAN_FILENAME, b"x")
    record.output_sha256 = sha256_file(other / models.PLAN_FILENAME)
    record.write(models.provenance_path(other / models.PLAN_FILENAME))
    build.publish(other, entry)
    assert (entry / models.PLAN_FILENAME).read_bytes() == b"another pod's plan of the same inputs"
    assert provenance.is_current(entry / models.PLAN_FILENAME, first.provenance["input_hash"])
    assert sorted(path.name for path in entry.parent.iterdir()) == [entry.name]  # nothing staged or set aside is left
    pipeline.plan.unlink()
    again = build.build_engine(settings(pipeline, onnx, cache_dir=cache), lambda _: None, StandIn(), [H100])
    assert again.status == "from-cache" and pipeline.plan.read_bytes() == b"another pod's plan of the same inputs"
    assert read_record(pipeline.plan)["output"]["sha256"] == sha256_file(pipeline.plan)


def test_another_tensorrt_release_never_reuses_a_plan(pipeline, tmp_path):
    cache = tmp_path / "plan-cache"
    for version in ("10.13.3.9", "10.16.0.2"):
        result = build.build_engine(settings(pipeline, cache_dir=cache), lambda _: None, StandIn(version), [H100])
        assert result.status == "built"
    assert sorted(path.name for path in cache.iterdir()) == ["trt10.13.3-sm90", "trt10.16.0-sm90"]


def test_the_timing_cache_is_new_then_loaded_and_a_stale_one_is_replaced(pipeline):
    logged: list[str] = []
    timing = pipeline.repository / "timing.cache"
    build.build_engine(settings(pipeline), logged.append, StandIn(), [H100])
    assert timing.read_bytes() and f"timing cache {timing} (new)" in logged
    assert read_record(pipeline.plan)["builder"]["timing_cache_loaded"] is False
    build.build_engine(settings(pipeline, force=True), logged.append, StandIn(), [H100])
    assert read_record(pipeline.plan)["builder"]["timing_cache_loaded"] is True
    timing.write_bytes(b"another GPU's timings")
    build.build_engine(settings(pipeline, force=True), logged.append, StandIn(stale_timing_cache=b"another GPU's timings"), [H100])
    assert f"timing cache {timing} does not match this GPU or TensorRT; starting an empty one" in logged
    assert read_record(pipeline.plan)["builder"]["timing_cache_loaded"] is False
    cache = pipeline.repository / "cache"
    build.build_engine(settings(pipeline, timing_cache=None, cache_dir=cache, force=True), logged.append, StandIn(), [H100])
    assert (cache / "trt10.13.3-sm90" / "timing-nvidia-h100-80gb-hbm3.cache").is_file()  # per GPU model, beside the plans


def test_without_hardware_compatibility_the_plan_is_the_gpu_model_s(pipeline):
    """TensorRT 10.8 has no SAME_COMPUTE_CAPABILITY: a plan for the GPU model that built it, keyed by it."""
    old = StandIn("10.8.0.43")
    result = build.build_engine(settings(pipeline), lambda _: None, old, [H100])
    assert result.provenance["cache_key"] == "trt10.8.0-sm90-nvidia-h100-80gb-hbm3"
    assert result.provenance["gpu"]["hardware_compatibility"] == interface.GPU_MODEL_ONLY
    assert old.configs[0].hardware_compatibility_level == old.HardwareCompatibilityLevel.NONE
    with pytest.raises(BuildError, match=r"TensorRT 10\.8\.0 builds plans for one GPU model and several are visible"):
        build.build_engine(settings(pipeline, force=True), lambda _: None, old, [H100, H100_PCIE])
    new = StandIn("10.9.0.34")  # the same two GPUs: one compute capability, one plan for both
    assert build.build_engine(settings(pipeline, force=True), lambda _: None, new, [H100, H100_PCIE]).status == "built"
    assert new.configs[0].hardware_compatibility_level == new.HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY
    with pytest.raises(BuildError, match="different compute capabilities"):
        build.build_engine(settings(pipeline, force=True), lambda _: None, new, [H100, L4])
    with pytest.raises(BuildError, match="no NVIDIA GPU visible"):
        build.build_engine(settings(pipeline, force=True), lambda _: None, new, [])


def test_a_parser_error_names_each_node_and_nothing_is_written(pipeline):
    errors = [
        {"node": 41, "name": "/model.22/NonMaxSuppression", "op": "EfficientNMS_TRT", "desc": "Plugin not found"},
        {"desc": "invalid graph"},
    ]
    onnx = write_network(pipeline.onnx("int8"), *TINY_IO, errors=errors)
    with pytest.raises(BuildError) as failed:
        build.build_engine(settings(pipeline, onnx), lambda _: None, StandIn(), [H100])
    assert str(failed.value) == (
        f"{onnx}: the TensorRT ONNX parser failed with 2 error(s): [UNSUPPORTED_NODE] node /model.22/NonMaxSuppression "
        "op EfficientNMS_TRT: Plugin not found | [UNSUPPORTED_NODE] invalid graph"
    )
    onnx = write_network(pipeline.onnx("int8"), *TINY_IO, fails=True)
    with pytest.raises(BuildError, match=r"failed with 1 error\(s\): \(the parser reported no details\)"):
        build.build_engine(settings(pipeline, onnx), lambda _: None, StandIn(), [H100])
    assert not pipeline.plan.exists()


def test_a_network_that_is_not_the_config_s_is_refused(pipeline):
    onnx = write_network(pipeline.onnx("int8"), {"images": [-1, 3, 8, 8]}, ["logits", "features"])
    with pytest.raises(BuildError, match=r"I/O names \['images'\] -> \['features', 'logits'\] differ from the core config's"):
        build.build_engine(settings(pipeline, onnx), lambda _: None, StandIn(), [H100])
    onnx = write_network(pipeline.onnx("int8"), {"images": [-1, 3, 16, 16]}, ["logits"])
    with pytest.raises(BuildError, match=r"input 'images' has shape \[-1, 3, 16, 16\], the profile is \[1, 3, 8, 8\]\.\.\[4, 3, 8, 8\]"):
        build.build_engine(settings(pipeline, onnx), lambda _: None, StandIn(), [H100])


def test_a_failed_build_writes_nothing(pipeline):
    trt = StandIn(build_fails=True)
    with pytest.raises(BuildError, match="TensorRT could not build the engine"):
        build.build_engine(settings(pipeline), lambda _: None, trt, [H100])
    assert trt.builds == 1 and not pipeline.plan.exists() and not models.provenance_path(pipeline.plan).exists()


def test_a_tensorrt_too_old_for_strong_typing_is_refused(pipeline):
    with pytest.raises(BuildError, match=r"TensorRT 10\.7\.0\.23 is too old: need 10\.8 or newer"):
        build.build_engine(settings(pipeline), lambda _: None, StandIn("10.7.0.23"), [H100])


def test_the_request_is_checked_before_tensorrt_is_needed(pipeline, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(BuildError, match="--workspace-mib must be positive, got 0"):
        build.build_engine(settings(pipeline, workspace_mib=0))
    with pytest.raises(BuildError, match="no such ONNX file"):
        build.build_engine(settings(pipeline, pipeline.repository / "missing.onnx"))
    with pytest.raises(BuildError, match="TensorRT is not installed"):
        build.build_engine(settings(pipeline))
