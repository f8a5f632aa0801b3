"""Offline validation of the deployment: versions.env, docker/, k8s/ and its canary overlay.

No Docker engine, cluster or GPU is needed. What runs:
- ``kubectl kustomize k8s/`` and ``k8s/overlays/canary`` (skipped, with the reason, only
  where kubectl is absent);
- every rendered object validated strictly against the Kubernetes 1.35 schemas
  (kubernetes-validate) or, for the Prometheus Operator and Gateway API CRDs, against the
  schemas vendored in tests/deploy/ (an unknown kind fails; it never passes silently);
- ``checkov --skip-download`` on the rendered manifests and docker/, hadolint on
  every Dockerfile;
- the Gateway routes, the tracks (stable, canary) and their Services, route weights,
  HPA/PDB/NetworkPolicy/ServiceMonitor selectors, and the contract with devtools.canary;
- the model image's content, staged from the built repository (devtools.model_image),
  is what the local server below serves;
- cross-checks between versions.env, the Dockerfiles, compose.yaml and the manifests
  (tags, ports, flags, shutdown timing, the HPA metric vs the adapter rule);
- pipelines are never named in docker/ or k8s/: the server's entry script
  (docker/tritonserver-pipelines.sh) and the builder's (docker/build_artifacts.sh) find
  them (folders with a pipeline.toml), run here against the real model_repository/ with
  fake `tritonserver`/`python` executables; the monitoring selects models by suffix;

The tools run from their own venv, .build/deploy-check/ (requirements/deploy-check.txt),
created here when missing or stale: checkov's pins conflict with .venv."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools import model_image
from tests.support.deployment import (
    BUILD_SCRIPT,
    CANARY,
    CORE_SELECTOR,
    DOCKER,
    DOCKERFILES,
    ENSEMBLE_SELECTOR,
    ENTRY_COMMAND,
    ENTRY_SCRIPT,
    EXPECTED_CRDS,
    GATEWAY_DOCKERFILE,
    K8S,
    LIVENESS_COMMAND,
    LIVENESS_SCRIPT,
    MODELS_DOCKERFILE,
    NVIDIA_ENTRYPOINT,
    PIPELINES,
    ROOT,
    ROOT_FLAG,
    STEP_SELECTOR,
    STREAMS_DOCKERFILE,
    TRACKS,
    VALIDATE,
    alert_rules,
    dashboard,
    dashboard_expressions,
    deployment_container,
    dockerfile_entrypoint,
    find,
    flag_values,
    kustomize,
    labels_match,
    load_yaml,
    prometheus_rules,
    tritonserver_arguments,
    tritonserver_binary,
    validate_manifests,
)
from vision_serving import layout, model_config


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
    assert not {key for key in versions if key.endswith("_BASE_IMAGE")}, "the Dockerfiles take TRITON_RELEASE alone: no image to edit here"
    for key in ("SERVER_IMAGE", "BUILDER_IMAGE"):
        assert versions[key].split(":")[1].startswith(f"{release}-"), key
    assert (ROOT / versions["SERVE_REQUIREMENTS"]).is_file()


def test_dockerfiles_take_the_versions_env_tag(versions):
    for name, path in DOCKERFILES.items():
        text = path.read_text()
        assert re.search(rf"^ARG TRITON_RELEASE={re.escape(versions['TRITON_RELEASE'])}$", text, re.MULTILINE), path.name
        *_, base = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)  # the last stage is the image (server: after the TensorRT check's)
        expected = f"nvcr.io/nvidia/{'tritonserver' if name == 'server' else 'tensorrt'}:{versions['TRITON_RELEASE']}-py3"
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
    # Both run their image's entrypoint: the server's entry script finds the pipelines, the builder's builds them all.
    assert "entrypoint" not in services["server"] and "entrypoint" not in services["builder"]
    assert not any(a.startswith("--model-repository") for a in services["server"]["command"])


def test_k8s_images_carry_the_versions_env_tags(pod_spec, versions):
    images = {c["name"]: c["image"] for c in [*pod_spec["initContainers"], *pod_spec["containers"]]}
    assert images == {
        "models": versions["MODELS_IMAGE"],
        "build-plan": versions["BUILDER_IMAGE"],
        "verify-plan": versions["SERVER_IMAGE"],
        "triton": versions["SERVER_IMAGE"],
    }
    # One place for the images, shared by the base and the canary overlay's Deployment.
    kustomization = (K8S / "server" / "kustomization.yaml").read_text()
    assert "images:" not in (K8S / "kustomization.yaml").read_text()
    for key in ("SERVER_IMAGE", "BUILDER_IMAGE", "MODELS_IMAGE"):
        name, tag = versions[key].split(":")
        assert re.search(rf"- name: {re.escape(name)}\n\s+newTag: {re.escape(tag)}\n", kustomization), key


def test_every_object_validates(manifests):
    problems = [r for r in manifests["results"] if r["status"] != "ok"]
    assert not problems, "\n".join(f"{r['kind']}/{r['name']} ({r['apiVersion']}): {r['status']}: {r['detail']}" for r in problems)
    crds = {(r["apiVersion"], r["kind"]) for r in manifests["results"] if r["detail"].startswith("vendored")}
    assert crds == EXPECTED_CRDS
    kinds = {r["kind"] for r in manifests["results"]}
    assert {"Gateway", "GRPCRoute", "HTTPRoute"} <= kinds
    assert {
        "Namespace",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ConfigMap",
    } <= kinds


def test_an_unknown_kind_or_a_bad_field_fails(tools):
    bad = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}], typo: 1}\n"
    # The Gateway API schemas are the CRDs' own, made strict: a misspelt field fails (an API server would drop it).
    route = "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: r}\nspec: {rules: [{backendRefs: [{name: s, port: 1, wieght: 5}]}]}\n"
    weight = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {rules: [{backendRefs: [{name: s, port: 1, weight: -1}]}]}\n"
    statuses = [r["status"] for r in validate_manifests(tools, "---\n".join([bad, route, weight]))["results"]]
    assert statuses == ["unknown", "invalid", "invalid", "invalid"]


def test_vendored_gateway_api_schemas_match_their_readme():
    """tests/deploy/README.md records each vendored file's release, source path and sha256."""
    readme = (VALIDATE.parent / "README.md").read_text()
    rows = re.findall(r"^\| (\S+\.json) \| (\S+) \| ([0-9a-f]{64}) \| ([0-9a-f]{64}) \|$", readme, re.MULTILINE)
    vendored = sorted(p.name for p in VALIDATE.parent.glob("*-gateway.networking.k8s.io-*.json"))
    assert sorted(row[0] for row in rows) == vendored and len(vendored) == 5
    for name, source, _, sha in rows:
        assert hashlib.sha256((VALIDATE.parent / name).read_bytes()).hexdigest() == sha, name
        assert source.startswith("config/crd/standard/gateway.networking.k8s.io_"), source
    assert "Release **v1.6.1**" in readme


def test_the_gpu_product_patch_renders_and_validates(tools, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(K8S / "patches" / "gpu-product-affinity.yaml", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"resources:\n  - {os.path.relpath(K8S, overlay)}\npatches:\n  - path: gpu-product-affinity.yaml\n"
    )
    result = validate_manifests(tools, kustomize(overlay))
    assert all(r["status"] == "ok" for r in result["results"])
    spec = find(result["objects"], "Deployment", "vision-serving")["spec"]["template"]["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert spec["securityContext"]["runAsNonRoot"] is True  # the patch merges, it does not replace


def run_checkov(tools: Path, *target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools / "checkov"), "--skip-download", "--quiet", "--compact", *target],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
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


def test_hadolint_passes_on_every_dockerfile(tools):
    assert sorted(DOCKER.glob("*.Dockerfile")) == sorted([*DOCKERFILES.values(), MODELS_DOCKERFILE, GATEWAY_DOCKERFILE, STREAMS_DOCKERFILE])
    for path in [*DOCKERFILES.values(), MODELS_DOCKERFILE, GATEWAY_DOCKERFILE, STREAMS_DOCKERFILE]:
        completed = subprocess.run([str(tools / "hadolint"), str(path)], capture_output=True, text=True, timeout=120, check=False)
        assert completed.returncode == 0 and not completed.stdout.strip(), completed.stdout
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if "hadolint ignore=" in line:
                assert index > 0 and lines[index - 1].startswith("#") and "hadolint" not in lines[index - 1], (
                    f"{path.name}:{index + 1}: say why"
                )


def test_every_server_flag_is_known_to_tritonserver(triton, compose):
    binary, env = tritonserver_binary()
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, env=env, timeout=60, check=False)
    known = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text.stdout + help_text.stderr, re.MULTILINE))
    assert len(known) > 50, "tritonserver --help printed no flags"
    used = {
        "deployment": triton["command"][2:] + triton["args"],
        "server.Dockerfile": dockerfile_entrypoint(DOCKERFILES["server"])[2:],
        "compose.yaml": compose["services"]["server"]["command"],
    }
    assert triton["command"] == [NVIDIA_ENTRYPOINT, ENTRY_COMMAND] == dockerfile_entrypoint(DOCKERFILES["server"])[:2]
    assert "--model-repository" in known and ROOT_FLAG not in known
    for where, arguments in used.items():
        unknown = set(flag_values(tritonserver_arguments(arguments))) - known
        assert not unknown, f"{where}: tritonserver does not know {sorted(unknown)}"
        assert "--model-repository" not in flag_values(arguments), f"{where}: the entry script adds one per pipeline"


