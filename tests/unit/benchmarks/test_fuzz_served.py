"""The served fuzz benchmark's report (benchmarks/fuzz_served.py), on answers made up here."""

from __future__ import annotations

from benchmarks.fuzz_served import Answer, markdown, report


def answer(pipeline: str, kind: str, status: str, seconds: float) -> Answer:
    return Answer(pipeline, kind, "png", "none" if kind == "valid" else "truncate", status, "", seconds)


def test_the_report_measures_refusals_against_the_clean_runs_valid_photos():
    clean = [answer("a", "valid", "OK", seconds) for seconds in (0.10, 0.10, 0.12, 0.20)]
    clean += [answer("b", "valid", "OK", 1.0)] * 4
    mixed = [
        answer("a", "valid", "OK", 0.25),
        answer("a", "mutant", "INVALID_ARGUMENT", 0.02),
        answer("a", "mutant", "INVALID_ARGUMENT", 0.6),
    ]
    mixed += [answer("b", "valid", "OK", 1.0), answer("b", "mutant", "UNAVAILABLE", 9.0), answer("b", "mutant", "OK", 1.0)]
    result = report(clean, mixed, ["a", "b"], {"tritonserver": 1, "a_0": 2}, {"tritonserver": 1, "a_0": 2}, True, 12.0, 7)
    assert result["classes"] == {"mutant INVALID_ARGUMENT": 2, "mutant OK": 1, "mutant UNAVAILABLE": 1, "valid OK": 10}
    assert [item["status"] for item in result["unexpected"]] == ["UNAVAILABLE"]
    assert result["per_pipeline"]["a"]["valid_median_ms"] == 110.0 and result["per_pipeline"]["a"]["refused"] == 2
    assert result["refused_cost_over_valid"]["over_5x"] == 1  # 0.6 s against a median of 0.11 s
    assert result["per_pipeline"]["a"]["refused_cost_max"] == round(0.6 / 0.11, 3)
    assert result["processes_unchanged"] and result["ready_after"]
    table = markdown(result)
    assert result["per_pipeline"]["a"]["clean_p99_over_median"] == round(0.1976 / 0.11, 2)
    assert "| a | 110.0 |" in table and "Other than OK or INVALID_ARGUMENT: 1." in table
    changed = report(clean, mixed, ["a", "b"], {"tritonserver": 1}, {"tritonserver": 3}, True, 1.0, 7)
    assert not changed["processes_unchanged"]
