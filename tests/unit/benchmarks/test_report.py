"""The benchmarks' one result format and renderer, and the systems benchmark's targets computed from its rows
as stated (ratios, met or missed); the plot renders; reading a result imports no runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import report, targets

CLASSIFIER = "image_classifier"
ROOT = Path(__file__).resolve().parents[3]


def throughput(mix: str, system: str, concurrency: int, req_per_s: float, p50: float, errors: int = 0, **extra) -> dict:
    return {
        "table": "throughput",
        "mix": mix,
        "pipeline": CLASSIFIER,
        "system": system,
        "concurrency": concurrency,
        "throughput": req_per_s,
        "p50_ms": p50,
        "p95_ms": p50 * 1.5,
        "p99_ms": p50 * 2,
        "errors": errors,
        **extra,
    }


def limit(mix: str, system: str, img_per_s: float, **extra) -> dict:
    row = {"table": "inprocess", "mix": mix, "pipeline": CLASSIFIER, "system": system, "mode": "threads x2", "batch_size": 8}
    return {**row, "throughput": img_per_s, **extra}


def by_check(rows: list[dict]) -> dict[str, dict]:
    return {check["check"]: check for check in targets.checks(rows)}


def test_targets_ratios_and_verdicts():
    rows = [
        limit("web", "inprocess_reference", 100.0),
        limit("web", "inprocess_reference", 90.0, when="end"),  # the higher of the two counts: the conservative ratio
        limit("web", "inprocess", 110.0),
        {**limit("web", "single_request", 100.0), "batch_ms_p50": 10.0},
        throughput("web", "ensemble_grpc", 1, 40.0, 24.0),
        throughput("web", "ensemble_grpc", 16, 120.0, 130.0),
        throughput("web", "ensemble_openvino", 16, 135.0, 120.0),
        limit("phone", "inprocess_reference", 20.0),
        throughput("phone", "ensemble_grpc", 16, 45.0, 350.0),
        throughput("phone", "ensemble_openvino", 16, 40.0, 390.0),
        limit("mix", "inprocess_reference", 50.0),
        throughput("mix", "ensemble_grpc", 16, 60.0, 250.0),
        throughput("mix", "naive", 1, 10.0, 50.0, errors=2),
    ]
    checks = by_check(rows)
    web = checks[f"web/{CLASSIFIER}/vs_inprocess_reference"]
    assert web["value"] == 1.35 and web["met"] is True  # the best ensemble of either runtime (OpenVINO's 135)
    assert "ensemble_openvino 135.0 req/s at c=16" in web["detail"]
    # Against the in-process limit: the ensemble at the highest concurrency, at least 0.9 (web and phone photos).
    assert (
        checks[f"web/{CLASSIFIER}/vs_inprocess"]["value"] == round(135 / 110, 3) and checks[f"web/{CLASSIFIER}/vs_inprocess"]["met"] is True
    )
    phone = checks[f"phone/{CLASSIFIER}/vs_inprocess_reference"]
    assert phone["value"] == 2.25 and phone["met"] is False
    assert checks[f"mix/{CLASSIFIER}/vs_inprocess_reference"]["met"] is None  # context only
    assert checks[f"web/{CLASSIFIER}/c1_p50"]["value"] == 2.4 and checks[f"web/{CLASSIFIER}/c1_p50"]["met"] is False
    errors = checks["no_errors"]
    assert errors["value"] == 2 and errors["met"] is False and f"mix/{CLASSIFIER}/naive: 2" in errors["detail"]
    # Another pipeline's ratios are context: the targets are the classifier's.
    other = [{**row, "pipeline": "face_detector"} for row in rows]
    assert by_check(other)["web/face_detector/vs_inprocess_reference"]["met"] is None


def test_the_ensemble_against_the_naive_service():
    """At 4 clients and more the ensemble must serve at least as much; at one, be behind by at most the floor."""
    rows = [
        {**throughput("web", "ensemble_grpc", 1, 80.0, 10.0), "p50_ms": 12.0},
        {**throughput("web", "naive", 1, 100.0, 10.0), "p50_ms": 11.0},
        throughput("web", "ensemble_grpc", 16, 120.0, 10.0),
        throughput("web", "naive", 16, 130.0, 10.0),
        throughput("phone", "ensemble_grpc", 4, 31.0, 10.0),
        throughput("phone", "naive", 4, 30.0, 10.0),
        {**throughput("phone", "ensemble_grpc", 1, 10.0, 10.0), "p50_ms": 60.0},
        {**throughput("phone", "naive", 1, 12.0, 10.0), "p50_ms": 50.0},
    ]
    checks = by_check(rows)
    assert checks[f"web/{CLASSIFIER}/c1_vs_naive"]["met"] is True  # 1.0 ms behind
    assert checks[f"web/{CLASSIFIER}/c16_vs_naive"]["met"] is False and checks[f"web/{CLASSIFIER}/c16_vs_naive"]["value"] == round(
        120 / 130, 3
    )
    assert checks[f"phone/{CLASSIFIER}/c4_vs_naive"]["met"] is True
    assert checks[f"phone/{CLASSIFIER}/c1_vs_naive"]["met"] is False and checks[f"phone/{CLASSIFIER}/c1_vs_naive"]["value"] == 10.0


def test_a_throughput_target_needs_the_cpu_time_ratio_to_agree():
    """Measured minutes apart on a loaded machine, throughput can flatter; CPU time per image decides with it."""
    ensemble = throughput("web", "ensemble_grpc", 16, 150.0, 100.0, server_cpu_ms_per_request=30.0, client_cpu_ms_per_request=1.0)
    same_cpu = limit("web", "inprocess_reference", 100.0, cpu_ms_per_image=31.0)  # ratio 1.0 from CPU time
    check = by_check([same_cpu, ensemble])[f"web/{CLASSIFIER}/vs_inprocess_reference"]
    assert check["value"] == 1.5 and check["cpu_ratio"] == 1.0 and check["met"] is False
    more_cpu = limit("web", "inprocess_reference", 100.0, cpu_ms_per_image=46.5)  # 1.5x the ensemble's CPU per request
    assert by_check([more_cpu, ensemble])[f"web/{CLASSIFIER}/vs_inprocess_reference"]["met"] is True


def result_with_rows() -> dict:
    result = report.new("systems", "A test run", ".venv/bin/python -m benchmarks.systems --quick", {"mixes": ["web"]})
    report.table(
        result,
        "throughput",
        "Throughput",
        {"system": "system", "concurrency": "c", "throughput": "req/s", "p99_ms": "p99 ms"},
        "Closed loop.",
    )
    report.table(result, "inprocess", "In-process", {"system": "system", "throughput": "img/s"})
    report.table(result, "empty", "Never filled", {"x": "x"})
    for row in [throughput("web", "ensemble_grpc", 1, 40.0, 24.0), throughput("web", "ensemble_grpc", 4, 90.5, 45.0)]:
        report.add(result, "throughput", **{key: value for key, value in row.items() if key != "table"})
    report.add(result, "inprocess", mix="web", pipeline=CLASSIFIER, system="inprocess", throughput=100.0)
    return report.finish(result)


def test_one_format_with_the_machine_and_one_renderer():
    result = result_with_rows()
    machine = result["machine"]
    assert set(machine["instruction_sets"]) >= {"AVX2", "AVX-512", "VNNI"} and machine["cpu_model"] and machine["usable_cpus"] >= 1
    assert result["schema"] == report.SCHEMA and result["date"].endswith("+00:00") and result["elapsed_s"] >= 0
    json.loads(json.dumps(result))  # serializable as it is written
    markdown = report.markdown(result)
    assert markdown.startswith("# A test run\n") and "Command: `.venv/bin/python -m benchmarks.systems --quick`" in markdown
    assert "AVX2" in markdown and "load average" in markdown
    assert "## Throughput\n\nClosed loop.\n\n| system | c | req/s | p99 ms |\n|---|---:|---:|---:|\n" in markdown
    assert "| ensemble_grpc | 4 | 90.5 | 90 |" in markdown  # p50 45 x 2
    assert "Never filled" not in markdown  # a table without rows is left out
    assert report.rows(result, "throughput", concurrency=4)[0]["throughput"] == 90.5


def test_write_and_render_only(tmp_path):
    result = result_with_rows()
    written = report.write(result, tmp_path, with_plot=True)
    assert {path.name for path in written} >= {"systems.json", "systems.md"}
    saved = json.loads((tmp_path / "systems.json").read_text())
    (tmp_path / "systems.md").write_text("stale")
    report.render_only(tmp_path, "systems")
    assert (tmp_path / "systems.md").read_text() == report.markdown(saved)
    if result.get("plot"):  # matplotlib is in requirements/dev.txt (builder.in)
        assert "![latency vs throughput](systems.png)" in (tmp_path / "systems.md").read_text()


def test_latency_throughput_plot(tmp_path):
    result = result_with_rows()
    path = report.plot(result, tmp_path / "plot.png")
    if path is not None:  # matplotlib is in requirements/dev.txt (builder.in)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size < 200_000


def test_values_are_formatted_for_reading():
    assert [report.fmt(value) for value in (None, True, False, 0.0, 0.0312, 1.0, 12.345, 100.0, 1234.56)] == [
        "–",
        "yes",
        "**no**",
        "0",
        "0.031",
        "1.00",
        "12.3",
        "100",
        "1234.6",
    ]
    assert report.fmt(3.2e-30) == "3.2e-30"
    assert report.fmt({"a": 1, "b": [84, 8400]}) == "a: 1, b: 84/8400" and report.fmt("a|b") == "a\\|b"


def test_reading_results_and_planning_import_no_runtime():
    """The report, the targets, the queue sizes and the planner work without onnx, onnxruntime or a server."""
    code = (
        "import sys; import benchmarks.report, benchmarks.targets, benchmarks.queue_sizes, benchmarks.capacity; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'onnx', 'onnxruntime', 'openvino', 'tritonclient'}))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout.strip()
    assert found == "[]"
