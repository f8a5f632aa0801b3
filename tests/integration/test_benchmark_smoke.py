"""The benchmark harness end to end in a minimal mode (2 concurrencies x 2 s) against a real server.

Only the shape of the results and the absence of errors are asserted: speed
is judged by the benchmark itself (benchmarks/results/), never by tests.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import CLASSIFIER, report, run, systems

pytestmark = pytest.mark.integration

THROUGHPUT_FIELDS = ("concurrency", "throughput", "p50_ms", "p95_ms", "p99_ms", "errors", "completed")


@pytest.fixture(scope="module")
def results(triton_server, tmp_path_factory):
    options = run.Options(
        concurrencies=[1, 2],
        duration_s=2.0,
        warmup_s=0.5,
        batch_sizes=[1, 2],
        inprocess_duration_s=0.5,
        http_concurrencies=[2],
        core_concurrencies=[2],
        naive_tuned_concurrencies=[2],
        pa_concurrencies=[2],
        pa_measurement_ms=1000,
        naive_concurrencies=None,
        systems=run.ALL_SYSTEMS,
        command="pytest tests/integration/test_benchmark_smoke.py",
    )
    return run.run_benchmark(options, triton_server, output_dir=tmp_path_factory.mktemp("bench"))


def test_results_are_well_formed_and_error_free(results, tmp_path):
    json.loads(json.dumps(results))  # serializable as results.json
    assert results["machine"]["logical_cpus"] >= 1 and len(results["load_average_end"]) == 3
    assert results["images"]["count"] > 0
    expected = {"ensemble_grpc": [1, 2], "ensemble_http": [2], "core_grpc": [2]}
    if systems.naive_service_available() is None:
        expected.update(naive=[1, 2], naive_openvino=[1, 2], naive_tuned=[2])
    else:
        assert "naive" in results["skipped"] and "naive_tuned" in results["skipped"]
    assert "ensemble_openvino" in results["skipped"]  # needs a second server (cpu_openvino), started by run.main
    assert results["mix"] == "web" and results["images"]["shares"] == {"web": 1.0}
    for system, levels in expected.items():
        rows = results["systems"][system]
        assert [row["concurrency"] for row in rows] == levels, system
        for row in rows:
            assert set(THROUGHPUT_FIELDS) <= row.keys()
            assert row["errors"] == 0, (system, row["error_samples"])
            assert row["completed"] > 0 and row["throughput"] > 0
            assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
            if not system.startswith("naive"):
                core = row["triton"][CLASSIFIER.model_name("core")]
                assert core["requests"] > 0 and core["avg_batch"] >= 1 and core["queue_ms"] is not None
            if system.startswith("ensemble"):
                for model in (CLASSIFIER.name, CLASSIFIER.model_name("preprocess"), CLASSIFIER.model_name("postprocess")):
                    assert row["triton"][model]["requests"] > 0, model
    assert {row["batch_size"] for row in results["inprocess"]} == {1, 2}
    assert all(row["throughput"] > 0 for row in results["inprocess"])
    assert len(results["inprocess_reference"]) == 2  # at the start and again at the end
    for row in [*results["inprocess_reference"], *results["inprocess_openvino"]]:
        assert row["batch_size"] == run.REFERENCE_BATCH and row["throughput"] > 0
    assert results["single_request"]["batch_ms_p50"] > 0
    if "perf_analyzer" not in results["skipped"]:
        (row,) = results["systems"]["perf_analyzer"]
        assert "error" not in row, row
        assert row["throughput"] > 0 and row["errors"] == 0
    assert results["targets"]["no_errors"]["met"], results["targets"]["no_errors"]
    markdown = report.markdown(results)
    assert "## Targets" in markdown and "| ensemble (gRPC) | 1 |" in markdown
    plot = report.plot(results, tmp_path / "plot.png")
    if plot is not None:
        assert plot.stat().st_size < 200_000
    # The multi-mix report (what run.main writes) with this run as its web mix.
    combined = {"schema": 2, "command": "pytest", "quick": True, "started_at": "now", "elapsed_s": 1.0, "runs": {"web": results}}
    combined["targets"] = report.issue_targets(combined)
    assert combined["targets"]["no_errors"]["met"]
    assert combined["targets"]["web_vs_reference"]["value"] > 0 and combined["targets"]["c1_p50_vs_single"]["value"] > 0
    assert "## Targets" in report.markdown(combined)
    plot = report.plot(combined, tmp_path / "latency_throughput.png")
    if plot is not None:
        assert plot.stat().st_size < 200_000