def test_the_server_image_installs_the_entry_script():
    text = DOCKERFILES["server"].read_text()
    assert re.search(rf"^COPY --chmod=0755 docker/{ENTRY_SCRIPT.name} /usr/local/bin/{ENTRY_COMMAND}$", text, re.MULTILINE)
    ignore = (DOCKER / "server.Dockerfile.dockerignore").read_text().splitlines()
    assert f"!docker/{ENTRY_SCRIPT.name}" in ignore, "the build context must include the entry script"
    assert re.search(rf"^COPY --chmod=0755 docker/{LIVENESS_SCRIPT.name} /usr/local/bin/{LIVENESS_COMMAND}$", text, re.MULTILINE)
    assert f"!docker/{LIVENESS_SCRIPT.name}" in ignore, "the build context must include the liveness script"
    builder_ignore = (DOCKER / "builder.Dockerfile.dockerignore").read_text().splitlines()
    assert f"!docker/{BUILD_SCRIPT.name}" in builder_ignore
    assert dockerfile_entrypoint(DOCKERFILES["builder"]) == [NVIDIA_ENTRYPOINT, "bash", f"docker/{BUILD_SCRIPT.name}"]


def test_every_command_in_nvidias_images_runs_behind_nvidias_entrypoint():
    """The driver check and CUDA forward compatibility (NVIDIA's entrypoint.d) run before anything in the builder and server
    images: their ENTRYPOINTs, and every documented `--entrypoint` of a compose service (the GPU tests' command)."""
    for image in ("builder", "server"):
        assert dockerfile_entrypoint(DOCKERFILES[image])[0] == NVIDIA_ENTRYPOINT, image
    documented = [*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("tests/gpu/**/*.py")]
    commands = [(path, line) for path in documented for line in path.read_text().splitlines() if "compose.yaml run" in line]
    assert commands, "no documented compose run"
    for path, line in commands:
        assert f"--entrypoint {NVIDIA_ENTRYPOINT} " in line, f"{path.relative_to(ROOT)}: {line.strip()}"


def test_production_flags_are_the_same_everywhere(triton, compose):
    deployment = flag_values(triton["args"])
    image = flag_values(dockerfile_entrypoint(DOCKERFILES["server"])[2:])
    assert deployment["--model-control-mode"] == image["--model-control-mode"] == "none"
    assert deployment[ROOT_FLAG] == image[ROOT_FLAG] == "/models"
    assert deployment["--metrics-config"] == image["--metrics-config"] == "summary_latencies=true"
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        apis, _, header = deployment[flag].partition(":")
        assert {"model-repository", "shared-memory"} <= set(apis.split(",")) and header == "x-triton-admin-key=$(TRITON_ADMIN_KEY)"
        assert flag_values(compose["services"]["server"]["command"])[flag].startswith(apis + ":x-triton-admin-key=")
        # gRPC sends the key as metadata "triton-grpc-protocol-<name>", and gRPC metadata keys are lower case:
        # with any upper-case letter in <name> no gRPC client could ever send the key (measured on 2.51).
        name = header.partition("=")[0]
        assert name == name.lower(), f"{flag}: the key name {name!r} must be lower case"
    for flag in ("--exit-timeout-secs", "--http-port", "--grpc-port", "--metrics-port", "--strict-readiness", "--exit-on-error"):
        assert deployment[flag] == image[flag], flag


