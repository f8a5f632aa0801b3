"""devtools.capacity (the planner of the benchmarks' measurements): measured CPU costs -> vCPUs, memory and pods for a pipeline, a mix and a target."""

from __future__ import annotations

import json

import pytest

from devtools import capacity

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
    assert "run `python -m devtools.capacity --measure`" in capsys.readouterr().err


def test_resident_memory_leaves_out_the_shared_memory_the_tensors_travel_through():
    status = "Name:\ttritonserver\nVmRSS:\t  982344 kB\nRssAnon:\t  120000 kB\nRssFile:\t   15000 kB\nRssShmem:\t  847344 kB\n"
    assert capacity.resident_kib(status) == 135000
    assert capacity.resident_kib("Name:\told\nVmRSS:\t  4096 kB\n") == 4096  # a kernel without the split
