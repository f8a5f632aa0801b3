"""verify-plan: a plan's provenance against the machine, and a deserialized plan against its config (stand-in)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from builders import provenance as provenance_records
from builders.artifacts import sha256_file
from builders.tensorrt import build, interface, models, profiles, verify
from builders.tensorrt.discovery import GpuFacts
from tests.support.tensorrt import core_config
from tests.support.tensorrt_standin import StandIn
from vision_serving import layout

CLASSIFIER = layout.pipeline("image_classifier")
H100 = GpuFacts("NVIDIA H100 80GB HBM3", "9.0", "580.65.06", "13.0")
L4 = GpuFacts("NVIDIA L4", "8.9", "580.65.06", "13.0")


def provenance(trt: str = "10.13.3.9", cc: str = "9.0") -> dict:
    return {"tensorrt": {"version": trt}, "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": cc}}


def write_plan(directory: Path, record: dict, payload: bytes = b"plan") -> Path:
    plan = directory / "model.plan"
    plan.write_bytes(payload)
    record = dict(record, output={"file": plan.name, "sha256": sha256_file(plan)})
    (directory / "model.plan.json").write_text(json.dumps(record))
    return plan


def test_provenance_that_matches():
    assert verify.compare_provenance(provenance(), "10.13.3.1", [H100, H100]) == []  # only the build number differs


def test_provenance_with_another_tensorrt_release():
    (problem,) = verify.compare_provenance(provenance(), "10.14.1.48", [H100])
    assert "TensorRT 10.13.3" in problem and "10.14.1" in problem and "major.minor.patch must match" in problem
    (problem,) = verify.compare_provenance(provenance(), "11.1.0.4", [H100])  # a 10.x plan on an 11.x server
    assert problem.startswith("plan built with TensorRT 10.13.3, this machine has 11.1.0")


def test_provenance_for_another_gpu_architecture():
    problems = verify.compare_provenance(provenance(cc="8.9"), "10.13.3.9", [H100, L4])
    assert problems == [
        "plan built for compute capability 8.9 (NVIDIA H100 80GB HBM3), GPU 0 is 9.0 (NVIDIA H100 80GB HBM3)",
        "plan built on NVIDIA H100 80GB HBM3 without hardware compatibility (only that GPU model), GPU 1 is NVIDIA L4",
    ]
    assert verify.compare_provenance(provenance(), "10.13.3.9", []) == ["no NVIDIA GPU visible"]
    assert verify.compare_provenance({}, "10.13.3.9", [H100]) == ["the provenance has no TensorRT version or compute capability"]


def test_a_plan_without_hardware_compatibility_serves_its_gpu_model_only():
    """sm_90 is H100 SXM, H100 PCIe, H200 and GH200: TensorRT's default level promises only the GPU that built it."""
    pcie = GpuFacts("NVIDIA H100 PCIe", "9.0", "580.65.06")
    h200 = GpuFacts("NVIDIA H200", "9.0", "580.65.06")
    older = provenance()  # a record without the field: built at TensorRT's default
    assert verify.compare_provenance(older, "10.13.3.9", [H100]) == []
    (problem,) = verify.compare_provenance(older, "10.13.3.9", [pcie])
    assert problem == "plan built on NVIDIA H100 80GB HBM3 without hardware compatibility (only that GPU model), GPU 0 is NVIDIA H100 PCIe"
    portable = provenance()
    portable["gpu"]["hardware_compatibility"] = interface.SAME_COMPUTE_CAPABILITY
    assert verify.compare_provenance(portable, "10.13.3.9", [pcie, h200]) == []
    assert verify.compare_provenance(portable, "10.13.3.9", [L4])[0].startswith("plan built for compute capability 9.0")


def test_engine_io_comparison():
    expected = verify.expected_engine_io(core_config())
    assert expected == {"images": ("INPUT", "FP32", (-1, 3, 8, 8)), "logits": ("OUTPUT", "FP32", (-1, 10))}
    actual = dict(expected, logits=("OUTPUT", "FP16", (-1, 10)), extra=("OUTPUT", "FP32", (-1,)))
    del actual["images"]
    assert verify.compare_engine_io(expected, actual) == [
        "the plan's output 'extra' is not in the core config",
        "the core config's input 'images' is not an I/O tensor of the plan",
        "'logits': config says ('OUTPUT', 'FP32', (-1, 10)), plan has ('OUTPUT', 'FP16', (-1, 10))",
    ]


