"""The alert rules with the real promtool (Debian's prometheus 2.42, scripts/system-packages.sh):
``promtool check rules`` on the PrometheusRule's groups, ``promtool test rules`` on
tests/deploy/alerts.test.yaml, and a test case that fires and one that stays silent for every alert.
Needs no server: promtool evaluates the rules on the crafted series itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from devtools.prometheus import load_rule_groups, tool, write_rules_file
from vision_serving import layout

TESTS_FILE = layout.REPOSITORY_ROOT / "tests" / "deploy" / "alerts.test.yaml"


def promtool(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *arguments], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def alert_names(groups: list[dict]) -> list[str]:
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def unit_tests_in(folder: Path, groups: list[dict], alert: str | None = None) -> Path:
    """The test file beside the rules file it names, written from ``groups``; with ``alert``, only the
    test cases that check that alert (promtool then evaluates a fraction of the series)."""
    tests = yaml.safe_load(TESTS_FILE.read_text())
    (rules_file,) = tests["rule_files"]
    write_rules_file(folder / rules_file, groups)
    if alert is None:
        return Path(shutil.copy(TESTS_FILE, folder / TESTS_FILE.name))
    tests["tests"] = [case for case in tests["tests"] if any(check["alertname"] == alert for check in case.get("alert_rule_test", []))]
    assert tests["tests"], f"no test case checks {alert}"
    path = folder / TESTS_FILE.name
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return path


def test_promtool_checks_every_rule_group(tmp_path):
    groups = load_rule_groups()
    path = write_rules_file(tmp_path / "rules.yaml", groups)
    completed = promtool("check", "rules", str(path), cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rules = sum(len(group["rules"]) for group in groups)
    assert f"SUCCESS: {rules} rules found" in completed.stdout


def test_promtool_unit_tests_pass(tmp_path):
    tests = unit_tests_in(tmp_path, load_rule_groups())
    completed = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert "SUCCESS" in completed.stdout


def test_every_alert_has_a_case_that_fires_and_one_that_stays_silent():
    """A new alert without promtool tests fails here."""
    alerts = set(alert_names(load_rule_groups()))
    fires: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(TESTS_FILE.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fires | silent <= alerts, f"tests for alerts that do not exist: {sorted((fires | silent) - alerts)}"
    assert not alerts - fires, f"alerts never tested firing: {sorted(alerts - fires)}"
    assert not alerts - silent, f"alerts never tested silent: {sorted(alerts - silent)}"


@pytest.mark.parametrize("alert", alert_names(load_rule_groups()))
def test_the_unit_tests_catch_an_alert_that_never_fires(tmp_path, alert):
    """Each alert's expression replaced by one that is never true: promtool's tests must fail for it."""
    groups = load_rule_groups()
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["expr"] = "vector(1) < 0"
    tests = unit_tests_in(tmp_path, groups, alert)
    completed = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert completed.returncode != 0
    assert f"alertname: {alert}," in completed.stdout + completed.stderr


def test_the_unit_tests_catch_an_hpa_metric_that_watches_only_the_cores(tmp_path):
    """The HPA's recorded metric narrowed to the core models (what it was before it covered every step):
    the saturated-preprocessing case must fail."""
    groups = load_rule_groups()
    (rule,) = [rule for group in groups for rule in group["rules"] if "record" in rule]
    rule["expr"] = rule["expr"].replace('model=~".+_(preprocess|core|core_.+|postprocess)"', 'model=~".+_core"')
    tests = unit_tests_in(tmp_path, groups)
    completed = promtool("test", "rules", tests.name, cwd=tmp_path)
    assert completed.returncode != 0
    assert "pod:triton_step_queue_avg_us:max" in completed.stdout + completed.stderr
