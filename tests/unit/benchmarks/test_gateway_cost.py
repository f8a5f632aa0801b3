"""benchmarks.gateway's reading of its windows: the gateway's own time from Server-Timing, the medians over rounds, the
added p50 paired by round, the net CPU and the verdicts against the targets."""

from __future__ import annotations

from benchmarks import gateway, report


def window(p50: float, own: float | None = None, gateway_cpu: float | None = None, client: float = 0.5, server: float = 6.0) -> dict:
    return {
        "p50_ms": p50,
        "throughput": 10.0,
        "errors": 0,
        "gateway_own_p50_ms": own,
        "gateway_cpu_ms_per_request": gateway_cpu,
        "client_cpu_ms_per_request": client,
        "server_cpu_ms_per_request": server,
    }


def test_server_timing_gives_the_gateways_own_time():
    assert gateway.own_ms("triton;dur=12.5, gateway;dur=0.312") == 0.312
    assert gateway.own_ms(None) is None and gateway.own_ms("triton;dur=3") is None


def test_the_cost_is_the_median_over_rounds_paired_by_round():
    result = report.new("gateway", "t", "c")
    gateway.declare_tables(result)
    rounds = {
        "grpc": [window(10.0), window(30.0), window(12.0)],
        "gateway": [window(11.0, 0.3, 0.9, client=0.3), window(31.5, 0.2, 1.2, client=0.3), window(12.5, 0.25, 0.8, client=0.3)],
    }
    gateway.add_cost(result, "face_detector", 16, rounds)
    (row,) = report.rows(result, "cost")
    assert row["added_p50_ms"] == 1.0  # the median of 1.0, 1.5 and 0.5: each gateway window less its own round's gRPC one
    assert row["gateway_own_p50_ms"] == 0.25 and row["p50_met"] is True
    assert row["gateway_cpu_ms"] == 0.9 and row["cpu_met"] is True
    assert row["net_cpu_ms"] == round(0.9 + 0.3 - 0.5, 3)
    assert row["server_cpu_grpc"] == row["server_cpu_gateway"] == 6.0 and row["errors"] == 0