def test_a_static_batch_plan_verifies_at_its_max_batch_size():
    """A plan of an export whose batch is fixed (``nms=True``'s unrolled NMS, a batch-1 static export served at batch 1)
    reports that batch where a dynamic one reports -1 (ICudaEngine::getTensorShape): it verifies when the batch is the
    config's max_batch_size; any other batch fails, naming the tensor."""
    expected = verify.expected_engine_io(core_config())
    static = {"images": ("INPUT", "FP32", (4, 3, 8, 8)), "logits": ("OUTPUT", "FP32", (4, 10))}
    assert verify.compare_engine_io(expected, static, max_batch_size=4) == []
    assert verify.compare_engine_io(expected, {"images": ("INPUT", "FP32", (1, 3, 8, 8)), "logits": ("OUTPUT", "FP32", (1, 10))}, 1) == []
    assert verify.compare_engine_io(expected, static, max_batch_size=8) == [
        "'images': the plan's batch is 4, the config's max_batch_size is 8 (a plan's batch is -1, dynamic, or fixed at max_batch_size)",
        "'logits': the plan's batch is 4, the config's max_batch_size is 8 (a plan's batch is -1, dynamic, or fixed at max_batch_size)",
    ]
    assert verify.compare_engine_io(expected, dict(static, logits=("OUTPUT", "FP32", (4, 11))), max_batch_size=4) == [
        "'logits': config says ('OUTPUT', 'FP32', (-1, 10)), plan has ('OUTPUT', 'FP32', (4, 11))"
    ]


def test_a_static_batch_plan_deserializes_and_verifies(tmp_path):
    """Through deserialize_and_compare, as verify-plan --deserialize runs it in the pod's build-plan step: the static plan's
    I/O at batch 4 and its one profile, its shape (4..4: build.configure), against a core config of max_batch_size 4; at
    max_batch_size 8 the batch and the profile are refused."""
    core = core_config()
    core.max_batch_size = 4
    expected = profiles.optimization_profiles(core)
    built = [((4, 3, 8, 8), (4, 3, 8, 8), (4, 3, 8, 8))]
    tensors = {"images": (1, "FLOAT", (4, 3, 8, 8)), "logits": (2, "FLOAT", (4, 10))}
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"plan")
    engine = Engine(built, [1], tensors)
    assert verify.deserialize_and_compare(plan, core, expected, lambda _: None, StandIn(engine=engine)) == []
    core.max_batch_size = 8
    assert verify.deserialize_and_compare(plan, core, profiles.optimization_profiles(core), lambda _: None, StandIn(engine=engine)) == [
        "'images': the plan's batch is 4, the config's max_batch_size is 8 (a plan's batch is -1, dynamic, or fixed at max_batch_size)",
        "'logits': the plan's batch is 4, the config's max_batch_size is 8 (a plan's batch is -1, dynamic, or fixed at max_batch_size)",
        "'images': the plan's profile 0 allows batch 4, the config's max_batch_size is 8",
        "'images': the plan's profile 0 is [4, 3, 8, 8]..[4, 3, 8, 8], the code gives [1, 3, 8, 8]..[8, 3, 8, 8]",
    ]


def test_calibration_hash_is_read_from_the_onnx_provenance(tmp_path):
    onnx_path = tmp_path / "model_int8_qdq.onnx"
    onnx_path.write_bytes(b"")
    assert build.onnx_provenance(onnx_path) == {"file": None, "calibration_hash": None}
    digest = "ab" * 32
    record = provenance_records.Provenance.for_bytes("quantize", "cd" * 32, onnx_path, b"", input_hashes={"calibration": digest})
    record.write(provenance_records.path_for(onnx_path))
    assert build.onnx_provenance(onnx_path) == {"file": "model_int8_qdq.onnx.json", "input_hash": "cd" * 32, "calibration_hash": digest}


def test_verify_plan_outcomes(tmp_path):
    plan = write_plan(tmp_path, provenance())
    assert verify.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100], log=lambda _: None)
    with pytest.raises(verify.VerificationError) as mismatch:
        verify.verify_plan(plan, CLASSIFIER, tensorrt_version="11.4.1", gpus=[L4])
    assert mismatch.value.exit_code == 1 and "\n" not in str(mismatch.value)
    assert "TensorRT 10.13.3" in str(mismatch.value) and "compute capability 9.0" in str(mismatch.value)
    plan.write_bytes(b"another plan")
    with pytest.raises(verify.VerificationError, match="sha256 differs"):
        verify.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100])
    (tmp_path / "model.plan.json").unlink()
    with pytest.raises(verify.VerificationError, match="missing or unreadable provenance"):
        verify.verify_plan(plan, CLASSIFIER, tensorrt_version="10.13.3", gpus=[H100])


RECOGNIZER_IO = {"images": (1, "FLOAT", (-1, 3, 48, -1)), "indices": (2, "INT32", (-1, -1)), "scores": (2, "FLOAT", (-1, -1))}


