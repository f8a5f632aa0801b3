"""The stream service's deployment, offline: k8s/streams (kustomize, the Kubernetes 1.35 and Prometheus Operator
schemas, checkov), its alert rules with promtool (tests/deploy/streams-alerts.test.yaml), and its image's Dockerfile
(hadolint runs in test_deployment.py with the others)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from devtools.prometheus import load_rule_groups, tool, write_rules_file
from tests.support.deployment import K8S, ROOT, STREAMS_DOCKERFILE, find, kustomize, validate_manifests
from vision_streams.config import ServiceConfig

STREAMS = K8S / "streams"
ALERT_TESTS = ROOT / "tests" / "deploy" / "streams-alerts.test.yaml"
RUNBOOKS = ROOT / "docs" / "streams.md"  # the stream alerts' runbooks: its sections named after them


@pytest.fixture(scope="module")
def rendered() -> str:
    return kustomize(STREAMS)


@pytest.fixture(scope="module")
def objects(tools, rendered) -> list[dict]:
    result = validate_manifests(tools, rendered)
    bad = [r for r in result["results"] if r["status"] != "ok"]
    assert not bad, bad
    return result["objects"]


def container(objects: list[dict]) -> dict:
    (streams,) = find(objects, "StatefulSet", "vision-streams")["spec"]["template"]["spec"]["containers"]
    return streams


def flags(arguments: list[str]) -> dict[str, str]:
    return dict(argument.removeprefix("--").split("=", 1) for argument in arguments)


def test_every_object_validates_and_checkov_passes(tools, objects, rendered, tmp_path):
    assert sorted(o["kind"] for o in objects) == sorted(
        ["ConfigMap", "Service", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy", "PrometheusRule", "ServiceMonitor"]
    )
    path = tmp_path / "streams.yaml"
    path.write_text(rendered)
    completed = subprocess.run(
        [str(tools / "checkov"), "--skip-download", "--quiet", "--compact", "--framework", "kubernetes", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]


def test_replicas_share_the_streams_through_the_headless_service(objects):
    statefulset = find(objects, "StatefulSet", "vision-streams")
    peers = find(objects, "Service", "vision-streams-peers")
    assert statefulset["spec"]["serviceName"] == peers["metadata"]["name"] and statefulset["spec"]["replicas"] >= 2
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"] is False
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(key) == value for key, value in peers["spec"]["selector"].items())
    streams = container(objects)
    arguments = flags(streams["args"])
    assert arguments["peers-service"] == peers["metadata"]["name"]
    (pod_ip,) = [e for e in streams["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"  # --me's default (vision_streams/__main__.py)
    assert streams["readinessProbe"]["httpGet"]["path"] == "/readyz" and streams["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (port,) = streams["ports"]
    assert port["containerPort"] == int(arguments["port"])


def test_the_config_map_is_the_mounted_config_and_names_triton_s_service(objects):
    streams = container(objects)
    config = Path(flags(streams["args"])["config"])
    (mount,) = [m for m in streams["volumeMounts"] if m["mountPath"] == str(config.parent)]
    (volume,) = [
        v for v in find(objects, "StatefulSet", "vision-streams")["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    ]
    config_map = find(objects, "ConfigMap", volume["configMap"]["name"])
    text = config_map["data"][config.name]
    service = ServiceConfig.from_mapping(tomllib.loads(text))
    host, port = service.triton_url.split(":")
    triton = find(list(yaml.safe_load_all((K8S / "services.yaml").read_text())), "Service", host)
    assert int(port) in [p["port"] for p in triton["spec"]["ports"] if p["name"] == "grpc"]
    assert "suffix" not in str(config_map["metadata"].get("annotations", {}))
    assert not re.search(r"-[a-z0-9]{10}$", config_map["metadata"]["name"]), "a hashed name would restart every replica on each edit"


def test_the_service_monitor_scrapes_the_api_service(objects):
    monitor = find(objects, "ServiceMonitor", "vision-streams")
    api = find(objects, "Service", "vision-streams")
    assert monitor["spec"]["selector"]["matchLabels"] == {
        k: api["metadata"]["labels"][k] for k in monitor["spec"]["selector"]["matchLabels"]
    }
    assert monitor["spec"]["endpoints"][0]["port"] in [p["name"] for p in api["spec"]["ports"]]


def groups() -> list[dict]:
    return load_rule_groups(STREAMS / "prometheusrule.yaml")


def promtool(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *arguments], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def test_promtool_checks_and_tests_the_stream_alerts(tmp_path):
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    (rules_file,) = tests["rule_files"]
    path = write_rules_file(tmp_path / rules_file, groups())
    completed = promtool("check", "rules", str(path), cwd=tmp_path)
    assert completed.returncode == 0 and "SUCCESS: 3 rules found" in completed.stdout, completed.stdout + completed.stderr
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    completed = promtool("test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]


def test_every_stream_alert_fires_and_stays_silent_in_a_case_and_has_a_runbook():
    alerts = {rule["alert"] for group in groups() for rule in group["rules"] if "alert" in rule}
    fires, silent = set(), set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fires == silent == alerts
    anchors = {re.sub(r"[^a-z0-9]", "", line.lower()) for line in RUNBOOKS.read_text().splitlines() if line.startswith("#")}
    for group in groups():
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"].endswith(f"#{rule['alert'].lower()}") and rule["alert"].lower() in anchors


@pytest.mark.parametrize("alert", ["VisionStreamDown", "VisionStreamNoResults", "VisionStreamDropsSustained"])
def test_the_alert_tests_catch_an_alert_that_never_fires(tmp_path, alert):
    broken = groups()
    for group in broken:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["expr"] = "vector(1) < 0"
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    write_rules_file(tmp_path / tests["rule_files"][0], broken)
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    completed = promtool("test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert completed.returncode != 0 and f"alertname: {alert}," in completed.stdout + completed.stderr


def test_the_image_installs_exactly_the_streams_lock_and_runs_the_service():
    text = STREAMS_DOCKERFILE.read_text()
    assert "--require-hashes --only-binary=:all: -r /tmp/requirements/streams.txt" in text
    assert "COPY vision_streams " in text and "vision_serving" not in text.replace("# nothing of Triton or the serving library", "")
    assert re.search(r'^ENTRYPOINT \["python", "-m", "vision_streams"\]$', text, re.MULTILINE)
    assert re.search(r"^USER 10001$", text, re.MULTILINE)
