"""What the deployment tests share (tests/deploy/test_deployment.py offline, tests/integration/
test_deployment.py on the real server): the paths, the deploy-check tools' venv, the rendered and
validated manifests as fixtures (registered by tests/conftest.py), and readers of their parts.

The tools run from their own venv, .build/deploy-check/ (requirements/deploy-check.txt),
created here when missing or stale: checkov's pins conflict with .venv.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from builders import build_envs
from devtools.triton_server import LocalTritonServer
from tests.support.pipelines import CALIBRATION_SAMPLES
from vision_serving import layout

ROOT = layout.REPOSITORY_ROOT


K8S = ROOT / "k8s"


DOCKER = ROOT / "docker"


DOCKERFILES = {"server": DOCKER / "server.Dockerfile", "builder": DOCKER / "builder.Dockerfile"}


GATEWAY_DOCKERFILE = DOCKER / "gateway.Dockerfile"


GATEWAY_K8S = K8S / "image-gateway"


MODELS_DOCKERFILE = DOCKER / "models.Dockerfile"
# The stream service's image (tests/deploy/test_streams_deployment.py).
STREAMS_DOCKERFILE = DOCKER / "streams.Dockerfile"


CANARY = K8S / "overlays" / "canary"


DEPLOY_ENV = ROOT / ".build" / "deploy-check"


DEPLOY_REQUIREMENTS = ROOT / "requirements" / "deploy-check.txt"


VALIDATE = ROOT / "tests" / "deploy" / "validate.py"


ENTRY_SCRIPT = DOCKER / "tritonserver-pipelines.sh"


BUILD_SCRIPT = DOCKER / "build_artifacts.sh"


ENTRY_COMMAND = "tritonserver-pipelines"  # where server.Dockerfile installs ENTRY_SCRIPT
# NVIDIA's image entrypoint, kept in front of ENTRY_COMMAND (its parts set up CUDA forward compatibility)
NVIDIA_ENTRYPOINT = "/opt/nvidia/nvidia_entrypoint.sh"


LIVENESS_SCRIPT = DOCKER / "triton-liveness.sh"


LIVENESS_COMMAND = "triton-liveness"  # where server.Dockerfile installs LIVENESS_SCRIPT


ROOT_FLAG = "--pipelines-root"  # the entry script's own flag; never passed to tritonserver


K8S_VERSION = "1.35.0"


PIPELINES = layout.pipelines(layout.MODEL_REPOSITORY)


STEPS = tuple(pipeline.model_name(role) for pipeline in PIPELINES for role in layout.ROLES)


# The monitoring selects models by their role suffix (<pipeline>_<role>), never by pipeline.
STEP_SELECTOR = 'model=~".+_(preprocess|core|core_.+|postprocess)"'


CORE_SELECTOR = 'model=~".+_core"'


ENSEMBLE_SELECTOR = 'model!~".+_(preprocess|core|core_.+|postprocess)"'


# Metric names only a GPU build of Triton exports (Triton's DCGM-based GPU metrics) and
# Prometheus' own series: the local CPU server cannot show them.
GPU_ONLY_METRICS = {"nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"}


PROMETHEUS_BUILTINS = {"up"}


EXPECTED_CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("gateway.networking.k8s.io/v1", "Gateway"),
    ("gateway.networking.k8s.io/v1", "GRPCRoute"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
}


TRACKS = ("stable", "canary")


ADMIN_KEY = "test-admin-key"


DRIFT_BATCH = 8  # images per request while filling the drift windows (every ensemble takes at least 16)
DRIFT_CONCURRENCY = 4  # requests in flight per pipeline while filling them


def ensure_deploy_env() -> Path:
    """The bin folder of .build/deploy-check with requirements/deploy-check.txt installed (reinstalled when the
    file changes; under an flock, so a background install and a test never install it at the same time).
    Raises RuntimeError with pip's output when the install fails."""
    stamp = DEPLOY_ENV / ".requirements.sha256"
    want = hashlib.sha256(DEPLOY_REQUIREMENTS.read_bytes()).hexdigest()
    python = DEPLOY_ENV / "bin" / "python"
    with build_envs.exclusive(DEPLOY_ENV.parent / ".deploy-check.lock"):
        if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
            return DEPLOY_ENV / "bin"
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(DEPLOY_ENV)], check=True, capture_output=True)
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "-r", str(DEPLOY_REQUIREMENTS)],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        if install.returncode != 0:
            raise RuntimeError(f"could not install requirements/deploy-check.txt into {DEPLOY_ENV}:\n{install.stderr[-3000:]}")
        stamp.write_text(want + "\n")
    return DEPLOY_ENV / "bin"


