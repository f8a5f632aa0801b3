"""devtools.prometheus without the binary: durations, the shortened `for:` and the generated scrape config."""

from __future__ import annotations

import pytest

from devtools.prometheus import (
    SERVICE,
    PrometheusError,
    ScrapeTarget,
    alert_rule_groups,
    duration_ms,
    load_rule_groups,
    scrape_config,
    shorten_for,
)


@pytest.mark.parametrize(("text", "ms"), [("5m", 300_000), ("1h30m", 5_400_000), ("10s", 10_000), ("250ms", 250), ("1d", 86_400_000)])
def test_duration_ms(text, ms):
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "5mm", "1.5m"])
def test_duration_ms_refuses_what_prometheus_refuses(text):
    with pytest.raises(PrometheusError, match="not a Prometheus duration"):
        duration_ms(text)


def test_shorten_for_divides_every_for_and_leaves_the_rest():
    groups = [{"name": "g", "rules": [{"alert": "A", "expr": "x[5m] > 0", "for": "10m"}, {"alert": "B", "expr": "y"}]}]
    (group,) = shorten_for(groups, 60)
    assert group["rules"][0] == {"alert": "A", "expr": "x[5m] > 0", "for": "10000ms"}
    assert group["rules"][1] == {"alert": "B", "expr": "y"}
    assert groups[0]["rules"][0]["for"] == "10m", "the input is not changed"
    assert shorten_for([{"name": "g", "rules": [{"alert": "A", "expr": "x", "for": "1s"}]}], 10_000)[0]["rules"][0]["for"] == "1ms"
    with pytest.raises(PrometheusError):
        shorten_for(groups, 0)


def test_the_bundles_rules_load_and_shorten():
    groups = load_rule_groups()
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert alerts and all("for" in rule for rule in alerts)
    shortened = [rule for group in alert_rule_groups(for_divisor=60) for rule in group["rules"] if "alert" in rule]
    assert [duration_ms(rule["for"]) for rule in shortened] == [round(duration_ms(rule["for"]) / 60) for rule in alerts]


def test_scrape_config_labels_every_target_with_the_service_and_its_own_labels(tmp_path):
    targets = [ScrapeTarget("localhost:1", {"track": "stable"}), ScrapeTarget("localhost:2", {"track": "canary"})]
    config = scrape_config(targets, "2s", "3s", [tmp_path / "rules.yaml"])
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "3s"}
    assert config["rule_files"] == [str(tmp_path / "rules.yaml")]
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [
        {"targets": ["localhost:1"], "labels": {"service": SERVICE, "track": "stable"}},
        {"targets": ["localhost:2"], "labels": {"service": SERVICE, "track": "canary"}},
    ]
