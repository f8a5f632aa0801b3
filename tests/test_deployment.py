"""Offline validation of the deployment: versions.env, docker/, k8s/.

No Docker engine, cluster or GPU is needed. What runs:
- ``kubectl kustomize k8s/`` (skipped, with the reason, only where kubectl is absent);
- every rendered object validated strictly against the Kubernetes 1.35 schemas
  (kubernetes-validate) or, for the Prometheus Operator CRDs, against the minimal
  schemas vendored in tests/deploy/ (an unknown kind fails; it never passes silently);
- ``checkov --skip-download`` on the rendered manifests and docker/, hadolint on
  both Dockerfiles;
- cross-checks between versions.env, the Dockerfiles, compose.yaml and the manifests
  (tags, ports, flags, shutdown timing, the HPA metric vs the adapter rule);
- the real local tritonserver started with the Deployment's own flags: it accepts
  them, the probe paths answer 200, the restricted APIs want the key, and every
  metric name used by the alerts, the adapter rule and the dashboard exists on its
  /metrics (except the GPU-only ones).

The tools run from their own venv, .build/deploy-check/ (requirements/deploy-check.txt),
created here when missing or stale: checkov's pins conflict with .venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devtools.loadgen import free_port

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
DOCKER = ROOT / "docker"
DOCKERFILES = {"server": DOCKER / "server.Dockerfile", "builder": DOCKER / "builder.Dockerfile"}
DEPLOY_ENV = ROOT / ".build" / "deploy-check"
DEPLOY_REQUIREMENTS = ROOT / "requirements" / "deploy-check.txt"
VALIDATE = ROOT / "tests" / "deploy" / "validate.py"
K8S_VERSION = "1.35.0"
STEPS = ("image_classifier_preprocess", "image_classifier_core", "image_classifier_postprocess")
# Metric names only a GPU build of Triton exports (Triton's DCGM-based GPU metrics) and
# Prometheus' own series: the local CPU server cannot show them.
GPU_ONLY_METRICS = {"nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"}
PROMETHEUS_BUILTINS = {"up"}
EXPECTED_CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
ADMIN_KEY = "test-admin-key"



# --------------------------------------------------------------------------- tools and inputs


def ensure_deploy_env() -> Path:
    """.build/deploy-check with requirements/deploy-check.txt installed (reinstalled when the file changes)."""
    stamp = DEPLOY_ENV / ".requirements.sha256"
    want = hashlib.sha256(DEPLOY_REQUIREMENTS.read_bytes()).hexdigest()
    python = DEPLOY_ENV / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return DEPLOY_ENV / "bin"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(DEPLOY_ENV)], check=True, capture_output=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(DEPLOY_REQUIREMENTS)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if install.returncode != 0:
        pytest.fail(f"could not install requirements/deploy-check.txt into {DEPLOY_ENV}:\n{install.stderr[-3000:]}")
    stamp.write_text(want + "\n")
    return DEPLOY_ENV / "bin"


@pytest.fixture(scope="session")
def tools() -> Path:
    return ensure_deploy_env()


def parse_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), f"versions.env: not KEY=VALUE: {line!r}"
        values[key] = value
    return values


@pytest.fixture(scope="session")
def versions() -> dict[str, str]:
    return parse_env_file(ROOT / "versions.env")


def kustomize(directory: Path) -> str:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` renders k8s/ (CI machines have it)")
    completed = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def validate_manifests(tools: Path, rendered: str) -> dict[str, Any]:
    completed = subprocess.run(
        [str(tools / "python"), str(VALIDATE), "manifests", K8S_VERSION], input=rendered, capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def load_yaml(tools: Path, path: Path) -> Any:
    completed = subprocess.run(
        [str(tools / "python"), str(VALIDATE), "yaml"], input=path.read_text(), capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


@pytest.fixture(scope="session")
def rendered() -> str:
    return kustomize(K8S)


@pytest.fixture(scope="session")
def manifests(tools, rendered) -> dict[str, Any]:
    return validate_manifests(tools, rendered)


@pytest.fixture(scope="session")
def objects(manifests) -> list[dict[str, Any]]:
    return manifests["objects"]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


@pytest.fixture(scope="session")
def pod_spec(objects) -> dict[str, Any]:
    return find(objects, "Deployment")["spec"]["template"]["spec"]


@pytest.fixture(scope="session")
def triton(pod_spec) -> dict[str, Any]:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "triton"]
    return container


def flag_values(arguments: list[str]) -> dict[str, str]:
    """``--name=value`` arguments as {name: value} (last one wins, as in tritonserver)."""
    values = {}
    for argument in arguments:
        assert argument.startswith("--") and "=" in argument, f"use --flag=value form: {argument!r}"
        name, _, value = argument.partition("=")
        values[name] = value
    return values


def dockerfile_entrypoint(path: Path) -> list[str]:
    text = path.read_text().replace("\\\n", " ")
    match = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"{path.name}: no exec-form ENTRYPOINT"
    return json.loads(match.group(1))


@pytest.fixture(scope="session")
def compose(tools) -> dict[str, Any]:
    (document,) = load_yaml(tools, DOCKER / "compose.yaml")
    return document


def tritonserver_binary() -> tuple[str, dict[str, str]]:
    from devtools.triton_server import _pytriton_dir, server_environment

    return str(_pytriton_dir() / "tritonserver" / "bin" / "tritonserver"), server_environment()


# --------------------------------------------------------------------------- versions


def test_versions_env_is_shell_sourceable_and_consistent(versions):
    shell = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; set -a; source {shlex.quote(str(ROOT / 'versions.env'))}; env -0"],
        capture_output=True,
        check=True,
    )
    sourced = dict(item.split("=", 1) for item in shell.stdout.decode().split("\0") if "=" in item)
    assert {k: sourced.get(k) for k in versions} == versions
    release = versions["TRITON_RELEASE"]
    assert re.fullmatch(r"\d\d\.\d\d", release)
    assert versions["TRITONSERVER_BASE_IMAGE"] == f"nvcr.io/nvidia/tritonserver:{release}-py3"
    assert versions["TENSORRT_BASE_IMAGE"] == f"nvcr.io/nvidia/tensorrt:{release}-py3"
    for key in ("SERVER_IMAGE", "BUILDER_IMAGE"):
        assert versions[key].split(":")[1].startswith(f"{release}-"), key
    assert (ROOT / versions["SERVE_REQUIREMENTS"]).is_file()


def test_dockerfiles_take_the_versions_env_tag(versions):
    for name, path in DOCKERFILES.items():
        text = path.read_text()
        assert re.search(rf"^ARG TRITON_RELEASE={re.escape(versions['TRITON_RELEASE'])}$", text, re.MULTILINE), path.name
        (base,) = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
        expected = versions["TRITONSERVER_BASE_IMAGE" if name == "server" else "TENSORRT_BASE_IMAGE"]
        assert base.replace("${TRITON_RELEASE}", versions["TRITON_RELEASE"]) == expected, path.name
        assert "${TRITON_RELEASE}" in base, f"{path.name}: the base tag must come from the build arg"
    assert re.search(rf"^ARG MODELOPT_VERSION={re.escape(versions['MODELOPT_VERSION'])}$", DOCKERFILES["builder"].read_text(), re.MULTILINE)
    assert re.search(rf"^ARG TORCH_INDEX_URL={re.escape(versions['TORCH_INDEX_URL'])}$", DOCKERFILES["builder"].read_text(), re.MULTILINE)


def test_compose_builds_with_versions_env(compose, versions):
    services = compose["services"]
    assert services["server"]["image"].startswith("${SERVER_IMAGE")
    assert services["builder"]["image"].startswith("${BUILDER_IMAGE")
    for name, service in services.items():
        args = service["build"]["args"]
        assert args["TRITON_RELEASE"].startswith("${TRITON_RELEASE"), name
        assert set(args) <= set(versions), f"{name}: build args not in versions.env: {set(args) - set(versions)}"
        assert service["build"]["dockerfile"] == f"docker/{name}.Dockerfile"
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert service["shm_size"]
    assert services["server"]["depends_on"]["builder"]["condition"] == "service_completed_successfully"
    assert "../model_repository:/models:ro" in services["server"]["volumes"]
    assert "../model_repository:/models" in services["builder"]["volumes"]


def test_k8s_images_carry_the_versions_env_tags(pod_spec, versions):
    images = {c["name"]: c["image"] for c in [*pod_spec["initContainers"], *pod_spec["containers"]]}
    assert images == {"build-plan": versions["BUILDER_IMAGE"], "verify-plan": versions["SERVER_IMAGE"], "triton": versions["SERVER_IMAGE"]}
    kustomization = (K8S / "kustomization.yaml").read_text()
    for key in ("SERVER_IMAGE", "BUILDER_IMAGE"):
        name, tag = versions[key].split(":")
        assert re.search(rf"- name: {re.escape(name)}\n\s+newTag: {re.escape(tag)}\n", kustomization), key


# --------------------------------------------------------------------------- schemas and policies


def test_every_object_validates(manifests):
    problems = [r for r in manifests["results"] if r["status"] != "ok"]
    assert not problems, "\n".join(f"{r['kind']}/{r['name']} ({r['apiVersion']}): {r['status']}: {r['detail']}" for r in problems)
    crds = {(r["apiVersion"], r["kind"]) for r in manifests["results"] if r["detail"].startswith("vendored")}
    assert crds == EXPECTED_CRDS
    kinds = {r["kind"] for r in manifests["results"]}
    assert {"Namespace", "PersistentVolumeClaim", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap"} <= kinds


def test_an_unknown_kind_or_a_bad_field_fails(tools):
    bad = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}], typo: 1}\n"
    statuses = [r["status"] for r in validate_manifests(tools, bad)["results"]]
    assert statuses == ["unknown", "invalid"]


def test_the_gpu_product_patch_renders_and_validates(tools, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(K8S / "patches" / "gpu-product-affinity.yaml", overlay)
    (overlay / "kustomization.yaml").write_text(f"resources:\n  - {os.path.relpath(K8S, overlay)}\npatches:\n  - path: gpu-product-affinity.yaml\n")
    result = validate_manifests(tools, kustomize(overlay))
    assert all(r["status"] == "ok" for r in result["results"])
    spec = find(result["objects"], "Deployment")["spec"]["template"]["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert spec["securityContext"]["runAsNonRoot"] is True  # the patch merges, it does not replace


def run_checkov(tools: Path, *target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools / "checkov"), "--skip-download", "--quiet", "--compact", *target], capture_output=True, text=True, timeout=600, check=False
    )


def test_checkov_passes_on_the_rendered_manifests(tools, rendered, objects, tmp_path):
    path = tmp_path / "rendered.yaml"
    path.write_text(rendered)
    completed = run_checkov(tools, "--framework", "kubernetes", "-f", str(path))
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]
    skips = {k: v for o in objects for k, v in o["metadata"].get("annotations", {}).items() if k.startswith("checkov.io/skip")}
    for value in skips.values():
        check, _, reason = value.partition("=")
        assert re.fullmatch(r"CKV2?_K8S_\d+", check) and len(reason) > 30, f"a skip needs its reason: {value!r}"


def test_checkov_passes_on_docker(tools):
    completed = run_checkov(tools, "--framework", "dockerfile", "-d", str(DOCKER))
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]


def test_hadolint_passes_on_both_dockerfiles(tools):
    for path in DOCKERFILES.values():
        completed = subprocess.run([str(tools / "hadolint"), str(path)], capture_output=True, text=True, timeout=120, check=False)
        assert completed.returncode == 0 and not completed.stdout.strip(), completed.stdout
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if "hadolint ignore=" in line:
                assert index > 0 and lines[index - 1].startswith("#") and "hadolint" not in lines[index - 1], f"{path.name}:{index + 1}: say why"


# --------------------------------------------------------------------------- cross-checks


def test_every_server_flag_is_known_to_tritonserver(triton, compose):
    binary, env = tritonserver_binary()
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, env=env, timeout=60, check=False)
    known = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text.stdout + help_text.stderr, re.MULTILINE))
    assert len(known) > 50, "tritonserver --help printed no flags"
    used = {
        "deployment": triton["command"][1:] + triton["args"],
        "server.Dockerfile": dockerfile_entrypoint(DOCKERFILES["server"])[1:],
        "compose.yaml": compose["services"]["server"]["command"],
    }
    assert triton["command"] == ["tritonserver"] and dockerfile_entrypoint(DOCKERFILES["server"])[0] == "tritonserver"
    for where, arguments in used.items():
        unknown = set(flag_values(arguments)) - known
        assert not unknown, f"{where}: tritonserver does not know {sorted(unknown)}"


def test_production_flags_are_the_same_everywhere(triton, compose):
    deployment = flag_values(triton["args"])
    image = flag_values(dockerfile_entrypoint(DOCKERFILES["server"])[1:])
    assert deployment["--model-control-mode"] == image["--model-control-mode"] == "none"
    assert deployment["--model-repository"] == image["--model-repository"] == "/models"
    assert deployment["--metrics-config"] == image["--metrics-config"] == "summary_latencies=true"
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        apis, _, header = deployment[flag].partition(":")
        assert {"model-repository", "shared-memory"} <= set(apis.split(",")) and header == "X-Triton-Admin-Key=$(TRITON_ADMIN_KEY)"
        assert flag_values(compose["services"]["server"]["command"])[flag].startswith(apis + ":X-Triton-Admin-Key=")
    for flag in ("--exit-timeout-secs", "--http-port", "--grpc-port", "--metrics-port", "--strict-readiness"):
        assert deployment[flag] == image[flag], flag


def test_ports_agree_between_server_manifests_and_compose(objects, triton, compose):
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    flags = flag_values(triton["args"])
    assert ports == {"http": int(flags["--http-port"]), "grpc": int(flags["--grpc-port"]), "metrics": int(flags["--metrics-port"])}
    exposed = {int(p) for p in re.findall(r"^EXPOSE\s+(.+)$", DOCKERFILES["server"].read_text(), re.MULTILINE)[0].split()}
    assert exposed == set(ports.values())
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert triton[probe]["httpGet"]["port"] in ("http", ports["http"]), probe
    for service in (o for o in objects if o["kind"] == "Service"):
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert ports.get(target, target) == port["port"] and port["name"] == target, f"{service['metadata']['name']}: {port}"
    assert {p["name"] for p in find(objects, "Service", "image-classifier")["spec"]["ports"]} == {"http", "grpc"}
    assert {p["name"] for p in find(objects, "Service", "image-classifier-metrics")["spec"]["ports"]} == {"metrics"}
    (endpoint,) = find(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    policy_ports = {p["port"] for rule in find(objects, "NetworkPolicy")["spec"]["ingress"] for p in rule["ports"]}
    assert policy_ports == set(ports.values())
    published = {int(mapping.rsplit(":", 1)[1]) for mapping in compose["services"]["server"]["ports"]}
    assert published == set(ports.values())
    assert "127.0.0.1:8002:8002" in compose["services"]["server"]["ports"], "metrics stay local on a Docker host"


def test_shutdown_fits_in_the_grace_period(pod_spec, triton, compose):
    sleep = triton["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    exit_timeout = int(flag_values(triton["args"])["--exit-timeout-secs"])
    assert int(sleep[1]) + exit_timeout < pod_spec["terminationGracePeriodSeconds"]
    assert int(compose["services"]["server"]["stop_grace_period"].rstrip("s")) > exit_timeout


def test_pod_security_resources_and_shm(pod_spec, triton):
    pod = pod_spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0 and pod["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod_spec["automountServiceAccountToken"] is False
    for container in [*pod_spec["initContainers"], *pod_spec["containers"]]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["capabilities"]["drop"] == ["ALL"], container["name"]
        resources = container["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1, container["name"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"]), container["name"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    (shm,) = [m for m in triton["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory" and volumes[shm["name"]]["emptyDir"]["sizeLimit"]
    assert all(m.get("readOnly") for m in triton["volumeMounts"] if m["mountPath"] == "/models")
    build = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")
    script = " ".join(build["args"])
    assert "build-engine" in script and "--cache-dir /store/plans" in script and "verify-plan" in script
    verify = next(c for c in pod_spec["initContainers"] if c["name"] == "verify-plan")
    assert verify["command"] == ["python3", "-m", "builders.tensorrt_engine", "verify-plan", "--repository", "/models"]
    assert [c["name"] for c in pod_spec["initContainers"]] == ["build-plan", "verify-plan"]


def test_hpa_scales_on_the_adapter_rule_for_the_core_model(objects, tools, tmp_path):
    hpa = find(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert {"scaleUp", "scaleDown"} <= set(hpa["spec"]["behavior"])
    assert hpa["spec"]["scaleTargetRef"]["name"] == find(objects, "Deployment")["metadata"]["name"]
    config = find(objects, "ConfigMap", "prometheus-adapter-image-classifier")["data"]["config.yaml"]
    path = tmp_path / "adapter.yaml"
    path.write_text(config)
    (adapter,) = load_yaml(tools, path)
    (rule,) = adapter["rules"]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    assert 'model="image_classifier_core"' in rule["seriesQuery"] and 'model="image_classifier_core"' in rule["metricsQuery"]
    assert "image_classifier" not in rule["metricsQuery"]  # not the ensemble (server#8979)
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == find(objects, "Deployment")["spec"]["selector"]
    assert hpa["spec"]["minReplicas"] >= 2, "with one replica the PDB would block every drain"


def prometheus_rules(objects) -> list[dict[str, Any]]:
    return [rule for group in find(objects, "PrometheusRule")["spec"]["groups"] for rule in group["rules"]]


def test_alerts_cover_the_thresholds_and_have_runbooks(objects):
    rules = prometheus_rules(objects)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and len(rule["annotations"]["runbook"]) > 150, rule["alert"]
    expressions = " ".join(rule["expr"] for rule in rules)
    for needle in ("< 0.995", "> 50000", "> 100000", "nv_inference_request_failure", "nv_gpu_utilization", "nv_gpu_memory_used_bytes"):
        assert needle in expressions, needle
    assert 'quantile="0.95"' in expressions
    for rule in rules:
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]


def dashboard(objects) -> dict[str, Any]:
    return json.loads(find(objects, "ConfigMap", "image-classifier-dashboard")["data"]["image-classifier.json"])


def test_dashboard_shows_every_step(objects):
    board = dashboard(objects)
    expressions = [t["expr"] for p in board["panels"] for t in p["targets"]]
    joined = " ".join(expressions)
    for metric in ("nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us", "nv_inference_request_duration_us", "nv_inference_exec_count", "nv_inference_queue_summary_us"):
        assert metric in joined, metric
    assert 'model=~"preprocess|core|postprocess"' in joined
    assert any("nv_inference_count" in e and "nv_inference_exec_count" in e for e in expressions), "batch size panel"


def used_metric_names(objects) -> set[str]:
    texts = [r["expr"] for r in prometheus_rules(objects)]
    texts.append(find(objects, "ConfigMap", "prometheus-adapter-image-classifier")["data"]["config.yaml"])
    texts += [t["expr"] for p in dashboard(objects)["panels"] for t in p["targets"]]
    names = set()
    for text in texts:
        names |= set(re.findall(r"\b(nv_[a-z_]+)\b", text))
        names |= {"up"} & set(re.findall(r"\b(up)\{", text))
    return names


# --------------------------------------------------------------------------- the real local server with the production flags


@pytest.fixture(scope="module")
def production_server(triton, built_repository, tmp_path_factory):
    """The local tritonserver 2.51 (CPU core) started with the Deployment's own flags."""
    from devtools.triton_server import LocalTritonServer

    env = {"TRITON_ADMIN_KEY": ADMIN_KEY}
    local = {"--model-repository", "--http-port", "--grpc-port", "--metrics-port", "--exit-timeout-secs"}
    arguments = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in triton["args"] if a.split("=", 1)[0] not in local]
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_repository=built_repository,
        exit_timeout_secs=int(flag_values(triton["args"])["--exit-timeout-secs"]),
        extra_args=arguments,
        log_file=tmp_path_factory.mktemp("production-flags") / "tritonserver.log",
    )
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        yield server
    finally:
        server.stop()


