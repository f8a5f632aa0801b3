"""benchmarks.capacity (the planner of the benchmarks' measurements): measured CPU costs -> vCPUs, memory and pods for a pipeline, a mix and a target."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import capacity

MACHINE = {"cpu_model": "Test CPU", "usable_cpus": 2, "instruction_sets": {"AVX2": True, "AVX-512": False, "VNNI": False, "AMX": False}}


def costs() -> dict:
    """Round numbers: web 6 ms of steps + 1 ms overhead = 7 ms; phone 55 + 1; thumbnail 1 + 1."""
    steps = {
        "thumbnail": {"decode": 0.5, "preprocess": 0.4, "postprocess": 0.1},
        "web": {"decode": 5.0, "preprocess": 0.9, "postprocess": 0.1},
        "phone": {"decode": 53.0, "preprocess": 1.9, "postprocess": 0.1},
    }
    instances = {
        "preprocess": {"sized": True, "count": 2, "cpu_share": 1.0, "max_instances": 8},
        "postprocess": {"sized": False, "count": 1, "cpu_share": None, "max_instances": 8},
    }
    pipeline = {"steps": steps, "instances": instances, "overhead_ms": 1.0, "instance_mib": {"preprocess": 300.0, "postprocess": 100.0}}
    return {"command": "test", "created_at": "now", "machine": MACHINE, "server_mib": 624.0, "pipelines": {"p": pipeline}}


def test_cpu_per_image_is_the_steps_of_the_mix_and_the_serving_overhead():
    assert capacity.cpu_ms_per_image(costs(), "p", "web") == pytest.approx(7.0)
    assert capacity.cpu_ms_per_image(costs(), "p", "phone") == pytest.approx(56.0)
    # the mix: 20 % thumbnails, 60 % web, 20 % phone photos
    assert capacity.cpu_ms_per_image(costs(), "p", "mix") == pytest.approx(0.2 * 1 + 0.6 * 6 + 0.2 * 55 + 1)


def test_a_cpu_bound_pod_and_the_pods_a_target_needs():
    result = capacity.plan(costs(), "p", "web", target=2000, gpu_images_per_s=3000, vcpus_per_pod=8, utilization=0.7)
    assert result.images_per_s_per_vcpu == pytest.approx(100.0)  # 0.7 x 1000 / 7
    assert result.vcpus_per_1000 == pytest.approx(10.0)
    assert result.vcpus_to_fill_gpu == pytest.approx(30.0)
    assert result.pod_images_per_s == pytest.approx(800.0) and result.bottleneck == "CPU"
    assert result.pods == 3  # 2000 / 800, rounded up
    assert result.gpu_utilization == pytest.approx(2000 / 3 / 3000)
    # 8 CPUs: 8 preprocess instances x 300 MiB + 1 postprocess x 100 + the server's 624
    assert result.memory_gib_per_pod == pytest.approx((8 * 300 + 100 + 624) / 1024)
    bigger = capacity.plan(costs(), "p", "web", target=2000, gpu_images_per_s=3000, vcpus_per_pod=32, utilization=0.7)
    assert bigger.memory_gib_per_pod == result.memory_gib_per_pod  # past max_instances, threads: no more memory


def test_a_gpu_bound_pod():
    result = capacity.plan(costs(), "p", "thumbnail", target=5000, gpu_images_per_s=1000, vcpus_per_pod=32, utilization=0.7)
    assert result.bottleneck == "GPU" and result.pod_images_per_s == 1000 and result.pods == 5
    assert result.gpu_utilization == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"pipeline": "nope"}, "no measured costs for pipeline 'nope'"),
        ({"mix": "panorama"}, "unknown upload mix 'panorama'"),
        ({"target": 0}, "must be positive"),
        ({"utilization": 1.5}, r"utilization in \(0, 1\]"),
    ],
)
def test_bad_requests_are_refused_in_one_line(arguments, message):
    chosen = {"pipeline": "p", "mix": "web", "target": 100.0, "utilization": 0.7} | arguments
    with pytest.raises(ValueError, match=message):
        capacity.plan(costs(), chosen["pipeline"], chosen["mix"], chosen["target"], utilization=chosen["utilization"])


def test_the_command_prints_the_plan_and_the_table(tmp_path, capsys):
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(costs()))
    assert capacity.main(["--costs", str(path), "--pipeline", "p", "--mix", "web", "--target", "2000", "--all"]) == 0
    out = capsys.readouterr().out
    assert "pods needed:       3" in out and "Test CPU, 2 CPUs, AVX2 yes" in out
    assert out.count("| p |") == len(capacity.MIXES)
    assert capacity.main(["--costs", str(tmp_path / "missing.json")]) == 2
    assert "run `python -m benchmarks.capacity --measure`" in capsys.readouterr().err


def test_resident_memory_leaves_out_the_shared_memory_the_tensors_travel_through():
    status = "Name:\ttritonserver\nVmRSS:\t  982344 kB\nRssAnon:\t  120000 kB\nRssFile:\t   15000 kB\nRssShmem:\t  847344 kB\n"
    assert capacity.resident_kib(status) == 135000
    assert capacity.resident_kib("Name:\told\nVmRSS:\t  4096 kB\n") == 4096  # a kernel without the split


def with_shm(data: dict) -> dict:
    """costs() with shared memory measured: 3 MiB per preprocess request, 10 MiB per postprocess request."""
    pipeline = data["pipelines"]["p"]
    pipeline["instances"]["preprocess"]["max_batch_size"] = 8
    pipeline["instances"]["postprocess"]["max_batch_size"] = 4
    pipeline["shm"] = {"preprocess": {"bytes": 3 << 20, "photo": "phone/a"}, "postprocess": {"bytes": 10 << 20, "photo": "text/b"}}
    return data


def test_dev_shm_holds_every_instance_at_its_largest_batch_of_its_largest_request():
    data = with_shm(costs())
    # 8 CPUs: 8 sized preprocess instances x 8 x 3 MiB, 1 fixed postprocess instance x 4 x 10 MiB, 1 MiB per region
    assert capacity.dshm_gib(data, 8) == pytest.approx((8 * 8 * 3 + 4 * 10 + 9) / 1024)
    assert capacity.dshm_gib(data, 2) == pytest.approx((2 * 8 * 3 + 4 * 10 + 3) / 1024)
    assert capacity.plan(data, "p", "web", 100, vcpus_per_pod=8).dshm_gib_per_pod == pytest.approx(capacity.dshm_gib(data, 8))
    assert capacity.plan(costs(), "p", "web", 100, vcpus_per_pod=8).dshm_gib_per_pod is None  # not measured: not guessed
    with pytest.raises(ValueError, match=r"run python -m benchmarks\.capacity --measure-shm"):
        capacity.dshm_gib(costs(), 8)


def test_what_a_tensor_takes_in_shared_memory():
    assert capacity.tensor_bytes(np.zeros((2, 3), np.float32)) == 24
    assert capacity.tensor_bytes(np.array([[b"abc"], [b"de"]], dtype=np.object_)) == 3 + 4 + 2 + 4  # BYTES: 4-byte length prefixes
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = np.zeros((3, 4, 5), np.float32), np.zeros((3, 2, 5), np.float32)
    assert capacity.tensor_bytes(ragged) == (60 + 30) * 4


def gpu_model(name: str, profiles: int, activations_mib: int, instances: int = 1) -> dict:
    profile = {
        "name": "p",
        "max_shape": [8, 3, 32, 32],
        "activations_bytes": activations_mib << 20,
        "input_bytes": 0,
        "output_bytes": 0,
        "largest_tensor": {"name": "t", "shape": [1], "bytes": 1},
    }
    strategy = "ON_PROFILE_CHANGE" if profiles > 1 else "STATIC"
    return {
        "model": name, "onnx": "model.onnx", "precision": "fp16", "weights_bytes": 0, "strategy": strategy, "instances": instances,
        "profiles": [profile] * profiles,
    }  # fmt: skip


def test_two_instances_for_a_multi_profile_model_only_where_the_pod_fits_the_gpu_with_margin():
    """16 GiB at 90 % less 1 GiB of runtime is 13.4 GiB, at 1.5 x the estimate 8.93 GiB of plans: a small model with
    several profiles gets two instances, then a large one only if it still fits; one-profile models keep their count."""
    small, large, fixed = gpu_model("recognizer", 6, 200), gpu_model("detector", 3, 1200), gpu_model("classifier", 1, 500, 3)
    assert capacity.choose_instances([small, large, fixed]) == {"recognizer": 2, "detector": 1}  # 2.4 + 3.6 x 2 + 1.5 > 8.93
    assert capacity.choose_instances([small, large, fixed], gpu_memory_gib=24) == {"recognizer": 2, "detector": 2}
    assert capacity.choose_instances([gpu_model("huge", 2, 5000)]) == {"huge": 1}
    report = capacity.render_gpu_memory({"command": "c", "created_at": "t", "gpu_runtime_gib": 1.0, "models": [small, large, fixed]})
    assert "an ESTIMATE from shapes" in report and "recognizer 2 (config: 1), detector 1 (config: 1)" in report
    assert "| detector | fp16 | p 1200, p 1200, p 1200 | 3600 (ON_PROFILE_CHANGE) |" in report


def pixel_costs() -> dict:
    """One run of benchmarks.gpu_pixels: the served steps (CPU mode) and what the GPU pixel path leaves on the CPU."""
    served = {
        "thumbnail": {"decode": 0.5, "preprocess": 0.4, "preprocess_drift": 0.1, "postprocess": 0.1},
        "web": {"decode": 5.0, "preprocess": 0.9, "preprocess_drift": 0.1, "postprocess": 0.1, "postprocess_drift": 0.1},
        "phone": {"decode": 53.0, "preprocess": 1.9, "preprocess_drift": 0.1, "postprocess": 0.1},
    }
    gpu = {"thumbnail": {"checks": 0.1, "preprocess_drift": 0.1}, "web": {"checks": 0.2}, "phone": {"checks": 2.0}}
    measured = {kind: {"cpu_mode": served[kind], "gpu_mode": gpu[kind]} for kind in capacity.KINDS}
    return {"command": "test", "created_at": "now", "machine": MACHINE, "pipelines": {"p": measured}}


def test_the_gpu_pixel_path_counts_the_checks_the_postprocess_and_the_hops():
    web = capacity.pixel_path_ms(pixel_costs(), costs(), "p", "web", "gpu")
    assert web == pytest.approx({"preprocess": 0.2, "postprocess": 0.2, "hops": 1.0})
    assert capacity.pixel_path_ms(pixel_costs(), costs(), "p", "web", "cpu")["preprocess"] == pytest.approx(6.0)
    mix = capacity.pixel_path_ms(pixel_costs(), costs(), "p", "mix", "gpu")
    assert mix["preprocess"] == pytest.approx(0.2 * 0.2 + 0.6 * 0.2 + 0.2 * 2.0)
    result = capacity.plan(costs(), "p", "web", 2000, 3000, 8, 0.7, pixel_costs())
    assert result.cpu_ms_per_image == pytest.approx(1.4) and result.vcpus_per_1000 == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no GPU pixel path costs for pipeline 'q'"):
        capacity.pixel_path_ms(pixel_costs(), costs(), "q", "web", "gpu")


def test_the_command_plans_the_gpu_pixel_path_from_its_run(tmp_path, capsys):
    (tmp_path / "capacity.json").write_text(json.dumps(costs()))
    (tmp_path / "gpu_pixels.json").write_text(json.dumps(pixel_costs()))
    arguments = ["--costs", str(tmp_path / "capacity.json"), "--pipeline", "p", "--vcpus-per-pod", "8", "--pixels", "gpu"]
    assert capacity.main([*arguments, "--pixel-costs", str(tmp_path / "gpu_pixels.json")]) == 0
    out = capsys.readouterr().out
    assert "CPU per image:     1.40 ms" in out and "pixels:            on the GPU" in out
    assert capacity.main([*arguments, "--pixel-costs", str(tmp_path / "missing.json")]) == 2
    assert "run `python -m benchmarks.gpu_pixels --measure`" in capsys.readouterr().err


def tiling_costs() -> dict:
    """A tiling run: untiled 4 + 1 ms of the Python steps per photo; at 101 views 34 + 11 ms (0.4 ms per added view)."""
    rows = [
        {
            "table": "cost",
            "tiles": "untiled",
            "system": "tiled pipeline",
            "preprocess_cpu_ms": 4.0,
            "postprocess_cpu_ms": 1.0,
            "core_items": 1,
        },
        {
            "table": "cost",
            "tiles": "64x64",
            "system": "tiled pipeline",
            "preprocess_cpu_ms": 34.0,
            "postprocess_cpu_ms": 11.0,
            "core_items": 101,
        },
        {
            "table": "cost",
            "tiles": "64x64",
            "system": "SAHI in the client",
            "preprocess_cpu_ms": 0.0,
            "postprocess_cpu_ms": 0.0,
            "core_items": 101,
        },
    ]
    return {"machine": MACHINE, "rows": rows}


def test_a_tiled_pipeline_takes_a_core_pass_per_view_and_the_steps_cpu_per_added_view():
    assert capacity.tiled_view_ms(tiling_costs()) == pytest.approx(0.4)
    result = capacity.plan(costs(), "p", "web", 100, 3000, 8, 0.7, None, tiles=11, tiling=tiling_costs())
    assert result.core_passes_per_image == 11
    assert result.cpu_ms_per_image == pytest.approx(7.0 + 10 * 0.4)
    assert result.pod_images_per_s == pytest.approx(3000 / 11) and result.bottleneck == "GPU"  # 8 x 0.7 x 1000 / 11 = 509 > 273
    assert result.gpu_utilization == pytest.approx(100 / 1 / (3000 / 11))
    with pytest.raises(ValueError, match="a tiled plan needs the tiling run's costs"):
        capacity.plan(costs(), "p", "web", 100, 3000, 8, 0.7, None, tiles=11)


def test_the_command_plans_a_tiled_pipeline_from_the_tiling_run(tmp_path, capsys):
    (tmp_path / "capacity.json").write_text(json.dumps(costs()))
    (tmp_path / "tiling.json").write_text(json.dumps(tiling_costs()))
    arguments = ["--costs", str(tmp_path / "capacity.json"), "--pipeline", "p", "--vcpus-per-pod", "8", "--tiles", "11"]
    assert capacity.main([*arguments, "--tiling-costs", str(tmp_path / "tiling.json")]) == 0
    out = capsys.readouterr().out
    assert "tiled:             11 core passes per photo (273 photos/s per GPU)" in out and "CPU per image:     11.00 ms" in out
