"""devtools.canary: the decision over fetched numbers, the PromQL it sends, the kubectl commands it generates."""

from __future__ import annotations

import pytest

from devtools import canary
from devtools.canary import Decision, KubernetesTarget, Thresholds, TrackMetrics, decide

LIMITS = Thresholds(min_requests=200, max_error_rate_delta=0.005, max_p95_ratio=1.5, drift_p_value=0.01)


def outcome(decision: Decision, name: str) -> str:
    return next(check.outcome for check in decision.checks if check.name == name)


def test_a_healthy_canary_with_enough_traffic_is_promoted():
    decision = decide(TrackMetrics(9000, 9, 40.0), TrackMetrics(1000, 1, 42.0), LIMITS)
    assert decision.verdict == "PROMOTE" and decision.exit_code == canary.EXIT_PROMOTE
    assert [check.outcome for check in decision.checks] == ["pass", "pass", "pass", "n/a"]


def test_errors_above_stable_plus_delta_roll_back():
    # 0.1 % on stable, 1 % on the canary: 0.9 points over, the limit is 0.5.
    decision = decide(TrackMetrics(9990, 10, 40.0), TrackMetrics(990, 10, 40.0), LIMITS)
    assert decision.verdict == "ROLLBACK" and decision.exit_code == canary.EXIT_ROLLBACK
    assert outcome(decision, "error rate") == "FAIL"
    assert "error rate" in decision.reason
    # 0.5 points over exactly is within the limit.
    assert decide(TrackMetrics(1000, 0), TrackMetrics(995, 5), LIMITS).verdict == "PROMOTE"


def test_too_little_canary_traffic_waits():
    decision = decide(TrackMetrics(9000, 0, 40.0), TrackMetrics(50, 0, 40.0), LIMITS)
    assert decision.verdict == "WAIT" and decision.exit_code == canary.EXIT_WAIT
    assert outcome(decision, "requests") == "wait" and outcome(decision, "p95 latency") == "wait"
    assert decide(TrackMetrics(9000, 0), TrackMetrics(), LIMITS).verdict == "WAIT"


def test_failures_that_already_exceed_the_budget_roll_back_before_min_requests():
    # 30 requests, all failed: even 170 more successes would leave 15 % errors.
    assert decide(TrackMetrics(900, 0), TrackMetrics(0, 30), LIMITS).verdict == "ROLLBACK"
    # 1 failure in 30: 0.5 % at 200 requests is still within the limit, so wait.
    assert decide(TrackMetrics(900, 0), TrackMetrics(29, 1), LIMITS).verdict == "WAIT"


def test_without_stable_traffic_the_canary_is_held_to_the_delta_alone():
    assert decide(TrackMetrics(), TrackMetrics(300, 0), LIMITS).verdict == "PROMOTE"
    assert decide(TrackMetrics(), TrackMetrics(290, 10), LIMITS).verdict == "ROLLBACK"


def test_p95_latency_ratio():
    slow = decide(TrackMetrics(9000, 0, 40.0), TrackMetrics(1000, 0, 61.0), LIMITS)
    assert slow.verdict == "ROLLBACK" and outcome(slow, "p95 latency") == "FAIL"
    assert decide(TrackMetrics(9000, 0, 40.0), TrackMetrics(1000, 0, 59.0), LIMITS).verdict == "PROMOTE"


def test_missing_latency_or_drift_series_are_not_available_never_a_failure():
    decision = decide(TrackMetrics(9000, 0, None), TrackMetrics(1000, 0, 80.0), LIMITS)
    assert decision.verdict == "PROMOTE"
    assert outcome(decision, "p95 latency") == "n/a" and outcome(decision, "drift") == "n/a"


def test_drift_only_on_the_canary_rolls_back_drift_on_both_is_the_traffic():
    stable = TrackMetrics(9000, 0, 40.0, {"image_classifier/top1_class": 0.4, "image_classifier_preprocess/brightness": 0.001})
    drifted = TrackMetrics(1000, 0, 40.0, {"image_classifier/top1_class": 0.0001, "image_classifier_preprocess/brightness": 0.002})
    decision = decide(stable, drifted, LIMITS)
    assert decision.verdict == "ROLLBACK"
    assert outcome(decision, "drift image_classifier/top1_class") == "FAIL"
    assert outcome(decision, "drift image_classifier_preprocess/brightness") == "pass"
    # A feature stable does not export is judged on the canary alone.
    assert decide(TrackMetrics(9000, 0), TrackMetrics(1000, 0, None, {"m/f": 0.5}), LIMITS).verdict == "PROMOTE"
    assert decide(TrackMetrics(9000, 0), TrackMetrics(1000, 0, None, {"m/f": 0.001}), LIMITS).verdict == "ROLLBACK"


def test_the_table_names_every_check_and_the_verdict():
    text = canary.format_table(decide(TrackMetrics(9990, 10, 40.0), TrackMetrics(990, 10, 40.0), LIMITS))
    assert text.splitlines()[0].split() == ["check", "stable", "canary", "limit", "outcome"]
    assert "0.10%" in text and "1.00%" in text
    assert text.splitlines()[-1].startswith("verdict: ROLLBACK")


def test_queries_select_the_ensemble_by_track_label_and_extra_matchers():
    queries = canary.queries("image_classifier", "track", "5m", 'namespace="ns"')
    assert queries["succeeded"] == (
        'sum by (track) (increase(nv_inference_request_success{model="image_classifier",track=~"stable|canary",namespace="ns"}[5m]))'
    )
    assert queries["p95_us"] == (
        'max by (track) (nv_inference_request_summary_us{model="image_classifier",track=~"stable|canary",namespace="ns",quantile="0.95"})'
    )
    assert (
        'vision_drift_p_value{pipeline="image_classifier",rollout=~"stable|canary"}'
        in canary.queries("image_classifier", "rollout", "1m")["drift_p_value"]
    )


def test_printed_commands_are_shell_quoted_and_a_promotion_prints_its_way_back():
    lines = canary.apply_kubectl("ROLLBACK", KubernetesTarget(), run=False)
    assert lines[0].startswith("kubectl -n vision-serving patch grpcroute/vision-serving --type=json -p '[{")
    lines = canary.apply_kubectl("PROMOTE", KubernetesTarget(images=("triton=registry/server:2",)), run=False)
    assert lines[0] == "kubectl -n vision-serving get deployment/vision-serving -o json"
    assert lines[2] == "kubectl -n vision-serving rollout status deployment/vision-serving"  # bounded by the Deployment's own numbers
    assert lines[-1].startswith("# if that rollout does not finish: kubectl -n vision-serving set image deployment/vision-serving triton=")


def test_bad_arguments_exit_2(capsys):
    for argv in (
        ["--pipeline", "p"],
        ["--prometheus", "http://x", "--pipeline", "p", "--window", "five"],
        ["--prometheus", "http://x", "--pipeline", "p", "--apply", "nginx"],
        ["--prometheus", "http://x", "--pipeline", "p", "--max-error-rate-delta", "2"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            canary.parse_args(argv)
        assert exit_info.value.code == 2


def test_an_unreachable_prometheus_is_one_line_and_exit_2(capsys):
    from devtools.loadgen import free_port

    code = canary.main(["--prometheus", f"http://127.0.0.1:{free_port()}", "--pipeline", "image_classifier"])
    error = capsys.readouterr().err
    assert code == canary.EXIT_ERROR
    assert error.startswith("canary: error: cannot query Prometheus") and error.count("\n") == 1