def http_status(url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.integration
def test_probe_paths_answer_200_on_the_real_server(production_server, triton):
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = triton[probe]["httpGet"]["path"]
        assert http_status(f"http://{production_server.http_url}{path}") == 200, probe


@pytest.mark.integration
def test_restricted_apis_want_the_admin_key(production_server):
    url = f"http://{production_server.http_url}/v2/repository/index"
    assert http_status(url, "POST", data=b"{}") == 403
    assert http_status(url, "POST", headers={"X-Triton-Admin-Key": ADMIN_KEY}, data=b"{}") == 200
    assert http_status(f"http://{production_server.http_url}/v2/models/image_classifier") == 200  # metadata stays open
    unload = f"http://{production_server.http_url}/v2/repository/models/image_classifier_core/unload"
    assert http_status(unload, "POST", headers={"X-Triton-Admin-Key": ADMIN_KEY}, data=b"{}") != 200  # model control is off


@pytest.mark.integration
def test_metric_names_used_exist_on_the_real_server(production_server, objects, photo_bytes):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(production_server.http_url)
    image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo_bytes["coffee"]]], dtype=np.object_))
    client.infer("image_classifier", [image])
    with urllib.request.urlopen(f"http://localhost:{production_server.metrics_port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    exported = set(re.findall(r"^(nv_[a-z_]+?)(?:_count|_sum)?[{ ]", exposition, re.MULTILINE))
    exported |= set(re.findall(r"^# TYPE (nv_[a-z_]+) ", exposition, re.MULTILINE))
    used = used_metric_names(objects)
    assert used & GPU_ONLY_METRICS == GPU_ONLY_METRICS and used & PROMETHEUS_BUILTINS == PROMETHEUS_BUILTINS
    missing = used - GPU_ONLY_METRICS - PROMETHEUS_BUILTINS - exported
    assert not missing, f"not on the server's /metrics: {sorted(missing)}"
    for step in STEPS:
        assert f'nv_inference_queue_summary_us{{model="{step}",version="1",quantile="0.95"}}' in exposition
