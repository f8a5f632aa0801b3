"""The issue's targets are computed from side-by-side rows as stated (ratios, met or missed), and the plot renders."""

from __future__ import annotations

from benchmarks import report


def row(concurrency: int, throughput: float, p50: float, errors: int = 0) -> dict:
    return {"concurrency": concurrency, "throughput": throughput, "p50_ms": p50, "p95_ms": p50 * 1.5, "p99_ms": p50 * 2, "errors": errors}


def run(reference: float, ensemble: list[dict], openvino: list[dict], single_ms: float | None = None, errors: int = 0) -> dict:
    systems = {"ensemble_grpc": ensemble, "ensemble_openvino": openvino, "naive": [row(1, 10.0, 50.0, errors)]}
    result = {
        "inprocess_reference": [{"mode": "parallel x2", "batch_size": 8, "throughput": reference}],
        "inprocess": [{"mode": "parallel x2", "batch_size": 8, "throughput": reference * 1.1}],
        "systems": systems,
    }
    if single_ms:
        result["single_request"] = {"mode": "single request, 2 threads", "batch_ms_p50": single_ms}
    result["targets"] = report.targets(result)
    return result


def test_issue_targets_ratios_and_verdicts():
    results = {
        "runs": {
            "web": run(100.0, [row(1, 40.0, 24.0), row(16, 120.0, 130.0)], [row(16, 135.0, 120.0)], single_ms=10.0),
            "phone": run(20.0, [row(16, 45.0, 350.0)], [row(16, 40.0, 390.0)]),
            "mix": run(50.0, [row(16, 60.0, 250.0)], [], errors=2),
        }
    }
    targets = report.issue_targets(results)
    web = targets["web_vs_reference"]
    assert web["value"] == 1.35 and web["met"] is True  # the best ensemble of either runtime (OpenVINO's 135)
    assert targets["phone_vs_reference"]["value"] == 2.25 and targets["phone_vs_reference"]["met"] is False
    assert targets["mix_vs_reference"]["met"] is None  # context only
    assert targets["c1_p50_vs_single"]["value"] == 2.4 and targets["c1_p50_vs_single"]["met"] is False
    assert targets["no_errors"]["value"]["mix/naive"] == 2 and targets["no_errors"]["met"] is False


def test_latency_throughput_plot(tmp_path):
    results = {"runs": {"web": run(100.0, [row(1, 40.0, 24.0), row(4, 90.0, 45.0)], [row(1, 35.0, 28.0)])}}
    path = report.plot(results, tmp_path / "plot.png")
    if path is not None:  # matplotlib is in requirements/dev.txt (builder.in)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size < 200_000


def test_a_throughput_target_needs_the_cpu_time_ratio_to_agree():
    """Measured minutes apart on a loaded machine, throughput can flatter; CPU time per image decides with it."""
    web = run(100.0, [{**row(16, 150.0, 100.0), "server_cpu_ms_per_request": 30.0, "client_cpu_ms_per_request": 1.0}], [])
    web["inprocess_reference"][0]["cpu_ms_per_image"] = 31.0  # the same CPU per image: ratio 1.0 from CPU time
    targets = report.issue_targets({"runs": {"web": web}})["web_vs_reference"]
    assert targets["value"] == 1.5 and targets["cpu_ratio"] == 1.0 and targets["met"] is False
    web["inprocess_reference"][0]["cpu_ms_per_image"] = 46.5  # 1.5x the ensemble's CPU per request
    assert report.issue_targets({"runs": {"web": web}})["web_vs_reference"]["met"] is True
