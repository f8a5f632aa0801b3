"""The systems benchmark end to end in a minimal mode (2 concurrencies x 1 s) against a real server.

Only the shape of the results and the absence of errors are asserted: speed is judged by the
benchmark itself (benchmarks/results/), never by tests.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import CLASSIFIER, report, senders, systems

pytestmark = pytest.mark.integration

THROUGHPUT_FIELDS = ("concurrency", "throughput", "p50_ms", "p95_ms", "p99_ms", "errors", "completed")


@pytest.fixture(scope="module")
def result(triton_server, tmp_path_factory):
    options = systems.Options(
        mixes=("web",),
        systems=systems.ALL_SYSTEMS,
        concurrencies=[1, 2],
        duration_s=1.0,
        warmup_s=0.5,
        batch_sizes=[1, 2],
        inprocess_duration_s=0.5,
        levels={"naive_tuned": [2], "ensemble_http": [2], "core_grpc": [2], "perf_analyzer": [2]},
        pa_measurement_ms=1000,
        service_rates=True,
        command="pytest tests/integration/test_benchmark_smoke.py",
    )
    return systems.measure(options, systems.Servers(triton_server), work_dir=tmp_path_factory.mktemp("bench"))


def by_system(result: dict, table: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in report.rows(result, table):
        found.setdefault(row["system"], []).append(row)
    return found


def test_results_are_well_formed_and_error_free(result, tmp_path):
    json.loads(json.dumps(result))  # serializable as systems.json
    assert result["benchmark"] == "systems" and result["machine"]["usable_cpus"] >= 1 and "AVX2" in result["machine"]["instruction_sets"]
    assert len(result["machine"]["load_average_end"]) == 3
    skipped = {row["system"]: row["reason"] for row in report.rows(result, "skipped")}
    assert "ensemble_openvino" in skipped  # needs a second server (cpu_openvino), started by systems.main
    expected = {"ensemble_grpc": [1, 2], "ensemble_http": [2], "core_grpc": [2]}
    if senders.naive_service_available() is None:
        expected.update(naive=[1, 2], naive_openvino=[1, 2], naive_tuned=[2])
    else:
        assert "naive" in skipped and "naive_tuned" in skipped
    measured = by_system(result, "throughput")
    for system, levels in expected.items():
        rows = measured[system]
        assert [row["concurrency"] for row in rows] == levels, system
        for row in rows:
            assert set(THROUGHPUT_FIELDS) <= row.keys()
            assert row["errors"] == 0, (system, row["error_samples"])
            assert row["completed"] > 0 and row["throughput"] > 0
            assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
            assert row["server_cpu_ms_per_request"] > 0, system
    steps = report.rows(result, "steps")
    for system in ("ensemble_grpc", "ensemble_http", "core_grpc"):
        core = [r for r in steps if r["system"] == system and r["step"] == "core"]
        assert core and all(r["avg_batch"] >= 1 and r["queue_ms"] is not None for r in core), system
    for step in ("ensemble", "preprocess", "postprocess"):
        assert any(r["system"] == "ensemble_grpc" and r["step"] == step and r["request_ms"] for r in steps), step
    inprocess = by_system(result, "inprocess")
    assert {row["batch_size"] for row in inprocess["inprocess"] if row["when"] == "start"} == {1, 2}
    assert all(row["throughput"] > 0 for rows in inprocess.values() for row in rows)
    assert [row["when"] for row in inprocess["inprocess_reference"]] == ["start", "end"]  # at the start and again at the end
    for row in [*inprocess["inprocess_reference"], *inprocess["inprocess_openvino"]]:
        assert row["batch_size"] == systems.REFERENCE_BATCH
    assert inprocess["single_request"][0]["batch_ms_p50"] > 0
    if "perf_analyzer" not in skipped:
        (row,) = measured["perf_analyzer"]
        assert "error" not in row, row
        assert row["throughput"] > 0 and row["errors"] == 0
    rates = report.rows(result, "service_rates")
    assert [row["model"] for row in rates] == [CLASSIFIER.model_name(role) for role in ("preprocess", "core", "postprocess")]
    assert all(row["rate"] > 0 and row["max_queue_size"] >= row["floor"] for row in rates)
    assert report.rows(result, "memory", process="tritonserver")


def test_targets_and_the_report(result, tmp_path):
    checks = {row["check"]: row for row in report.rows(result, "checks")}
    assert checks["no_errors"]["met"], checks["no_errors"]
    assert checks[f"web/{CLASSIFIER.name}/vs_inprocess_reference"]["value"] > 0
    assert checks[f"web/{CLASSIFIER.name}/c1_p50"]["value"] > 0
    written = report.write(result, tmp_path, with_plot=True)
    markdown = (tmp_path / "systems.md").read_text()
    assert "## Targets" in markdown and f"| web | {CLASSIFIER.name} | ensemble_grpc | 1 |" in markdown
    assert "## Service rates" in markdown and "## In-process" in markdown
    if result.get("plot"):
        assert (tmp_path / "systems.png").stat().st_size < 200_000 and tmp_path / "systems.png" in written