@pytest.fixture(scope="session")
def tools() -> Path:
    try:
        return ensure_deploy_env()
    except RuntimeError as error:
        pytest.fail(str(error))


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
        [str(tools / "python"), str(VALIDATE), "manifests", K8S_VERSION],
        input=rendered,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
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
    return find(objects, "Deployment", "vision-serving")["spec"]["template"]["spec"]


@pytest.fixture(scope="session")
def canary_rendered() -> str:
    return kustomize(CANARY)


@pytest.fixture(scope="session")
def canary_manifests(tools, canary_rendered) -> dict[str, Any]:
    return validate_manifests(tools, canary_rendered)


@pytest.fixture(scope="session")
def canary_cluster(objects, canary_manifests) -> list[dict[str, Any]]:
    """What the cluster holds after `kubectl apply -k k8s/` then `-k k8s/overlays/canary`:
    the overlay's objects replace the base's of the same kind and name, the rest stay."""
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    overlay = {key(o): o for o in canary_manifests["objects"]}
    return [overlay.pop(key(o), o) for o in objects] + list(overlay.values())


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


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


def tritonserver_arguments(arguments: list[str]) -> list[str]:
    """What the entry script passes on to tritonserver: all but its own --pipelines-root."""
    return [a for a in arguments if a.split("=", 1)[0] != ROOT_FLAG]


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


def prometheus_rules(objects) -> list[dict[str, Any]]:
    return [rule for group in find(objects, "PrometheusRule")["spec"]["groups"] for rule in group["rules"]]


def alert_rules(objects) -> list[dict[str, Any]]:
    return [rule for rule in prometheus_rules(objects) if "alert" in rule]


def dashboard(objects) -> dict[str, Any]:
    return json.loads(find(objects, "ConfigMap", "vision-serving-dashboard")["data"]["vision-serving.json"])


def dashboard_expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def used_metric_names(objects) -> set[str]:
    texts = [r["expr"] for r in prometheus_rules(objects)]
    texts.append(find(objects, "ConfigMap", "prometheus-adapter-vision-serving")["data"]["config.yaml"])
    board = dashboard(objects)
    texts += dashboard_expressions(board)
    texts += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    names = set()
    for text in texts:
        names |= set(re.findall(r"\b((?:nv|vision)_[a-z_]+)\b", text))
        names |= {"up"} & set(re.findall(r"\b(up)\{", text))
    return names


# --------------------------------------------------------------------------- the shared server: the image's way, the Deployment's flags

ADMIN_HEADER = "x-triton-admin-key"  # the key name the Deployment's restricted-API flags give (lower case: gRPC metadata keys are)


def admin_http_headers() -> dict[str, str]:
    """What an operator sends to the restricted HTTP APIs of :func:`production_server`."""
    return {ADMIN_HEADER: ADMIN_KEY}


def admin_grpc_headers() -> dict[str, str]:
    """The same key over gRPC: Triton reads it from the ``triton-grpc-protocol-<header>`` metadata."""
    return {f"triton-grpc-protocol-{ADMIN_HEADER.lower()}": ADMIN_KEY}


