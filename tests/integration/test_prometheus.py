"""devtools.prometheus.LocalPrometheus: the real Prometheus binary scraping a real local tritonserver
and loading the bundle's alert rules (k8s/prometheusrule.yaml)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from devtools.prometheus import SERVICE, SERVICE_LABEL, LocalPrometheus, PrometheusError, ScrapeTarget, alert_rule_groups

pytestmark = pytest.mark.integration


def classify_once(server, photo: bytes) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo]], dtype=np.object_))
    client.infer("image_classifier", [image])


def poll(prometheus: LocalPrometheus, promql: str, timeout_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = prometheus.query(promql)
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"no series for {promql} within {timeout_s:.0f} s")


def test_scrapes_a_real_tritonserver_with_target_labels_and_loads_the_alert_rules(triton_server, photo_bytes, tmp_path):
    classify_once(triton_server, photo_bytes["coffee"])
    target = ScrapeTarget(f"localhost:{triton_server.metrics_port}", {"track": "stable", "namespace": "ns", "pod": "p1"})
    groups = alert_rule_groups(for_divisor=60)
    with LocalPrometheus([target], rule_groups=groups, workdir=tmp_path / "prometheus") as prometheus:
        prometheus.wait_until_scraped()
        series = poll(prometheus, "nv_inference_request_success")
        models = {s["metric"]["model"] for s in series}
        assert {"image_classifier", "image_classifier_preprocess", "image_classifier_core", "image_classifier_postprocess"} <= models
        for s in series:
            assert s["metric"][SERVICE_LABEL] == SERVICE and s["metric"]["track"] == "stable"
        (ensemble,) = prometheus.query('nv_inference_request_success{model="image_classifier",track="stable"}')
        assert float(ensemble["value"][1]) >= 1
        # Every alert of the rule file is loaded and evaluates without error against real series.
        time.sleep(2.5)  # two evaluation rounds at 1 s
        rules = prometheus.rules()
        names = {rule.get("alert", rule.get("record")) for group in groups for rule in group["rules"]}
        assert {rule["name"] for rule in rules} == names
        assert all(rule["health"] == "ok" for rule in rules), [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        # The HPA's recorded metric, computed by the real Prometheus from the real server's counters.
        (recorded,) = poll(prometheus, "pod:triton_step_queue_avg_us:max")
        assert recorded["metric"] == {"__name__": "pod:triton_step_queue_avg_us:max", "namespace": "ns", "pod": "p1"}
        assert float(recorded["value"][1]) >= 0
        # for: shortened 60x: 5m became 5 s.
        down = next(rule for rule in rules if rule["name"] == "VisionServingDown")
        assert down["duration"] == 5
        assert not [a for a in prometheus.alerts() if a["labels"]["alertname"] == "VisionServingDown"]
        with pytest.raises(PrometheusError, match="bad_data"):
            prometheus.query("sum(")
    assert prometheus.process is not None and prometheus.process.poll() is not None
    assert (tmp_path / "prometheus" / "prometheus.yml").is_file()


def test_a_temporary_workdir_is_removed_on_stop(triton_server):
    with LocalPrometheus([ScrapeTarget(f"localhost:{triton_server.metrics_port}")]) as prometheus:
        workdir = prometheus.workdir
        assert workdir is not None and (workdir / "prometheus.yml").is_file()
        prometheus.wait_until_scraped()
        (up,) = prometheus.query(f'up{{{SERVICE_LABEL}="{SERVICE}"}}')
        assert up["value"][1] == "1"
    assert not workdir.exists()