def test_ports_agree_between_server_manifests_and_compose(objects, triton, compose):
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    flags = flag_values(triton["args"])
    assert ports == {"http": int(flags["--http-port"]), "grpc": int(flags["--grpc-port"]), "metrics": int(flags["--metrics-port"])}
    exposed = {int(p) for p in re.findall(r"^EXPOSE\s+(.+)$", DOCKERFILES["server"].read_text(), re.MULTILINE)[0].split()}
    assert exposed == set(ports.values())
    for probe in ("startupProbe", "readinessProbe"):
        assert triton[probe]["httpGet"]["port"] in ("http", ports["http"]), probe
    assert flag_values(triton["livenessProbe"]["exec"]["command"][1:])["--http-port"] == str(ports["http"])
    for service in (
        o for o in objects if o["kind"] == "Service" and o["metadata"]["labels"]["app.kubernetes.io/component"] != "image-gateway"
    ):
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert ports.get(target, target) == port["port"] and port["name"] == target, f"{service['metadata']['name']}: {port}"
    assert {p["name"] for p in find(objects, "Service", "vision-serving")["spec"]["ports"]} == {"http", "grpc"}
    assert {p["name"] for p in find(objects, "Service", "vision-serving-metrics")["spec"]["ports"]} == {"metrics"}
    (endpoint,) = find(objects, "ServiceMonitor", "vision-serving")["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    policy_ports = {p["port"] for rule in find(objects, "NetworkPolicy", "vision-serving")["spec"]["ingress"] for p in rule["ports"]}
    assert policy_ports == set(ports.values())
    published = {int(mapping.rsplit(":", 1)[1]) for mapping in compose["services"]["server"]["ports"]}
    assert published == set(ports.values())
    assert "127.0.0.1:8002:8002" in compose["services"]["server"]["ports"], "metrics stay local on a Docker host"


def test_liveness_runs_the_stub_check_with_its_timing(triton):
    """An exec probe (a dead Python stub leaves /v2/health/live green): the installed script, a
    timeout above the script's own 3 s HTTP wait, and a restart within 30 s of a stub's death."""
    probe = triton["livenessProbe"]
    assert "httpGet" not in probe and probe["exec"]["command"][0] == LIVENESS_COMMAND
    assert probe["timeoutSeconds"] > 3
    assert probe["failureThreshold"] >= 2 and probe["periodSeconds"] * probe["failureThreshold"] <= 30
    assert "periodSeconds" in probe and "failureThreshold" in probe


def test_the_liveness_script_fails_in_one_clear_line(tmp_path):
    gone = run_script(LIVENESS_SCRIPT, ["--pid", "999999999", "--state", str(tmp_path / "state")], tmp_path / "bin")
    assert gone.returncode == 1 and gone.stderr.strip() == "triton-liveness: tritonserver (pid 999999999) is not running"
    unknown = run_script(LIVENESS_SCRIPT, ["--bogus"], tmp_path / "bin")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


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
        gpus = 0 if container["name"] == "models" else 1  # the model image's copy needs no GPU
        assert resources["requests"].get("nvidia.com/gpu", 0) == resources["limits"].get("nvidia.com/gpu", 0) == gpus, container["name"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"]), container["name"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    (shm,) = [m for m in triton["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory" and volumes[shm["name"]]["emptyDir"]["sizeLimit"]
    assert all(m.get("readOnly") for m in triton["volumeMounts"] if m["mountPath"] == "/models")
    build = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")
    script = " ".join(build["args"])
    assert 'python -m builders build-engine --model-repository /models --cache-dir "$cache"' in script and "cache=/plan-cache" in script
    assert "python -m builders verify-plan --model-repository /models --deserialize" in script
    assert "--pipeline" not in script and "--onnx" not in script
    assert [c["name"] for c in pod_spec["initContainers"]] == ["models", "build-plan", "verify-plan"]
    verify = next(c for c in pod_spec["initContainers"] if c["name"] == "verify-plan")
    assert verify["command"] == [NVIDIA_ENTRYPOINT, "python3", "-m", "builders", "verify-plan", "--model-repository", "/models"]
    assert build["command"] == [NVIDIA_ENTRYPOINT, "bash", "-c"]


def memory_gib(quantity: str) -> float:
    units = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1.0, "Ti": 2**10}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_the_servers_cpu_and_memory_follow_from_the_sizing_and_the_measured_costs(pod_spec, triton, compose):
    """CPU request = limit (the sizing reads the limit; the scheduler reserves what is sized for); /dev/shm holds what
    the planner computes travels through it for that limit (every Python step instance at its largest batch of its
    largest measured request), and compose's for the most instances any CPU count gives; memory covers the planner's
    figure for that limit from the committed measurements (of every served pipeline), the /dev/shm volume and the
    CUDA/TensorRT host allowance docs/sizing.md names."""
    from benchmarks import capacity

    resources = triton["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"]
    vcpus = capacity.deployment_vcpus()
    assert vcpus == capacity.cpu_quantity(resources["limits"]["cpu"])
    measured = capacity.load()
    served = {pipeline.name: pipeline for pipeline in layout.pipelines(layout.MODEL_REPOSITORY)}
    unmeasured = sorted(set(served) - set(measured["pipelines"]))
    if unmeasured:  # a pipeline just added: reported, and the pod's figures checked for the measured ones
        warnings.warn(f"{capacity.RESULTS} has no costs of {unmeasured}: run python -m benchmarks.capacity --measure", stacklevel=1)
    for name, pipeline in served.items():
        if name in unmeasured:
            continue  # the batch sizes the shared memory was planned with are the configs'
        for step, instance in measured["pipelines"][name]["instances"].items():
            config = model_config.load_config(pipeline.model_dir(step))
            assert instance["max_batch_size"] == config.max_batch_size, f"{name} {step}: run python -m benchmarks.capacity --measure-shm"
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    (shm,) = [m for m in triton["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    dshm = memory_gib(volumes[shm["name"]]["emptyDir"]["sizeLimit"])
    assert capacity.dshm_gib(measured, vcpus) <= dshm <= 1.5 * capacity.dshm_gib(measured, vcpus) + 1
    most = capacity.dshm_gib(measured, 1024)  # every step at its max_instances
    assert most <= float(compose["services"]["server"]["shm_size"].removesuffix("gb")) <= 1.5 * most + 1
    needed = capacity.memory_gib_per_pod(measured, vcpus) + dshm + capacity.CUDA_HOST_GIB
    assert memory_gib(resources["requests"]["memory"]) == memory_gib(resources["limits"]["memory"]) >= needed
    assert memory_gib(resources["limits"]["memory"]) <= 2 * needed, "far more than the pod needs: the node's memory is wasted"


def test_the_recognizer_s_instances_are_the_capacity_planner_s_choice():
    """Where no GPU measured it, a model whose instance runs several profiles has the instances the planner chooses
    from the committed GPU memory estimate; that estimate is of the configs and profiles as they are now."""
    from benchmarks import capacity
    from builders.tensorrt import models, profiles

    estimated = capacity.load_gpu_memory()
    assert estimated is not None, f"{capacity.GPU_MEMORY}: run python -m benchmarks.capacity --gpu-memory"
    recorded = {model["model"]: model for model in estimated["models"]}
    for pipeline in layout.pipelines(layout.MODEL_REPOSITORY):
        for role in models.engine_roles(pipeline):
            config = models.load_core_config(pipeline, role)
            model = recorded.get(config.name)
            if model is None:  # a pipeline just added: reported, not failed
                warnings.warn(
                    f"{config.name} is not in {capacity.GPU_MEMORY.name}: run python -m benchmarks.capacity --gpu-memory", stacklevel=1
                )
                continue
            ranges = models.model_profiles(pipeline, role, config)
            shapes = [list(profile[0].max) for profile in profiles.optimization_profiles(config, None, ranges)]
            assert [p["max_shape"] for p in model["profiles"]] == shapes, f"{config.name}: profiles changed since the estimate"
            assert model["instances"] == sum(group.count for group in config.instance_group), config.name
    chosen = capacity.choose_instances(estimated["models"])
    assert chosen["text_reader_core_recognizer"] == recorded["text_reader_core_recognizer"]["instances"] == 2
    assert all(recorded[name]["instances"] == count for name, count in chosen.items())


def builder_commands(script: str) -> list[list[str]]:
    """The `python -m builders ...` commands of a shell script, as argument lists."""
    joined = script.replace("\\\n", " ")
    found = (re.match(r"\s*(?:if )?(?:timeout \S+ )?(python3? -m builders(\.tensorrt)? .*)", line) for line in joined.splitlines())
    return [shlex.split(match.group(1).removesuffix("; then :; else"))[3:] for match in found if match]


def test_init_containers_build_and_verify_every_pipeline(pod_spec):
    """No --pipeline (every pipeline in turn), no --onnx/--output (each core's ONNX from its
    precision ladder, its plan at <pipeline>_core/1/model.plan), the new --model-repository."""
    build = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")
    verify = next(c for c in pod_spec["initContainers"] if c["name"] == "verify-plan")
    script = build["args"][0]
    commands = [*builder_commands(script), verify["command"][4:]]
    assert [c[0] for c in commands] == ["build-engine", "verify-plan", "verify-plan"]
    for command in commands:
        options = flag_options(command[1:])
        assert options["--model-repository"] == "/models", command
        assert not {"--repository", "--pipeline", "--onnx", "--output", "--plan"} & set(options), command
    assert flag_options(commands[0][1:])["--cache-dir"] == "$cache"  # /plan-cache, or /plan-scratch when not writable
    assert "--deserialize" in commands[1]
    assert "/models/*/pipeline.toml" in script, "build-plan stops with one line when the model image holds no pipeline"
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in build["volumeMounts"]}
    # The shared cache by default (more than one replica): a pod on a GPU and TensorRT the cluster has seen copies its
    # plans; the scratch volume stays the pod's own. Only build-plan mounts the claim.
    assert (
        mounts["/plan-cache"]["persistentVolumeClaim"] == {"claimName": "plan-cache"} and mounts["/plan-scratch"]["emptyDir"]["sizeLimit"]
    )
    assert not any("persistentVolumeClaim" in volumes[m["name"]] for c in pod_spec["containers"] for m in c["volumeMounts"])


def test_the_models_come_from_the_model_image(pod_spec):
    """The first init container copies the model image's repository (docker/models.Dockerfile's
    COPY destination) into the pod's /models; nothing of the models is on the PVC any more."""
    models = pod_spec["initContainers"][0]
    assert models["name"] == "models" and models["image"].split(":")[0] == "vision-serving/models"
    assert models["command"] == ["cp", "-R", "/model_repository/.", "/models/"]
    (mount,) = models["volumeMounts"]
    assert mount["mountPath"] == "/models" and not mount.get("readOnly")
    copies = re.findall(r"^COPY\s+(\S+)\s+(\S+)$", MODELS_DOCKERFILE.read_text(), re.MULTILINE)
    assert copies == [(f"{model_image.STAGED_REPOSITORY}/", "/model_repository/")]
    assert re.search(r"^FROM busybox:\d+\.\d+\.\d+$", MODELS_DOCKERFILE.read_text(), re.MULTILINE), "cp comes from a pinned busybox"


def run_init_containers(
    pod_spec: dict[str, Any],
    image: Path,
    models: Path,
    cache: Path,
    fake_bin: Path,
    scratch: Path | None = None,
    as_uid: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """The models and build-plan init containers' commands with the image and the volumes moved under tmp_path."""
    copy = [
        part.replace("/model_repository", str(image)).replace("/models", str(models)) for part in pod_spec["initContainers"][0]["command"]
    ]
    subprocess.run(copy, check=True, timeout=120)
    (script,) = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")["args"]
    local = script.replace("/plan-cache", str(cache)).replace("/plan-scratch", str(scratch or cache.parent / "scratch"))
    local = local.replace("/models", str(models))
    environment = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": "/tmp"}
    command = ["bash", "-c", local]
    if as_uid is not None:  # as the pod's user (root writes anywhere)
        command = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120, check=False)


def test_the_init_containers_run_over_every_pipeline(pod_spec, tmp_path):
    """Run here with a fake `python`: the model image's repository copied, then one build-engine
    and one verify-plan over all of it; an image without a pipeline stops before any build, in one line."""
    fake_executable(tmp_path / "bin", "python")
    image, models, cache = tmp_path / "image" / "model_repository", tmp_path / "models", tmp_path / "cache"
    shutil.copytree(layout.MODEL_REPOSITORY, image, ignore=shutil.ignore_patterns("*.onnx", "*.tmp", "__pycache__"))
    models.mkdir()
    cache.mkdir()  # the pod's emptyDir
    completed = run_init_containers(pod_spec, image, models, cache, tmp_path / "bin")
    assert completed.returncode == 0, completed.stderr
    assert sorted(p.name for p in layout.pipelines(models)) == sorted(p.name for p in PIPELINES)
    commands = [call.splitlines() for call in completed.stdout.split("-m\n")[1:]]
    assert commands == [
        ["vision_serving.cuda_driver", "--require", "--prefix", "build-plan"],  # the node's driver, in one line
        ["builders", "build-engine", "--model-repository", str(models), "--cache-dir", str(cache)],
        ["builders", "verify-plan", "--model-repository", str(models), "--deserialize"],
    ]
    shutil.rmtree(models)
    models.mkdir()
    shutil.rmtree(image)
    (image / "lost+found").mkdir(parents=True)
    completed = run_init_containers(pod_spec, image, models, cache, tmp_path / "bin")
    assert completed.returncode == 1 and completed.stdout == ""
    (line,) = completed.stderr.splitlines()
    assert line.startswith("build-plan: error: no pipeline in")


def test_a_plan_cache_the_pod_cannot_write_is_replaced_by_its_scratch_volume(pod_spec):
    """An RWX volume whose CSI driver ignores fsGroup: owned by root, the pod's UID 1000 cannot write it. build-plan
    says so in one warning line and builds into /plan-scratch; a writable cache is used as it is."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="plan-cache-") as scratch_root:  # readable by UID 1000 (pytest's is not)
        run_as_the_pod_user(pod_spec, Path(scratch_root))


def run_as_the_pod_user(pod_spec: dict[str, Any], tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_executable(fake_bin, "python")
    image, models = tmp_path / "image" / "model_repository", tmp_path / "models"
    shutil.copytree(layout.MODEL_REPOSITORY, image, ignore=shutil.ignore_patterns("*.onnx", "*.tmp", "__pycache__"))
    models.mkdir()
    cache, scratch = tmp_path / "cache", tmp_path / "scratch"
    cache.mkdir(mode=0o755)  # root's, as an NFS export without the pod's fsGroup
    scratch.mkdir()
    os.chown(scratch, 1000, 1000)
    for path in (tmp_path, fake_bin, fake_bin / "python"):
        path.chmod(0o755)
    os.chmod(models, 0o777)
    completed = run_init_containers(pod_spec, image, models, cache, fake_bin, scratch, as_uid=1000)
    assert completed.returncode == 0, completed.stderr
    (warning,) = [line for line in completed.stderr.splitlines() if "warning" in line]
    assert warning.startswith(f"build-plan: warning: the plan cache {cache} is not writable by uid 1000")
    build = completed.stdout.split("-m\n")[2].splitlines()
    assert build == ["builders", "build-engine", "--model-repository", str(models), "--cache-dir", str(scratch)]
    os.chown(cache, 1000, 1000)
    completed = run_init_containers(pod_spec, image, models, cache, fake_bin, scratch, as_uid=1000)
    assert completed.returncode == 0 and "warning" not in completed.stderr, completed.stderr
    assert completed.stdout.split("-m\n")[2].splitlines()[-1] == str(cache)


def test_the_shared_plan_cache_is_the_default_for_stable_and_canary(objects, canary_manifests):
    """k8s/components/shared-plan-cache, on in the base and the canary overlay: the claim (ReadWriteMany, the StorageClass
    of settings.yaml) replaces every Deployment's emptyDir cache; the HPA keeps more than one replica."""
    settings = K8S / "components" / "shared-plan-cache" / "settings.yaml"
    (storage_class,) = re.findall(r"^  storageClassName: (\S+)$", settings.read_text(), re.MULTILINE)
    assert find(objects, "HorizontalPodAutoscaler", "vision-serving")["spec"]["minReplicas"] > 1
    for rendered in (objects, canary_manifests["objects"]):
        claim = find(rendered, "PersistentVolumeClaim", "plan-cache")
        assert claim["spec"]["storageClassName"] == storage_class and claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert not [o for o in rendered if o["kind"] == "PlanCacheSettings"]  # local-config: never applied
        servers = [o for o in rendered if o["kind"] == "Deployment" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "server"]
        assert servers and all("plan-cache" not in json.dumps(o) for o in rendered if o["kind"] == "Deployment" and o not in servers)
        for deployment in servers:
            volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
            assert volumes["plan-cache"] == {"name": "plan-cache", "persistentVolumeClaim": {"claimName": "plan-cache"}}
            assert "emptyDir" in volumes["plan-scratch"]


def test_the_rollout_waits_for_the_plans_as_the_start_estimate_says(objects, pod_spec, triton):
    """progressDeadlineSeconds (one pod's cold start: it bounds the build, init containers having no probes), the
    build-plan init container's timeout and the startupProbe's budget are builders/tensorrt/startup.py's, from the
    committed engine sizes; the canary's promotion waits replicas x that deadline."""
    from benchmarks import capacity
    from builders.tensorrt import startup

    estimated = capacity.load_gpu_memory()
    assert estimated is not None, f"{capacity.GPU_MEMORY}: run python -m benchmarks.capacity --gpu-memory"
    start = startup.estimate(estimated["models"])
    deployment = find(objects, "Deployment", "vision-serving")
    assert deployment["spec"]["progressDeadlineSeconds"] == start.progress_deadline_seconds > 600  # Kubernetes' default is 600
    assert deployment["spec"]["progressDeadlineSeconds"] >= startup.SAFETY * start.cold_seconds()
    (script,) = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")["args"]
    assert f"budget={start.build_timeout_seconds}\n" in script and 'timeout "$budget" python -m builders build-engine' in script
    probe = triton["startupProbe"]
    assert probe["periodSeconds"] == startup.STARTUP_PERIOD_SECONDS and probe["failureThreshold"] == start.startup_failure_threshold
    assert probe["periodSeconds"] * probe["failureThreshold"] >= startup.SAFETY * start.startup_seconds
    assert start.rollout_timeout_seconds(deployment["spec"]["replicas"]) == deployment["spec"]["replicas"] * start.progress_deadline_seconds


def test_a_build_past_its_budget_fails_the_pod_in_one_line(pod_spec, tmp_path):
    """build-plan's timeout, run here with a `python` that hangs and a budget of one second."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$*" in *cuda_driver*) exit 0 ;; esac\nsleep 30\n')  # the driver check passes
    fake.chmod(0o755)
    (script,) = next(c for c in pod_spec["initContainers"] if c["name"] == "build-plan")["args"]
    models, cache = tmp_path / "models", tmp_path / "cache"
    (models / "p").mkdir(parents=True)
    (models / "p" / "pipeline.toml").write_text("")
    cache.mkdir()
    local = re.sub(r"budget=\d+", "budget=1", script).replace("/plan-cache", str(cache)).replace("/models", str(models))
    environment = {"PATH": f"{fake.parent}:/usr/bin:/bin", "HOME": "/tmp"}
    completed = subprocess.run(["bash", "-c", local], capture_output=True, text=True, env=environment, timeout=60, check=False)
    assert completed.returncode == 124
    (line,) = completed.stderr.strip().splitlines()
    assert line.startswith("build-plan: error: the plans' build ran past its 1 s budget")


def flag_options(arguments: list[str]) -> dict[str, str | None]:
    """``--name value`` / ``--name=value`` / ``--switch`` as {name: value or None}."""
    options: dict[str, str | None] = {}
    index = 0
    while index < len(arguments):
        name, sep, value = arguments[index].partition("=")
        if sep:
            options[name] = value
        elif index + 1 < len(arguments) and not arguments[index + 1].startswith("--"):
            options[name] = arguments[index + 1]
            index += 1
        else:
            options[name] = None
        index += 1
    return options


def test_hpa_scales_on_the_worst_step_recorded_by_the_prometheus_rule(objects, tools, tmp_path):
    hpa = find(objects, "HorizontalPodAutoscaler", "vision-serving")
    assert hpa["apiVersion"] == "autoscaling/v2"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert {"scaleUp", "scaleDown"} <= set(hpa["spec"]["behavior"])
    assert hpa["spec"]["scaleTargetRef"]["name"] == find(objects, "Deployment", "vision-serving")["metadata"]["name"]
    config = find(objects, "ConfigMap", "prometheus-adapter-vision-serving")["data"]["config.yaml"]
    path = tmp_path / "adapter.yaml"
    path.write_text(config)
    (adapter,) = load_yaml(tools, path)
    (rule,) = adapter["rules"]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    # The adapter renames the PrometheusRule's recorded series (promtool tests it: tests/deploy/alerts.test.yaml).
    (recorded,) = [r for r in prometheus_rules(objects) if "record" in r]
    assert rule["seriesQuery"].startswith(recorded["record"] + "{") and rule["name"]["matches"] == f"^{recorded['record']}$"
    assert rule["metricsQuery"] == "max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})"
    # Every step of every pipeline, none named, never an ensemble (server#8979): the worst step per pod.
    query = " ".join(recorded["expr"].split())
    assert query.count(STEP_SELECTOR) == 2 and "model=" not in query.replace(STEP_SELECTOR, "")
    assert query.startswith("max by (namespace, pod) (") and query.count("sum by (namespace, pod, model)") == 2
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    pdb = find(objects, "PodDisruptionBudget", "vision-serving")
    assert pdb["spec"]["selector"] == find(objects, "Deployment", "vision-serving")["spec"]["selector"]
    assert hpa["spec"]["minReplicas"] >= 2, "with one replica the PDB would block every drain"


def test_alerts_cover_the_thresholds_and_have_runbooks(objects):
    rules = alert_rules(objects)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and len(annotations["description"]) > 80, rule["alert"]
        # tests/unit/test_alert_runbooks.py checks that the URL's section exists in docs/runbooks.md.
        assert annotations["runbook_url"].startswith("https://") and "/docs/runbooks.md#" in annotations["runbook_url"], rule["alert"]
    expressions = " ".join(rule["expr"] for rule in rules)
    for needle in ("< 0.995", "> 50000", "> 100000", "nv_inference_request_failure", "nv_gpu_utilization", "nv_gpu_memory_used_bytes"):
        assert needle in expressions, needle
    assert 'quantile="0.95"' in expressions
    for rule in rules:
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]


def test_alerts_cover_every_pipeline_by_model(objects):
    """No pipeline named: ensembles and steps are selected by suffix, and each alert that is
    about a model keeps the `model` label (the pipeline, or <pipeline>_<step>) in its result."""
    by_name = {rule["alert"].removeprefix("VisionServing"): rule for rule in alert_rules(objects)}
    success = " ".join(by_name["SuccessRateLow"]["expr"].split())
    assert success.count(ENSEMBLE_SELECTOR) == 3 and success.count("sum by (model)") == 3
    assert "{{ $labels.model }}" in by_name["SuccessRateLow"]["annotations"]["summary"]
    for name in ("QueueP95High", "ComputeP95High"):
        expr = " ".join(by_name[name]["expr"].split())
        assert STEP_SELECTOR in expr and expr.startswith("max by (model, pod)"), name
        assert "{{ $labels.model }}" in by_name[name]["annotations"]["summary"], name
    assert "sum by (model, reason)" in by_name["InferenceFailures"]["expr"]
    for rule in by_name.values():
        assert not re.search(r'model=~?"(?!\.\+_)', rule["expr"]), f"{rule['alert']}: selects a model by name"


def test_dashboard_shows_every_step_of_every_pipeline(objects):
    board = dashboard(objects)
    expressions = dashboard_expressions(board)
    joined = " ".join(expressions)
    for metric in (
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_duration_us",
        "nv_inference_exec_count",
        "nv_inference_queue_summary_us",
        "vision_drift_p_value",
        "vision_feature_window_mean",
        "vision_feature_reference_mean",
        "vision_nonfinite_outputs_total",
    ):
        assert metric in joined, metric
    assert any("nv_inference_count" in e and "nv_inference_exec_count" in e for e in expressions), "batch size panel"
    # The pipeline variable: every core model's pipeline, found from the metrics.
    variable = next(v for v in board["templating"]["list"] if v["name"] == "pipeline")
    assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
    assert CORE_SELECTOR in variable["definition"] and variable["regex"] == "/^(.+)_core$/"
    # Per pipeline, a repeated row of per-step panels selected by that pipeline's models.
    panels = board["panels"]
    (repeated,) = [p for p in panels if p.get("repeat")]
    assert repeated["type"] == "row" and repeated["repeat"] == "pipeline"
    step_panels = [p for p in panels if p["gridPos"]["y"] > repeated["gridPos"]["y"]]
    assert len(step_panels) >= 6
    for panel in step_panels:
        for target in panel["targets"]:
            assert 'model=~"${pipeline}_(preprocess|core|core_.+|postprocess)"' in target["expr"], panel["title"]
    above = [t["expr"] for p in panels if p["gridPos"]["y"] < repeated["gridPos"]["y"] for t in p.get("targets", [])]
    assert any('model=~"${pipeline:regex}"' in e and "nv_inference_request_success" in e for e in above), "ensemble panel"
    # The HPA's own metric, the recorded series the adapter serves.
    assert "max by (pod) (pod:triton_step_queue_avg_us:max)" in above
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    # Every selector names a pipeline only through the variable.
    for expression in expressions:
        for selector in re.findall(r'model=~?"([^"]*)"', expression):
            assert "${pipeline" in selector or selector.startswith(".+_"), selector


ROUTE_PORTS = {"GRPCRoute": "grpc", "HTTPRoute": "http"}


def route_backends(route: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = route["spec"]["rules"]
    return rule["backendRefs"]


def test_routes_balance_per_request_through_the_gateway(objects, triton):
    """gRPC 8001 through a GRPCRoute and HTTP 8000 through an HTTPRoute, each attached to its own
    listener of the shipped Gateway, to the stable track's ClusterIP Service."""
    gateway = find(objects, "Gateway")
    listeners = {listener["name"]: listener for listener in gateway["spec"]["listeners"]}
    container_ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    service = find(objects, "Service", "vision-serving")
    assert service["spec"]["type"] == "ClusterIP"
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for kind, port_name in ROUTE_PORTS.items():
        route = find(objects, kind, "vision-serving")
        (parent,) = route["spec"]["parentRefs"]
        assert parent["name"] == gateway["metadata"]["name"] and "namespace" not in parent, kind
        listener = listeners[parent["sectionName"]]
        assert listener["protocol"] == "HTTP" and listener["port"] == container_ports[port_name], kind
        assert listener["allowedRoutes"]["kinds"] == [{"group": "gateway.networking.k8s.io", "kind": kind}]
        (backend,) = route_backends(route)
        assert backend["name"] == "vision-serving" and backend["port"] == service_ports[port_name]["port"], kind
        assert backend.get("weight", 1) > 0
    # gRPC to the pods is HTTP/2 with prior knowledge (Gateway API's appProtocol for it).
    assert service_ports["grpc"]["appProtocol"] == "kubernetes.io/h2c"
    (rule,) = find(objects, "GRPCRoute")["spec"]["rules"]
    (match,) = rule["matches"]
    import tritonclient.grpc.service_pb2 as service_pb2

    assert match["method"]["service"] == service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
    assert "method" not in match["method"], "every method of the service"
    (rule,) = find(objects, "HTTPRoute", "vision-serving")["spec"]["rules"]
    (match,) = rule["matches"]
    assert match["path"] == {"type": "PathPrefix", "value": "/v2"}
    for probe in ("startupProbe", "readinessProbe"):
        assert triton[probe]["httpGet"]["path"].startswith("/v2/")


def test_the_gateway_class_is_set_in_one_place():
    gateway_files = [path for path in deployment_files() if "gatewayClassName:" in path.read_text()]
    assert gateway_files == [K8S / "gateway.yaml"]
    assert len(re.findall(r"^\s+gatewayClassName: \S+$", (K8S / "gateway.yaml").read_text(), re.MULTILINE)) == 1


def test_stable_track_selectors(objects):
    """The base runs the stable track: its Deployment, the client Service, PDB and HPA select track: stable;
    the NetworkPolicy and the metrics Service select every track; Prometheus gets the track label."""
    deployment = find(objects, "Deployment", "vision-serving")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["track"] == "stable" and labels_match(selector, deployment["spec"]["template"]["metadata"]["labels"])
    assert find(objects, "Service", "vision-serving")["spec"]["selector"] == selector
    assert find(objects, "PodDisruptionBudget", "vision-serving")["spec"]["selector"]["matchLabels"] == selector
    assert find(objects, "HorizontalPodAutoscaler", "vision-serving")["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    every_track = {k: v for k, v in selector.items() if k != "track"}
    assert find(objects, "NetworkPolicy", "vision-serving")["spec"]["podSelector"]["matchLabels"] == every_track
    metrics = find(objects, "Service", "vision-serving-metrics")
    assert metrics["spec"]["selector"] == every_track
    monitor = find(objects, "ServiceMonitor", "vision-serving")
    assert labels_match(monitor["spec"]["selector"]["matchLabels"], metrics["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    from devtools.canary import parse_args

    track_label = parse_args(["--prometheus", "http://p", "--pipeline", "p"]).track_label
    assert {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_track"], "targetLabel": track_label} in endpoint[
        "relabelings"
    ]


def test_the_canary_overlay_validates(canary_manifests):
    problems = [r for r in canary_manifests["results"] if r["status"] != "ok"]
    assert not problems, "\n".join(f"{r['kind']}/{r['name']}: {r['status']}: {r['detail']}" for r in problems)
    rendered = sorted((r["kind"], r["name"]) for r in canary_manifests["results"])
    assert rendered == [
        ("Deployment", "vision-serving-canary"),
        ("GRPCRoute", "vision-serving"),
        ("HTTPRoute", "vision-serving"),
        ("PersistentVolumeClaim", "plan-cache"),  # the base's claim, the same object: the canary's pods share it
        ("Service", "vision-serving-canary"),
    ], "weights.yaml is local-config: never applied"
    assert {o["metadata"]["namespace"] for o in canary_manifests["objects"]} == {"vision-serving"}


def test_checkov_passes_on_the_canary_cluster(tools, canary_cluster, tmp_path):
    path = tmp_path / "canary.yaml"
    path.write_text("---\n".join(json.dumps(o) + "\n" for o in canary_cluster))  # JSON documents are YAML
    completed = run_checkov(tools, "--framework", "kubernetes", "-f", str(path))
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]


def test_canary_routes_split_by_the_weights(canary_cluster):
    """Both routes: stable then canary, weights from weights.yaml summing to 100, in the positions
    devtools.canary patches (its defaults name these routes, Services and Deployments)."""
    from devtools.canary import KubernetesTarget

    target = KubernetesTarget()
    assert sorted(target.routes) == sorted(f"{kind.lower()}/vision-serving" for kind in ROUTE_PORTS)
    weights = [route_backends(find(canary_cluster, kind, "vision-serving")) for kind in ROUTE_PORTS]
    for kind, backends in zip(ROUTE_PORTS, weights, strict=True):
        assert target.rule_index == 0 and len(find(canary_cluster, kind, "vision-serving")["spec"]["rules"]) == 1
        assert [b["name"] for b in backends] == [target.stable_service, target.canary_service]
        assert [backends[target.stable_ref_index]["name"], backends[target.canary_ref_index]["name"]] == [
            target.stable_service,
            target.canary_service,
        ]
        assert sum(b["weight"] for b in backends) == 100 and all(b["weight"] > 0 for b in backends), kind
        service_ports = {p["name"]: p["port"] for p in find(canary_cluster, "Service", backends[1]["name"])["spec"]["ports"]}
        assert backends[0]["port"] == backends[1]["port"] == service_ports[ROUTE_PORTS[kind]], kind
    assert weights[0] == [{**b, "port": weights[0][i]["port"]} for i, b in enumerate(weights[1])], "the same split on both"
    assert [b["weight"] for b in weights[0]] == [90, 10]
    assert find(canary_cluster, "Deployment", target.stable_deployment) and find(canary_cluster, "Deployment", target.canary_deployment)
    assert target.namespace == find(canary_cluster, "Namespace")["metadata"]["name"]


def test_each_track_has_its_deployment_and_service(canary_cluster):
    deployments = {
        d["metadata"]["labels"]["track"]: d for d in canary_cluster if d["kind"] == "Deployment" and "track" in d["metadata"]["labels"]
    }
    assert set(deployments) == set(TRACKS)
    services = {
        "stable": find(canary_cluster, "Service", "vision-serving"),
        "canary": find(canary_cluster, "Service", "vision-serving-canary"),
    }
    for track in TRACKS:
        template = deployments[track]["spec"]["template"]["metadata"]["labels"]
        assert template["track"] == track
        for other in TRACKS:
            selects = labels_match(services[other]["spec"]["selector"], template)
            owns = labels_match(deployments[other]["spec"]["selector"]["matchLabels"], template)
            assert selects == owns == (other == track), f"{other} selects {track} pods: {selects}, {owns}"
        # Every track is scraped (metrics Service), admitted by the NetworkPolicy, spread with the others.
        assert labels_match(find(canary_cluster, "Service", "vision-serving-metrics")["spec"]["selector"], template)
        assert labels_match(find(canary_cluster, "NetworkPolicy", "vision-serving")["spec"]["podSelector"]["matchLabels"], template)
    budget = find(canary_cluster, "PodDisruptionBudget", "vision-serving")["spec"]["selector"]["matchLabels"]
    assert labels_match(budget, deployments["stable"]["spec"]["template"]["metadata"]["labels"])
    assert not labels_match(budget, deployments["canary"]["spec"]["template"]["metadata"]["labels"]), "one canary pod: no budget"
    hpa = find(canary_cluster, "HorizontalPodAutoscaler", "vision-serving")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployments["stable"]["metadata"]["name"]
    assert deployments["canary"]["spec"]["replicas"] == 1


def test_the_canary_runs_the_stable_server_with_the_candidate_models(canary_cluster):
    """The canary Deployment is the stable one (same file) but for its name, track, replicas and the
    model image: the same server and builder images, a different model image."""
    stable = find(canary_cluster, "Deployment", "vision-serving")
    canary = find(canary_cluster, "Deployment", "vision-serving-canary")

    def images(deployment: dict[str, Any]) -> dict[str, str]:
        spec = deployment["spec"]["template"]["spec"]
        return {c["name"]: c["image"] for c in [*spec["initContainers"], *spec["containers"]]}

    stable_images, canary_images = images(stable), images(canary)
    assert stable_images.keys() == canary_images.keys()
    assert {k for k in stable_images if stable_images[k] != canary_images[k]} == {"models"}
    assert stable_images["models"].split(":")[0] == canary_images["models"].split(":")[0]
    stable_spec = json.loads(json.dumps(stable["spec"]["template"]["spec"]).replace(stable_images["models"], canary_images["models"]))
    assert stable_spec == canary["spec"]["template"]["spec"]


def deployment_files() -> list[Path]:
    return sorted(path for folder in (DOCKER, K8S) for path in folder.rglob("*") if path.is_file())


def test_nothing_in_docker_or_k8s_names_a_pipeline():
    """A pipeline added with `builders new-pipeline` must need no change here: no file names
    one of today's pipelines or their models (vision-serving with a hyphen is the project)."""
    names = {pipeline.name for pipeline in PIPELINES} | {"image_classifier", "person_segmenter", "face_detector"}
    assert {"image_classifier", "person_segmenter"} <= {pipeline.name for pipeline in PIPELINES}
    pattern = re.compile("|".join(sorted(map(re.escape, names))), re.IGNORECASE)
    files = deployment_files()
    assert {ENTRY_SCRIPT, BUILD_SCRIPT, K8S / "server" / "deployment.yaml", K8S / "dashboards" / "vision-serving.json"} <= set(files)
    assert CANARY / "kustomization.yaml" in files
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "pipelines named in docker/ or k8s/:\n" + "\n".join(found)


def fake_executable(directory: Path, name: str) -> Path:
    """An executable ``name`` that prints each argument on its own line and exits 0."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text('#!/bin/sh\nfor argument in "$@"; do printf \'%s\\n\' "$argument"; done\n')
    path.chmod(0o755)
    return path


def run_script(script: Path, arguments: list[str], fake_bin: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run(["bash", str(script), *arguments], capture_output=True, text=True, env=environment, timeout=60, check=False)


def run_entry_script(arguments: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The entry script with a fake tritonserver first on PATH, then this environment's python3 (the
    image's /opt/venv/bin: vision_serving for the CPU sizing), its sized view in tmp_path/sized."""
    fake_executable(tmp_path / "bin", "tritonserver")
    environment = {
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "SIZED_MODELS_DIR": str(tmp_path / "sized"),
        **env,
    }
    # With CGROUP: the script runs inside that cgroup (its shell joins it, then execs the script).
    command = ["bash", str(ENTRY_SCRIPT), *arguments]
    if "CGROUP" in env:
        command = ["sh", "-c", 'echo $$ > "$CGROUP/cgroup.procs" && exec "$@"', "sh", *command]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60, check=False, cwd=ROOT)


def test_the_entry_script_passes_one_sized_model_repository_per_pipeline(tmp_path, triton):
    args = tritonserver_arguments(triton["args"])
    completed = run_entry_script([f"{ROOT_FLAG}={layout.MODEL_REPOSITORY}", *args], tmp_path, SIZED_MODELS_DIR=str(tmp_path / "sized"))
    assert completed.returncode == 0, completed.stderr
    passed = completed.stdout.splitlines()
    repositories = [a.partition("=")[2] for a in passed if a.startswith("--model-repository")]
    # Each pipeline's sized view (vision_serving.cpu_sizing), in the same order as the pipelines.
    assert repositories == [str(tmp_path / "sized" / path.name) for path in layout.model_repositories(layout.MODEL_REPOSITORY)]
    assert len(repositories) == len(PIPELINES) >= 2
    assert all(a.startswith("--model-repository=") for a in passed[: len(repositories)])
    assert passed[len(repositories) :] == args, "every other argument is passed on unchanged, in order"
    assert ROOT_FLAG not in completed.stdout
    lines = completed.stderr.splitlines()
    (line,) = [line for line in lines if line.startswith(f"{ENTRY_COMMAND}: serving ")]
    assert all(pipeline.name in line for pipeline in PIPELINES)
    # One line per sized step, naming this machine's CPUs, and the view's configs say the same.
    sized = [line for line in lines if line.startswith("cpu_sizing: ")]
    assert len(sized) == 2 * len(PIPELINES) and all("CPUs (" in line for line in sized), lines  # preprocess, postprocess
    for pipeline in PIPELINES:
        config = model_config.load_config(tmp_path / "sized" / pipeline.name / pipeline.model_name("preprocess"))
        assert config.parameters["decode_threads"].string_value.isdigit()


def test_the_entry_script_preloads_jemalloc_for_the_server_and_its_stubs(tmp_path):
    """jemalloc first in tritonserver's LD_PRELOAD (the stubs inherit it), one line saying so; VISION_SERVING_MALLOC=glibc
    opts out; a missing library is a warning and glibc's malloc."""
    root = tmp_path / "root"
    (root / "alpha").mkdir(parents=True)
    (root / "alpha" / layout.RECIPE_FILENAME).write_text("")
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")  # a name only: the fake tritonserver is a shell script

    def preloaded(**env: str) -> tuple[str, str]:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "tritonserver").write_text('#!/bin/sh\nprintf "LD_PRELOAD=%s\\n" "$LD_PRELOAD"\n')
        (bin_dir / "tritonserver").chmod(0o755)
        environment = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
        environment |= {"SIZED_MODELS_DIR": str(tmp_path / "sized"), "PIPELINES_ROOT": str(root), **env}
        completed = subprocess.run(["bash", str(ENTRY_SCRIPT)], capture_output=True, text=True, env=environment, timeout=60, check=False)
        assert completed.returncode == 0, completed.stderr
        (line,) = [line for line in completed.stdout.splitlines() if line.startswith("LD_PRELOAD=")]
        return line.removeprefix("LD_PRELOAD="), completed.stderr

    found, log = preloaded(JEMALLOC_LIBRARY=str(library), LD_PRELOAD="/opt/other.so")
    assert found.split(":")[:2] == [str(library), "/opt/other.so"]
    assert f"{ENTRY_COMMAND}: allocator: jemalloc ({library})" in log
    found, log = preloaded(JEMALLOC_LIBRARY=str(library), VISION_SERVING_MALLOC="glibc")
    assert str(library) not in found and "allocator" not in log
    found, log = preloaded(JEMALLOC_LIBRARY=str(tmp_path / "none.so"))
    assert found == "" and f"{ENTRY_COMMAND}: warning: jemalloc not found" in log


def test_the_entry_script_root_defaults_to_the_images(tmp_path):
    """The Dockerfile's ENTRYPOINT root; without the flag, $PIPELINES_ROOT, else /models."""
    entrypoint = dockerfile_entrypoint(DOCKERFILES["server"])
    assert f"{ROOT_FLAG}=/models" in entrypoint
    root = tmp_path / "root"
    for name in ("zeta", "alpha"):
        (root / name).mkdir(parents=True)
        (root / name / layout.RECIPE_FILENAME).write_text("")
    (root / "not_a_pipeline").mkdir()  # no recipe: not served
    (root / "stray.toml").write_text("")
    (root / "dir_recipe" / layout.RECIPE_FILENAME).mkdir(parents=True)  # not a file
    completed = run_entry_script(["--log-info=true"], tmp_path, PIPELINES_ROOT=str(root))
    assert completed.returncode == 0, completed.stderr
    sized = tmp_path / "sized"
    assert completed.stdout.splitlines() == [f"--model-repository={sized}/alpha", f"--model-repository={sized}/zeta", "--log-info=true"]
    # The same folders layout.pipelines() finds (what ./scripts/serve and the builders use).
    assert [f"--model-repository={sized / p.name}" for p in layout.model_repositories(root)] == completed.stdout.splitlines()[:2]
    assert (sized / "alpha" / layout.RECIPE_FILENAME).resolve() == (root / "alpha" / layout.RECIPE_FILENAME).resolve()


@contextlib.contextmanager
def cpu_limited_cgroup(quota_us: int, period_us: int = 100_000) -> Iterator[Path]:
    """A real cgroup with a CPU quota (v2 ``cpu.max``, else v1's CFS quota); its ``cgroup.procs``
    takes a process. Skips where this user cannot create one (not root, no cpu controller)."""
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")
    name = f"vision-serving-test-{os.getpid()}"
    v2_controllers = v2 / "cgroup.subtree_control"
    if v2_controllers.is_file() and "cpu" in v2_controllers.read_text().split():
        group, files = v2 / name, {"cpu.max": f"{quota_us} {period_us}"}
    elif (v1 / "cpu.cfs_quota_us").is_file():
        group, files = v1 / name, {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(quota_us)}
    else:
        pytest.skip("no cgroup cpu controller on this machine")
    try:
        group.mkdir()
        for file, value in files.items():
            (group / file).write_text(value)
    except OSError as error:
        pytest.skip(f"cannot create a cgroup with a CPU quota here: {error}")
    try:
        yield group
    finally:
        group.rmdir()


def test_the_entry_script_sizes_to_a_real_cgroup_cpu_limit(tmp_path):
    """The image's path on a real kernel cgroup: the entry script started inside a cgroup limited to half a
    CPU sizes every preprocess to 1 instance of 1 thread (2 x 1 on this machine without the limit)."""
    with cpu_limited_cgroup(50_000) as group:
        completed = run_entry_script([f"{ROOT_FLAG}={layout.MODEL_REPOSITORY}", "--log-info=true"], tmp_path, CGROUP=str(group))
    assert completed.returncode == 0, completed.stderr
    sized = [line for line in completed.stderr.splitlines() if line.startswith("cpu_sizing: ")]
    assert len(sized) == 2 * len(PIPELINES) and all("1 instance(s)" in line and "for 0.5 CPUs (cgroup " in line for line in sized), sized
    for pipeline in PIPELINES:
        config = model_config.load_config(tmp_path / "sized" / pipeline.name / pipeline.model_name("preprocess"))
        assert config.instance_group[0].count == 1 and config.parameters["decode_threads"].string_value == "1"


def bad_share(tmp_path: Path) -> Path:
    """A root whose one pipeline's preprocess asks for 150 % of the CPUs."""
    root = tmp_path / "bad_share"
    model = root / "pipe" / "pipe_preprocess"
    model.mkdir(parents=True)
    (root / "pipe" / layout.RECIPE_FILENAME).write_text("")
    (model / "config.pbtxt").write_text(
        'name: "pipe_preprocess"\nbackend: "python"\ninstance_group [ { kind: KIND_CPU count: 2 } ]\n'
        'parameters [ { key: "cpu_share", value: { string_value: "1.5" } } ]\n'
    )
    return root


def test_the_entry_script_checks_the_node_s_driver_in_one_line(tmp_path, triton):
    """vision_serving.cuda_driver before tritonserver (NVIDIA's entrypoint, which the image replaces, checked for a driver):
    here, with no driver, a warning and the CPU configs still serve; in the Deployment (VISION_SERVING_REQUIRE_GPU=1) the
    pod stops with one error line before tritonserver starts."""
    assert {"name": "VISION_SERVING_REQUIRE_GPU", "value": "1"} in triton["env"]
    completed = run_entry_script([f"{ROOT_FLAG}={layout.MODEL_REPOSITORY}"], tmp_path)
    assert completed.returncode == 0 and completed.stdout, completed.stderr
    (warning,) = [line for line in completed.stderr.splitlines() if "driver" in line]
    assert warning.startswith(f"{ENTRY_COMMAND}: warning: no NVIDIA driver in this container")
    completed = run_entry_script([f"{ROOT_FLAG}={layout.MODEL_REPOSITORY}"], tmp_path, VISION_SERVING_REQUIRE_GPU="1")
    assert completed.returncode == 1 and completed.stdout == "", "tritonserver must not start"
    assert completed.stderr.splitlines()[-1].startswith(f"{ENTRY_COMMAND}: error: no NVIDIA driver in this container")


@pytest.mark.parametrize("case", ["empty", "missing", "model-repository", "bad-share"])
def test_the_entry_script_fails_in_one_clear_line(tmp_path, case):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "some_folder").mkdir()
    arguments = {
        "empty": [f"{ROOT_FLAG}={empty}"],
        "missing": [f"{ROOT_FLAG}={tmp_path / 'nowhere'}"],
        "model-repository": [f"{ROOT_FLAG}={layout.MODEL_REPOSITORY}", f"--model-repository={layout.MODEL_REPOSITORY}"],
        "bad-share": [f"{ROOT_FLAG}={bad_share(tmp_path)}"],
    }[case]
    completed = run_entry_script([*arguments, "--log-info=true"], tmp_path)
    assert completed.returncode == 2 and completed.stdout == "", "tritonserver must not start"
    (line,) = completed.stderr.splitlines()
    prefix = "cpu_sizing" if case == "bad-share" else ENTRY_COMMAND
    assert line.startswith(f"{prefix}: error: ")
    expected = {
        "empty": f"no pipeline in {empty}",
        "missing": "does not exist",
        "model-repository": "do not pass --model-repository",
        "bad-share": "parameter cpu_share must be in (0, 1] (a share of the pod's CPUs), found 1.5",
    }[case]
    assert expected in line


def test_the_builder_script_builds_every_pipeline(tmp_path):
    """docker/build_artifacts.sh with a fake `python`: `builders all`, then build-engine and
    verify-plan --deserialize over the whole repository (no --pipeline), the baked build
    environments linked where builders/build_envs.py looks."""
    fake_executable(tmp_path / "bin", "python")
    baked = tmp_path / "baked"
    (baked / "tflite-convert" / "bin").mkdir(parents=True)
    envs = tmp_path / "cache" / "envs"
    (envs / "tflite-convert").mkdir(parents=True)  # stale, e.g. from an older image's volume
    completed = run_script(
        BUILD_SCRIPT, [str(layout.MODEL_REPOSITORY), "--workspace-mib", "2048"], tmp_path / "bin",
        PLAN_CACHE_DIR="/cache/plans", BUILD_ENVS_DIR=str(envs), BAKED_ENVS_DIR=str(baked),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    calls = completed.stdout.split("-m\n")[1:]
    commands = [call.splitlines() for call in calls]
    repository = str(layout.MODEL_REPOSITORY)
    assert commands == [
        ["builders", "all", "--model-repository", repository],
        ["builders", "build-engine", "--model-repository", repository, "--cache-dir", "/cache/plans", "--workspace-mib", "2048"],
        ["builders", "verify-plan", "--model-repository", repository, "--deserialize"],
    ]
    assert os.readlink(envs / "tflite-convert") == str(baked / "tflite-convert")
    assert all(pipeline.name in completed.stderr for pipeline in PIPELINES)
    empty = tmp_path / "empty"
    empty.mkdir()
    completed = run_script(BUILD_SCRIPT, [str(empty)], tmp_path / "bin", BUILD_ENVS_DIR=str(envs), BAKED_ENVS_DIR=str(baked))
    assert completed.returncode == 2 and completed.stdout == ""
    (line,) = completed.stderr.splitlines()
    assert line.startswith("build_artifacts: error: no pipeline in")


def tensorrt_libraries(root: Path, version: str) -> Path:
    """``root/usr/lib/x86_64-linux-gnu`` as NVIDIA's images ship TensorRT ``version`` (X.Y.Z): the real library and its
    two symlinks (``libnvinfer.so.X`` sorts before ``libnvinfer.so.X.Y.Z``), beside the plugin library's."""
    folder = root / "usr" / "lib" / "x86_64-linux-gnu"
    folder.mkdir(parents=True)
    major = version.split(".")[0]
    for library in ("libnvinfer", "libnvinfer_plugin"):
        (folder / f"{library}.so.{version}").write_bytes(b"\x7fELF")
        (folder / f"{library}.so.{major}").symlink_to(f"{library}.so.{version}")
        (folder / f"{library}.so").symlink_to(f"{library}.so.{major}")
    return folder


def fake_docker(directory: Path, builder_tensorrt: str, server_root: Path) -> Path:
    """A `docker` whose `run IMAGE` answers as the two upstream images would: the tensorrt image prints
    tensorrt.__version__; the tritonserver image runs the script's command against ``server_root`` as its /usr.
    Each image it was run with is appended to ``directory/images``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "docker"
    path.write_text(
        "#!/bin/bash\n"
        f'for argument in "$@"; do case "$argument" in nvcr.io/*) echo "$argument" >> "{directory}/images" ;; esac; done\n'
        'case "$*" in\n'
        f'  *nvcr.io/nvidia/tensorrt:*) echo "{builder_tensorrt}" ;;\n'
        f'  *nvcr.io/nvidia/tritonserver:*) command="${{@: -1}}"; exec bash -c "${{command//\\/usr\\//{server_root}/usr/}}" ;;\n'
        "  *) exit 125 ;;\n"
        "esac\n"
    )
    path.chmod(0o755)
    return directory / "images"


@pytest.mark.parametrize(
    "builder, server, code, message",
    [
        ("10.13.3.9", "10.13.3", 0, "TensorRT 10.13.3 in both"),
        ("11.1.0.4", "11.1.0", 0, "TensorRT 11.1.0 in both"),
        (
            "11.1.0.4",
            "11.0.2",
            1,
            "error: the builder image has TensorRT 11.1.0, the server image 11.0.2",
        ),
        ("11.1.0.4", None, 2, "check-tensorrt: error: no libnvinfer.so.* in nvcr.io/nvidia/tritonserver:"),
    ],
    ids=["same-10", "same-11", "previous-month-base", "no-library"],
)
def test_the_tensorrt_check_compares_the_two_upstream_images(tmp_path, versions, builder, server, code, message):
    """docker/check-tensorrt.sh on the images the Dockerfiles build FROM (docker answered by a stand-in: no Docker
    engine here; the server image's library folder laid out as TensorRT ships it, symlinks included), then the
    same comparison the server image's build runs."""
    root = tmp_path / "server-image"
    if server is not None:
        tensorrt_libraries(root, server)
    images = fake_docker(tmp_path / "bin", builder, root)
    completed = run_script(DOCKER / "check-tensorrt.sh", [], tmp_path / "bin", PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    assert completed.returncode == code, completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert message in line
    release = versions["TRITON_RELEASE"]
    assert images.read_text().split() == [f"nvcr.io/nvidia/tensorrt:{release}-py3", f"nvcr.io/nvidia/tritonserver:{release}-py3"]
    if code == 1:  # the remedy names what a user sets: versions.env's TRITON_RELEASE, the Dockerfiles' one build arg
        assert "set TRITON_RELEASE in versions.env" in line and "_BASE_IMAGE" not in line
        for path in DOCKERFILES.values():
            assert re.search(r"^ARG TRITON_RELEASE=", path.read_text(), re.MULTILINE), path.name


def docker_engine() -> bool:
    """A Docker CLI with an engine it can reach."""
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode == 0


@pytest.mark.skipif(not docker_engine(), reason="no Docker engine on this machine")
def test_the_upstream_images_carry_the_same_tensorrt():
    """Online: the real images of versions.env (pulls them)."""
    completed = subprocess.run([str(DOCKER / "check-tensorrt.sh")], capture_output=True, text=True, timeout=3600, check=False)
    assert completed.returncode == 0, completed.stderr


def test_the_server_image_checks_the_builder_images_tensorrt_while_it_builds():
    text = DOCKERFILES["server"].read_text()
    assert re.search(r"^FROM nvcr\.io/nvidia/tensorrt:\$\{TRITON_RELEASE\}-py3 AS builder-tensorrt$", text, re.MULTILINE)
    assert "COPY --from=builder-tensorrt /builder-tensorrt-version" in text
    assert re.search(r"^RUN /opt/venv/bin/python -m builders same-tensorrt \\$", text, re.MULTILINE)


def test_the_builder_image_bakes_its_build_environments():
    """builders/build_envs.py's venvs for the export steps are made in the image (no ensurepip
    needed at run time), with the stamp it compares, where build_artifacts.sh links them from."""
    from builders import build_envs

    text = DOCKERFILES["builder"].read_text()
    (names,) = re.findall(r'^ARG BUILD_ENVS="([^"]*)"$', text, re.MULTILINE)
    for name in names.split():
        assert build_envs.requirements_file(name).is_file(), name
    assert f"/{build_envs.STAMP_NAME}" in text and 'sha256sum "requirements/${name}.txt"' in text
    assert "/opt/build-envs/${name}" in text and "/opt/build-envs" in BUILD_SCRIPT.read_text()
    assert str(build_envs.ENVS_DIR.relative_to(build_envs.ROOT)) == ".build/envs"
    assert "/opt/vision-serving/.build/envs" in BUILD_SCRIPT.read_text()


def test_the_shared_test_server_runs_the_rendered_container(triton):
    """tests/support/deployment.py starts the integration tests' server with the triton container read
    from k8s/server/deployment.yaml (no kubectl needed there): it is the container kustomize renders."""
    assert deployment_container() == triton