def deployment_container(name: str = "triton") -> dict[str, Any]:
    """The Deployment's container as written in k8s/server/deployment.yaml (the rendered one is
    checked to be the same by tests/deploy/test_deployment.py), read without kubectl."""
    import yaml

    (deployment,) = [d for d in yaml.safe_load_all((K8S / "server" / "deployment.yaml").read_text()) if d and d["kind"] == "Deployment"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return container


@dataclass
class EntryScriptServer(LocalTritonServer):
    """The local tritonserver started the way the images start it: through the entry script,
    which must find every pipeline under --pipelines-root and add its --model-repository."""

    bin_dir: Path = Path("/nonexistent")

    def command(self) -> list[str]:
        from devtools.triton_server import server_environment

        binary, *arguments = super().command()
        (self.bin_dir / "tritonserver").symlink_to(binary)
        arguments = [a for a in arguments if not a.startswith("--model-repository=")]
        path = f"{self.bin_dir}:{server_environment()['PATH']}"
        sized = self.bin_dir / "sized-models"  # this server's own, not the image's /tmp/sized-models
        return [
            "env",
            f"PATH={path}",
            f"SIZED_MODELS_DIR={sized}",
            "bash",
            str(ENTRY_SCRIPT),
            f"{ROOT_FLAG}={self.model_repository}",
            *arguments,
        ]


@pytest.fixture(scope="session")
def laddered_repository(built_repository, tmp_path_factory) -> Path:
    """A copy of the built pipelines after `python -m builders all`, as the README has users run it before the
    model image, with each recipe's INT8 calibration cut to CALIBRATION_SAMPLES: every step of the precision
    ladder runs (calibration, the gate on the held-out images, served_precision.json), in a fraction of the
    time; the shipped calibration's own gate is the slow test in tests/onnx/builders/test_quantize.py."""
    from builders.build_all import run_all
    from devtools.loadgen import copy_repository

    root = tmp_path_factory.mktemp("laddered")
    for pipeline in layout.pipelines(built_repository):
        copy_repository(pipeline.repository, root / pipeline.name)
        recipe = root / pipeline.name / "pipeline.toml"
        text, count = re.subn(r"(?m)^samples = \d+$", f"samples = {CALIBRATION_SAMPLES}", recipe.read_text())
        assert count == 1 or "int8" not in tomllib.loads(text).get("precisions", ["int8"]), f"{recipe}: no [quantize] samples line"
        recipe.write_text(text)
    assert run_all(list(layout.pipelines(root))) == 0, "python -m builders all failed"
    return root


@pytest.fixture(scope="session")
def int8_classifier(laddered_repository, tmp_path_factory) -> layout.Pipeline:
    """The laddered image_classifier (its INT8 model calibrated on CALIBRATION_SAMPLES, with provenance) copied
    alone into a model repository of its own, without its served_precision.json: the CPU config then serves FP32
    and configs/cpu_int8.pbtxt the INT8 model, so tests can tell the two apart. ``.repository.parent`` is a model
    repository to serve; the builders take the pipeline."""
    from devtools.loadgen import copy_repository

    root = tmp_path_factory.mktemp("int8") / "model_repository"
    copy_repository(laddered_repository / "image_classifier", root / "image_classifier")
    copy = layout.pipeline("image_classifier", root)
    copy.served_precision.unlink()
    return copy


@pytest.fixture(scope="session")
def model_image_context(laddered_repository, tmp_path_factory) -> Path:
    """The model image's build context, staged as the README says: after `python -m builders all` (the
    precision ladder's served_precision.json travels in the image)."""
    from devtools import model_image

    context = tmp_path_factory.mktemp("model-image")
    assert model_image.main(["--model-repository", str(laddered_repository), "--output", str(context)]) == 0
    return context


@pytest.fixture(scope="session")
def production_server(model_image_context, tmp_path_factory) -> Iterator[EntryScriptServer]:
    """The local tritonserver 2.51 (CPU core) started through docker/tritonserver-pipelines.sh with the
    Deployment's own flags (model control off, the restricted APIs behind ADMIN_KEY, summary latencies),
    serving the model image's content (what the `models` init container copies). Every integration test
    that needs "a server" shares this one (tests/conftest.py's ``triton_server``)."""
    from devtools import model_image
    from devtools.loadgen import free_port

    container = deployment_container()
    env = {"TRITON_ADMIN_KEY": ADMIN_KEY}
    local = {ROOT_FLAG, "--http-port", "--grpc-port", "--metrics-port", "--exit-timeout-secs"}
    arguments = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"] if a.split("=", 1)[0] not in local]
    directory = tmp_path_factory.mktemp("production-flags")
    server = EntryScriptServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_repository=model_image_context / model_image.STAGED_REPOSITORY,
        exit_timeout_secs=int(flag_values(container["args"])["--exit-timeout-secs"]),
        extra_args=arguments,
        log_file=directory / "tritonserver.log",
        bin_dir=directory,
    )
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        yield server
    finally:
        server.stop()