class Engine:
    """What deserialize_and_compare reads of a TensorRT 10/11 ICudaEngine: a plan of the text recognizer built
    with ``built`` (batch-first min/opt/max), each profile reserving ``mib`` MiB of activations."""

    def __init__(self, built: list[tuple[tuple[int, ...], ...]], mib: list[int], tensors: dict | None = None) -> None:
        self.built, self.mib = built, mib
        self.tensors = tensors or RECOGNIZER_IO  # name -> (TensorIOMode, DataType name, shape)
        self.num_io_tensors = len(self.tensors)
        self.num_optimization_profiles = len(built)

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> int:
        return self.tensors[name][0]

    def get_tensor_dtype(self, name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(name=self.tensors[name][1])

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][2]

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> tuple[tuple[int, ...], ...]:
        assert name == "images"
        return self.built[profile_index]

    def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int:
        return self.mib[profile_index] << 20


def test_a_deserialized_plan_s_profiles_are_the_ones_its_input_s_code_gives(tmp_path):
    """verify-plan --deserialize refuses a plan built for other shapes than the code now sends (a plan built
    before the widths changed), and logs what each profile's context reserves, as TensorRT reports it."""
    text_reader = layout.pipeline("text_reader")
    recognizer = models.load_core_config(text_reader, "recognizer")
    expected = profiles.optimization_profiles(recognizer, None, models.model_profiles(text_reader, "recognizer"))
    built = [(p[0].min, p[0].opt, p[0].max) for p in expected]
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"plan")
    logged: list[str] = []
    trt = StandIn("11.1.0.4", engine=Engine(built, [20, 30, 40, 60, 80, 120]))
    assert verify.deserialize_and_compare(plan, recognizer, expected, logged.append, trt) == []
    assert logged == [
        f"{plan}: activation memory per profile (TensorRT): 0: 20.0 MiB, 1: 30.0 MiB, 2: 40.0 MiB, 3: 60.0 MiB, 4: 80.0 MiB, 5: 120.0 MiB"
    ]
    older = [*built[:5], ((1, 3, 48, 2560), (16, 3, 48, 2560), (16, 3, 48, 2560))]
    (problem,) = verify.deserialize_and_compare(plan, recognizer, expected, logged.append, StandIn(engine=Engine(older, [1] * 6)))
    assert (
        problem
        == "'images': the plan's profile 5 is [1, 3, 48, 2560]..[16, 3, 48, 2560], the code gives [1, 3, 48, 1920]..[16, 3, 48, 1920]"
    )
    small = [((1, 3, 48, 320), (4, 3, 48, 320), (8, 3, 48, 320))]
    assert verify.deserialize_and_compare(plan, recognizer, expected, logged.append, StandIn(engine=Engine(small, [1]))) == [
        "the plan has 1 optimization profile(s), its input's code gives 6",
        "'images': the plan's profile 0 allows batch 8, the config's max_batch_size is 16",
        "'images': the plan's profile 0 is [1, 3, 48, 320]..[8, 3, 48, 320], the code gives [1, 3, 48, 320]..[16, 3, 48, 320]",
    ]
    assert verify.deserialize_and_compare(plan, recognizer, expected, logged.append, StandIn(engine=None)) == [
        f"trt.Runtime could not deserialize {plan} (see the TensorRT messages above)"
    ]


def test_verify_plan_deserializes_the_plan_when_asked(tmp_path, monkeypatch):
    from tests.support.tensorrt import tiny_pipeline

    pipeline = tiny_pipeline(tmp_path)
    plan = write_plan(pipeline.core_version_dir, provenance())
    tiny = {"images": (1, "FLOAT", (-1, 3, 8, 8)), "logits": (2, "FLOAT", (-1, 10))}
    engine = Engine([((1, 3, 8, 8), (4, 3, 8, 8), (4, 3, 8, 8))], [3], tiny)
    monkeypatch.setattr(interface, "import_tensorrt", lambda: StandIn(engine=engine))
    logged: list[str] = []
    verify.verify_plan(plan, pipeline, deserialize=True, tensorrt_version="10.13.3", gpus=[H100], log=logged.append)
    assert logged[0].endswith("activation memory per profile (TensorRT): 0: 3.0 MiB") and "OK for TensorRT 10.13.3" in logged[1]
    engine.tensors = dict(tiny, logits=(2, "HALF", (-1, 10)))  # a plan of another precision at the boundary
    with pytest.raises(
        verify.VerificationError, match=r"'logits': config says \('OUTPUT', 'FP32', \(-1, 10\)\), plan has \('OUTPUT', 'FP16'"
    ):
        verify.verify_plan(plan, pipeline, deserialize=True, tensorrt_version="10.13.3", gpus=[H100], log=logged.append)
