"""The image gateway's image and manifests (docker/gateway.Dockerfile, k8s/image-gateway), validated with the rest of
k8s/ by tests/deploy/test_deployment.py (schemas, checkov, hadolint) and checked here against each other and the code:
its image tag, flags, ports and probes; its route beside Triton's; its HPA, budget and policy selecting its pods; its
gRPC target the servers' headless Service; no admin key anywhere near it."""

from __future__ import annotations

import json
import re

from starlette.routing import Route

from gateway import cli
from gateway.app import create_app
from gateway.settings import Settings
from tests.support.deployment import DOCKER, GATEWAY_DOCKERFILE, GATEWAY_K8S, dockerfile_entrypoint, find, labels_match

NAME = "image-gateway"


def gateway_container(objects):
    (container,) = find(objects, "Deployment", NAME)["spec"]["template"]["spec"]["containers"]
    return container


def test_the_image_tag_is_the_versions_env_one(objects, versions):
    assert gateway_container(objects)["image"] == versions["GATEWAY_IMAGE"]
    name, tag = versions["GATEWAY_IMAGE"].split(":")
    assert re.search(rf"- name: {re.escape(name)}\n\s+newTag: {re.escape(tag)}\n", (GATEWAY_K8S / "kustomization.yaml").read_text())


def test_the_image_runs_the_gateway_from_its_lock(versions):
    text = GATEWAY_DOCKERFILE.read_text()
    assert dockerfile_entrypoint(GATEWAY_DOCKERFILE) == ["python3", "-m", "gateway"]
    assert "--require-hashes --only-binary=:all: -r requirements/gateway.txt" in text
    assert re.search(r"^FROM python:3\.12-", text, re.MULTILINE), "the lock is resolved for Python 3.12"
    ignore = (DOCKER / "gateway.Dockerfile.dockerignore").read_text().splitlines()
    assert {"!requirements/gateway.txt", "!vision_serving/", "!gateway/"} <= set(ignore)
    assert "!builders/" not in ignore and "!devtools/" not in ignore
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, re.MULTILINE)
    exposed = re.findall(r"^EXPOSE (\d+)$", text, re.MULTILINE)
    assert cli.parse_args(json.loads(cmd)).port == int(exposed[0])


def test_the_flags_parse_and_reach_the_headless_grpc_service(objects):
    container = gateway_container(objects)
    settings = cli.parse_args(container["args"])
    assert settings.host == "0.0.0.0" and settings.fetch.enabled is False and settings.api_keys is None and settings.cors_origins == ()
    (port,) = container["ports"]
    assert port["containerPort"] == settings.port
    target = settings.triton_url.removeprefix("dns:///")
    host, _, grpc_port = target.partition(":")
    headless = find(objects, "Service", host)
    assert headless["spec"]["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]} == {"grpc": int(grpc_port)}
    server = find(objects, "Deployment", "vision-serving")
    assert labels_match(headless["spec"]["selector"], server["spec"]["template"]["metadata"]["labels"])


def test_the_gateway_holds_no_admin_key(objects):
    spec = find(objects, "Deployment", NAME)["spec"]["template"]["spec"]
    text = json.dumps(spec)
    assert "triton-admin" not in text and "ADMIN" not in text.upper() and "secretKeyRef" not in text
    assert spec["automountServiceAccountToken"] is False


def test_the_probes_are_routes_of_the_gateway(objects):
    container = gateway_container(objects)
    paths = {route.path for route in create_app(Settings()).routes if isinstance(route, Route)}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in paths and container[probe]["httpGet"]["port"] == "http", probe


def test_service_hpa_budget_policy_and_monitor_select_the_gateway_pods(objects):
    deployment = find(objects, "Deployment", NAME)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    server_labels = find(objects, "Deployment", "vision-serving")["spec"]["template"]["metadata"]["labels"]
    service = find(objects, "Service", NAME)
    assert labels_match(service["spec"]["selector"], labels) and not labels_match(service["spec"]["selector"], server_labels)
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"
    assert find(objects, "HorizontalPodAutoscaler", NAME)["spec"]["scaleTargetRef"]["name"] == NAME
    assert find(objects, "PodDisruptionBudget", NAME)["spec"]["selector"] == deployment["spec"]["selector"]
    policy = find(objects, "NetworkPolicy", NAME)
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    servers, dns = policy["spec"]["egress"]
    assert labels_match(servers["to"][0]["podSelector"]["matchLabels"], server_labels) and servers["ports"] == [
        {"port": 8001, "protocol": "TCP"}
    ]
    assert {p["port"] for p in dns["ports"]} == {53}
    monitor = find(objects, "ServiceMonitor", NAME)
    assert labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    # The servers' own objects do not select the gateway's pods.
    assert not labels_match(find(objects, "NetworkPolicy", "vision-serving")["spec"]["podSelector"]["matchLabels"], labels)


def test_the_route_sits_beside_tritons_on_the_http_listener(objects):
    route, triton_route = find(objects, "HTTPRoute", NAME), find(objects, "HTTPRoute", "vision-serving")
    assert route["spec"]["parentRefs"] == triton_route["spec"]["parentRefs"]
    (rule,) = route["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    assert backend["name"] == NAME and backend["port"] == find(objects, "Service", NAME)["spec"]["ports"][0]["port"]
    paths = {(m["path"]["type"], m["path"]["value"]) for m in rule["matches"]}
    assert ("PathPrefix", "/v1") in paths and ("Exact", "/openapi.json") in paths and ("Exact", "/") in paths
    assert not any(value.startswith(("/v2", "/metrics", "/healthz", "/readyz")) for _, value in paths)
    app_paths = {route.path for route in create_app(Settings()).routes}
    for kind, value in paths:
        assert any(path == value or (kind == "PathPrefix" and path.startswith(value)) for path in app_paths), value
