"""A pod's start estimated from the plans' engine sizes (builders/tensorrt/startup.py), and what Kubernetes is told."""

from __future__ import annotations

import pytest

from builders.tensorrt import startup

MIB, GIB = 2**20, 2**30


def model(name: str, weights_mib: float, activations_gib: list[float]) -> dict:
    return {
        "model": name,
        "weights_bytes": int(weights_mib * MIB),
        "profiles": [{"activations_bytes": int(a * GIB)} for a in activations_gib],
    }


def test_a_plan_costs_its_profiles_weights_and_activations():
    assert startup.plan_seconds(0, [0]) == startup.PLAN_SECONDS + startup.PROFILE_SECONDS
    one = startup.plan_seconds(10 * MIB, [1 * GIB])
    assert one == pytest.approx(20 + 15 + 0.5 * 10 + 30 * 1)
    assert startup.plan_seconds(10 * MIB, [1 * GIB] * 3) == pytest.approx(20 + 3 * (15 + 5 + 30))  # each profile timed anew


@pytest.mark.parametrize(("weights_mib", "activations_gib", "published_seconds"), [(50, 0.1, 34.6), (245, 0.5, 108.6)])
def test_the_coefficients_sit_above_the_published_build_times(weights_mib, activations_gib, published_seconds):
    """EfficientNet-Lite4 and YOLOv4 (FP32 weights; activations at batch 1 taken as 0.1 and 0.5 GiB), one profile: about
    1.7 times what onnxruntime's TensorRT execution provider took to build them without a timing cache."""
    assert 1.5 <= startup.plan_seconds(int(weights_mib * MIB), [int(activations_gib * GIB)]) / published_seconds <= 1.9


def test_the_deadlines_follow_from_the_estimate():
    start = startup.estimate([model("a_core", 8, [0.25]), model("b_core", 4, [1.0, 0.5, 0.5])])
    assert [plan.profiles for plan in start.plans] == [1, 3]
    assert start.build_seconds == pytest.approx(
        startup.plan_seconds(8 * MIB, [GIB // 4]) + startup.plan_seconds(4 * MIB, [GIB, GIB // 2, GIB // 2])
    )
    assert start.startup_seconds == startup.TRITON_START_SECONDS + 4 * startup.WARMUP_SECONDS_PER_PROFILE
    cold = startup.PULL_SECONDS + startup.COPY_SECONDS + start.build_seconds + start.startup_seconds
    assert start.cold_seconds() == pytest.approx(cold) and start.cached_seconds() < cold
    deadline = start.progress_deadline_seconds
    assert deadline % 60 == 0 and startup.SAFETY * cold <= deadline < startup.SAFETY * cold + 60
    assert start.build_timeout_seconds >= startup.SAFETY * start.build_seconds
    assert start.startup_failure_threshold * startup.STARTUP_PERIOD_SECONDS >= startup.SAFETY * start.startup_seconds
    assert start.rollout_timeout_seconds(3) == 3 * deadline


def test_kubernetes_md_states_the_estimate_of_the_shipped_plans():
    """docs/kubernetes.md's table is the estimate of benchmarks/results/gpu_memory.json's plans, as the Deployment takes it."""
    import json

    from vision_serving import layout

    root = layout.REPOSITORY_ROOT
    start = startup.estimate(json.loads((root / "benchmarks" / "results" / "gpu_memory.json").read_text())["models"])
    text = (root / "docs" / "kubernetes.md").read_text()
    for quoted in (
        f"| every plan built on one GPU | {start.build_seconds:.1f} s | `build-plan` runs it under `timeout {start.build_timeout_seconds}` |",
        f"| {start.cold_seconds():.1f} s | `progressDeadlineSeconds: {start.progress_deadline_seconds}` |",
        f"| Triton's start and warm-up | {start.startup_seconds:.1f} s | startupProbe every {startup.STARTUP_PERIOD_SECONDS} s, "
        f"`failureThreshold: {start.startup_failure_threshold}` |",
        f"| a pod whose plans are in the shared cache | {start.cached_seconds():.1f} s |",
    ):
        assert quoted in text, quoted
